"""What only a real node shows: kubelet v1.37 over containerd and runc writing real cgroups, and the kernel.

On the ``real_nodes`` fixture (``tests/harness/realnode.py``): a CPU resize lands in the container's cgroup
(v1 ``cpu.cfs_quota_us``/``cpu.shares``, v2 ``cpu.max``/``cpu.weight``) with the same process and container,
no restart; a memory resize under ``RestartContainer`` restarts the container with the new limit in its
cgroup; a memory limit lowered below what the process really uses is refused (PodResizeInProgress, reason Error) and
never written; and the kernel's OOM kill
after a decrease is caught by the updater's OOM gate, which rolls the batch back (``test_real_node_oom.py``).
Expected cgroup values follow the kubelet's conversions (``pkg/kubelet/cm/helpers_linux.go``:
``MilliCPUToQuota``, ``MilliCPUToShares``) and runc's v1->v2 weight (``ConvertCPUSharesToCgroupV2Value``).
"""

from __future__ import annotations

import logging
import time

import pytest
from kubernetes import client

from podtailor.kube.errors import KubeError
from podtailor.resources import Resources
from podtailor.units import parse_cpu_millicores, parse_memory_bytes
from tests.builders.realpods import (
    Mi,
    container,
    container_id,
    hold_mib,
    kubelet_cadvisor,
    memory_usage_bytes,
    read_cgroup,
    run_pod,
    status_of,
    wait_resized,
)
from tests.harness.kubelets import KubeletPool
from tests.harness.realhost import CgroupLayout
from tests.harness.realnode import RealNode, RealNodePool
from tests.waiting import eventually
from updater.cgroups import GRACE_S, disagreement
from updater.kube.cadvisor import CgroupCheck, NodeCgroups

pytestmark = pytest.mark.cluster


def _node(real_nodes: RealNodePool) -> RealNode:
    return next(iter(real_nodes.nodes.values()))


def _weight(shares: int) -> int:
    """runc libcontainer/cgroups/utils.go ConvertCPUSharesToCgroupV2Value (the linear form of runc 1.1)."""
    return 1 + ((shares - 2) * 9999) // 262142


def test_cpu_is_resized_in_place_in_the_cgroup_same_process_no_restart(
        real_nodes: RealNodePool, api: client.ApiClient, namespace: str) -> None:
    core, node = client.CoreV1Api(api), _node(real_nodes)
    pod = run_pod(core, namespace, "cpu", node.name, container(
        "app", hold_mib(0), requests={"cpu": "500m", "memory": "32Mi"}, limits={"cpu": "1", "memory": "64Mi"}))
    cid = container_id(pod, "app")
    before = read_cgroup(node, real_nodes.layout, cid)
    # Quota = limit x period: 1000m -> 100000 us of 100000; shares = request x 1024 / 1000: 500m -> 512.
    if real_nodes.layout is CgroupLayout.V1:
        assert (before.cpu_quota_us, before.cpu_period_us, before.cpu_shares) == (100_000, 100_000, 512)
    else:
        assert (before.cpu_quota_us, before.cpu_weight) == (100_000, _weight(512))
    pid = node.task_pid(cid)
    assert pid in before.pids, "the container's process is not in its cgroup"
    core.patch_namespaced_pod_resize("cpu", namespace, {"spec": {"containers": [
        {"name": "app", "resources": {"requests": {"cpu": "800m"}, "limits": {"cpu": "1500m"}}}]}})
    wait_resized(core, namespace, "cpu", generation=2)
    after_pod = core.read_namespaced_pod("cpu", namespace)
    status = status_of(after_pod, "app")
    assert (status.resources.requests["cpu"], status.resources.limits["cpu"]) == ("800m", "1500m")
    # 1500m -> 150000 us; 800m -> 800 x 1024 / 1000 = 819.2 -> 819 shares.
    after = eventually("the new CPU values in the cgroup", lambda: (
        v if (v := read_cgroup(node, real_nodes.layout, cid)).cpu_quota_us == 150_000 else None), timeout_s=10)
    if real_nodes.layout is CgroupLayout.V1:
        assert after.cpu_shares == 819
    else:
        assert after.cpu_weight == _weight(819)
    assert node.task_pid(cid) == pid and pid in after.pids, "the container's process changed"
    assert container_id(after_pod, "app") == cid and status.restart_count == 0
    assert after_pod.status.observed_generation == 2
    assert after.memory_limit_bytes == before.memory_limit_bytes == 64 * Mi


def test_memory_under_restart_container_restarts_with_the_new_limit_in_the_cgroup(
        real_nodes: RealNodePool, api: client.ApiClient, namespace: str) -> None:
    core, node = client.CoreV1Api(api), _node(real_nodes)
    pod = run_pod(core, namespace, "mem", node.name, container(
        "app", hold_mib(0), requests={"cpu": "100m", "memory": "48Mi"}, limits={"cpu": "200m", "memory": "64Mi"},
        memory_policy="RestartContainer"))
    old_cid = container_id(pod, "app")
    assert read_cgroup(node, real_nodes.layout, old_cid).memory_limit_bytes == 64 * Mi
    core.patch_namespaced_pod_resize("mem", namespace, {"spec": {"containers": [
        {"name": "app", "resources": {"requests": {"memory": "64Mi"}, "limits": {"memory": "96Mi"}}}]}})
    wait_resized(core, namespace, "mem", generation=2)
    restarted = eventually("the container restarted and running again", lambda: (
        p if status_of(p := core.read_namespaced_pod("mem", namespace), "app").restart_count == 1
        and status_of(p, "app").state.running else None), timeout_s=60)
    new_cid = container_id(restarted, "app")
    assert new_cid != old_cid, "RestartContainer kept the same container"
    assert read_cgroup(node, real_nodes.layout, new_cid).memory_limit_bytes == 96 * Mi
    assert status_of(restarted, "app").resources.limits["memory"] == "96Mi"


