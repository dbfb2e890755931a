"""The surfaces beyond regular containers, written by the updater's own ``PodResizer`` to the real API server.

- A plain init container on a real kubelet v1.37.2 (a hollow node): its node declares
  ``InPlacePodVerticalScalingInitContainers``, the API server takes the updater's patch (``initContainers``),
  and the kubelet resizes it in place, without a restart. The hollow node's fake runtime never lets a container
  exit, so the init container is the running one of a pod still initialising (the kubelet resizes a running
  plain init container's cgroup, ``computePodActions``); a completed one, which is what the updater meets on a
  Ready pod, cannot be made here: ``tests/integration/test_real_node_init.py`` resizes one on a real node.
- Pod-level requests on a real kubelet: written in the same patch as a container that outgrows them (alone,
  the API server refuses that container's resize), actuated, pod-level limits left alone.
- A node that does not declare the feature (a Node object with no kubelet, as a not-yet-upgraded node looks to
  the API server): NodeDeclaredFeatureValidator refuses the same patch with a 403 that ``write_error`` types as
  ``Refusal.NODE_FEATURE``, and nothing changes.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from podtailor.kube.errors import PermanentKubeError
from podtailor.resources import Resources
from tests.conformance.backends import KubeletBackend
from tests.harness.kubelets import HOLLOW_TOLERATION
from tests.waiting import eventually
from updater.answers import NodeFeature, Refusal
from updater.kube.refusals import Refused
from updater.kube.writes import PodResizer
from updater.rollout.machine.journal import ContainerValues

pytestmark = pytest.mark.cluster
Mi = 2**20


def _pod(node: str, toleration: dict[str, Any] | None) -> dict[str, Any]:
    setup = {"name": "setup", "image": "registry.invalid/setup:1",
             "resources": {"requests": {"cpu": "100m", "memory": "32Mi"}}}
    app = {"name": "app", "image": "registry.invalid/app:1", "resources": {"requests": {"cpu": "100m"}}}
    spec: dict[str, Any] = {"nodeName": node, "initContainers": [setup], "containers": [app],
                            "terminationGracePeriodSeconds": 0}
    if toleration:
        spec["tolerations"] = [toleration]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": spec}


SETUP_200M = ContainerValues(name="setup", requests=Resources(cpu_millicores=200, memory_bytes=32 * Mi),
                             limits=Resources(), init=True)


def _init_status(pod: client.V1Pod) -> client.V1ContainerStatus | None:
    return next((s for s in pod.status.init_container_statuses or () if s.name == "setup"), None)


def test_a_running_plain_init_container_is_resized_in_place(real_kubelet: KubeletBackend, api: client.ApiClient,
                                                            namespace: str) -> None:
    core = client.CoreV1Api(api)
    node = core.read_node(real_kubelet.node)
    assert NodeFeature.INIT_CONTAINER_RESIZE.value in (node.status.declared_features or [])
    core.create_namespaced_pod(namespace, _pod(real_kubelet.node, HOLLOW_TOLERATION))
    pod = eventually("init container setup running", lambda: (p := core.read_namespaced_pod("p", namespace))
                     and (s := _init_status(p)) is not None and s.state.running is not None and p, timeout_s=60)
    generation = PodResizer(api).resize(namespace, "p", pod.metadata.uid, pod.metadata.resource_version,
                                        [SETUP_200M])

    def resized() -> client.V1Pod | None:
        p = core.read_namespaced_pod("p", namespace)
        s = _init_status(p)
        conditions = {c.type for c in p.status.conditions or ()}
        return p if (p.status.observed_generation or 0) >= generation and s is not None and s.resources and \
            dict(s.resources.requests or {}) == {"cpu": "200m", "memory": "32Mi"} and \
            not conditions & {"PodResizePending", "PodResizeInProgress"} else None

    after = eventually("setup resized to 200m by the kubelet", resized, timeout_s=60)
    setup = _init_status(after)
    assert setup is not None
    assert dict(setup.allocated_resources or {}) == {"cpu": "200m", "memory": "32Mi"}
    assert setup.restart_count == 0 and setup.state.running is not None
    assert after.spec.init_containers[0].resources.requests == {"cpu": "200m", "memory": "32Mi"}


@pytest.fixture
def undeclared_node(api: client.ApiClient) -> Iterator[str]:
    """A Node object with allocatable but no declared features and no kubelet behind it."""
    core, name = client.CoreV1Api(api), f"ndf-old-{secrets.token_hex(3)}"
    core.create_node({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}})
    core.patch_node_status(name, {"status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "10"},
                                             "capacity": {"cpu": "4", "memory": "8Gi", "pods": "10"}}})
    try:
        yield name
    finally:
        core.delete_node(name)


def test_a_node_without_the_feature_refuses_the_patch_as_a_typed_refusal(
        undeclared_node: str, api: client.ApiClient, namespace: str) -> None:
    core = client.CoreV1Api(api)
    pod = core.create_namespaced_pod(namespace, _pod(undeclared_node, None))

    def refusal() -> Refused | None:
        fresh = core.read_namespaced_pod("p", namespace)
        try:
            PodResizer(api).resize(namespace, "p", fresh.metadata.uid, fresh.metadata.resource_version, [SETUP_200M])
        except Refused as err:
            return err if err.kind == Refusal.NODE_FEATURE else None  # "node not found" until its cache has it
        raise AssertionError("the API server took an init-container resize on a node that does not declare it")

    refused = eventually("the NodeDeclaredFeatureValidator refusal", refusal, timeout_s=20)
    assert "pod update requires features InPlacePodVerticalScalingInitContainers which are not available on node" \
        in str(refused) and undeclared_node in str(refused)
    after = core.read_namespaced_pod("p", namespace)
    assert after.metadata.generation == pod.metadata.generation
    assert after.spec.init_containers[0].resources.requests == {"cpu": "100m", "memory": "32Mi"}
    core.delete_namespaced_pod("p", namespace, grace_period_seconds=0)


def test_pod_level_requests_go_in_the_same_patch_as_the_containers(real_kubelet: KubeletBackend,
                                                                   api: client.ApiClient, namespace: str) -> None:
    # Pod-level 1 CPU over app 500m. app -> 1200m alone would outgrow the pod-level requests: the API server
    # refuses it (422). With pod-level 1500m in the same patch (the updater's entry carries both) it is taken.
    core = client.CoreV1Api(api)
    assert NodeFeature.POD_LEVEL_RESIZE.value in (core.read_node(real_kubelet.node).status.declared_features or [])
    spec = {"nodeName": real_kubelet.node, "tolerations": [HOLLOW_TOLERATION], "terminationGracePeriodSeconds": 0,
            "resources": {"requests": {"cpu": "1", "memory": "128Mi"}, "limits": {"cpu": "2", "memory": "256Mi"}},
            "containers": [{"name": "app", "image": "registry.invalid/app:1",
                            "resources": {"requests": {"cpu": "500m"}}}]}
    core.create_namespaced_pod(namespace, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
                                           "spec": spec})
    pod = eventually("pod p running", lambda: (p := core.read_namespaced_pod("p", namespace))
                     and p.status.phase == "Running" and p, timeout_s=60)
    app = ContainerValues(name="app", requests=Resources(cpu_millicores=1200), limits=Resources())
    resizer = PodResizer(api)
    with pytest.raises(PermanentKubeError, match="aggregate container requests"):  # a 422: nothing to retry
        resizer.resize(namespace, "p", pod.metadata.uid, pod.metadata.resource_version, [app])
    generation = resizer.resize(namespace, "p", pod.metadata.uid, pod.metadata.resource_version, [app],
                                pod_level=Resources(cpu_millicores=1500, memory_bytes=128 * Mi))

    def resized() -> client.V1Pod | None:
        p = core.read_namespaced_pod("p", namespace)
        conditions = {c.type for c in p.status.conditions or ()}
        return p if (p.status.observed_generation or 0) >= generation and p.status.resources and \
            dict(p.status.resources.requests or {}) == {"cpu": "1500m", "memory": "128Mi"} and \
            not conditions & {"PodResizePending", "PodResizeInProgress"} else None

    after = eventually("pod-level 1500m and app 1200m actuated", resized, timeout_s=60)
    assert dict(after.status.resources.limits or {}) == {"cpu": "2", "memory": "256Mi"}  # limits left alone
    status = next(s for s in after.status.container_statuses if s.name == "app")
    assert dict(status.resources.requests or {}) == {"cpu": "1200m"} and status.restart_count == 0
