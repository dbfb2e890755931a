"""Unit tests for the edges of canary analyses: the instant-query client against a local HTTP server, the
workload annotation read with the workload, the startup check, what ``plan`` lists, and an executor without a
Prometheus (a batch with analyses fails before it is sent, never passes)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs

import pytest

from podtailor.promquery import InstantQueries, QueryFailed
from podtailor.resize.types import Reason
from podtailor.runtime.cli import UsageError
from tests.builders.rollout import NOW, entry, rollout
from updater.analyses_cli import batch_analyses, check_at_startup
from updater.kube.workloads import WorkloadIndex
from updater.policy.analysis import Analysis, Condition, Operator, WorkloadAnalyses
from updater.policy.types import Action, Batch, Plan, PodDecision, RolloutPolicy
from updater.rollout.act.executor import Executor

P99 = Analysis(name="p99", query="max(latency{namespace={{namespace}}, pod=~{{pods}}})",
               condition=Condition(operator=Operator.LE, threshold=0.5))
ANSWERS: dict[str, tuple[int, Any]] = {
    "vec": (200, {"status": "success", "data": {"resultType": "vector", "result": [
        {"metric": {"pod": "a"}, "value": [1, "0.25"]}, {"metric": {"pod": "b"}, "value": [1, "NaN"]}]}}),
    "scalar": (200, {"status": "success", "data": {"resultType": "scalar", "result": [1, "+Inf"]}}),
    "bad": (400, {"status": "error", "errorType": "bad_data", "error": "parse error at char 3"}),
    "busy": (503, {"status": "error", "errorType": "timeout", "error": "query timed out"}),
    "html": (200, "<html>"),
}


class _Handler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        form = parse_qs(self.rfile.read(int(self.headers["Content-Length"])).decode())
        status, body = ANSWERS[form["query"][0]] if self.path == "/prom/api/v1/query" else (404, "no")
        data = (body if isinstance(body, str) else json.dumps(body)).encode()
        self.send_response(status)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def prom() -> Iterator[InstantQueries]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    client = InstantQueries(f"http://127.0.0.1:{server.server_address[1]}/prom/", timeout_s=5)
    yield client
    client.close()
    server.shutdown()


def test_instant_query_reads_vectors_and_scalars(prom: InstantQueries) -> None:
    assert [(s.labels, str(s.value)) for s in prom.query("vec")] == [({"pod": "a"}, "0.25"), ({"pod": "b"}, "nan")]
    assert [s.value for s in prom.query("scalar")] == [float("inf")]


@pytest.mark.parametrize(("query", "text", "temporary"), [
    ("bad", "prometheus answered 400: bad_data: parse error at char 3", False),
    ("busy", "prometheus answered 503: timeout: query timed out", True),
    ("html", "not JSON", False),
])
def test_instant_query_failures_are_classified(prom: InstantQueries, query: str, text: str, temporary: bool) -> None:
    with pytest.raises(QueryFailed, match=text) as err:
        prom.query(query)
    assert err.value.temporary is temporary


def test_unreachable_prometheus_is_temporary() -> None:
    with pytest.raises(QueryFailed, match="cannot reach") as err:
        InstantQueries("http://127.0.0.1:9", timeout_s=2).query("up")
    assert err.value.temporary


def test_the_annotation_is_read_from_top_level_workloads_only() -> None:
    ok = json.dumps([{"name": "p99", "query": "up", "condition": {"operator": "<", "threshold": 1}}])
    index = WorkloadIndex()
    index.add("Deployment", [{"metadata": {"namespace": "ns", "name": "web", "annotations": {
        "podtailor.io/analyses": ok}}}, {"metadata": {"namespace": "ns", "name": "api", "annotations": {
        "podtailor.io/analyses": "[{"}}}])
    index.add("ReplicaSet", [{"metadata": {"namespace": "ns", "name": "web-1", "annotations": {
        "podtailor.io/analyses": ok}, "ownerReferences": [{"controller": True, "kind": "Deployment", "name": "web"}]}}])
    assert set(index.analyses) == {("ns", "Deployment", "web"), ("ns", "Deployment", "api")}
    web = index.analyses[("ns", "Deployment", "web")]
    assert [a.name for a in web.analyses] == ["p99"] and web.analyses[0].namespaced
    assert index.analyses[("ns", "Deployment", "api")].error.startswith("Deployment ns/api: podtailor.io/analyses")


@dataclass
class Snap:
    policies: tuple[RolloutPolicy, ...] = ()
    policy_errors: tuple[str, ...] = ()
    analyses: dict[tuple[str, str, str], WorkloadAnalyses] = field(default_factory=dict)


def test_startup_refuses_unparsable_analyses_and_analyses_without_prometheus() -> None:
    with pytest.raises(UsageError, match=r"analyses cannot be used: ResizePolicy p: spec\.analyses"):
        check_at_startup(Snap(policy_errors=("ResizePolicy p: spec.analyses[0].query: not a PromQL query",)),
                         True)  # type: ignore[arg-type]
    declared = Snap(analyses={("ns", "Deployment", "web"): WorkloadAnalyses(analyses=(P99,))})
    with pytest.raises(UsageError, match=r"declared \(Deployment ns/web\) but no --prometheus-url"):
        check_at_startup(declared, False)  # type: ignore[arg-type]
    check_at_startup(declared, True)  # type: ignore[arg-type]
    check_at_startup(Snap(policy_errors=("ResizePolicy q: spec.steps: bad",)), False)  # type: ignore[arg-type]


def test_plan_lists_each_batchs_analyses_with_the_query_as_sent() -> None:
    decision = PodDecision(namespace="ns", pod="web-0", uid="u", resource_version="1", pool="p1",
                           workload_kind="Deployment", workload_name="web", action=Action.RESIZE_ONLINE,
                           reason=Reason.CHANGE)
    batch = Batch(pool="p1", step=0, pods=("ns/web-0",), bake_s=60.0, gates=())
    rows = batch_analyses(RolloutPolicy(analyses=(P99,)), Plan(decisions=(decision,), batches=(batch,)), batch,
                          {("ns", "Deployment", "web"): WorkloadAnalyses(error="Deployment ns/web: not JSON")})
    assert rows == [{"error": "Deployment ns/web: not JSON"}]
    rows = batch_analyses(RolloutPolicy(analyses=(P99,)), Plan(decisions=(decision,), batches=(batch,)), batch, {})
    assert rows == [{"name": "p99", "source": "policy", "workload": "Deployment/web", "condition": "<= 0.5",
                     "query": 'max(latency{namespace="ns", pod=~"web-0"})'}]


def test_without_prometheus_a_batch_with_analyses_fails_before_it_is_sent() -> None:
    r = rollout(entry("a", 0))

    def executor() -> Executor:
        return Executor(read=None, planner=None, store=None, resizer=None, recorder=None,  # type: ignore[arg-type]
                        policy=None)  # type: ignore[arg-type]

    snap = Snap(analyses={("ns", "Deployment", "web"): WorkloadAnalyses(analyses=(P99,))})
    why, events = executor()._analysis_gate(r, RolloutPolicy(), snap, NOW)  # type: ignore[arg-type]
    assert why == "the batch has canary analyses but the updater was started without --prometheus-url"
    assert events == []
    assert executor()._analysis_gate(r, RolloutPolicy(), Snap(), NOW) == ("", [])  # type: ignore[arg-type]
