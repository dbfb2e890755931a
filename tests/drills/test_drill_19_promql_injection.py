"""Drill 19, PromQL injection: label values with quote, backslash, newline, closing brace, pipe, ``.*``,
unicode, against the real Prometheus; and annotations carrying query fragments.

Namespace names must be DNS labels, but pod and container label values in Prometheus can be anything, so
series whose label values hold hostile text are backfilled (OpenMetrics escaping) and the production
selector builders are asked, under hypothesis, for subsets of them and for arbitrary text: every query
must parse (``tests/fuzz/promql_text.py``) and select exactly the intended series, nothing else. Then a
Deployment and its VPA annotated with query fragments are served through a recording proxy: no fragment
reaches any query and the target equals that of an identical Deployment without the annotations.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import requests
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kubernetes import client

from recommender.sources import promql
from tests.drills._recommender_fixtures import (
    LAG_S,
    Mi,
    PromProxy,
    backfill,
    drill_row,
    engine_for,
    grid_now,
    make_deployment,
    make_vpa,
    pods,
    statuses,
    target,
)
from tests.fuzz.promql_text import selectors
from tests.harness.prometheus import LocalPrometheus
from tests.nodesim.openmetrics import ExportContainer
from tests.nodesim.usage import Constant

pytestmark = [pytest.mark.cluster, pytest.mark.prometheus]
HOSTILE = ['a"b', "a\\b", "a\nb", "a}b", "a|b", ".*", "a.*", "a", "b", "ab", "^a$", "(a)", "[ab]", "a{2}",
           "a+", "a?", "\\", '"', '",namespace=~".*', '"} or vector(1) or {x="', "ü-ñ", "日本語", "🙂", "a\tb",
           "\\n", "\\\\", "$1", "a b", "\u200b", "\\u0041"]
_ALPHABET = 'ab"\\\n}{|.*()[]^$+?🙂é\u2028'
FRAGMENTS = {"podtailor.io/query": '"} or vector(1) or {__name__=~".+',
             "podtailor.io/promql": 'sum(container_cpu_usage_seconds_total{namespace!=""})',
             "prometheus.io/query": "up == 0) or (vector(1e9)",
             "podtailor.io/label-selector": 'namespace=~".*"'}


def corpus() -> list[str]:
    rng = random.Random(19)
    extra = {"".join(rng.choice(_ALPHABET) for _ in range(rng.randint(1, 8))) for _ in range(40)}
    return sorted(set(HOSTILE) | extra)


def selected_pods(url: str, query: str, at_s: float) -> set[str]:
    resp = requests.post(f"{url}/api/v1/query", data={"query": query, "time": repr(at_s)}, timeout=10)
    assert resp.status_code == 200, (query, resp.text[:300])
    return {r["metric"].get("pod", "") for r in resp.json()["data"]["result"]}


def test_hostile_label_values_select_exactly_their_series(
    api: client.ApiClient, crds: list[str], namespace: str, prometheus: LocalPrometheus, tmp_path: Path,
) -> None:
    with drill_row(19, "PromQL injection", "label values with quote, backslash, newline, }, |, .*, unicode "
                   "(backfilled, queried under hypothesis); annotations carrying query fragments") as row:
        values = corpus()
        end_s = grid_now(-120)
        model = Constant(cpu_cores=0.25, memory_bytes=100 * Mi)
        hostile = [ExportContainer(namespace=namespace, pod=v, container=v, node="n1", model=model, pod_uid=f"u{i}",
                                   owner_kind="ReplicaSet", owner_name=f"rs{i}", replicaset_owner_name="other")
                   for i, v in enumerate(values)]
        served = [*pods(namespace, "web", "web-5d", 2, model), *pods(namespace, "twin", "twin-5d", 2, model)]
        backfill(prometheus, tmp_path, "injection", [*hostile, *served], end_s, days=2 / 24)
        stored = selected_pods(prometheus.url, promql.selector("container_memory_working_set_bytes", promql.Scope(
            namespaces=(namespace,))) + "[1h]", end_s)
        stored = {p for p in stored if p in set(values)}
        assert stored == set(values), sorted(set(values) - stored)  # every hostile value survived the backfill

        def check(wanted: list[str]) -> None:
            try:
                scope = promql.Scope(namespaces=(namespace,), pods=tuple(wanted))
                query = promql.memory_peak_query(scope, STEP_S)
            except ValueError:  # a lone surrogate cannot be sent at all: refused, never sent mangled
                assert any(0xD800 <= ord(c) <= 0xDFFF for w in wanted for c in w)
                return
            parsed = selectors(query)
            assert [m.value for m in parsed[0][1] if m.label == "namespace"] == [namespace]
            instant = query.replace(f"[{promql.duration(STEP_S - 0.001)}]", "[1h]")
            assert selected_pods(prometheus.url, instant, end_s) == set(wanted) & set(values), wanted

        @settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck), database=None)
        @given(st.lists(st.sampled_from(values), min_size=1, max_size=6, unique=True))
        def subsets(wanted: list[str]) -> None:
            check(wanted)

        @settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck), database=None)
        @given(st.lists(st.one_of(st.sampled_from(values), st.text(min_size=1, max_size=12)), min_size=1,
                        max_size=4, unique=True))
        def arbitrary(wanted: list[str]) -> None:
            check(wanted)

        subsets()
        arbitrary()
        row.proof.append(f"{len(values)} hostile pod/container label values backfilled; 80 hypothesis subsets and 60 "
                         "arbitrary-text lists: every query parsed and selected exactly the wanted stored series")

        make_deployment(api, namespace, "web", cpu="100m", memory="64Mi", annotations=FRAGMENTS)
        make_deployment(api, namespace, "twin", cpu="100m", memory="64Mi")
        make_vpa(api, namespace, "web", "web")
        client.CustomObjectsApi(api).patch_namespaced_custom_object(
            "autoscaling.k8s.io", "v1", namespace, "verticalpodautoscalers", "web",
            {"metadata": {"annotations": FRAGMENTS}})
        make_vpa(api, namespace, "twin", "twin")
        with PromProxy(lambda: prometheus.url) as proxy:
            engine, _, _ = engine_for(api, proxy.url, [namespace], history_s=3600)
            report = engine.run_pass(end_s + LAG_S)
        assert report.written == 2
        sent = [v for s in proxy.sent for _, v in s.form]
        for fragment in ("vector(", "__name__", "sum(", "1e9", 'namespace=~".*"'):
            assert not any(fragment in v for v in sent), fragment
        for s in proxy.sent:
            for _, matchers in selectors(s.query) if s.query else []:
                assert {m.label for m in matchers} <= {"namespace", "pod", "container", "resource",
                                                       "owner_is_controller"}
                assert [m.value for m in matchers if m.label == "namespace"] == [namespace]
        found = statuses(api, [namespace])
        assert target(found[(namespace, "web")]) == target(found[(namespace, "twin")]) is not None
        row.proof.append(f"annotated Deployment and VPA served through a recording proxy: {len(proxy.sent)} requests, "
                         "no fragment in any, every selector on our labels and namespace only; target equals the "
                         "twin's")


STEP_S = 60.0