def test_a_memory_limit_below_what_the_process_uses_is_not_applied(
        real_nodes: RealNodePool, api: client.ApiClient, namespace: str) -> None:
    """kubelet 1.34+ checks a memory-limit decrease against the container's usage and does not write a limit
    below it: the resize stays PodResizeInProgress with reason Error and the old limit stays in the cgroup, so
    the kernel never OOM-kills the process for it. Seen here (kubelet 1.37.2, containerd 1.6.20, cgroup v1):
    'cannot decrease memory limits: attempting to set container "app" memory limit (25165824) below current
    usage (0)' while the cgroup showed over 40 MiB in use; the usage the message quotes is not the cgroup's."""
    core, node = client.CoreV1Api(api), _node(real_nodes)
    pod = run_pod(core, namespace, "low", node.name, container(
        "app", hold_mib(40), requests={"cpu": "100m", "memory": "128Mi"}, limits={"cpu": "200m", "memory": "128Mi"}))
    cid = container_id(pod, "app")
    eventually("the process holding its 40 MiB", lambda: memory_usage_bytes(node, real_nodes.layout, cid) > 40 * Mi,
               timeout_s=30)
    before, pid = read_cgroup(node, real_nodes.layout, cid), node.task_pid(cid)
    core.patch_namespaced_pod_resize("low", namespace, {"spec": {"containers": [
        {"name": "app", "resources": {"requests": {"memory": "24Mi"}, "limits": {"memory": "24Mi"}}}]}})

    def in_progress_error() -> client.V1PodCondition | None:
        conditions = core.read_namespaced_pod("low", namespace).status.conditions or []
        return next((c for c in conditions if c.type == "PodResizeInProgress" and c.reason == "Error"), None)

    condition = eventually("PodResizeInProgress with reason Error", in_progress_error, timeout_s=60)
    assert "memory" in (condition.message or "").lower(), condition.message
    now = core.read_namespaced_pod("low", namespace)
    status = status_of(now, "app")
    assert status.resources.limits["memory"] == "128Mi" and status.restart_count == 0
    after = read_cgroup(node, real_nodes.layout, cid)
    assert after.memory_limit_bytes == before.memory_limit_bytes == 128 * Mi
    assert node.task_pid(cid) == pid and pid in after.pids, "the process was replaced"
    assert status.last_state.terminated is None, "the process was killed"


def test_the_updaters_cgroup_check_reads_the_real_kubelets_cadvisor_series(
        real_nodes: RealNodePool, api: client.ApiClient, namespace: str) -> None:
    """What the cgroup check reads is what the kernel holds, before and after a resize (the kubelet serves
    cAdvisor's cached spec: the new quota shows within its refresh, inside GRACE_S). Through the API server's
    node proxy it cannot be read here: the API server refuses to proxy to a loopback node address."""
    core, node = client.CoreV1Api(api), _node(real_nodes)
    pod = run_pod(core, namespace, "seen", node.name, container(
        "app", hold_mib(0), requests={"cpu": "500m", "memory": "32Mi"}, limits={"cpu": "1", "memory": "64Mi"}))
    cid = container_id(pod, "app")
    with pytest.raises(KubeError, match="address not allowed"):
        NodeCgroups(api).read(node.name)
    read = kubelet_cadvisor(node.kubelet_port)
    reading = eventually("the container in the kubelet's cAdvisor series", lambda: read(node.name).get(cid),
                         timeout_s=30, interval_s=0.5)
    assert (reading.cpu_quota_us, reading.cpu_period_us, reading.memory_limit_bytes) == (100_000, 100_000, 64 * Mi)
    if real_nodes.layout is CgroupLayout.V1:
        assert reading.cpu_shares == 512
    core.patch_namespaced_pod_resize("seen", namespace, {"spec": {"containers": [
        {"name": "app", "resources": {"requests": {"cpu": "800m"}, "limits": {"cpu": "1500m"}}}]}})
    wait_resized(core, namespace, "seen", generation=2)
    t0 = time.monotonic()
    eventually("the new quota in the cAdvisor series", lambda: (
        (r := read(node.name).get(cid)) is not None and r.cpu_quota_us == 150_000), timeout_s=GRACE_S,
        interval_s=0.5)
    assert time.monotonic() - t0 < GRACE_S
    status = status_of(core.read_namespaced_pod("seen", namespace), "app").resources
    requests = Resources(cpu_millicores=parse_cpu_millicores(status.requests["cpu"]))
    limits = Resources(cpu_millicores=parse_cpu_millicores(status.limits["cpu"]),
                       memory_bytes=parse_memory_bytes(status.limits["memory"]))
    assert disagreement(requests, limits, read(node.name)[cid]) == ""


def test_a_hollow_node_serves_no_container_spec_series_and_the_check_says_so(
        kubelet_pool: KubeletPool, caplog: pytest.LogCaptureFixture) -> None:
    """The hollow node's fake runtime writes no cgroup: its /metrics/cadvisor has no container_spec series of a
    container for the check to compare, so the check logs that it is skipped for that node (once), not failed."""
    name, hollow = next(iter(kubelet_pool.nodes.items()))
    read = kubelet_cadvisor(hollow.kubelet_port, "http")
    assert read(name) == {}
    check = CgroupCheck(read)
    with caplog.at_level(logging.WARNING, logger="podtailor.updater.cgroups"):
        assert check._page(name) is None and check._page(name) is None
    skipped = [r for r in caplog.records if "serves no container_spec series" in r.getMessage()]
    assert len(skipped) == 1 and getattr(skipped[0], "node", None) == name
