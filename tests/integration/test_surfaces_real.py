"""A plain init container through the updater's read, plan and write, on the real API server v1.37.

The node simulator runs the pod (it completes plain init containers at once, as a kubelet does for a
finished one, and reports the pod Ready); its nodes declare no features, as a kubelet not yet upgraded. The
snapshot (``ClusterReader``) reads the pod's init container and the node's ``declaredFeatures``, and the pure
planner decides on them: the init container's change waits for the node, nothing written; once the node
declares ``InPlacePodVerticalScalingInitContainers`` the next plan resizes it, and the updater's own patch is
taken by the API server (NodeDeclaredFeatureValidator passes). The simulator does not actuate plain init
containers, so the test stops at the accepted write.
"""

from __future__ import annotations

import secrets
from typing import Any

import pytest
from kubernetes import client

from podtailor.resize.types import Reason
from podtailor.resources import Resources
from tests.conftest import SimFactory
from tests.nodesim.nodes import NodePool
from tests.waiting import eventually
from updater.answers import NodeFeature
from updater.kube.snapshot import ClusterReader, Snapshot
from updater.kube.writes import PodResizer
from updater.policy.planner import plan
from updater.policy.types import Action, PodDecision, RolloutPolicy
from updater.rollout.machine.journal import ContainerValues

pytestmark = pytest.mark.cluster
Mi = 2**20
KARPENTER = "karpenter.sh/nodepool"
VPA = ("autoscaling.k8s.io", "v1", "verticalpodautoscalers")


def _deployment(pool: str) -> dict[str, Any]:
    labels = {"app": "web"}
    setup = {"name": "setup", "image": "registry.invalid/setup:1",
             "resources": {"requests": {"cpu": "100m", "memory": "32Mi"}}}
    app = {"name": "app", "image": "registry.invalid/app:1", "resources": {"requests": {"cpu": "200m",
                                                                                        "memory": "64Mi"}}}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
            "spec": {"replicas": 1, "selector": {"matchLabels": labels}, "template": {
                "metadata": {"labels": labels},
                "spec": {"nodeSelector": {KARPENTER: pool}, "terminationGracePeriodSeconds": 1,
                         "initContainers": [setup], "containers": [app]}}}}


def _vpa(custom: Any, ns: str) -> None:
    """A VPA whose status names the init container (another recommender's, or one written by hand)."""
    obj = custom.create_namespaced_custom_object(*VPA[:2], ns, VPA[2], {
        "apiVersion": "autoscaling.k8s.io/v1", "kind": "VerticalPodAutoscaler", "metadata": {"name": "web"},
        "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                 "updatePolicy": {"updateMode": "InPlaceOrRecreate"}}})
    obj["status"] = {"recommendation": {"containerRecommendations": [
        {"containerName": "app", "target": {"cpu": "200m", "memory": "64Mi"}},
        {"containerName": "setup", "target": {"cpu": "300m", "memory": "32Mi"}}]}}
    custom.replace_namespaced_custom_object_status(*VPA[:2], ns, VPA[2], "web", obj)


def _decide(snap: Snapshot) -> PodDecision:
    policy = RolloutPolicy(min_pod_age_s=0.0)
    result = plan(pods=snap.pods, targets=snap.targets, hpas=snap.hpas, limit_ranges=snap.limit_ranges,
                  nodes=snap.nodes, policy=policy, now_s=max(p.created_s for p in snap.pods) + 60,
                  pod_level_resize_supported=snap.pod_level_resize_supported, features=snap.features)
    (decision,) = result.decisions
    return decision


def test_an_init_container_waits_for_its_node_then_is_planned_and_written(
        api: client.ApiClient, namespace: str, make_sim: SimFactory, crds: list[str]) -> None:
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    pool = f"k{secrets.token_hex(4)}"
    sim = make_sim(NodePool(name=pool, count=1, label_keys=(KARPENTER,)))
    (node,) = sim.node_names(pool)
    client.AppsV1Api(api).create_namespaced_deployment(namespace, _deployment(pool))
    _vpa(custom, namespace)
    reader = ClusterReader(api)

    def ready_snapshot() -> Snapshot | None:
        snap = reader.read(policy_pool_label=KARPENTER, namespaces=[namespace])
        return snap if len(snap.pods) == 1 and snap.pods[0].ready and snap.targets else None

    snap = eventually("the pod Ready in the snapshot", ready_snapshot, timeout_s=60)
    assert snap.features is not None and snap.features.init_container_resize
    (pod,) = snap.pods
    assert [(c.name, c.init) for c in pod.containers] == [("app", False), ("setup", True)]
    waiting = _decide(snap)
    assert (waiting.action, waiting.reason) == (Action.SKIP, Reason.NODE_FEATURE)
    assert f"setup waits for node {node}" in waiting.message

    core.patch_node_status(node, {"status": {"declaredFeatures": [NodeFeature.INIT_CONTAINER_RESIZE.value]}})
    snap = eventually("the node's declared feature in the snapshot", lambda: (
        s := reader.read(policy_pool_label=KARPENTER, namespaces=[namespace])) and s.nodes and
        NodeFeature.INIT_CONTAINER_RESIZE in s.nodes[0].declared_features and s, timeout_s=30)
    decision = _decide(snap)
    assert (decision.action, decision.reason) == (Action.RESIZE_ONLINE, Reason.CHANGE)
    (change,) = decision.changes
    assert (change.name, change.new_requests) == ("setup", Resources(cpu_millicores=300, memory_bytes=32 * Mi))
    values = [ContainerValues(name="setup", requests=change.new_requests, limits=change.new_limits, init=True)]
    generation = PodResizer(api).resize(namespace, decision.pod, decision.uid, decision.resource_version, values)
    written = core.read_namespaced_pod(decision.pod, namespace)
    assert written.metadata.generation == generation == snap.pods[0].generation + 1
    assert written.spec.init_containers[0].resources.requests == {"cpu": "300m", "memory": "32Mi"}
    assert written.spec.containers[0].resources.requests == {"cpu": "200m", "memory": "64Mi"}
