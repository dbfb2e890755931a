"""A DaemonSet per node pool on the local cluster: real API server, real Prometheus, simulated nodes.

Two pools of simulated nodes, 2 CPU and 32 CPU, labelled with the pool label the updater batches by. A
DaemonSet runs one pod on each node, and its usage, written by the node simulator's OpenMetrics exporter
from a known model, scales with the node: 5% of the node's CPU and 16 MiB of memory per core. The
recommender (one pass over two days of history) writes one target per pool into the VPA's
``podtailor.io/pool-recommendations`` annotation and the majority pool's into its status; the updater then
resizes each pod in place to its own pool's target; ``report`` shows one row per pool with the same targets;
and the webhook starts the pod the DaemonSet controller puts back on the large node at the large pool's value.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from prometheus_client import CollectorRegistry

from podtailor.poolrecs import ANNOTATION, decode
from podtailor.units import parse_cpu_millicores
from recommender.engine import EngineConfig, RecommenderEngine
from recommender.kube.cluster import KubeAdapter
from recommender.metrics import RecommenderMetrics
from recommender.model.registry import get_strategy
from recommender.sources.config import PrometheusConfig
from recommender.sources.prometheus import PrometheusSource
from tests.builders.cluster import POOL_KEY, Scenario
from tests.harness.prometheus import LocalPrometheus
from tests.integration.test_report_real import run_report
from tests.nodesim.openmetrics import ExportContainer, write_openmetrics
from tests.nodesim.usage import Constant
from tests.waiting import eventually

pytestmark = [pytest.mark.cluster, pytest.mark.prometheus]
Mi = 2**20
STEP = 60
CORES = {"small": 2, "large": 32}
"""The pools' node sizes, in cores."""


def daemonset(sc: Scenario) -> list[client.V1Pod]:
    """One pod per node of the two pools (requests 100m / 64Mi, no limits); returns them once all run."""
    labels = {"app": "agent"}
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": POOL_KEY, "operator": "In", "values": sorted(sc.pools.values())}]}]}}}
    sc.apps.create_namespaced_daemon_set(sc.ns, {
        "apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "agent"},
        "spec": {"selector": {"matchLabels": labels}, "template": {
            "metadata": {"labels": labels}, "spec": {
                "affinity": affinity, "terminationGracePeriodSeconds": 1, "containers": [{
                    "name": "app", "image": "registry.invalid/agent:1",
                    "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}},
                    "resizePolicy": [{"resourceName": "memory", "restartPolicy": "NotRequired"}]}]}}}})
    eventually("a DaemonSet pod on each node", lambda: len(sc.running("agent")) == 3, timeout_s=90)
    return sc.running("agent")


def backfill(prom: LocalPrometheus, tmp: Path, sc: Scenario, pods: list[client.V1Pod], end_s: float) -> None:
    """Two days of each pod's usage on its node: 5% of the node's cores, 16 MiB per core."""
    pool_of = {n.metadata.name: n.metadata.labels[POOL_KEY] for n in sc.core.list_node().items}
    short = {name: s for s, name in sc.pools.items()}
    containers = []
    for p in pods:
        cores = CORES[short[pool_of[p.spec.node_name]]]
        containers.append(ExportContainer(
            namespace=sc.ns, pod=p.metadata.name, container="app", node=p.spec.node_name, pod_uid=p.metadata.uid,
            model=Constant(cpu_cores=0.05 * cores, memory_bytes=16 * Mi * cores), owner_kind="DaemonSet",
            owner_name="agent", replicaset_owner_kind="", cpu_request_millicores=100, memory_request_bytes=64 * Mi))
    path = tmp / "agent.om"
    with path.open("w") as out:
        write_openmetrics(out, containers, now_s=end_s, days=2, step_s=STEP)
    prom.backfill(path)


