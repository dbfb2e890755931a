"""Canary analysis against the real Prometheus and the real API server: a resize that raises a service's own
latency is rolled back and its pool halted; a workload whose latency stays flat goes on.

Each workload's "application" is a small exporter here, scraped by a real Prometheus: it reports
``app_latency_seconds`` per pod from the CPU the kubelet (the node simulator) reports for the pod, like a
service whose latency follows its CPU. ``slow`` gets slower when its CPU is cut (latency 0.1 s x 500m / CPU);
``flat`` does not, and carries an analysis of its own in its annotation (confined to its namespace). The
ResizePolicy, with its analysis, goes through the real CRD schema; the updater's Executor runs in-process with
the analyses' runner on the Prometheus (what ``run --prometheus-url`` builds).
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from prometheus_client import CollectorRegistry

from podtailor.promquery import InstantQueries
from podtailor.units import parse_cpu_millicores
from tests.builders.cluster import POOL_KEY, Scenario
from tests.harness.prometheus import LocalPrometheus
from tests.waiting import eventually
from updater.metrics import UpdaterMetrics
from updater.rollout.act.analysis import AnalysisRunner
from updater.rollout.machine.journal import Phase

pytestmark = pytest.mark.cluster

QUERY = "max(app_latency_seconds{namespace={{namespace}}, pod=~{{pods}}})"


def kubelet_cpu(pod: client.V1Pod) -> int:
    return parse_cpu_millicores(pod.status.container_statuses[0].resources.requests["cpu"])


def exposition(core: client.CoreV1Api, ns: str) -> str:
    """``app_latency_seconds`` of every running pod of ``slow`` and ``flat``, from the CPU the kubelet reports."""
    lines = ["# TYPE app_latency_seconds gauge"]
    for pod in core.list_namespaced_pod(ns).items:
        if pod.status.phase != "Running" or not pod.status.container_statuses:
            continue
        app = (pod.metadata.labels or {}).get("app")
        latency = 0.1 * 500 / kubelet_cpu(pod) if app == "slow" else 0.1
        lines.append(f'app_latency_seconds{{namespace="{ns}",pod="{pod.metadata.name}",app="{app}"}} {latency}')
    return "\n".join(lines) + "\n"


@pytest.fixture
def app_metrics(scenario: Scenario, tmp_path: Path) -> Iterator[LocalPrometheus]:
    """The two applications' exporter on a loopback port, and a Prometheus of this test scraping it every second."""
    ns, core = scenario.ns, scenario.core

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = exposition(core, ns).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    prom = LocalPrometheus(tmp_path / "prometheus", targets=[f"127.0.0.1:{server.server_address[1]}"],
                           scrape_interval_s=1.0)
    prom.start()
    try:
        yield prom
    finally:
        prom.stop()
        server.shutdown()


