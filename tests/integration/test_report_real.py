"""``podtailor-recommender report`` end to end: real API server, simulated nodes and pods, real Prometheus.

Deployments run on a simulated node pool; their usage history is backfilled from known constant models with
the node simulator's OpenMetrics exporter, so every expected number is worked out from the model (the
``krr-simple`` strategy: CPU = p95, memory = peak x 1.15 rounded up to a MiB), not from the code under test.
The disruption column is checked against what the updater's planner decides for the same pods when VPAs
carry the report's targets, and the error paths against their documented exit codes.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import replace
from fractions import Fraction
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from kubernetes import client

from tests.conftest import SimFactory
from tests.harness.prometheus import LocalPrometheus
from tests.nodesim.nodes import POOL_LABEL_KEYS, NodePool
from tests.nodesim.openmetrics import ExportContainer, write_openmetrics
from tests.nodesim.usage import Constant
from tests.waiting import eventually

pytestmark = [pytest.mark.cluster, pytest.mark.prometheus]
Mi, Gi = 2**20, 2**30
POOL_KEY = POOL_LABEL_KEYS["podtailor"]
REPO = Path(__file__).resolve().parents[2]
SCHEMA = json.loads((REPO / "docs" / "report-schema.json").read_text())
USAGE = {"online": (0.2, 300 * Mi), "restart": (0.2, 300 * Mi), "cpu-only": (0.2, 300 * Mi),
         "guaranteed": (0.2, 300 * Mi), "big": (6.0, 300 * Mi)}
SIDECAR_USAGE = (0.05, 40 * Mi)


def container(name: str, requests: dict[str, str], limits: dict[str, str], memory_policy: str = "NotRequired",
              **extra: Any) -> dict[str, Any]:
    return {"name": name, "image": f"registry.invalid/{name}:1", "resources": {"requests": requests, "limits": limits},
            "resizePolicy": [{"resourceName": "memory", "restartPolicy": memory_policy}], **extra}


def deployment(name: str, pool: str, containers: list[dict[str, Any]], init: list[dict[str, Any]] | None = None,
               replicas: int = 1) -> dict[str, Any]:
    labels = {"app": name}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "labels": {"team": "report"}},
            "spec": {"replicas": replicas, "selector": {"matchLabels": labels}, "template": {
                "metadata": {"labels": labels}, "spec": {"nodeSelector": {POOL_KEY: pool},
                                                         "terminationGracePeriodSeconds": 1,
                                                         "initContainers": init or [], "containers": containers}}}}


WORKLOADS = {
    # 500m/256Mi requests, 1 core / 512Mi limits; NotRequired everywhere: CPU and memory change in place.
    "online": ([container("app", {"cpu": "500m", "memory": "256Mi"}, {"cpu": "1", "memory": "512Mi"})],
               [container("proxy", {"cpu": "100m", "memory": "64Mi"}, {"memory": "128Mi"}, restartPolicy="Always"),
                {"name": "setup", "image": "registry.invalid/setup:1",
                 "resources": {"requests": {"cpu": "50m", "memory": "32Mi"}}}]),
    # Memory RestartContainer and the memory request changes: a container restart.
    "restart": ([container("app", {"cpu": "500m", "memory": "256Mi"}, {"cpu": "1", "memory": "512Mi"},
                           "RestartContainer")], None),
    # Memory RestartContainer, but an HPA scales on memory utilization, so memory is kept: a CPU-only change.
    "cpu-only": ([container("app", {"cpu": "500m", "memory": "256Mi"}, {"cpu": "1", "memory": "512Mi"},
                            "RestartContainer")], None),
    # Guaranteed (requests == limits): the planned limits follow the requests, so it stays Guaranteed.
    "guaranteed": ([container("app", {"cpu": "500m", "memory": "512Mi"}, {"cpu": "500m", "memory": "512Mi"})], None),
    # Uses 6 cores on 4-core nodes: the target is above the node's allocatable.
    "big": ([container("app", {"cpu": "500m", "memory": "256Mi"}, {"memory": "512Mi"})], None),
}
EXPECTED = {"online": "in-place", "restart": "in-place-restart", "cpu-only": "in-place", "guaranteed": "in-place",
            "big": "replacement"}


def backfill(prom: LocalPrometheus, tmp: Path, core: client.CoreV1Api, ns: str, end_s: float) -> None:
    rows = []
    for pod in core.list_namespaced_pod(ns).items:
        app, rs = pod.metadata.labels["app"], pod.metadata.owner_references[0].name
        for name, (cpu, memory) in (("app", USAGE[app]), ("proxy", SIDECAR_USAGE)):
            if name == "proxy" and app != "online":
                continue
            rows.append(ExportContainer(namespace=ns, pod=pod.metadata.name, container=name, node=pod.spec.node_name,
                                        model=Constant(cpu_cores=cpu, memory_bytes=memory), pod_uid=pod.metadata.uid,
                                        owner_kind="ReplicaSet", owner_name=rs, replicaset_owner_name=app))
    path = tmp / "usage.om"
    with path.open("w") as out:
        write_openmetrics(out, rows, now_s=end_s, days=1, step_s=60)
    prom.backfill(path)


def run_report(cluster: Any, prom_url: str, *args: str,
               kubeconfig: str | None = None) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "recommender", "report", "--kubeconfig", kubeconfig or cluster.kubeconfig,
           "--prometheus-url", prom_url, "--scrape-interval", "60s", "--history", "1d", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False, cwd=REPO)


def setup_cluster(api: client.ApiClient, ns: str, make_sim: SimFactory) -> str:
    pool = f"{ns[-6:]}-a"
    make_sim(NodePool(name=pool, count=1, cpu_millicores=4000, memory_bytes=8 * Gi), tick_s=0.5)
    apps = client.AppsV1Api(api)
    for name, (containers, init) in WORKLOADS.items():
        apps.create_namespaced_deployment(ns, deployment(name, pool, containers, init))
    client.AutoscalingV2Api(api).create_namespaced_horizontal_pod_autoscaler(ns, {
        "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "metadata": {"name": "cpu-only"},
        "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "cpu-only"},
                 "minReplicas": 1, "maxReplicas": 3, "metrics": [{"type": "Resource", "resource": {
                     "name": "memory", "target": {"type": "Utilization", "averageUtilization": 80}}}]}})
    core = client.CoreV1Api(api)
    eventually("all pods running", lambda: sum(p.status.phase == "Running" and bool(p.status.container_statuses)
                                               for p in core.list_namespaced_pod(ns).items) == len(WORKLOADS),
               timeout_s=60)
    return pool


def updater_plan(api: client.ApiClient, ns: str, doc: dict[str, Any]) -> dict[str, Any]:
    """Write the report's targets into VPAs and let the updater's planner decide on the real snapshot."""
    write_vpas(api, ns, doc)
    return {d.workload_name: d for d in planner_decisions(api, ns)}


def write_vpas(api: client.ApiClient, ns: str, doc: dict[str, Any]) -> None:
    """A VPA per workload of the report, its status carrying the report's recommendations (InPlaceOrRecreate)."""
    custom = client.CustomObjectsApi(api)
    for w in doc["workloads"]:
        recs = [{"containerName": c["name"], **{k: {"cpu": f"{c['recommendation'][k]['cpuMillicores']}m",
                                                     "memory": str(c["recommendation"][k]["memoryBytes"])}
                                                 for k in ("target", "lowerBound", "upperBound", "uncappedTarget")}}
                for c in w["containers"] if c["recommendation"]]
        body = {"apiVersion": "autoscaling.k8s.io/v1", "kind": "VerticalPodAutoscaler", "metadata": {"name": w["name"]},
                "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": w["kind"], "name": w["name"]},
                         "updatePolicy": {"updateMode": "InPlaceOrRecreate"}, "recommenders": [{"name": "podtailor"}]}}
        custom.create_namespaced_custom_object("autoscaling.k8s.io", "v1", ns, "verticalpodautoscalers", body)
        obj = custom.get_namespaced_custom_object("autoscaling.k8s.io", "v1", ns, "verticalpodautoscalers", w["name"])
        obj["status"] = {"recommendation": {"containerRecommendations": recs}}
        custom.replace_namespaced_custom_object_status("autoscaling.k8s.io", "v1", ns, "verticalpodautoscalers",
                                                       w["name"], obj)


