"""A checked baseline: VPA 1.8.1's recommender and our ``vpa`` strategy on the same backfilled history.

Eight days of history of 36 containers (30 workloads of varied shapes, ``tests/vpa_baseline.py``) go into a
Prometheus of this module's own, which logs every query it answers. The real VPA recommender, built from its Go
module, reads that history once at start with its Prometheus history provider (``--storage=prometheus``, the
label flags of ``tests/harness/vpa.py``) and writes its VPAs' status. Then:

- **the model**: Prometheus' query log gives the exact two range queries VPA sent (start, end, step); re-run,
  their samples feed our ``vpa`` strategy (recommender/model/vpa.py), and every target, lowerBound and upperBound
  of every container must be in the same histogram bucket as VPA's or the next one (in fact all but float noise
  are equal);
- **end to end**: our recommender with ``--strategy vpa`` reads the same Prometheus with its own queries
  (``pt-<name>`` VPAs); its differences from VPA come from what it reads, each checked in its direction here.

The comparisons are written to ``tests/artifacts/vpa-baseline-*.md`` for a person to read.
"""

from __future__ import annotations

import math
import secrets
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from prometheus_client import CollectorRegistry

from podtailor.units import parse_cpu_millicores, parse_memory_bytes
from recommender.engine import EngineConfig, RecommenderEngine
from recommender.kube.cluster import KubeAdapter
from recommender.metrics import RecommenderMetrics
from recommender.model.registry import get_strategy
from recommender.sources.config import PrometheusConfig
from recommender.sources.prometheus import PrometheusSource
from tests.harness.cluster import ClusterState
from tests.harness.prometheus import LocalPrometheus
from tests.harness.vpa import Vpa
from tests.vpa_baseline import (
    FIELDS,
    RESOURCES,
    Replayed,
    Shape,
    buckets_apart,
    container_count,
    make_objects,
    replay,
    shapes,
    vpa_range_queries,
    write_history,
)
from tests.waiting import eventually

