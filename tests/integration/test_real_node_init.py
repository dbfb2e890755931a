"""A completed init container resized on a real node: kubelet v1.37 over containerd and runc.

The hollow nodes' runtime never exits a container, so what a real kubelet does with an init container that
has run to completion is seen only here (#38 item 3). The node declares
``InPlacePodVerticalScalingInitContainers`` in ``status.declaredFeatures`` (KEP-5328). First the API alone:
``pods/resize`` with ``spec.initContainers`` is accepted, the kubelet observes the generation and reports the
new values in the init container's status, and neither container runs again. Then the updater's own rollout
(read, plan, the batch's resize, verify, as the drills drive it) does the same from a VPA status naming the
init container.
"""

from __future__ import annotations

import json

import pytest
from kubernetes import client

from tests.builders.cluster import run_deployment
from tests.builders.realpods import (
    container,
    container_id,
    hold_mib,
    run_pod,
    status_of,
    wait_resized,
)
from tests.drills._rollout_scenario import DrillScenario
from tests.harness.realnode import RealNodePool
from updater.answers import NodeFeature
from updater.rollout.machine.journal import EntryState

pytestmark = pytest.mark.cluster
SETUP = {"cpu": "300m", "memory": "64Mi"}
SMALLER = {"cpu": "100m", "memory": "32Mi"}


def _declared(core: client.CoreV1Api, node: str) -> set[str]:
    raw = core.read_node(node, _preload_content=False)
    return set(json.loads(raw.data)["status"].get("declaredFeatures") or [])


def _init(pod: client.V1Pod) -> client.V1ContainerStatus:
    [s] = pod.status.init_container_statuses
    return s


def _setup() -> dict[str, object]:
    return container("setup", ["/bin/sh", "-c", "echo set up"], requests=SETUP, limits=SETUP)


def _app() -> dict[str, object]:
    return container("app", hold_mib(0), requests={"cpu": "100m", "memory": "32Mi"},
                     limits={"cpu": "200m", "memory": "64Mi"})


def test_a_completed_init_container_is_resized_in_place_and_not_run_again(
        real_nodes: RealNodePool, api: client.ApiClient, namespace: str) -> None:
    core = client.CoreV1Api(api)
    node = next(iter(real_nodes.nodes.values())).name
    assert NodeFeature.INIT_CONTAINER_RESIZE.value in _declared(core, node)
    pod = run_pod(core, namespace, "init", node, _app(), init_containers=(_setup(),))
    before = _init(pod)
    assert before.state.terminated.exit_code == 0 and before.resources.requests == SETUP
    app_id = container_id(pod, "app")
    core.patch_namespaced_pod_resize("init", namespace, {"spec": {"initContainers": [
        {"name": "setup", "resources": {"requests": SMALLER, "limits": SMALLER}}]}})
    wait_resized(core, namespace, "init", generation=2)
    after = core.read_namespaced_pod("init", namespace)
    done = _init(after)
    assert (done.resources.requests, done.resources.limits) == (SMALLER, SMALLER)
    assert done.state.terminated.container_id == before.state.terminated.container_id, "setup ran again"
    assert done.restart_count == 0 and done.state.terminated.exit_code == 0
    assert container_id(after, "app") == app_id and status_of(after, "app").restart_count == 0
    assert after.status.observed_generation == 2


def test_the_updater_resizes_a_completed_init_container_on_a_real_node(real_scenario: DrillScenario) -> None:
    s = real_scenario
    run_deployment(s, "web", _app(), init_containers=(_setup(),))
    [pod] = s.running("web")
    setup_id, app_id = _init(pod).state.terminated.container_id, container_id(pod, "app")
    s.vpa("web", {"cpu": "100m", "memory": "32Mi"})  # the app stays where it is
    vpa = s.custom.get_namespaced_custom_object("autoscaling.k8s.io", "v1", s.ns, "verticalpodautoscalers", "web")
    vpa["status"]["recommendation"]["containerRecommendations"].append(
        {"containerName": "setup", "target": SMALLER, "lowerBound": SMALLER, "upperBound": SMALLER,
         "uncappedTarget": SMALLER})
    s.custom.replace_namespaced_custom_object_status("autoscaling.k8s.io", "v1", s.ns, "verticalpodautoscalers",
                                                     "web", vpa)
    s.policy(steps=[{"fraction": 1, "bake": "2s"}])
    s.drive(s.counting_executor(), 90, until=lambda: any(
        e.state is EntryState.VERIFIED for r in s.rollouts() for e in r.entries))
    now = s.core.read_namespaced_pod(pod.metadata.name, s.ns)
    done = _init(now)
    assert now.spec.init_containers[0].resources.requests == SMALLER
    assert (done.resources.requests, done.resources.limits) == (SMALLER, SMALLER)
    assert done.state.terminated.container_id == setup_id and done.restart_count == 0, "setup ran again"
    assert now.metadata.uid == pod.metadata.uid
    assert container_id(now, "app") == app_id and status_of(now, "app").restart_count == 0
    assert [c.ok for c in s.calls.of("resize")] == [True]
