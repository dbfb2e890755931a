"""Unit tests for tests.nodesim.cadvisor: the throttling model and the rendered metric families."""

from __future__ import annotations

from dataclasses import replace

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from tests.nodesim.cadvisor import (
    ClusterSnapshot,
    ContainerSnapshot,
    NodeSnapshot,
    PodSnapshot,
    ReplicaSetSnapshot,
    SnapshotCollector,
    ThrottleResult,
    sanitize_label_name,
    throttle,
)


def test_throttle_below_limit() -> None:
    # 0.5 cores for 60 s = 30 cpu-seconds; 60 / 0.1 = 600 periods, none throttled
    assert throttle(0.5, 1000, 60.0) == ThrottleResult(used_cpu_seconds=30.0, periods=600, throttled_periods=0)


def test_throttle_above_limit_caps_usage() -> None:
    # demand 1.5 cores, limit 1 core -> used 60 cpu-seconds, every period throttled
    assert throttle(1.5, 1000, 60.0) == ThrottleResult(used_cpu_seconds=60.0, periods=600, throttled_periods=600)


def test_throttle_fractional() -> None:
    # slices: 0.5 (ok), 2.0 (over), 2.0 (over), 0.0 (idle); limit 1 core, 60 s
    # used = mean(0.5, 1, 1, 0) * 60 = 37.5; periods = 600 * 3/4 = 450; throttled = 600 * 2/4 = 300
    assert throttle([0.5, 2.0, 2.0, 0.0], 1000, 60.0) == ThrottleResult(
        used_cpu_seconds=37.5, periods=450, throttled_periods=300)


def test_throttle_without_limit_and_idle() -> None:
    assert throttle(3.0, None, 10.0) == ThrottleResult(used_cpu_seconds=30.0, periods=100, throttled_periods=0)
    assert throttle(0.0, 500, 10.0) == ThrottleResult(used_cpu_seconds=0.0, periods=0, throttled_periods=0)


def test_sanitize_label_name() -> None:
    assert sanitize_label_name("topology.kubernetes.io/zone") == "topology_kubernetes_io_zone"
    assert sanitize_label_name("a-b") == "a_b"


def _snapshot() -> ClusterSnapshot:
    container = ContainerSnapshot(
        namespace="shop", pod='web-1-x"y', container="app", node="node-1", pod_uid="uid-1",
        container_id="c0ffee", cpu_usage_seconds_total=12.5, memory_working_set_bytes=1000,
        cfs_periods_total=600, cfs_throttled_periods_total=60, oom_events_total=1,
        cpu_request_millicores=250, cpu_limit_millicores=1000, memory_request_bytes=2**20,
        last_terminated_reason="OOMKilled",
    )
    return ClusterSnapshot(
        containers=(container,),
        pods=(PodSnapshot(namespace="shop", pod='web-1-x"y', uid="uid-1", node="node-1",
                          owner_kind="ReplicaSet", owner_name="web-1"),),
        replicasets=(ReplicaSetSnapshot(namespace="shop", replicaset="web-1", owner_kind="Deployment",
                                        owner_name="web"),),
        nodes=(NodeSnapshot(node="node-1", labels={"kubernetes.io/hostname": "node-1", "zone\n": "a\\b"}),),
    )


def _scrape() -> dict[str, list[tuple[str, dict[str, str], float]]]:
    registry = CollectorRegistry()
    registry.register(SnapshotCollector(_snapshot))
    text = generate_latest(registry).decode()
    return {f.name: [(s.name, s.labels, s.value) for s in f.samples] for f in text_string_to_metric_families(text)}


def test_collector_cadvisor_families() -> None:
    families = _scrape()
    [(name, labels, value)] = families["container_cpu_usage_seconds"]
    assert name == "container_cpu_usage_seconds_total" and value == 12.5
    assert labels["pod"] == 'web-1-x"y'  # escaped on the wire, restored by the parser
    assert labels["namespace"] == "shop" and labels["container"] == "app" and labels["node"] == "node-1"
    assert labels["id"].endswith("cri-containerd-c0ffee.scope")
    assert families["container_memory_working_set_bytes"][0][2] == 1000.0
    assert families["container_cpu_cfs_periods"][0][2] == 600.0
    assert families["container_cpu_cfs_throttled_periods"][0][2] == 60.0
    assert families["container_oom_events"][0][2] == 1.0


def test_collector_exports_cfs_families_only_for_a_cpu_limit() -> None:
    """cAdvisor's condition (v0.60.5 metrics/prometheus.go: ``s.Cpu.Quota != 0``): no limit, no CFS series."""
    base = _snapshot()
    free = replace(base.containers[0], pod="free-1", cpu_limit_millicores=None)
    registry = CollectorRegistry()
    registry.register(SnapshotCollector(lambda: replace(base, containers=(base.containers[0], free))))
    text = generate_latest(registry).decode()
    pods = {f.name: sorted(s.labels["pod"] for s in f.samples) for f in text_string_to_metric_families(text)
            if f.name.startswith("container_")}
    assert pods["container_cpu_cfs_periods"] == pods["container_cpu_cfs_throttled_periods"] == ['web-1-x"y']
    assert pods["container_cpu_usage_seconds"] == ["free-1", 'web-1-x"y']


def test_collector_ksm_families() -> None:
    families = _scrape()
    requests = {(s[1]["resource"], s[1]["unit"]): s[2] for s in families["kube_pod_container_resource_requests"]}
    assert requests == {("cpu", "core"): 0.25, ("memory", "byte"): 1048576.0}
    limits = {(s[1]["resource"], s[1]["unit"]): s[2] for s in families["kube_pod_container_resource_limits"]}
    assert limits == {("cpu", "core"): 1.0}  # no memory limit -> no series
    assert families["kube_pod_container_status_last_terminated_reason"][0][1]["reason"] == "OOMKilled"
    owner = families["kube_pod_owner"][0][1]
    assert (owner["owner_kind"], owner["owner_name"], owner["owner_is_controller"]) == ("ReplicaSet", "web-1", "true")
    rs = families["kube_replicaset_owner"][0][1]
    assert (rs["replicaset"], rs["owner_kind"], rs["owner_name"]) == ("web-1", "Deployment", "web")
    info = families["kube_pod_info"][0][1]
    assert (info["node"], info["created_by_kind"], info["uid"]) == ("node-1", "ReplicaSet", "uid-1")
    phases = {s[1]["phase"]: s[2] for s in families["kube_pod_status_phase"]}
    assert phases == {"Pending": 0.0, "Succeeded": 0.0, "Failed": 0.0, "Unknown": 0.0, "Running": 1.0}
    [(_, node_labels, _)] = families["kube_node_labels"]
    assert node_labels == {"node": "node-1", "label_kubernetes_io_hostname": "node-1", "label_zone_": "a\\b"}


@pytest.mark.parametrize("demand", [-1.0, float("nan")])
def test_throttle_treats_bad_demand_as_zero(demand: float) -> None:
    assert throttle(demand, 1000, 1.0).used_cpu_seconds == 0.0
