"""A plain init container's recommendation, end to end: real API server (VPA CRD), real Prometheus.

The Deployment's pod has a regular container with two days of history and two plain init containers: ``migrate``
ran for ten minutes a day ago, and left what a finished init container leaves (cAdvisor series only while it
ran, its requests and limits in kube-state-metrics' ``kube_pod_init_container_resource_*``: the node simulator's
exporter, ``ExportContainer.init`` and ``ran_s``); ``wait`` left nothing in the window. One engine pass with the
``vpa`` strategy writes the VPA's status; the expected numbers are worked out from the usage model and VPA's
rules, not from the code under test.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from kubernetes import client

from podtailor.units import parse_cpu_millicores, parse_memory_bytes
from tests.harness.prometheus import LocalPrometheus
from tests.integration.test_recommender_real import (
    STEP,
    bucket_edge_slack,
    condition,
    engine_for,
    make_vpa,
    vpa_status,
)
from tests.nodesim.openmetrics import ExportContainer, write_openmetrics
from tests.nodesim.usage import Constant

pytestmark = [pytest.mark.cluster, pytest.mark.prometheus]
Mi = 2**20


def deployment(api: client.ApiClient, ns: str) -> None:
    labels = {"app": "web"}

    def c(name: str, cpu: str, memory: str) -> dict[str, object]:
        return {"name": name, "image": f"registry.invalid/{name}:1",
                "resources": {"requests": {"cpu": cpu, "memory": memory}, "limits": {"memory": "1Gi"}}}

    client.AppsV1Api(api).create_namespaced_deployment(ns, {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
        "spec": {"replicas": 0, "selector": {"matchLabels": labels}, "template": {
            "metadata": {"labels": labels}, "spec": {"initContainers": [c("migrate", "100m", "128Mi"),
                                                                        c("wait", "10m", "16Mi")],
                                                     "containers": [c("app", "500m", "256Mi")]}}}})


def backfill(prom: LocalPrometheus, tmp: Path, ns: str, end_s: float) -> None:
    def row(container: str, cores: float, memory_bytes: int, requests: tuple[int, int], *, init: bool = False,
            ran_s: tuple[float, float] | None = None) -> ExportContainer:
        return ExportContainer(namespace=ns, pod="web-5d9c-aaaaa", container=container, node="n1", pod_uid="u-web",
                               model=Constant(cpu_cores=cores, memory_bytes=memory_bytes), owner_kind="ReplicaSet",
                               owner_name="web-5d9c", replicaset_owner_kind="Deployment", replicaset_owner_name="web",
                               cpu_request_millicores=requests[0], memory_request_bytes=requests[1],
                               memory_limit_bytes=1024 * Mi, init=init, ran_s=ran_s)

    rows = [row("app", 0.2, 200 * Mi, (500, 256 * Mi)),
            row("migrate", 0.4, 300 * Mi, (100, 128 * Mi), init=True, ran_s=(end_s - 86400.0, end_s - 85800.0))]
    path = tmp / "init.om"
    with path.open("w") as out:
        write_openmetrics(out, rows, now_s=end_s, days=2, step_s=STEP)
    prom.backfill(path)


def test_the_vpa_status_carries_the_init_containers_recommendation(
    api: client.ApiClient, crds: list[str], namespace: str, prometheus: LocalPrometheus, tmp_path: Path,
) -> None:
    now_s = float(int(time.time()) // STEP * STEP)
    backfill(prometheus, tmp_path, namespace, now_s - 120)
    deployment(api, namespace)
    make_vpa(api, namespace, "web", "web")
    engine, _ = engine_for(api, prometheus, "vpa", namespace)
    report = engine.run_pass(now_s)
    assert report.served == 1 and report.written == 1
    status = vpa_status(api, namespace, "web")
    entries = {e["containerName"]: e for e in status["recommendation"]["containerRecommendations"]}
    # wait left no series: no recommendation for it (never a floor), and that does not count as missing.
    assert set(entries) == {"app", "migrate"}
    assert condition(status, "RecommendationProvided")["status"] == "True"
    cpu = parse_cpu_millicores(entries["migrate"]["target"]["cpu"])
    memory = parse_memory_bytes(entries["migrate"]["target"]["memory"])
    # CPU: the 240 s rate over ten minutes of a 0.4-core counter is 0.4 at most steps (lower only at the run's
    # two ends, where the window is partly empty), so p90 = 0.4 cores; x 1.15 = 460m, up to +7.5% for the edge
    # of its bucket (bucket_edge_slack(0.4, 0.01)).
    assert 460 <= cpu <= 460 * (1 + bucket_edge_slack(0.4, 0.01)) + 1, entries["migrate"]
    # Memory: one daily peak, 300Mi; x 1.15 = 345Mi, up to +8.2% for its bucket edge.
    assert 345 * Mi <= memory <= 345 * Mi * (1 + bucket_edge_slack(300 * Mi, 1e7)) + 1, entries["migrate"]
    # The regular container is unchanged by its pod's init containers: p90 0.2 cores x 1.15 = 230m.
    app_cpu = parse_cpu_millicores(entries["app"]["target"]["cpu"])
    assert 230 <= app_cpu <= 230 * (1 + bucket_edge_slack(0.2, 0.01)) + 1