def test_a_daemonset_gets_a_target_per_pool_and_each_pod_its_pools(
    scenario: Scenario, crds: list[str], prometheus: LocalPrometheus, tmp_path: Path, cluster: Any,
    webhook: Callable[[], None],
) -> None:
    sc = scenario
    sims = [sc.pool("small", nodes=2, cpu=2000), sc.pool("large", nodes=1, cpu=32000)]
    assert all(sims)
    pods = daemonset(sc)
    now_s = float(int(time.time()) // STEP * STEP)
    backfill(prometheus, tmp_path, sc, pods, now_s - 120)
    sc.custom.create_namespaced_custom_object("autoscaling.k8s.io", "v1", sc.ns, "verticalpodautoscalers", {
        "apiVersion": "autoscaling.k8s.io/v1", "kind": "VerticalPodAutoscaler", "metadata": {"name": "agent"},
        "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "agent"},
                 "updatePolicy": {"updateMode": "InPlaceOrRecreate"}, "recommenders": [{"name": "podtailor"}]}})
    registry = CollectorRegistry()
    source = PrometheusSource(PrometheusConfig(url=prometheus.url, step_s=STEP, scrape_interval_s=60, retries=0,
                                               timeout_s=20), registry=registry)
    engine = RecommenderEngine(store=KubeAdapter(sc.api), source=source, strategy=get_strategy("krr-simple"),
                               config=EngineConfig(namespaces=(sc.ns,), history_s=3 * 86400, pool_label=POOL_KEY),
                               metrics=RecommenderMetrics(registry))
    report = engine.run_pass(now_s)
    assert report.served == 1 and report.written == 1

    vpa = sc.custom.get_namespaced_custom_object("autoscaling.k8s.io", "v1", sc.ns, "verticalpodautoscalers", "agent")
    per_pool = decode(vpa["metadata"]["annotations"][ANNOTATION])
    small, large = (per_pool.pools[sc.pools[s]]["app"].target for s in ("small", "large"))
    # krr-simple: the 95th percentile of flat usage (0.1 and 1.6 cores), rounded up to its histogram bucket
    # (within 1%); memory the peak x 1.15 with a 100 MiB floor: 32 MiB -> 100 MiB, 512 MiB x 1.15 = 588.8 MiB,
    # rounded up once on the way out, to 589 MiB
    assert small.cpu_millicores is not None and large.cpu_millicores is not None
    assert 100 <= small.cpu_millicores <= 101 and 1600 <= large.cpu_millicores <= 1616
    assert small.memory_bytes == 100 * Mi and large.memory_bytes == 589 * Mi
    [status] = vpa["status"]["recommendation"]["containerRecommendations"]
    assert parse_cpu_millicores(status["target"]["cpu"]) == small.cpu_millicores  # two of three pods: small

    sc.policy()
    executor = sc.executor()
    want = {sc.pools["small"]: small.cpu_millicores, sc.pools["large"]: large.cpu_millicores}
    pool_of = {n.metadata.name: n.metadata.labels[POOL_KEY] for n in sc.core.list_node().items}

    def resized() -> bool:
        return all(parse_cpu_millicores(p.spec.containers[0].resources.requests["cpu"])
                   == want[pool_of[p.spec.node_name]] for p in sc.running("agent"))

    sc.run_until(executor, lambda: sc.settled() and resized(), timeout_s=90)
    after = {p.metadata.name: (pool_of[p.spec.node_name], p.spec.containers[0].resources.requests)
             for p in sc.running("agent")}
    assert sorted(a[0] for a in after.values()) == sorted([sc.pools["small"]] * 2 + [sc.pools["large"]])
    assert {p.metadata.name for p in pods} == set(after), json.dumps({k: v[0] for k, v in after.items()})

    # The report: one row per pool, each with that pool's recommendation (the same computation as the pass).
    out = run_report(cluster, prometheus.url, "-n", sc.ns, "-o", "json", "--strategy", "krr-simple", "--history",
                     "3d", "--pool-label", POOL_KEY, "--no-checkpoints")
    assert out.returncode == 0, out.stderr
    rows = {w["pool"]: w for w in json.loads(out.stdout)["workloads"] if w["name"] == "agent"}
    assert set(rows) == {sc.pools["small"], sc.pools["large"]}
    assert (rows[sc.pools["small"]]["runningPods"], rows[sc.pools["large"]]["runningPods"]) == (2, 1)
    for pool, rec in ((sc.pools["small"], small), (sc.pools["large"], large)):
        assert rows[pool]["containers"][0]["recommendation"]["target"] == {
            "cpuMillicores": rec.cpu_millicores, "memoryBytes": rec.memory_bytes}

    # The webhook: the large node's pod, replaced by the DaemonSet controller, starts at the large pool's value.
    [old] = [name for name, (pool, _) in after.items() if pool == sc.pools["large"]]
    sc.core.delete_namespaced_pod(old, sc.ns, grace_period_seconds=0)

    def replacement() -> client.V1Pod | None:
        return next((p for p in sc.running("agent") if p.metadata.name != old
                     and pool_of[p.spec.node_name] == sc.pools["large"]), None)

    eventually("the large node's pod replaced", lambda: replacement() is not None, timeout_s=60)
    new = replacement()
    assert new is not None and new.metadata.annotations.get("podtailor.io/admitted-resources")
    assert parse_cpu_millicores(new.spec.containers[0].resources.requests["cpu"]) == large.cpu_millicores
