"""The real kubelets of the test environment (hollow nodes): what they register, post and refuse.

Checks the harness's pool against the real API server: each node reports kubelet v1.37.2, its pool,
instance-type and zone labels and the hollow-node taint, and the capacity it was started with; the kubelet's
own Events for a pod reach the API server; the control endpoint refuses bad input with a clear error and
changes nothing; a separate node stops on SIGTERM and removes its CRI socket, and leaves no directory of
kubemark's in /tmp.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from kubernetes import client

from tests.conftest import KUBELET_POOL
from tests.harness.cluster import ClusterState
from tests.harness.kubelets import HOLLOW_TAINT, HOLLOW_TOLERATION, KubeletPool
from tests.harness.process import HarnessError
from tests.nodesim.nodes import POOL_LABEL_KEYS, NodePool
from tests.waiting import eventually

pytestmark = pytest.mark.cluster


def test_nodes_register_as_kubelet_1_37_with_pool_labels_and_taint(
    kubelet_pool: KubeletPool, api: client.ApiClient
) -> None:
    core = client.CoreV1Api(api)
    for name in kubelet_pool.node_names():
        node = core.read_node(name)
        assert node.status.node_info.kubelet_version == "v1.37.2"
        labels = node.metadata.labels
        assert labels[POOL_LABEL_KEYS["podtailor"]] == KUBELET_POOL.name
        assert labels["node.kubernetes.io/instance-type"] == KUBELET_POOL.instance_type
        assert labels["topology.kubernetes.io/zone"] == KUBELET_POOL.zone
        assert labels["kubernetes.io/hostname"] == name
        assert {(t.key, t.value, t.effect) for t in node.spec.taints or []} >= {
            (HOLLOW_TAINT["key"], HOLLOW_TAINT["value"], HOLLOW_TAINT["effect"])}
        assert node.status.capacity["cpu"] == "4" and node.status.capacity["memory"] == "8Gi"


def test_the_kubelets_own_events_reach_the_api_server(
    kubelet_pool: KubeletPool, api: client.ApiClient, namespace: str
) -> None:
    core = client.CoreV1Api(api)
    node = kubelet_pool.node_names()[0]
    core.create_namespaced_pod(namespace, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {
        "nodeName": node, "tolerations": [HOLLOW_TOLERATION], "terminationGracePeriodSeconds": 1,
        "containers": [{"name": "app", "image": "registry.invalid/app:1"}]}})

    def kubelet_reasons() -> set[str]:
        events = core.list_namespaced_event(namespace, field_selector="involvedObject.name=p").items
        return {e.reason for e in events if e.source and e.source.component == "kubelet" and e.source.host == node}

    reasons = eventually("kubelet events for p", lambda: (r := kubelet_reasons()) >= {"Created", "Started"} and r,
                         timeout_s=30)
    assert "Started" in reasons


def test_the_control_endpoint_refuses_bad_input_and_changes_nothing(
    kubelet_pool: KubeletPool, api: client.ApiClient
) -> None:
    hollow = kubelet_pool.nodes[kubelet_pool.node_names()[-1]]
    with pytest.raises(HarnessError, match="must be positive and within capacity"):
        hollow.set_allocatable(cpu_millicores=5000, memory_bytes=2**30)
    with pytest.raises(HarnessError, match="HTTP 404: no running container"):
        hollow.oom_kill("nope", "nope", "nope")
    with pytest.raises(HarnessError, match="namespace, pod and container are required"):
        hollow.set_usage("", "p", "c", memory_bytes=1, cpu_millicores=1)
    # Allocatable unchanged: the node still publishes its full capacity.
    assert client.CoreV1Api(api).read_node(hollow.name).status.allocatable["cpu"] == "4"


def test_a_node_stops_on_sigterm_and_removes_its_socket(cluster: ClusterState, tmp_path: Path) -> None:
    pool = KubeletPool(cluster=cluster, workdir=tmp_path, name_prefix=f"hs{os.getpid() % 1000}",
                       pools=(NodePool(name="solo", count=1),))
    pool.start()
    (node,) = pool.nodes.values()
    socket = node.root_dir / "cri.sock"
    assert socket.exists()
    # kubemark.GetHollowKubeletConfig makes a root dir of its own in /tmp and logs it; the node removes it
    made = re.findall(r"Using (\S+) as root dir for hollow-kubelet", node.proc.log_path.read_text())
    assert len(made) == 1 and Path(made[0]).name.startswith("hollow-kubelet."), made
    assert not Path(made[0]).exists(), f"{made[0]} left behind"
    node.proc.stop(timeout_s=15)
    assert node.proc.proc is not None and node.proc.proc.returncode == 0
    assert not socket.exists()
    pool.stop()
