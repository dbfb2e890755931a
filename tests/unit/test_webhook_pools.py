"""A new DaemonSet pod is admitted at its node's pool's value (``podtailor.poolrecs``), else at the status
value: the node from ``spec.nodeName`` or the DaemonSet controller's node affinity, its pool from the Nodes
the cache lists when a VPA carries per-pool values."""

from __future__ import annotations

from typing import Any

from podtailor.nodepool import PoolLabel
from podtailor.poolrecs import ANNOTATION, PoolRecommendations, encode
from podtailor.resources import Resources
from podtailor.vpa import RecommendedContainerResources
from tests.builders.webhook import container, patch_of, pod, review, vpa
from updater.webhook.cache import build_snapshot
from updater.webhook.mutation import Outcome
from updater.webhook.review import admit, pod_node

Obj = dict[str, Any]
LARGE = encode(PoolRecommendations(pools={"large": {"app": RecommendedContainerResources(
    container_name="app", target=Resources(cpu_millicores=1600, memory_bytes=256 * 2**20))}}))


def node(name: str, pool: str) -> Obj:
    return {"metadata": {"name": name, "labels": {PoolLabel.PODTAILOR: pool}}}


def daemonset_pod(node_name: str) -> Obj:
    """As the DaemonSet controller creates it: no nodeName yet, one node named by its required affinity."""
    obj = pod(container(requests={"cpu": "100m", "memory": "64Mi"}), owner=("DaemonSet", "agent"))
    obj["spec"]["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node_name]}]}]}}}
    return obj


def snapshot_with(annotation: str | None) -> Any:
    agent = vpa("agent", kind="DaemonSet", target={"cpu": "250m", "memory": "128Mi"})
    if annotation is not None:
        agent["metadata"]["annotations"] = {ANNOTATION: annotation}
    return build_snapshot({"VerticalPodAutoscaler": [agent], "Node": [node("s1", "small"), node("l1", "large")]})


def requests(answer: Obj) -> Obj:
    [op] = [o for o in patch_of(answer) if o["path"] == "/spec/containers/0/resources"]
    value: Obj = op["value"]["requests"]
    return value


def test_the_node_of_a_new_pod() -> None:
    assert pod_node({"nodeName": "n9"}) == "n9"
    assert pod_node(daemonset_pod("l1")["spec"]) == "l1"
    assert pod_node({}) is None
    two = {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["a", "b"]}]}]}}}}
    assert pod_node(two) is None  # not one node: no pool is guessed
    assert pod_node({"affinity": {"nodeAffinity": []}}) is None  # an odd shape is no node


def test_each_new_pod_gets_its_nodes_pools_value_else_the_status_one() -> None:
    snap = snapshot_with(LARGE)
    assert snap.node_pools == {"s1": "small", "l1": "large"}
    on_large, outcome = admit(review(daemonset_pod("l1")), snap)
    assert outcome == Outcome.MUTATED and requests(on_large) == {"cpu": "1600m", "memory": "256Mi"}
    on_small, _ = admit(review(daemonset_pod("s1")), snap)  # the small pool has no value of its own
    assert requests(on_small) == {"cpu": "250m", "memory": "128Mi"}
    unknown, _ = admit(review(daemonset_pod("gone")), snap)
    assert requests(unknown) == {"cpu": "250m", "memory": "128Mi"}


def test_a_refused_annotation_admits_every_pod_at_the_status_value() -> None:
    snap = snapshot_with('{"version": 1, "pools": {"large": {"containerRecommendations": "x"}}}')
    answer, _ = admit(review(daemonset_pod("l1")), snap)
    assert requests(answer) == {"cpu": "250m", "memory": "128Mi"}
