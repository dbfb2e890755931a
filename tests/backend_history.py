"""Helpers of tests/integration/test_backends_real.py: the history it writes and the cluster objects it reads.

Owns the usage history the backend tests compare (written as the node simulator's OpenMetrics files, so
one file can go into Prometheus with promtool, into VictoriaMetrics through its import API, and into each
Thanos cluster's Prometheus), the workloads and VPAs it is for, and a spy on the Prometheus source.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from kubernetes import client

from podtailor.units import parse_cpu_millicores, parse_memory_bytes
from recommender.engine import EngineConfig
from recommender.model.types import ContainerKey, UsageBatch
from recommender.sources.prometheus import PrometheusSource
from tests.nodesim.openmetrics import ExportContainer, write_openmetrics
from tests.nodesim.usage import Constant, Daily, Spikes, UsageModel

Mi = 2**20
STEP = 60
LAG = EngineConfig().read_lag_s
WORKLOADS = ("web", "api")


class RecordingSource:
    """The real PrometheusSource, with the ranges it was asked for recorded (a spy, not a fake)."""

    def __init__(self, inner: PrometheusSource) -> None:
        self.inner = inner
        self.calls: list[tuple[tuple[str, ...], float, float]] = []

    def history(self, namespaces: Sequence[str], start_s: float, end_s: float,
                pools: Mapping[tuple[str, str], str] | None = None) -> dict[ContainerKey, UsageBatch]:
        self.calls.append((tuple(namespaces), start_s, end_s))
        return self.inner.history(namespaces, start_s, end_s, pools)


def make_vpa(api: client.ApiClient, ns: str, name: str) -> None:
    client.CustomObjectsApi(api).create_namespaced_custom_object("autoscaling.k8s.io", "v1", ns,
                                                                 "verticalpodautoscalers", {
        "apiVersion": "autoscaling.k8s.io/v1", "kind": "VerticalPodAutoscaler", "metadata": {"name": name},
        "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
                 "updatePolicy": {"updateMode": "Off"}, "recommenders": [{"name": "podtailor"}]}})


def vpa_status(api: client.ApiClient, ns: str, name: str) -> dict[str, Any]:
    obj = client.CustomObjectsApi(api).get_namespaced_custom_object("autoscaling.k8s.io", "v1", ns,
                                                                    "verticalpodautoscalers", name)
    status: dict[str, Any] = obj.get("status") or {}
    return status


def condition(status: Mapping[str, Any], ctype: str) -> dict[str, Any]:
    found: dict[str, Any] = next(c for c in (status.get("conditions") or []) if c["type"] == ctype)
    return found


def target(status: Mapping[str, Any]) -> tuple[int, int]:
    rec = status["recommendation"]["containerRecommendations"][0]["target"]
    return parse_cpu_millicores(rec["cpu"]), parse_memory_bytes(rec["memory"])


def _containers(ns: str, rs: str, pods: int, model: UsageModel, workload: str) -> list[ExportContainer]:
    return [ExportContainer(namespace=ns, pod=f"{rs}-{i}", container="app", node="n1", model=model,
                            pod_uid=f"{ns}-{rs}-{i}", owner_kind="ReplicaSet", owner_name=rs,
                            replicaset_owner_name=workload, cpu_request_millicores=500,
                            memory_request_bytes=256 * Mi, memory_limit_bytes=2048 * Mi) for i in range(pods)]


def history_files(tmp: Path, ns: str, t2_s: float, *, distractor: bool = False) -> list[Path]:
    """Two days of web (old ReplicaSet) and api up to an hour before the second pass's read end, then an hour
    of web's new ReplicaSet (600 MiB: a new daily peak) and api up to it. The distractor: 3 cores, 900 MiB."""
    end1, end2 = t2_s - 3600 - LAG, t2_s - LAG
    web = Spikes(cpu_cores=0.2, memory_bytes=200 * Mi, spike_cpu_cores=1.0, spike_memory_bytes=100 * Mi,
                 period_s=3600, duration_s=1200)
    api = Daily(cpu_cores=0.6, memory_bytes=300 * Mi, cpu_amplitude_cores=0.4, memory_amplitude_bytes=50 * Mi,
                peak_hour=14, cpu_noise=0.2, memory_noise=0.1, seed=7)
    hot = Constant(cpu_cores=3.0, memory_bytes=900 * Mi)
    parts = [("old", end1, 2.0, [*_containers(ns, "web-1", 2, hot if distractor else web, "web"),
                                 *_containers(ns, "api-1", 2, hot if distractor else api, "api")]),
             # The new pods start 2 minutes after the first pass's read end (0.04 d = 57.6 min).
             ("new", end2, 0.04, _containers(ns, "web-2", 2, hot if distractor else Constant(
                 cpu_cores=0.2, memory_bytes=600 * Mi), "web"))]
    if not distractor:
        parts.append(("api", end2, 3540 / 86400, _containers(ns, "api-1", 2, api, "api")))
    paths = []
    for name, end, days, rows in parts:
        path = tmp / f"{ns}-{name}{'-b' if distractor else ''}.om"
        with path.open("w") as out:
            write_openmetrics(out, rows, now_s=end, days=days, step_s=STEP)
        paths.append(path)
    return paths


def make_workloads(api: client.ApiClient, ns: str) -> None:
    core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
    core.create_namespace({"metadata": {"name": ns}})
    for name in WORKLOADS:
        labels = {"app": name}
        apps.create_namespaced_deployment(ns, {
            "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "labels": {"team": "be"}},
            "spec": {"replicas": 0, "selector": {"matchLabels": labels}, "template": {
                "metadata": {"labels": labels}, "spec": {"containers": [{
                    "name": "app", "image": "registry.invalid/app:1",
                    "resources": {"requests": {"cpu": "500m", "memory": "256Mi"}, "limits": {"memory": "2Gi"}}}]}}}})
        make_vpa(api, ns, name)