pytestmark = [pytest.mark.cluster, pytest.mark.prometheus]
STEP = 300
"""The backfill's scrape interval: five minutes keeps eight days of 36 containers to ~1.3 M samples."""
ARTIFACT = Path(__file__).resolve().parents[1] / "artifacts" / "vpa-baseline.md"
"""Where the comparisons are written (``vpa-baseline-model.md``, ``vpa-baseline-end-to-end.md``)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Baseline:
    ns: str
    shapes: list[Shape]
    prometheus: LocalPrometheus
    vpa_status: Mapping[str, dict[str, Any]]
    """VPA's own VPAs (named as the workload): their status as VPA's recommender wrote it."""
    ours_status: Mapping[str, dict[str, Any]]
    """The ``pt-<name>`` VPAs: the status our recommender wrote with ``--strategy vpa``."""
    query_log: Path
    now_s: float


def _status(api: client.ApiClient, ns: str, name: str) -> dict[str, Any]:
    obj = client.CustomObjectsApi(api).get_namespaced_custom_object("autoscaling.k8s.io", "v1", ns,
                                                                    "verticalpodautoscalers", name)
    status: dict[str, Any] = obj.get("status") or {}
    return status


def _recommended(status: Mapping[str, Any], containers: int) -> bool:
    recs = ((status.get("recommendation") or {}).get("containerRecommendations")) or []
    return len(recs) == containers


@pytest.fixture(scope="module")
def baseline(api: client.ApiClient, crds: list[str], cluster: ClusterState,
             tmp_path_factory: pytest.TempPathFactory) -> Iterator[Baseline]:
    work = tmp_path_factory.mktemp("vpa-baseline")
    core = client.CoreV1Api(api)
    ns = f"t-vpa-baseline-{secrets.token_hex(3)}"
    core.create_namespace({"metadata": {"name": ns}})
    now_s = float(int(time.time()) // STEP * STEP)
    all_shapes = shapes(now_s)
    prom = LocalPrometheus(work / "prometheus", scrape_interval_s=60, query_log=work / "query.log")
    vpa = Vpa(cluster=cluster, workdir=work / "vpa", namespace=ns)
    try:
        for path in write_history(work, ns, all_shapes, end_s=now_s - 60, step_s=STEP):
            prom.backfill(path)
            path.unlink()
        prom.start()
        make_objects(api, ns, all_shapes)
        vpa.start_recommender(prometheus_url=prom.url, history="8d")
        by_name = {s.name: len(s.containers) for s in all_shapes}
        eventually("VPA's recommender's status on every VPA", lambda: all(
            _recommended(_status(api, ns, name), n) for name, n in by_name.items()), timeout_s=120, interval_s=1)
        registry = CollectorRegistry()
        strategy = get_strategy("vpa")
        source = PrometheusSource(PrometheusConfig(url=prom.url, step_s=STEP, scrape_interval_s=STEP, retries=0,
                                                   timeout_s=60), registry=registry, plan=strategy.history_plan())
        engine = RecommenderEngine(store=KubeAdapter(api), source=source, strategy=strategy,
                                   config=EngineConfig(namespaces=(ns,)), metrics=RecommenderMetrics(registry))
        report = engine.run_pass(time.time())
        assert report.served == len(all_shapes) and report.written == len(all_shapes)
        yield Baseline(ns=ns, shapes=all_shapes, prometheus=prom, now_s=now_s, query_log=work / "query.log",
                       vpa_status={name: _status(api, ns, name) for name in by_name},
                       ours_status={name: _status(api, ns, f"pt-{name}") for name in by_name})
    finally:
        vpa.stop()
        prom.stop()
        core.delete_namespace(ns)


def _amount(resource: str, quantity: str) -> float:
    return parse_cpu_millicores(quantity) / 1000.0 if resource == "cpu" else float(parse_memory_bytes(quantity))


def _by_container(status: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    return {r["containerName"]: r for r in status["recommendation"]["containerRecommendations"]}


def _ours(rep: Replayed, field_name: str, resource: str) -> float:
    res = {"target": rep.recommendation.target, "lowerBound": rep.recommendation.lower_bound,
           "upperBound": rep.recommendation.upper_bound}[field_name]
    return (res.cpu_millicores or 0) / 1000.0 if resource == "cpu" else float(res.memory_bytes or 0)


def _factor(field_name: str, c: float) -> float:
    """VPA's estimator around a percentile: x (1 + margin 0.15), the bounds x their confidence multipliers
    (pkg/recommender/logic/recommender.go CreatePodResourceRecommender, estimator.go getConfidence)."""
    if field_name == "target":
        return 1.15
    if field_name == "lowerBound":
        return 1.15 * (1 + 0.001 / c) ** -2
    return 1.15 * (1 + 1 / c)


def _show(resource: str, amount: float) -> str:
    return f"{round(amount * 1000)}m" if resource == "cpu" else f"{round(amount)}"


def _write_artifact(name: str, lines: list[str]) -> None:
    ARTIFACT.parent.mkdir(parents=True, exist_ok=True)
    ARTIFACT.with_name(f"vpa-baseline-{name}.md").write_text("\n".join(lines) + "\n")


def test_vpa_reads_our_backfilled_history_and_serves_every_container(baseline: Baseline) -> None:
    queries = vpa_range_queries(baseline.query_log, baseline.ns)
    # Its two history queries, as its history provider builds them with our label flags: an hourly rate over
    # one-hour windows and the working set at each hour, over the 8 days before its start.
    assert queries["cpu"].query.startswith("rate(container_cpu_usage_seconds_total{")
    assert queries["cpu"].query.endswith("[1h])") and float(queries["cpu"].step) == 3600
    assert 'container!="POD"' in queries["memory"].query and 'pod=~".+"' in queries["memory"].query
    n = container_count(baseline.shapes)
    assert n >= 30
    served = sum(len(_by_container(s)) for s in baseline.vpa_status.values())
    assert served == n
    for name, status in baseline.vpa_status.items():
        provided = next(c for c in status["conditions"] if c["type"] == "RecommendationProvided")
        assert provided["status"] == "True", name


def test_our_vpa_model_on_vpas_own_samples_is_within_one_bucket(baseline: Baseline) -> None:
    queries = vpa_range_queries(baseline.query_log, baseline.ns)
    ours = replay(baseline.prometheus.url, queries, baseline.shapes, baseline.now_s)
    lines = ["# VPA 1.8.1 against our `vpa` model, fed the samples VPA read", "",
             "| workload/container | field | cpu VPA | cpu ours | buckets | memory VPA | memory ours | buckets |",
             "|---|---|---|---|---|---|---|---|"]
    compared, within, exact, explained = 0, 0, 0, []
    for shape in baseline.shapes:
        recs = _by_container(baseline.vpa_status[shape.name])
        for container in shape.containers:
            rep = ours[(shape.name, container)]
            for field_name in FIELDS:
                cells = []
                for resource in RESOURCES:
                    theirs = _amount(resource, recs[container][field_name][resource])
                    mine = _ours(rep, field_name, resource)
                    apart = buckets_apart(resource, theirs, mine, _factor(field_name, rep.confidence_days))
                    compared += 1
                    exact += theirs == mine
                    if apart <= 1:
                        within += 1
                    else:
                        explained.append((shape.name, container, field_name, resource, theirs, mine, apart))
                    cells += [_show(resource, theirs), _show(resource, mine), str(apart)]
                lines.append(f"| {shape.name}/{container} | {field_name} | " + " | ".join(cells) + " |")
    lines += ["", f"{compared} values: {exact} equal, {within} within one bucket; beyond it: {explained}"]
    _write_artifact("model", lines)
    # Every value within one bucket, as the issue asks; it took two fixes in our model (VPA's integer arithmetic,
    # and a memory peak per pod: model/container.go addMemorySample runs per container of each pod).
    assert not explained, explained
    assert compared == 6 * container_count(baseline.shapes) and within == compared
    # Same arithmetic as VPA's (whole units, truncated at each step): the values are not just near, they are equal.
    # Two are left for float noise: a bucket edge (first x (1.05^n - 1) / 0.05) that numpy's power puts a hair
    # below a whole byte and Go's math.Pow a hair above truncates one byte apart (seen: 8 bytes in 419 MB on an
    # upper bound, after x 8.5), and a cumulative weight landing exactly on a percentile may round either way.
    assert exact >= compared - 2, (exact, compared)


def test_end_to_end_differences_have_the_stated_causes(baseline: Baseline) -> None:
    """Our recommender with ``--strategy vpa`` reads with its own queries: a rate per 5-minute step and the
    peak working set per step (``max_over_time``), at full resolution for six days, hourly summaries before."""
    lines = ["# VPA 1.8.1 against our recommender with --strategy vpa, each reading Prometheus its own way", "",
             "| workload/container | field | cpu VPA | cpu ours | ratio | memory VPA | memory ours | ratio |",
             "|---|---|---|---|---|---|---|---|"]
    agree = total = 0
    for shape in baseline.shapes:
        theirs_recs = _by_container(baseline.vpa_status[shape.name])
        ours_recs = _by_container(baseline.ours_status[shape.name])
        for container in shape.containers:
            theirs, ours = theirs_recs[container], ours_recs[container]
            for field_name in FIELDS:
                cells = []
                for resource in RESOURCES:
                    t, o = (_amount(resource, r[field_name][resource]) for r in (theirs, ours))
                    cells += [_show(resource, t), _show(resource, o), f"{o / t:.3f}"]
                lines.append(f"| {shape.name}/{container} | {field_name} | " + " | ".join(cells) + " |")
            # Memory: a peak per step is never below the working set at the step's end, so our memory target is
            # at least VPA's (less one bucket of rounding).
            t_mem, o_mem = (_amount("memory", r["target"]["memory"]) for r in (theirs, ours))
            assert o_mem >= t_mem / 1.06, (shape.name, container, t_mem, o_mem)
            # Confidence: VPA counts its hourly samples as if they came once a minute (c = samples / 1440), so 8
            # days of hourly history give c = 192/1440 = 0.133 and an upper bound of 8.5 x the p95; we read a
            # sample per 5 minutes and count it as such, so our upper bound is far lower.
            for resource in RESOURCES:
                t_up, o_up = (_amount(resource, r["upperBound"][resource]) for r in (theirs, ours))
                assert o_up <= t_up, (shape.name, container, resource, t_up, o_up)
                t_target, o_target = (_amount(resource, r["target"][resource]) for r in (theirs, ours))
                total += 1
                agree += math.isclose(t_target, o_target, rel_tol=0.11)
    lines += ["", f"targets within 11% (two buckets): {agree} of {total}"]
    _write_artifact("end-to-end", lines)
    # For most containers the targets still agree within about two buckets (10%).
    assert agree >= total // 2, (agree, total)
