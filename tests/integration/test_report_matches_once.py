"""``report`` says what ``once`` writes: the same history and cluster, the default strategy, equal numbers.

Real API server (VPA CRD) and real Prometheus, history backfilled by the node simulator's OpenMetrics
exporter. Two workloads: ``web`` has a two-container pod and a VPA whose maxAllowed (app's memory) and
minAllowed (proxy's memory) bind; ``db`` has a VPA without a container policy and is larger, so the fleet the
default strategy prices in is not any one workload. ``report -o json`` runs first (it writes nothing), then
``once`` writes the VPAs' status; every container's target, lower and upper bound in the report must equal
what ``once`` wrote, exactly. The second test does the same after a checkpoint exists: ``once`` has written
the VPAs' RecommenderCheckpoints, more history arrives, and Prometheus no longer holds the oldest history the
checkpoints do; ``report`` must restore them as the next ``once`` does.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from dataclasses import replace
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


STEP_S = 15
FAST = ("--scrape-interval", f"{STEP_S}s", "--step", f"{STEP_S}s")
"""A short step, so that new history after a checkpoint is a few steps of a minute's wait."""
HALF_DAY = 43200.0
HEAVY = {app: (rs, {name: replace(m, cpu_cores=2 * m.cpu_cores, memory_bytes=3 * m.memory_bytes // 2)
                    for name, m in models.items()}) for app, (rs, models) in PODS.items()}
"""Twice the CPU and half as much memory again: the older history, which Prometheus loses and the checkpoints keep."""


def export(prom: LocalPrometheus, path: Path, ns: str, pods: dict[str, Any], first_s: float, last_s: float) -> None:
    """Samples of ``pods`` at every STEP_S multiple in [first_s, last_s] (both on the step grid)."""
    rows = [ExportContainer(namespace=ns, pod=f"{rs}-aaaaa", container=name, node="n1", model=model,
                            pod_uid=f"{ns}-{rs}", owner_kind="ReplicaSet", owner_name=rs, replicaset_owner_name=app)
            for app, (rs, models) in pods.items() for name, model in models.items()]
    with path.open("w") as out:
        write_openmetrics(out, rows, now_s=last_s, days=(last_s - first_s + 1) / 86400, step_s=STEP_S)
    prom.backfill(path)


def on_grid(t: float) -> float:
    return math.floor(t / STEP_S) * STEP_S


def delete_history(prom: LocalPrometheus, ns: str, until_s: float) -> None:
    """Drop the namespace's samples up to ``until_s`` (as retention would), through the TSDB admin API."""
    query = urllib.parse.urlencode({"match[]": f'{{namespace="{ns}"}}', "start": "0", "end": f"{until_s:.3f}"})
    req = urllib.request.Request(f"{prom.url}/api/v1/admin/tsdb/delete_series?{query}", method="POST")
    with urllib.request.urlopen(req, timeout=30) as resp:
        assert resp.status == 204


def checkpointed_until(api: client.ApiClient, ns: str) -> float:
    """The history time of both VPAs' checkpoints (one pass wrote both: the same time)."""
    custom = client.CustomObjectsApi(api)
    until = {custom.get_namespaced_custom_object("podtailor.io", "v1alpha1", ns, "recommendercheckpoints",
                                                 app)["spec"]["historyUntilSeconds"] for app in PODS}
    assert len(until) == 1, until
    return float(until.pop())


def targets(doc: Any) -> dict[tuple[str, str], dict[str, tuple[int, int]]]:
    return {(w["vpa"], c["name"]): {key: (c["recommendation"][key]["cpuMillicores"],
                                          c["recommendation"][key]["memoryBytes"])
                                    for key in ("target", "lowerBound", "upperBound")}
            for w in doc["workloads"] for c in w["containers"]}


def test_after_a_checkpoint_report_restores_it_and_agrees_with_the_next_once(
    api: client.ApiClient, cluster: Any, crds: list[str], namespace: str, prometheus: LocalPrometheus,
    tmp_path: Path,
) -> None:
    old_end = on_grid(time.time() - HALF_DAY - 300)
    export(prometheus, tmp_path / "old.om", namespace, HEAVY, old_end - HALF_DAY, old_end)
    export(prometheus, tmp_path / "recent.om", namespace, PODS, old_end + STEP_S, on_grid(time.time() - 300))
    make_workloads(api, namespace)
    first = command("once", cluster, prometheus, namespace, *FAST)
    assert first["served"] == 2 and first["written"] == 2
    until = checkpointed_until(api, namespace)
    # More history arrives: three steps after the checkpoint's time, the ones the next pass reads.
    new_first = on_grid(until) + STEP_S
    new_last = new_first + 2 * STEP_S
    export(prometheus, tmp_path / "new.om", namespace, PODS, new_first, new_last)
    # Prometheus drops the older half day (retention); the checkpoints still hold it.
    delete_history(prometheus, namespace, old_end + 1)
    # Every read below ends (120 s before it starts) past the last step the new samples reach: a CPU rate
    # looks back 4 scrapes, so the reads see the same samples whatever second each one starts at.
    time.sleep(max(0.0, new_last + 4 * STEP_S + STEP_S + 120 + 5 - time.time()))
    doc = command("report", cluster, prometheus, namespace, *FAST)
    fresh = command("report", cluster, prometheus, namespace, *FAST, "--no-checkpoints")
    second = command("once", cluster, prometheus, namespace, *FAST)
    assert second["served"] == 2 and second["stale"] == 0
    assert doc["settings"]["checkpoints"] is True and fresh["settings"]["checkpoints"] is False
    assert not any("checkpoint" in w for w in doc["warnings"]), doc["warnings"]
    assert set(targets(doc)) == {("web", "app"), ("web", "proxy"), ("db", "db")}
    assert written(api, namespace) == targets(doc)
    # From fresh state over what Prometheus still has, the report says something else: the agreement above
    # is the checkpoints' doing.
    assert targets(fresh) != targets(doc)
