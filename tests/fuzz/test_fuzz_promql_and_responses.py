"""Property and fuzz tests of PromQL escaping, Prometheus responses and AdmissionReview bodies.

PromQL: every query built for any label values parses (``promql_text``, written from the grammar) and its
decoded matchers select exactly the intended values. Responses: whatever JSON a backend answers (NaN, Inf,
empty, partial, wrong types), ``PrometheusSource.history`` returns batches or raises a ``SourceError``, and
every sample it returns is a finite, non-negative value that was in the answer (no zero from missing data).
AdmissionReview: any body gives a well-formed response that allows the pod (fail open).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

import requests
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry
from requests.adapters import BaseAdapter

from recommender.sources import promql
from recommender.sources.config import PrometheusConfig
from recommender.sources.errors import SourceError
from recommender.sources.prometheus import PrometheusSource
from tests.fuzz.promql_text import matches, read_string, selectors
from updater.webhook.mutation import Resolution
from updater.webhook.review import admit

label_values = st.text(st.characters(exclude_categories=("Cs",)), min_size=1, max_size=10)


@given(st.text(st.characters(exclude_categories=("Cs",)), max_size=30))
def test_quote_round_trips_through_the_promql_lexer(value: str) -> None:
    literal = promql.quote(value)
    decoded, end = read_string(literal, 0)
    assert decoded == value and end == len(literal)


@given(st.lists(label_values, min_size=1, max_size=5, unique=True), st.lists(label_values, max_size=5),
       st.lists(label_values, min_size=1, max_size=3, unique=True))
def test_queries_parse_and_select_only_the_intended_values(namespaces: list[str], others: list[str],
                                                          pod_names: list[str]) -> None:
    scope = promql.Scope(namespaces=tuple(namespaces), pods=tuple(pod_names))
    for query in (promql.cpu_query(scope, 240), promql.memory_peak_query(scope, 60), promql.throttle_query(scope, 240),
                  promql.oom_events_query(scope), promql.pod_owner_query(scope, 3600)):
        for _, matchers in selectors(query):
            ns = [m for m in matchers if m.label == "namespace"]
            assert len(ns) == 1
            candidates = {*namespaces, *others, *(a + b for a in namespaces for b in others), ".*", ""}
            for candidate in candidates:
                assert matches(ns[0].op, ns[0].value, candidate) == (candidate in namespaces), (ns[0], candidate)
            pod = [m for m in matchers if m.label == "pod"]
            for candidate in {*pod_names, *others}:
                assert all(matches(m.op, m.value, candidate) == (candidate in pod_names) for m in pod)


@given(st.text(max_size=20))
def test_label_names_are_validated_never_escaped(name: str) -> None:
    try:
        assert promql.label_name(name) == name
    except ValueError:
        return
    assert name.isascii() and (name[0].isalpha() or name[0] == "_")


# ------------------------------------------------------------------------------------------ responses
numbers = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-5, 10**30),
                    st.sampled_from(["NaN", "+Inf", "-Inf", "1e309", "-1", "0", "abc", "", "1.5"]), st.none(),
                    st.lists(st.integers(), max_size=2))
labels = st.fixed_dictionaries({"namespace": st.sampled_from(["ns", "other"]),
                                "pod": st.sampled_from(["web-1-a", "web-1-b", ""]),
                                "container": st.sampled_from(["app", "", "POD"])},
                               optional={"owner_kind": st.sampled_from(["ReplicaSet", "Deployment", "<none>"]),
                                         "owner_name": st.sampled_from(["web-1", "web"]),
                                         "replicaset": st.just("web-1")})
points = st.lists(st.tuples(st.one_of(st.integers(1_699_999_000, 1_700_004_000), numbers), numbers), max_size=6)
json_any = st.recursive(st.one_of(st.none(), st.booleans(), numbers, st.text(max_size=5)), lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)), max_leaves=10)
matrix = st.lists(st.one_of(st.fixed_dictionaries({"metric": labels, "values": points}), json_any), max_size=4)
vector = st.lists(st.one_of(st.fixed_dictionaries({"metric": labels, "value": st.tuples(numbers, numbers)}),
                            json_any), max_size=4)


def envelope(result_type: str, result: Any) -> st.SearchStrategy[Any]:
    good = {"status": "success", "data": {"resultType": result_type, "result": result}}
    return st.one_of(st.just(good), st.just({"status": "error", "error": "x"}), json_any,
                     st.just({**good, "warnings": ["partial"]}))


answers = st.fixed_dictionaries({
    "series": st.one_of(st.builds(lambda ls: {"status": "success", "data": ls}, st.lists(labels, max_size=4)),
                        json_any),
    "query": vector.flatmap(lambda v: envelope("vector", v)),
    "query_range": matrix.flatmap(lambda m: envelope("matrix", m)),
    "status": st.sampled_from([200, 200, 200, 400, 422, 503]),
})


class Canned(BaseAdapter):
    """A requests transport answering each endpoint with a generated body (the backend under fuzz)."""

    def __init__(self, answer: Mapping[str, Any]) -> None:
        super().__init__()
        self.answer = answer

    def send(self, request: requests.PreparedRequest, **kwargs: Any) -> requests.Response:
        endpoint = str(request.url).rsplit("/", 1)[-1]
        response = requests.Response()
        response.status_code = self.answer["status"] if endpoint != "series" else 200
        response._content = json.dumps(self.answer[endpoint]).encode()
        response.url, response.request = str(request.url), request
        return response

    def close(self) -> None:
        return


def finite_inputs(answer: Mapping[str, Any]) -> set[float]:
    out = set()
    result = (answer["query_range"].get("data") or {}) if isinstance(answer["query_range"], dict) else {}
    for item in result.get("result") or [] if isinstance(result, dict) else []:
        for pair in (item.get("values") or []) if isinstance(item, dict) else []:
            try:
                out.add(float(pair[1]))
            except (TypeError, ValueError, IndexError, OverflowError):
                continue
    return out


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])
@given(answers)
def test_any_backend_answer_gives_batches_of_real_samples_or_a_source_error(answer: dict[str, Any]) -> None:
    session = requests.Session()
    session.mount("http://", Canned(answer))
    source = PrometheusSource(PrometheusConfig(url="http://127.0.0.1:9", retries=0, step_s=60),
                              registry=CollectorRegistry(), session=session)
    try:
        batches = source.history(["ns"], 1_700_000_000, 1_700_003_600)
    except SourceError:
        return
    seen = finite_inputs(answer)
    for batch in batches.values():
        for samples in (batch.cpu_cores, batch.memory_peak_bytes, batch.cpu_throttled_fraction):
            assert all(math.isfinite(v) and v >= 0 and v in seen for v in samples.values.tolist())


# ------------------------------------------------------------------------------------- AdmissionReview
class NoTarget:
    def resolve(self, namespace: str, meta: Mapping[str, Any]) -> Resolution:
        return Resolution(workload_kind="Deployment", workload_name="web")


pod = st.fixed_dictionaries({"metadata": json_any, "spec": st.one_of(json_any, st.fixed_dictionaries({
    "containers": st.lists(st.fixed_dictionaries({"name": st.text(max_size=4)}, optional={
        "resources": st.one_of(json_any, st.fixed_dictionaries({}, optional={
            "requests": st.dictionaries(st.sampled_from(["cpu", "memory"]), st.one_of(st.text(max_size=6), numbers)),
            "limits": json_any}))}), max_size=3)}))})
review = st.fixed_dictionaries({"kind": st.sampled_from(["AdmissionReview", "Other"]), "request": st.one_of(
    json_any, st.fixed_dictionaries({"uid": st.text(max_size=6), "operation": st.sampled_from(["CREATE", "UPDATE"]),
                                     "resource": st.just({"group": "", "resource": "pods"}), "object": pod},
                                    optional={"namespace": st.text(max_size=5), "subResource": st.text(max_size=3)}))})


@given(st.one_of(review.map(lambda r: json.dumps(r).encode()), st.binary(max_size=64)))
def test_every_admission_review_body_is_answered_and_allowed(body: bytes) -> None:
    out, _ = admit(body, NoTarget())
    assert out["apiVersion"] == "admission.k8s.io/v1" and out["kind"] == "AdmissionReview"
    assert out["response"]["allowed"] is True and isinstance(out["response"]["uid"], str)
    json.dumps(out)
