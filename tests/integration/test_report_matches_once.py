"""``report`` says what ``once`` writes: the same history and cluster, the default strategy, equal numbers.

Real API server (VPA CRD) and real Prometheus, history backfilled by the node simulator's OpenMetrics
exporter. Two workloads: ``web`` has a two-container pod and a VPA whose maxAllowed (app's memory) and
minAllowed (proxy's memory) bind; ``db`` has a VPA without a container policy and is larger, so the fleet the
default strategy prices in is not any one workload. ``report -o json`` runs first (it writes nothing), then
``once`` writes the VPAs' status; every container's target, lower and upper bound in the report must equal
what ``once`` wrote, exactly.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from podtailor.units import parse_cpu_millicores, parse_memory_bytes
from tests.harness.prometheus import LocalPrometheus
from tests.nodesim.openmetrics import ExportContainer, write_openmetrics
from tests.nodesim.usage import Spikes

pytestmark = [pytest.mark.cluster, pytest.mark.prometheus]
Mi = 2**20
REPO = Path(__file__).resolve().parents[2]
PODS = {"web": ("web-5d", {"app": Spikes(cpu_cores=0.3, memory_bytes=600 * Mi, spike_cpu_cores=0.9,
                                         spike_memory_bytes=100 * Mi, period_s=7200, duration_s=600),
                           "proxy": Spikes(cpu_cores=0.02, memory_bytes=50 * Mi, spike_cpu_cores=0.2,
                                           spike_memory_bytes=30 * Mi, period_s=3600, duration_s=300, offset_s=900)}),
        "db": ("db-7f", {"db": Spikes(cpu_cores=1.0, memory_bytes=2048 * Mi, spike_cpu_cores=3.0,
                                      spike_memory_bytes=512 * Mi, period_s=4 * 3600, duration_s=300)})}
"""Spiky usage, so that the prices (relative to the fleet, as run sets them) decide how much of it is covered."""
REQUESTS = {"app": ("500m", "512Mi"), "proxy": ("100m", "64Mi"), "db": ("1", "2Gi")}
POLICIES = {"web": [{"containerName": "app", "maxAllowed": {"memory": "400Mi"}},
                    {"containerName": "proxy", "minAllowed": {"memory": "256Mi"}}],
            "db": None}


def backfill(prom: LocalPrometheus, tmp: Path, ns: str, end_s: float) -> None:
    rows = [ExportContainer(namespace=ns, pod=f"{rs}-aaaaa", container=name, node="n1", model=model,
                            pod_uid=f"{ns}-{rs}", owner_kind="ReplicaSet", owner_name=rs, replicaset_owner_name=app)
            for app, (rs, models) in PODS.items() for name, model in models.items()]
    path = tmp / "usage.om"
    with path.open("w") as out:
        write_openmetrics(out, rows, now_s=end_s, days=2, step_s=60)
    prom.backfill(path)


def make_workloads(api: client.ApiClient, ns: str) -> None:
    custom = client.CustomObjectsApi(api)
    for app, (_, models) in PODS.items():
        labels = {"app": app}
        containers = [{"name": name, "image": f"registry.invalid/{name}:1", "resources": {
            "requests": {"cpu": REQUESTS[name][0], "memory": REQUESTS[name][1]},
            "limits": {"memory": REQUESTS[name][1]}}} for name in models]
        client.AppsV1Api(api).create_namespaced_deployment(ns, {
            "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": app},
            "spec": {"replicas": 0, "selector": {"matchLabels": labels}, "template": {
                "metadata": {"labels": labels}, "spec": {"containers": containers}}}})
        spec: dict[str, Any] = {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": app},
                                "updatePolicy": {"updateMode": "Off"}, "recommenders": [{"name": "podtailor"}]}
        if POLICIES[app] is not None:
            spec["resourcePolicy"] = {"containerPolicies": POLICIES[app]}
        custom.create_namespaced_custom_object("autoscaling.k8s.io", "v1", ns, "verticalpodautoscalers", {
            "apiVersion": "autoscaling.k8s.io/v1", "kind": "VerticalPodAutoscaler", "metadata": {"name": app},
            "spec": spec})


def command(name: str, cluster: Any, prom: LocalPrometheus, ns: str, *args: str) -> Any:
    cmd = [sys.executable, "-m", "recommender", name, "--kubeconfig", cluster.kubeconfig, "--prometheus-url",
           prom.url, "-n", ns, "--scrape-interval", "60s", "--history", "3d", "-o", "json", *args]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=180, check=False, cwd=REPO)
    assert done.returncode == 0, (name, done.stderr)
    return json.loads(done.stdout)


def written(api: client.ApiClient, ns: str) -> dict[tuple[str, str], dict[str, tuple[int, int]]]:
    """(VPA, container) -> target, lowerBound and upperBound as (millicores, bytes), from the VPAs' status."""
    out = {}
    for app in PODS:
        obj = client.CustomObjectsApi(api).get_namespaced_custom_object("autoscaling.k8s.io", "v1", ns,
                                                                        "verticalpodautoscalers", app)
        for entry in obj["status"]["recommendation"]["containerRecommendations"]:
            out[(app, entry["containerName"])] = {
                key: (parse_cpu_millicores(entry[key]["cpu"]), parse_memory_bytes(entry[key]["memory"]))
                for key in ("target", "lowerBound", "upperBound")}
    return out


def test_report_and_once_agree_on_every_container(
    api: client.ApiClient, cluster: Any, crds: list[str], namespace: str, prometheus: LocalPrometheus,
    tmp_path: Path,
) -> None:
    backfill(prometheus, tmp_path, namespace, time.time() - 300)
    make_workloads(api, namespace)
    doc = command("report", cluster, prometheus, namespace)
    reported = {(w["vpa"], c["name"]): {key: (c["recommendation"][key]["cpuMillicores"],
                                              c["recommendation"][key]["memoryBytes"])
                                        for key in ("target", "lowerBound", "upperBound")}
                for w in doc["workloads"] for c in w["containers"]}
    assert set(reported) == {("web", "app"), ("web", "proxy"), ("db", "db")}
    assert not any("no VPA" in w for w in doc["warnings"])
    printed = command("once", cluster, prometheus, namespace)
    assert printed["served"] == 2 and printed["written"] == 2
    assert written(api, namespace) == reported
    # The VPA's bounds bind: app's memory at maxAllowed, below what it would be; proxy's memory at minAllowed.
    web = {c["name"]: c["recommendation"] for w in doc["workloads"] if w["name"] == "web" for c in w["containers"]}
    assert web["app"]["target"]["memoryBytes"] == 400 * Mi < web["app"]["uncappedTarget"]["memoryBytes"]
    assert web["proxy"]["target"]["memoryBytes"] == 256 * Mi > web["proxy"]["uncappedTarget"]["memoryBytes"]