def test_a_resize_that_raises_latency_is_rolled_back_and_a_flat_one_goes_on(
        scenario: Scenario, app_metrics: LocalPrometheus) -> None:
    scenario.pool("a")
    scenario.pool("b")
    scenario.deployment("slow", "a", replicas=2)
    own = [{"name": "own-latency", "query": 'max(app_latency_seconds{app="flat"})', "interval": "2s",
            "condition": {"operator": "<=", "threshold": 0.15}}]  # confined: namespace="<ns>" is added
    scenario.deployment("flat", "b", replicas=2, annotations={"podtailor.io/analyses": json.dumps(own)})
    for name in ("slow", "flat"):
        scenario.vpa(name, {"cpu": "250m", "memory": "256Mi"})  # 500m -> 250m: slow's latency doubles
    scenario.policy(steps=[{"fraction": 0, "bake": "8s"}, {"fraction": 1, "bake": "2s"}], analyses=[{
        "name": "p99", "query": QUERY, "condition": {"operator": "<=", "baselineRatio": 1.2}, "interval": "2s"}])
    prom = InstantQueries(app_metrics.url)
    eventually("both applications' series scraped", lambda: len(prom.query(
        f'app_latency_seconds{{namespace="{scenario.ns}"}}')) == 4, timeout_s=60)
    executor = scenario.executor()
    registry = CollectorRegistry()
    executor.analyses = AnalysisRunner(prom, UpdaterMetrics(registry))
    scenario.run_until(executor, scenario.settled, timeout_s=120)

    by_pool = {r.pool: r for r in scenario.rollouts()}
    slow, flat = by_pool[scenario.pools["a"]], by_pool[scenario.pools["b"]]
    assert slow.phase == Phase.HALTED, slow.message
    assert "analysis p99 on Deployment" in slow.message and f"{scenario.ns}/slow failed" in slow.message
    assert "value 0.2" in slow.message and "threshold <= 1.2 x baseline = 0.12" in slow.message
    assert f'query: max(app_latency_seconds{{namespace="{scenario.ns}", pod=~' in slow.message
    assert [kubelet_cpu(p) for p in scenario.running("slow")] == [500, 500]  # restored; batch 2 never sent
    assert flat.phase == Phase.COMPLETED, flat.message
    assert [kubelet_cpu(p) for p in scenario.running("flat")] == [250, 250]
    events = scenario.core.list_namespaced_event(scenario.ns, field_selector="reason=AnalysisFailed").items
    assert [(e.involved_object.kind, e.involved_object.name, e.type) for e in events] == [
        ("Deployment", "slow", "Warning")]
    measured = {(source, outcome): registry.get_sample_value("podtailor_updater_analysis_measurements_total",
                                                             {"source": source, "outcome": outcome}) or 0
                for source in ("policy", "workload") for outcome in ("pass", "fail", "skip")}
    assert measured[("workload", "pass")] >= 2 and measured[("workload", "fail")] == 0  # flat's own, each batch
    assert measured[("policy", "fail")] == 1 and measured[("policy", "skip")] == 0


def test_schema_and_startup_refuse_an_unparsable_query_and_plan_lists_the_analyses(
        scenario: Scenario, cluster: Any) -> None:
    analysis = {"name": "p99", "query": QUERY, "condition": {"operator": "<=", "threshold": 0.5}}
    with pytest.raises(client.ApiException) as refused:  # the schema: a cut-off query
        scenario.policy(analyses=[{**analysis, "query": "max(app_latency_seconds{namespace={{namespace}}}"}])
    assert refused.value.status == 422 and "as many ( as )" in str(refused.value.body)
    scenario.policies.clear()
    scenario.pool("a")
    scenario.deployment("web", "a", replicas=1)
    scenario.vpa("web", {"cpu": "250m", "memory": "256Mi"})
    scenario.policy(analyses=[analysis])
    updater = [sys.executable, "-m", "updater"]
    kube = ["--kubeconfig", cluster.kubeconfig, "-n", scenario.ns, "--pool-label", POOL_KEY]
    out = subprocess.run([*updater, "plan", *kube, "-o", "json"], capture_output=True, text=True, timeout=120,
                         check=False)
    assert out.returncode == 0, out.stderr
    [batch] = json.loads(out.stdout)["plans"][0]["batches"]
    [listed] = batch["analyses"]
    assert listed["name"] == "p99" and listed["workload"] == "Deployment/web"
    assert listed["query"].startswith(f'max(app_latency_seconds{{namespace="{scenario.ns}", pod=~"web-')
    run = [*updater, "run", *kube, "--listen", "127.0.0.1:0", "--no-leader-elect"]
    out = subprocess.run(run, capture_output=True, text=True, timeout=120, check=False)  # no --prometheus-url
    assert out.returncode == 2 and "no --prometheus-url was given" in out.stderr, out.stderr
    # Balanced, so the schema takes it; the updater's parser does not.
    name = scenario.policies[0]
    scenario.custom.patch_cluster_custom_object("podtailor.io", "v1alpha1", "resizepolicies", name, {
        "spec": {"analyses": [{**analysis, "query": "sum by (le) app_latency_seconds"}]}})
    out = subprocess.run([*run, "--prometheus-url", "http://127.0.0.1:9"], capture_output=True, text=True,
                         timeout=120, check=False)
    assert out.returncode == 2, out.stderr
    assert "ResizePolicy analyses cannot be used" in out.stderr and "not a PromQL query" in out.stderr
