"""The recommender end to end: real API server (VPA CRD, checkpoints), real Prometheus, backfilled history.

History is written by the node simulator's OpenMetrics exporter from known usage models, so every
expected number below is worked out from the model, not from the code under test.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
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
from recommender.model.types import ContainerKey, UsageBatch
from recommender.sources.config import PrometheusConfig
from recommender.sources.prometheus import PrometheusSource
from tests.harness.prometheus import LocalPrometheus
from tests.nodesim.openmetrics import ExportContainer, write_openmetrics
from tests.nodesim.usage import Constant, Spikes, UsageModel

pytestmark = [pytest.mark.cluster, pytest.mark.prometheus]
Mi = 2**20
STEP = 60


def backfill(prom: LocalPrometheus, tmp: Path, ns: str, pods: Sequence[str], rs: str, model: UsageModel,
             end_s: float, days: float, workload: str = "web") -> None:
    containers = [ExportContainer(namespace=ns, pod=p, container="app", node="n1", model=model, pod_uid=p,
                                  owner_kind="ReplicaSet", owner_name=rs, replicaset_owner_kind="Deployment",
                                  replicaset_owner_name=workload, cpu_request_millicores=500,
                                  memory_request_bytes=256 * Mi, memory_limit_bytes=1024 * Mi) for p in pods]
    path = tmp / f"{rs}-{int(end_s)}.om"
    with path.open("w") as out:
        write_openmetrics(out, containers, now_s=end_s, days=days, step_s=STEP)
    prom.backfill(path)


def make_deployment(api: client.ApiClient, ns: str, name: str = "web") -> None:
    labels = {"app": name}
    client.AppsV1Api(api).create_namespaced_deployment(ns, {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
        "spec": {"replicas": 0, "selector": {"matchLabels": labels}, "template": {
            "metadata": {"labels": labels}, "spec": {"containers": [{
                "name": "app", "image": "registry.invalid/app:1",
                "resources": {"requests": {"cpu": "500m", "memory": "256Mi"}, "limits": {"memory": "1Gi"}}}]}}}})


def make_vpa(api: client.ApiClient, ns: str, name: str, target: str, recommender: str = "podtailor") -> None:
    client.CustomObjectsApi(api).create_namespaced_custom_object("autoscaling.k8s.io", "v1", ns,
                                                                 "verticalpodautoscalers", {
        "apiVersion": "autoscaling.k8s.io/v1", "kind": "VerticalPodAutoscaler", "metadata": {"name": name},
        "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": target},
                 "updatePolicy": {"updateMode": "Off"}, "recommenders": [{"name": recommender}]}})


def vpa_status(api: client.ApiClient, ns: str, name: str) -> dict[str, Any]:
    obj = client.CustomObjectsApi(api).get_namespaced_custom_object("autoscaling.k8s.io", "v1", ns,
                                                                    "verticalpodautoscalers", name)
    status: dict[str, Any] = obj.get("status") or {}
    return status


def condition(status: Mapping[str, Any], ctype: str) -> dict[str, Any]:
    return next(c for c in (status.get("conditions") or []) if c["type"] == ctype)


def target(status: Mapping[str, Any], key: str = "target") -> tuple[int, int]:
    rec = status["recommendation"]["containerRecommendations"][0]
    return parse_cpu_millicores(rec[key]["cpu"]), parse_memory_bytes(rec[key]["memory"])


class RecordingSource:
    """The real PrometheusSource, with the calls made to it recorded (a spy, not a fake)."""

    def __init__(self, inner: PrometheusSource) -> None:
        self.inner, self.calls = inner, []  # type: ignore[var-annotated]

    def history(self, namespaces: Sequence[str], start_s: float, end_s: float,
                pools: Mapping[tuple[str, str], str] | None = None) -> dict[ContainerKey, UsageBatch]:
        self.calls.append((tuple(namespaces), start_s, end_s))
        return self.inner.history(namespaces, start_s, end_s, pools)


def engine_for(api: client.ApiClient, prom: LocalPrometheus, strategy: str, ns: str,
               registry: CollectorRegistry | None = None) -> tuple[RecommenderEngine, RecordingSource]:
    registry = registry or CollectorRegistry()
    config = PrometheusConfig(url=prom.url, step_s=STEP, scrape_interval_s=60, retries=0, timeout_s=20)
    source = RecordingSource(PrometheusSource(config, registry=registry))
    engine = RecommenderEngine(store=KubeAdapter(api), source=source, strategy=get_strategy(strategy),
                               config=EngineConfig(namespaces=(ns,), history_s=3 * 86400),
                               metrics=RecommenderMetrics(registry))
    return engine, source


def bucket_edge_slack(x: float, first_bucket: float) -> float:
    """How far above ``x`` the upper edge of VPA's histogram bucket holding ``x`` can be, as a fraction.

    Bucket n starts at first * (r^n - 1) / (r - 1) with r = 1.05 (vpa.md 1.2), so its width relative to its
    start is (r - 1) r^n / (r^n - 1), where r^n = 1 + x (r - 1) / first: 5% only for large x.
    """
    rn = 1 + x * 0.05 / first_bucket
    return 0.05 * rn / (rn - 1)


@pytest.fixture
def now_s() -> float:
    return float(int(time.time()) // STEP * STEP)


def test_vpa_strategy_targets_are_the_percentiles_of_the_usage(
    api: client.ApiClient, crds: list[str], namespace: str, prometheus: LocalPrometheus, tmp_path: Path,
    now_s: float,
) -> None:
    # 0.2 cores, plus 1.0 core for 20 of every 60 minutes: a third of the time at 1.2 cores, so p90 = 1.2
    # and p50 = 0.2. Memory 200Mi, 300Mi during spikes: every daily peak is 300Mi.
    model = Spikes(cpu_cores=0.2, memory_bytes=200 * Mi, spike_cpu_cores=1.0, spike_memory_bytes=100 * Mi,
                   period_s=3600, duration_s=1200)
    backfill(prometheus, tmp_path, namespace, ["web-5d9c-aaaaa", "web-5d9c-bbbbb"], "web-5d9c", model,
             now_s - 120, days=2)
    make_deployment(api, namespace)
    make_vpa(api, namespace, "web", "web")
    engine, _ = engine_for(api, prometheus, "vpa", namespace)
    report = engine.run_pass(now_s)
    assert report.served == 1 and report.written == 1
    status = vpa_status(api, namespace, "web")
    cpu, memory = target(status)
    # VPA: target = p90 x 1.15, read at the upper edge of the bucket holding p90 = 1.2 cores (first bucket
    # 0.01 core): 1.2 x 1.15 = 1.38 cores, up to +5.8% for the bucket edge.
    assert 1380 <= cpu <= 1380 * (1 + bucket_edge_slack(1.2, 0.01)) + 1
    # Memory: p90 of the daily peaks (all 300Mi; first bucket 1e7 B) x 1.15 = 345Mi, up to +8.2%.
    assert 345 * Mi <= memory <= 345 * Mi * (1 + bucket_edge_slack(300 * Mi, 1e7)) + 1
    low_cpu, _ = target(status, "lowerBound")
    # Lower bound: p50 (0.2 cores) x 1.15 = 230m, up to +10% for the bucket edge; two days of samples make
    # the confidence factor (1 + 0.001/c)^-2 about 0.999.
    assert 229 <= low_cpu <= 230 * (1 + bucket_edge_slack(0.2, 0.01)) + 1
    assert condition(status, "RecommendationProvided")["status"] == "True"


def test_restart_resumes_from_the_checkpoint(
    api: client.ApiClient, crds: list[str], namespace: str, prometheus: LocalPrometheus, tmp_path: Path,
    now_s: float,
) -> None:
    model = Constant(cpu_cores=0.4, memory_bytes=300 * Mi)
    backfill(prometheus, tmp_path, namespace, ["web-77f-aaaaa"], "web-77f", model, now_s - 120, days=2)
    make_deployment(api, namespace)
    make_vpa(api, namespace, "web", "web")
    first, first_source = engine_for(api, prometheus, "podtailor", namespace)
    first.run_pass(now_s)
    first.checkpoint_all(now_s)
    lag = EngineConfig().read_lag_s
    assert first_source.calls[0][1:] == (now_s - lag - 3 * 86400, now_s - lag)  # cold start: the whole window
    before = target(vpa_status(api, namespace, "web"))

    registry = CollectorRegistry()
    second, second_source = engine_for(api, prometheus, "podtailor", namespace, registry)
    second.run_pass(now_s + STEP)
    assert registry.get_sample_value("podtailor_recommender_checkpoints_restored_total") == 1.0
    # The restarted recommender read only what came after the checkpoint, not the window again.
    assert [c[1:] for c in second_source.calls] == [(now_s - lag, now_s + STEP - lag)]
    assert target(vpa_status(api, namespace, "web")) == before


def test_a_rollout_that_renames_pods_keeps_the_history(
    api: client.ApiClient, crds: list[str], namespace: str, prometheus: LocalPrometheus, tmp_path: Path,
    now_s: float,
) -> None:
    # Yesterday's ReplicaSet ran at 1.0 core; today's pods (new names, new ReplicaSet) run at 0.2 cores.
    backfill(prometheus, tmp_path, namespace, ["web-old1-aaaaa", "web-old1-bbbbb"], "web-old1",
             Constant(cpu_cores=1.0, memory_bytes=300 * Mi), now_s - 86400 - 120, days=1)
    backfill(prometheus, tmp_path, namespace, ["web-new2-ccccc", "web-new2-ddddd"], "web-new2",
             Constant(cpu_cores=0.2, memory_bytes=300 * Mi), now_s - 120, days=0.99)
    make_deployment(api, namespace)
    make_vpa(api, namespace, "web", "web")
    engine, _ = engine_for(api, prometheus, "vpa", namespace)
    engine.run_pass(now_s)
    cpu, _ = target(vpa_status(api, namespace, "web"))
    # Pooled by Deployment, the old pods' day (decayed to half weight, about a third of the total) is still
    # above the top 10%: p90 = 1.0 core -> 1.15 cores. Keyed by pod, only 0.2 x 1.15 = 230m would remain.
    assert 1150 <= cpu <= 1150 * (1 + bucket_edge_slack(1.0, 0.01)) + 1


def test_prometheus_outage_keeps_the_targets_and_marks_them_stale(
    api: client.ApiClient, crds: list[str], namespace: str, prometheus: LocalPrometheus, tmp_path: Path,
    now_s: float,
) -> None:
    backfill(prometheus, tmp_path, namespace, ["web-1a-aaaaa"], "web-1a", Constant(cpu_cores=0.3,
                                                                                  memory_bytes=200 * Mi),
             now_s - 120, days=1)
    make_deployment(api, namespace)
    make_vpa(api, namespace, "web", "web")
    engine, _ = engine_for(api, prometheus, "podtailor", namespace)
    engine.run_pass(now_s)
    before = vpa_status(api, namespace, "web")
    prometheus.stop()
    try:
        report = engine.run_pass(now_s + STEP)
        assert report.stale == 1 and report.written == 0
        during = vpa_status(api, namespace, "web")
        assert during["recommendation"] == before["recommendation"]  # no zero, no floor, no change
        stale = condition(during, "Stale")
        assert stale["status"] == "True" and "usage history unavailable" in stale["message"]
    finally:
        prometheus.start()
    engine.run_pass(now_s + 2 * STEP)
    assert condition(vpa_status(api, namespace, "web"), "Stale")["status"] == "False"


def test_only_our_vpas_are_served_and_bad_targets_are_reported(
    api: client.ApiClient, crds: list[str], namespace: str, prometheus: LocalPrometheus, now_s: float,
) -> None:
    make_deployment(api, namespace)
    make_vpa(api, namespace, "theirs", "web", recommender="someone-else")
    make_vpa(api, namespace, "missing", "no-such-deployment")
    engine, _ = engine_for(api, prometheus, "podtailor", namespace)
    report = engine.run_pass(now_s)
    assert report.served == 0 and report.unsupported == 1
    assert vpa_status(api, namespace, "theirs") == {}
    unsupported = condition(vpa_status(api, namespace, "missing"), "ConfigUnsupported")
    assert unsupported["status"] == "True" and "no-such-deployment not found" in unsupported["message"]


def test_the_once_command_writes_and_prints_recommendations(
    api: client.ApiClient, cluster: Any, crds: list[str], namespace: str, prometheus: LocalPrometheus,
    tmp_path: Path, now_s: float,
) -> None:
    backfill(prometheus, tmp_path, namespace, ["web-9z-aaaaa"], "web-9z", Constant(cpu_cores=0.25,
                                                                                  memory_bytes=150 * Mi),
             now_s - 120, days=1)
    make_deployment(api, namespace)
    make_vpa(api, namespace, "web", "web")
    cmd = [sys.executable, "-m", "recommender", "once", "--kubeconfig", cluster.kubeconfig, "--prometheus-url",
           prometheus.url, "-n", namespace, "--scrape-interval", "60s", "--history", "2d", "-o", "json"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    printed = json.loads(done.stdout)
    assert printed["served"] == 1 and printed["recommendations"][0]["container"] == "app"
    assert target(vpa_status(api, namespace, "web")) == (
        parse_cpu_millicores(printed["recommendations"][0]["target"]["cpu"]),
        parse_memory_bytes(printed["recommendations"][0]["target"]["memory"]))
    events = client.CoreV1Api(api).list_namespaced_event(namespace).items
    assert any(e.reason == "RecommendationUpdated" and e.involved_object.kind == "VerticalPodAutoscaler"
               and e.involved_object.name == "web" and "app: cpu" in e.message for e in events)
    bad = subprocess.run([*cmd[:-2], "--history=-1d"], capture_output=True, text=True, timeout=60, check=False)
    assert bad.returncode == 2 and "bad duration" in bad.stderr


def _get(url: str) -> tuple[int, str]:
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()
    except OSError:
        return 0, ""


def test_the_run_command_serves_elects_a_leader_and_stops_cleanly(
    api: client.ApiClient, cluster: Any, crds: list[str], namespace: str, prometheus: LocalPrometheus,
    tmp_path: Path, now_s: float,
) -> None:
    import signal

    from tests.harness.process import free_port
    from tests.waiting import eventually

    backfill(prometheus, tmp_path, namespace, ["web-run-aaaaa"], "web-run", Constant(cpu_cores=0.3,
                                                                                    memory_bytes=120 * Mi),
             now_s - 120, days=1)
    make_deployment(api, namespace)
    make_vpa(api, namespace, "web", "web")
    ports = [free_port(), free_port()]
    procs = [subprocess.Popen(
        [sys.executable, "-m", "recommender", "run", "--kubeconfig", cluster.kubeconfig, "--prometheus-url",
         prometheus.url, "-n", namespace, "--scrape-interval", "60s", "--history", "2d", "--interval", "2s",
         "--listen", f"127.0.0.1:{port}", "--leader-election-namespace", namespace, "--log-format", "json"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) for port in ports]
    try:
        for port in ports:
            eventually("/healthz", lambda p=port: _get(f"http://127.0.0.1:{p}/healthz")[0] == 200, timeout_s=30)
        eventually("a recommendation written", lambda: vpa_status(api, namespace, "web").get("recommendation"),
                   timeout_s=60)
        lease = client.CoordinationV1Api(api).read_namespaced_lease("podtailor-recommender", namespace)
        ok_pass = 'podtailor_recommender_passes_total{outcome="ok"}'
        # The pass counter moves when a pass returns, after the statuses it writes: wait for the first count.
        eventually("a pass counted", lambda: any(ok_pass in _get(f"http://127.0.0.1:{p}/metrics")[1] for p in ports),
                   timeout_s=30)
        metrics = [_get(f"http://127.0.0.1:{p}/metrics")[1] for p in ports]
        passes = [m for m in metrics if ok_pass in m]
        assert len(passes) == 1, "exactly one replica leads and runs passes"
        assert all(_get(f"http://127.0.0.1:{p}/readyz")[0] == 200 for p in ports)  # leader ready, standby ready
        assert lease.spec.holder_identity
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        codes = [proc.wait(timeout=30) for proc in procs]
        assert codes == [0, 0], [proc.stderr.read() if proc.stderr else "" for proc in procs]
        # The leader checkpointed on its way out.
        checkpoint = client.CustomObjectsApi(api).get_namespaced_custom_object(
            "podtailor.io", "v1alpha1", namespace, "recommendercheckpoints", "web")
        assert checkpoint["spec"]["strategy"] == "podtailor"
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
