"""The node simulator's follow mode on real kubelets: the usage it feeds reaches the kubelet itself.

``tests/nodesim/follow.py`` drives pods that real kubelets run (as ``make demo`` does): the kubelet's own
memory-limit check must see the usage the model gives, a container whose usage passes its limit must be
OOM-killed and restarted by the kubelet, and the metrics must carry the model's usage and the resources the
kubelet reports.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from kubernetes import client

from tests.harness.kubelets import HOLLOW_TOLERATION, KubeletPool
from tests.nodesim.follow import UsageFollower
from tests.waiting import eventually

pytestmark = pytest.mark.cluster
Mi = 2**20
LEND = {"podtailor.io/test": "follow"}


@pytest.fixture
def node(kubelet_pool: KubeletPool) -> Iterator[str]:
    (name,) = kubelet_pool.lend(1, LEND)
    try:
        yield name
    finally:
        kubelet_pool.give_back([name], LEND)


def _pod(name: str, node: str, memory_limit: str, usage: dict[str, object]) -> dict[str, object]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "annotations": {"nodesim.podtailor.io/usage": json.dumps(usage)}},
            "spec": {"nodeName": node, "tolerations": [HOLLOW_TOLERATION], "terminationGracePeriodSeconds": 1,
                     "containers": [{"name": "app", "image": "registry.invalid/app:1", "resources": {
                         "requests": {"cpu": "500m", "memory": "128Mi"},
                         "limits": {"cpu": "1", "memory": memory_limit}}}]}}


def test_follower_feeds_the_kubelet_oom_kills_through_it_and_serves_what_it_reports(
    kubelet_pool: KubeletPool, api: client.ApiClient, namespace: str, node: str
) -> None:
    core = client.CoreV1Api(api)
    usage = {"kind": "constant", "cpu_cores": 0.3, "memory_bytes": "300Mi"}
    core.create_namespaced_pod(namespace, _pod("fits", node, "1Gi", usage))
    core.create_namespaced_pod(namespace, _pod("over", node, "256Mi", usage))
    follower = UsageFollower(api, {node: kubelet_pool.nodes[node]}, interval_s=0.5).start()
    try:
        def status(name: str) -> client.V1ContainerStatus | None:
            statuses = core.read_namespaced_pod_status(name, namespace).status.container_statuses or []
            return statuses[0] if statuses else None

        # Over its limit: OOM-killed through the kubelet, which restarts it and says why.
        over = eventually("the kubelet restarts the OOM-killed container",
                          lambda: (s := status("over")) is not None and s.restart_count >= 1 and s, timeout_s=60)
        assert over.last_state.terminated.reason == "OOMKilled"
        assert over.last_state.terminated.exit_code == 137

        # Within its limit: the kubelet's own check sees the fed usage and refuses a limit below it.
        eventually("fits running", lambda: (s := status("fits")) is not None and s.state.running is not None,
                   timeout_s=30)
        eventually("the follower has fed fits", lambda: any(
            c.pod == "fits" and c.memory_working_set_bytes == 300 * Mi for c in follower.snapshot().containers))
        core.patch_namespaced_pod_resize("fits", namespace, {"spec": {"containers": [
            {"name": "app", "resources": {"limits": {"memory": "200Mi"}}}]}})

        def refused() -> str | None:
            pod = core.read_namespaced_pod_status("fits", namespace)
            for c in pod.status.conditions or []:
                if c.type == "PodResizeInProgress" and c.reason == "Error":
                    return str(c.message)
            return None

        message = eventually("the kubelet refuses the memory limit below usage", refused, timeout_s=60)
        assert "cannot decrease memory limits" in message and str(300 * Mi) in message

        # The metrics: the model's usage, CPU counted while running, and the resources the kubelet reports.
        snap = {c.pod: c for c in follower.snapshot().containers}
        assert snap["fits"].memory_limit_bytes == 1024 * Mi  # not actuated: the kubelet still reports 1Gi
        eventually("CPU seconds accumulate", lambda: {c.pod: c for c in follower.snapshot().containers}[
            "fits"].cpu_usage_seconds_total > 0.3)
        assert snap["over"].oom_events_total >= 1
        assert {n.node for n in follower.snapshot().nodes} == {node}
    finally:
        follower.stop()