def planner_decisions(api: client.ApiClient, ns: str, change_threshold: float | None = None) -> list[Any]:
    """The updater's planner on the real snapshot of ``ns``: a decision per pod (with the policy's default
    change threshold unless one is given)."""
    from updater.kube.snapshot import ClusterReader
    from updater.policy.planner import plan
    from updater.policy.types import RolloutPolicy

    snap = ClusterReader(api).read(policy_pool_label=POOL_KEY, namespaces=(ns,))
    policy = RolloutPolicy(min_pod_age_s=0, excluded_namespaces=frozenset(), allow_single_replica_eviction=True)
    if change_threshold is not None:
        policy = replace(policy, change_threshold=change_threshold)
    result = plan(pods=snap.pods, targets=snap.targets, hpas=snap.hpas, limit_ranges=snap.limit_ranges,
                  nodes=snap.nodes, policy=policy, now_s=time.time(),
                  approvals=frozenset((t.namespace, t.workload_kind, t.workload_name) for t in snap.targets))
    return list(result.decisions)


def test_report_numbers_costs_schema_and_disruption(
    api: client.ApiClient, cluster: Any, crds: list[str], namespace: str, prometheus: LocalPrometheus,
    make_sim: SimFactory, tmp_path: Path,
) -> None:
    pool = setup_cluster(api, namespace, make_sim)
    backfill(prometheus, tmp_path, client.CoreV1Api(api), namespace, time.time() - 180)
    done = run_report(cluster, prometheus.url, "-n", namespace, "--strategy", "krr-simple", "-o", "json",
                      "-l", "team=report")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)  # stdout holds the report and nothing else
    jsonschema.Draft202012Validator(SCHEMA, format_checker=jsonschema.FormatChecker()).validate(doc)
    by_name = {w["name"]: w for w in doc["workloads"]}
    assert set(by_name) == set(WORKLOADS) and all(w["pool"] == pool for w in doc["workloads"])

    # Numbers: krr-simple from constant usage. CPU p95 of 0.2 cores is read at the upper edge of a 1% bucket:
    # [200m, 1.01 x 200m + 1m]; memory = 300Mi peak x 1.15 = 345Mi exactly (rounded up to a MiB).
    for name, (cpu, memory) in USAGE.items():
        target = by_name[name]["containers"][-1 if name != "online" else 1]["recommendation"]["target"]
        assert cpu * 1000 <= target["cpuMillicores"] <= cpu * 1010 + 1, (name, target)
        assert target["memoryBytes"] == -(-memory * 115 // (100 * Mi)) * Mi
    proxy, app, setup = by_name["online"]["containers"]
    assert (proxy["role"], app["role"], setup["role"]) == ("sidecar", "container", "init")
    # The sidecar: 40Mi peak x 1.15 = 46Mi, under KRR's 100Mi floor; 50m p95 -> [50m, 51.5m].
    assert proxy["recommendation"]["target"]["memoryBytes"] == 100 * Mi
    assert 50 <= proxy["recommendation"]["target"]["cpuMillicores"] <= 52
    assert setup["recommendation"] is None and setup["cost"]["currentMicros"] == 0  # no history; init costs 0
    # Planned limits keep the ratio: 1 core x 200m / 500m = 400m (up to the bucket slack).
    assert app["planned"]["limits"]["cpuMillicores"] == -(-1000 * app["planned"]["requests"]["cpuMillicores"] // 500)
    # The HPA on memory keeps memory where it is.
    assert by_name["cpu-only"]["containers"][0]["planned"]["requests"]["memoryBytes"] == 256 * Mi
    assert by_name["guaranteed"]["qos"] == {"current": "Guaranteed", "planned": "Guaranteed"}
    assert {r["flag"] for r in by_name["cpu-only"]["risks"]} >= {"hpa-same-resource"}

    # Costs: a worked value, then exact sums at every level (integer micro-dollars, no tolerance).
    # 500m x $0.031611 + 0.25 GiB x $0.004237 = $0.01686475 per hour x 730 h = $12.3112675 -> 12,311,268 micros.
    assert by_name["restart"]["containers"][0]["cost"]["currentMicros"] == 12_311_268
    assert round(Fraction("0.01686475") * 730 * 10**6) == 12_311_268
    keys = ("currentMicros", "recommendedMicros", "savingsMicros", "increasesMicros")
    for w in doc["workloads"]:
        for k in keys:
            assert w["cost"][k] == sum(c["cost"][k] for c in w["containers"])
    for k in keys:
        total = doc["summary"]["total"]["cost"][k]
        assert total == sum(w["cost"][k] for w in doc["workloads"])
        assert total == sum(g["cost"][k] for g in doc["summary"]["namespaces"])
        assert total == sum(g["cost"][k] for g in doc["summary"]["pools"])

    # Disruption: the report's column against the updater's planner on the same pods.
    assert {n: w["disruption"]["action"] for n, w in by_name.items()} == EXPECTED
    assert by_name["big"]["disruption"]["reason"] == "above-node-allocatable"
    decisions = updater_plan(api, namespace, doc)
    updater = {"resize-online": "in-place", "resize-restart": "in-place-restart", "fallback": "replacement"}
    assert {n: updater[d.action.value] for n, d in decisions.items()} == EXPECTED, {
        n: (d.action.value, d.reason.value, d.message) for n, d in decisions.items()}
    assert decisions["big"].reason.value == by_name["big"]["disruption"]["reason"]


def test_report_formats_and_error_exit_codes(
    api: client.ApiClient, cluster: Any, namespace: str, prometheus: LocalPrometheus, tmp_path: Path,
) -> None:
    apps = client.AppsV1Api(api)
    apps.create_namespaced_deployment(namespace, deployment("web", "nowhere", [
        container("app", {"cpu": "100m", "memory": "64Mi"}, {"memory": "128Mi"})]))
    # No history for this namespace: the report is written but the result is empty (3).
    html_file = tmp_path / "report.html"
    empty = run_report(cluster, prometheus.url, "-n", namespace, "-o", "html", "--output-file", str(html_file))
    assert empty.returncode == 3 and "no usage history" in empty.stderr, empty.stderr
    assert html_file.read_text().startswith("<!DOCTYPE html>")
    # No workload matches the filters: 3, nothing on stdout.
    none = run_report(cluster, prometheus.url, "-n", namespace, "--kind", "DaemonSet", "-o", "json")
    assert (none.returncode, none.stdout) == (3, "") and "no workload matched" in none.stderr
    # Prometheus unreachable: 1, named.
    down = run_report(cluster, "http://127.0.0.1:9", "-n", namespace, "-o", "json", "--prometheus-timeout", "2s")
    assert down.returncode == 1 and "Prometheus at http://127.0.0.1:9" in down.stderr, down.stderr
    # Usage errors: 2 before anything is contacted.
    bad = run_report(cluster, prometheus.url, "-l", "a in (b", "-o", "json")
    assert bad.returncode == 2 and "label selector" in bad.stderr, bad.stderr
    # A service account that may list Deployments only: 1, with the verb and resource it lacks.
    kubeconfig = limited_kubeconfig(api, cluster, namespace, tmp_path)
    denied = run_report(cluster, prometheus.url, "-n", namespace, "-o", "json", kubeconfig=str(kubeconfig))
    assert denied.returncode == 1, denied.stderr
    assert "RBAC verb 'list' on resource 'statefulsets', apiGroup 'apps'" in denied.stderr, denied.stderr


def limited_kubeconfig(api: client.ApiClient, cluster: Any, ns: str, tmp: Path) -> Path:
    import yaml

    core, rbac = client.CoreV1Api(api), client.RbacAuthorizationV1Api(api)
    core.create_namespaced_service_account(ns, {"metadata": {"name": "reviewer"}})
    rbac.create_namespaced_role(ns, {"metadata": {"name": "reviewer"}, "rules": [
        {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["list"]}]})
    rbac.create_namespaced_role_binding(ns, {"metadata": {"name": "reviewer"}, "roleRef": {
        "apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "reviewer"},
        "subjects": [{"kind": "ServiceAccount", "name": "reviewer", "namespace": ns}]})
    token = core.create_namespaced_service_account_token("reviewer", ns, {"spec": {"expirationSeconds": 600}})
    config = yaml.safe_load(Path(cluster.kubeconfig).read_text())
    config["users"] = [{"name": "reviewer", "user": {"token": token.status.token}}]
    for ctx in config["contexts"]:
        ctx["context"]["user"] = "reviewer"
    path = tmp / "reviewer.kubeconfig"
    path.write_text(yaml.safe_dump(config))
    return path
