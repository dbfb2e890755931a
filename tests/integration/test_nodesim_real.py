"""The node simulator against the real API server: nodes, pods and every in-place resize case.

Each test talks to the real kube-apiserver 1.37 (which validates every resize and bumps generations),
the real controller manager (node lifecycle, ReplicaSets, disruption) and the real scheduler; only the
kubelet is simulated. Expected messages are kubelet's (``resize.py`` cites their sources).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from tests.conftest import SimFactory
from tests.nodesim.nodes import POOL_LABEL_KEYS, NodePool
from tests.nodesim.usage import Constant
from tests.waiting import eventually

pytestmark = pytest.mark.cluster
Mi = 2**20


def app_container(name: str, requests: dict[str, str], limits: dict[str, str] | None = None,
                  memory_policy: str | None = None) -> dict[str, Any]:
    c: dict[str, Any] = {"name": name, "image": f"registry.invalid/{name}:1",
                         "resources": {"requests": requests, "limits": limits or {}}}
    if memory_policy:
        c["resizePolicy"] = [{"resourceName": "memory", "restartPolicy": memory_policy}]
    return c


def make_pod(name: str, node: str, *containers: dict[str, Any], usage: dict[str, Any] | None = None,
             priority_class: str | None = None, restart_policy: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if usage is not None:
        meta["annotations"] = {"nodesim.podtailor.io/usage": json.dumps(usage)}
    spec: dict[str, Any] = {"nodeName": node, "containers": list(containers)}
    if priority_class:
        spec["priorityClassName"] = priority_class
    if restart_policy:
        spec["restartPolicy"] = restart_policy
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def run_pod(core: client.CoreV1Api, ns: str, pod: dict[str, Any]) -> client.V1Pod:
    core.create_namespaced_pod(ns, pod)
    name = pod["metadata"]["name"]
    return eventually(f"pod {name} Running", lambda: (p := core.read_namespaced_pod(name, ns)).status.phase
                      == "Running" and p.status.container_statuses and p)


def resize(core: client.CoreV1Api, ns: str, name: str, container: str, resources: dict[str, Any]) -> int:
    body = {"spec": {"containers": [{"name": container, "resources": resources}]}}
    return int(core.patch_namespaced_pod_resize(name, ns, body).metadata.generation)


def resize_condition(pod: client.V1Pod, ctype: str) -> client.V1PodCondition | None:
    return next((c for c in pod.status.conditions or [] if c.type == ctype), None)


def settled(core: client.CoreV1Api, ns: str, name: str, generation: int) -> client.V1Pod | None:
    """The pod once the kubelet has caught up with ``generation`` and no resize condition is left."""
    pod = core.read_namespaced_pod(name, ns)
    done = (pod.status.observed_generation or 0) >= generation and not any(
        resize_condition(pod, t) for t in ("PodResizePending", "PodResizeInProgress"))
    return pod if done else None


def status_of(pod: client.V1Pod, container: str) -> client.V1ContainerStatus:
    return next(s for s in pod.status.container_statuses if s.name == container)


@pytest.fixture
def core(api: client.ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(api)


# ---------------------------------------------------------------------------------------------- nodes
def test_nodes_register_in_pools_and_stay_ready(make_sim: SimFactory, core: client.CoreV1Api) -> None:
    keys = (POOL_LABEL_KEYS["gke"], POOL_LABEL_KEYS["karpenter"])
    sim = make_sim(NodePool(name="web", count=2, cpu_millicores=8000, label_keys=keys))
    for name in sim.node_names():
        node = core.read_node(name)
        assert node.metadata.labels[keys[0]] == "web" and node.metadata.labels[keys[1]] == "web"
        assert node.status.allocatable["cpu"] == "8"
        assert node.status.node_info.kubelet_version == "v1.37.2"
        # The node-lifecycle controller removes the not-ready taint that admission put on the new node.
        eventually(f"{name} untainted", lambda n=name: not core.read_node(n).spec.taints, timeout_s=30)
        lease = client.CoordinationV1Api(core.api_client).read_namespaced_lease(name, "kube-node-lease")
        assert lease.spec.holder_identity == name


def test_not_ready_and_memory_pressure_are_tainted_by_the_controller(
    make_sim: SimFactory, core: client.CoreV1Api
) -> None:
    sim = make_sim(NodePool(name="p", count=2))
    a, b = sim.node_names()
    for name in (a, b):
        eventually(f"{name} untainted", lambda n=name: not core.read_node(n).spec.taints, timeout_s=30)
    sim.set_memory_pressure(a, True)
    sim.set_node_ready(b, False)

    def taint_keys(name: str) -> set[str]:
        return {t.key for t in core.read_node(name).spec.taints or []}

    eventually("memory-pressure taint", lambda: "node.kubernetes.io/memory-pressure" in taint_keys(a), 30)
    eventually("not-ready taint", lambda: "node.kubernetes.io/not-ready" in taint_keys(b), 30)


def test_deployment_pods_run_and_disruption_budget_blocks_eviction(
    make_sim: SimFactory, core: client.CoreV1Api, namespace: str
) -> None:
    sim = make_sim(NodePool(name="apps", count=2))
    pool_key = POOL_LABEL_KEYS["podtailor"]
    apps, policy = client.AppsV1Api(core.api_client), client.PolicyV1Api(core.api_client)
    labels = {"app": "web"}
    template = {"metadata": {"labels": labels},
                "spec": {"nodeSelector": {pool_key: "apps", "type": "nodesim"},
                         "tolerations": [], "terminationGracePeriodSeconds": 5,
                         "containers": [app_container("app", {"cpu": "100m", "memory": "64Mi"})]}}
    # Only this test's simulator has nodes labelled with this test's pool name + prefix.
    template["spec"]["nodeSelector"] = {"kubernetes.io/hostname": sim.node_names()[0]}
    apps.create_namespaced_deployment(namespace, {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
        "spec": {"replicas": 2, "selector": {"matchLabels": labels}, "template": template}})
    policy.create_namespaced_pod_disruption_budget(namespace, {
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "web"},
        "spec": {"minAvailable": 2, "selector": {"matchLabels": labels}}})

    def ready_pods() -> list[client.V1Pod]:
        pods = core.list_namespaced_pod(namespace).items
        return [p for p in pods if p.status.phase == "Running" and resize_condition(p, "Ready")
                and resize_condition(p, "Ready").status == "True" and not p.metadata.deletion_timestamp]

    pods = eventually("2 ready pods", lambda: len(r := ready_pods()) == 2 and r, timeout_s=60)
    eventually("PDB sees 2 healthy", lambda: (s := policy.read_namespaced_pod_disruption_budget_status(
        "web", namespace).status) and s.current_healthy == 2 and s.observed_generation)
    victim = pods[0].metadata.name
    with pytest.raises(client.ApiException) as info:
        core.create_namespaced_pod_eviction(victim, namespace, {
            "apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": victim, "namespace": namespace}})
    assert info.value.status == 429
    # A plain delete goes through graceful termination, which the simulated kubelet confirms.
    core.delete_namespaced_pod(victim, namespace)
    eventually("the deleted pod is gone", lambda: victim not in {p.metadata.name for p in
                                                                core.list_namespaced_pod(namespace).items})
    eventually("the ReplicaSet's replacement is ready", lambda: len(ready_pods()) == 2, timeout_s=60)


# --------------------------------------------------------------------------------------------- resize
def test_cpu_up_in_place_without_restart(make_sim: SimFactory, core: client.CoreV1Api, namespace: str) -> None:
    sim = make_sim(NodePool(name="p", count=1), actuation_delay_s=1.0)
    node = sim.node_names()[0]
    run_pod(core, namespace, make_pod("p", node, app_container("app", {"cpu": "500m"}, {"cpu": "1"})))
    gen = resize(core, namespace, "p", "app", {"requests": {"cpu": "800m"}, "limits": {"cpu": "2"}})
    assert gen == 2
    # While actuating: allocated already, condition InProgress, actual resources still the old ones.
    pod = eventually("PodResizeInProgress", lambda: (p := core.read_namespaced_pod("p", namespace))
                     and resize_condition(p, "PodResizeInProgress") and p, timeout_s=10, interval_s=0.05)
    assert pod.status.observed_generation == 2
    assert status_of(pod, "app").allocated_resources["cpu"] == "800m"
    assert status_of(pod, "app").resources.requests["cpu"] == "500m"
    pod = eventually("resize done", lambda: settled(core, namespace, "p", gen), timeout_s=20)
    app = status_of(pod, "app")
    assert app.resources.requests["cpu"] == "800m" and app.resources.limits["cpu"] == "2"
    assert app.restart_count == 0


def test_memory_up_restarts_only_the_container_with_restart_policy(
    make_sim: SimFactory, core: client.CoreV1Api, namespace: str
) -> None:
    sim = make_sim(NodePool(name="p", count=1))
    node = sim.node_names()[0]
    run_pod(core, namespace, make_pod(
        "p", node,
        app_container("app", {"cpu": "200m", "memory": "128Mi"}, {"memory": "256Mi"}, "RestartContainer"),
        app_container("helper", {"cpu": "100m", "memory": "64Mi"}, {"memory": "128Mi"}, "RestartContainer"),
    ))
    body = {"spec": {"containers": [
        {"name": "app", "resources": {"requests": {"memory": "256Mi"}, "limits": {"memory": "512Mi"}}},
        {"name": "helper", "resources": {"requests": {"cpu": "150m"}}},  # cpu: NotRequired by default
    ]}}
    gen = core.patch_namespaced_pod_resize("p", namespace, body).metadata.generation
    pod = eventually("resize done", lambda: settled(core, namespace, "p", gen), timeout_s=20)
    assert status_of(pod, "app").restart_count == 1
    assert status_of(pod, "app").resources.limits["memory"] == "512Mi"
    assert status_of(pod, "helper").restart_count == 0
    assert status_of(pod, "helper").resources.requests["cpu"] == "150m"


def test_request_above_allocatable_is_refused_by_the_api_server(
    make_sim: SimFactory, core: client.CoreV1Api, namespace: str
) -> None:
    sim = make_sim(NodePool(name="p", count=1, cpu_millicores=4000))
    run_pod(core, namespace, make_pod("p", sim.node_names()[0], app_container("app", {"cpu": "1"})))
    # Since 1.35 the API server's admission checks a resize against the node's allocatable itself.
    with pytest.raises(client.ApiException) as info:
        resize(core, namespace, "p", "app", {"requests": {"cpu": "5"}})
    assert info.value.status == 403
    assert json.loads(info.value.body)["message"] == (
        'pods "p" is forbidden: node didn\'t have enough allocatable resources: cpu, requested: 5000, '
        "allocatable: 4000")


def test_an_unpublished_allocatable_change_is_not_enforced_yet(
    make_sim: SimFactory, core: client.CoreV1Api, namespace: str
) -> None:
    sim = make_sim(NodePool(name="p", count=1, cpu_millicores=8000))
    node = sim.node_names()[0]
    run_pod(core, namespace, make_pod("p", node, app_container("app", {"cpu": "1"})))
    # Like kubelet 1.37, which admits against its informer's Node object (lifecycle/predicate.go), the
    # simulator decides with the allocatable it has published: 8 cores until the 4-core change is reported.
    sim.set_allocatable(node, cpu_millicores=4000, memory_bytes=16 * 2**30, report=False)
    gen = resize(core, namespace, "p", "app", {"requests": {"cpu": "5"}})
    pod = eventually("resize done", lambda: settled(core, namespace, "p", gen), timeout_s=10)
    assert status_of(pod, "app").resources.requests["cpu"] == "5"
    # Once published, a request above it is Deferred (never Infeasible in 1.36+), e.g. when the API
    # server's cached Node still allowed it.
    sim.set_allocatable(node, cpu_millicores=4000, memory_bytes=16 * 2**30, report=True)
    eventually("4 cores published", lambda: core.read_node(node).status.allocatable["cpu"] == "4")
    with pytest.raises(client.ApiException) as info:
        resize(core, namespace, "p", "app", {"requests": {"cpu": "6"}})
    assert info.value.status == 403


@pytest.fixture
def priority_classes(core: client.CoreV1Api, namespace: str) -> Iterator[tuple[str, str]]:
    sched = client.SchedulingV1Api(core.api_client)
    names = (f"{namespace}-low", f"{namespace}-high")
    for name, value in zip(names, (100, 1000), strict=True):
        sched.create_priority_class({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                                     "metadata": {"name": name}, "value": value})
    try:
        yield names
    finally:
        for name in names:
            sched.delete_priority_class(name)


def test_deferred_until_capacity_frees_then_applied_in_priority_order(
    make_sim: SimFactory, core: client.CoreV1Api, namespace: str, priority_classes: tuple[str, str]
) -> None:
    low_class, high_class = priority_classes
    sim = make_sim(NodePool(name="p", count=1, cpu_millicores=4000))
    node = sim.node_names()[0]
    run_pod(core, namespace, make_pod("filler", node, app_container("app", {"cpu": "2800m"})))
    run_pod(core, namespace, make_pod("low", node, app_container("app", {"cpu": "500m"}),
                                      priority_class=low_class))
    run_pod(core, namespace, make_pod("high", node, app_container("app", {"cpu": "500m"}),
                                      priority_class=high_class))
    # 2800 + 500 + 500 = 3800 of 4000 allocated: neither +800 fits now.
    low_gen = resize(core, namespace, "low", "app", {"requests": {"cpu": "1300m"}})
    high_gen = resize(core, namespace, "high", "app", {"requests": {"cpu": "1300m"}})
    for name in ("low", "high"):
        cond = eventually(f"{name} Deferred", lambda n=name: resize_condition(
            core.read_namespaced_pod(n, namespace), "PodResizePending"), timeout_s=10)
        assert cond.reason == "Deferred"
        # others: 2800 (filler) + 500 (the other pod) = 3300 in use.
        assert cond.message == "Node didn't have enough resource: cpu, requested: 1300, used: 3300, capacity: 4000"
    # Shrinking the filler by 900m frees room for exactly one of them: the higher priority goes first.
    resize(core, namespace, "filler", "app", {"requests": {"cpu": "1900m"}})
    eventually("high applied", lambda: settled(core, namespace, "high", high_gen), timeout_s=20)
    low = core.read_namespaced_pod("low", namespace)
    assert resize_condition(low, "PodResizePending").reason == "Deferred"
    assert status_of(low, "app").resources.requests["cpu"] == "500m"
    # Removing the filler frees the rest: the low-priority resize is applied too.
    core.delete_namespaced_pod("filler", namespace)
    pod = eventually("low applied", lambda: settled(core, namespace, "low", low_gen), timeout_s=30)
    assert status_of(pod, "app").resources.requests["cpu"] == "1300m"


def test_periodic_retry_restarts_after_every_retry(
    make_sim: SimFactory, core: client.CoreV1Api, namespace: str
) -> None:
    # kubelet 1.37 allocation_manager.go: retryPendingResizes resets the periodic ticker on every retry, so
    # a deferred resize made feasible without a trigger is retried retryDelay after the last retry of any kind.
    sim = make_sim(NodePool(name="p", count=1, cpu_millicores=4000), deferred_retry_s=6.0)
    node = sim.node_names()[0]
    run_pod(core, namespace, make_pod("other", node, app_container("app", {"cpu": "100m"})))
    run_pod(core, namespace, make_pod("p", node, app_container("app", {"cpu": "500m"})))
    # 3950m fits the node's 4 cores (the API server admits it) but not beside the other pod: Deferred.
    gen = resize(core, namespace, "p", "app", {"requests": {"cpu": "3950m"}})
    eventually("p Deferred", lambda: (c := resize_condition(core.read_namespaced_pod("p", namespace),
                                                            "PodResizePending")) and c.reason == "Deferred",
               timeout_s=10)
    # Raising the allocatable triggers no retry; another pod's resize does, and restarts the timer.
    sim.set_allocatable(node, cpu_millicores=8000, memory_bytes=8 * 2**30)
    time.sleep(2.0)
    sim.set_allocatable(node, cpu_millicores=4000, memory_bytes=8 * 2**30)
    other_gen = resize(core, namespace, "other", "app", {"requests": {"cpu": "200m"}})
    eventually("other applied", lambda: settled(core, namespace, "other", other_gen), timeout_s=10)
    retried_at = time.monotonic()
    sim.set_allocatable(node, cpu_millicores=8000, memory_bytes=8 * 2**30)
    pod = eventually("p applied by the periodic retry", lambda: settled(core, namespace, "p", gen), timeout_s=20,
                     interval_s=0.1)
    waited = time.monotonic() - retried_at
    # Not before 6 s after the 'pod updated' retry (an unreset timer would have fired about 4 s after it).
    assert waited >= 5.0, waited
    assert status_of(pod, "app").resources.requests["cpu"] == "3950m"


def test_memory_limit_below_usage_is_an_error_until_raised(
    make_sim: SimFactory, core: client.CoreV1Api, namespace: str
) -> None:
    sim = make_sim(NodePool(name="p", count=1), tick_s=0.2)
    usage = {"kind": "constant", "cpu_cores": 0.1, "memory_bytes": 300 * Mi}
    run_pod(core, namespace, make_pod("p", sim.node_names()[0],
                                      app_container("app", {"memory": "256Mi"}, {"memory": "512Mi"}), usage=usage))
    eventually("usage sampled", lambda: (s := sim.pod(namespace, "p")) and
               s.containers["app"].memory_working_set_bytes == 300 * Mi, timeout_s=10)
    gen = resize(core, namespace, "p", "app", {"limits": {"memory": "280Mi"}})
    cond = eventually("Error", lambda: (c := resize_condition(core.read_namespaced_pod("p", namespace),
                                                              "PodResizeInProgress")) and c.reason == "Error" and c,
                      timeout_s=10)
    assert cond.message == (f'cannot decrease memory limits: attempting to set container "app" memory limit '
                            f"({280 * Mi}) below current usage ({300 * Mi})")
    assert status_of(core.read_namespaced_pod("p", namespace), "app").resources.limits["memory"] == "512Mi"
    gen = resize(core, namespace, "p", "app", {"limits": {"memory": "400Mi"}})
    pod = eventually("resize done", lambda: settled(core, namespace, "p", gen), timeout_s=20)
    assert status_of(pod, "app").resources.limits["memory"] == "400Mi"
    assert status_of(pod, "app").restart_count == 0


def test_api_server_rejects_restart_with_never_and_qos_changes(
    make_sim: SimFactory, core: client.CoreV1Api, namespace: str
) -> None:
    sim = make_sim(NodePool(name="p", count=1))
    node = sim.node_names()[0]
    never = make_pod("never", node, app_container("app", {"memory": "64Mi"}, None, "RestartContainer"),
                     restart_policy="Never")
    with pytest.raises(client.ApiException) as info:
        core.create_namespaced_pod(namespace, never)
    assert info.value.status == 422
    expected = ("resizePolicy: Invalid value: \"RestartContainer\": "
                "must be 'NotRequired' when pod `restartPolicy` is 'Never'")
    assert expected in json.loads(info.value.body)["message"]
    guaranteed = {"cpu": "500m", "memory": "128Mi"}
    run_pod(core, namespace, make_pod("g", node, app_container("app", guaranteed, guaranteed)))
    with pytest.raises(client.ApiException) as info:
        resize(core, namespace, "g", "app", {"requests": {"cpu": "250m"}})
    assert info.value.status == 422
    assert "Pod QOS Class may not change as a result of resizing" in json.loads(info.value.body)["message"]


# ---------------------------------------------------------------------------------- usage and metrics
def test_oom_kill_then_restart_when_usage_passes_the_limit(
    make_sim: SimFactory, core: client.CoreV1Api, namespace: str
) -> None:
    sim = make_sim(NodePool(name="p", count=1), tick_s=0.2, crash_backoff_s=0.5)
    usage = {"kind": "constant", "cpu_cores": 0.05, "memory_bytes": 100 * Mi}
    run_pod(core, namespace, make_pod("p", sim.node_names()[0],
                                      app_container("app", {"memory": "128Mi"}, {"memory": "256Mi"}), usage=usage))
    sim.set_usage(namespace, "p", "app", Constant(cpu_cores=0.05, memory_bytes=300 * Mi))
    pod = eventually("OOMKilled", lambda: (p := core.read_namespaced_pod("p", namespace)) and
                     (s := status_of(p, "app")).last_state.terminated and
                     s.last_state.terminated.reason == "OOMKilled" and p, timeout_s=10)
    assert status_of(pod, "app").last_state.terminated.exit_code == 137
    sim.set_usage(namespace, "p", "app", Constant(cpu_cores=0.05, memory_bytes=100 * Mi))
    pod = eventually("restarted and ready", lambda: (p := core.read_namespaced_pod("p", namespace)) and
                     (s := status_of(p, "app")).restart_count >= 1 and s.ready and p, timeout_s=15)
    snap = next(c for c in sim.snapshot().containers if c.pod == "p")
    assert snap.oom_events_total >= 1 and snap.last_terminated_reason == "OOMKilled"


def test_cpu_above_the_limit_is_capped_and_counted_as_throttling(
    make_sim: SimFactory, core: client.CoreV1Api, namespace: str
) -> None:
    sim = make_sim(NodePool(name="p", count=1), tick_s=0.2)
    usage = {"kind": "constant", "cpu_cores": 2.0, "memory_bytes": 10 * Mi}
    run_pod(core, namespace, make_pod("p", sim.node_names()[0], app_container("app", {"cpu": "500m"}, {"cpu": "1"}),
                                      usage=usage))
    start = next(c for c in sim.snapshot().containers if c.pod == "p")
    time.sleep(2.0)
    end = next(c for c in sim.snapshot().containers if c.pod == "p")
    used = end.cpu_usage_seconds_total - start.cpu_usage_seconds_total
    periods = end.cfs_periods_total - start.cfs_periods_total
    throttled = end.cfs_throttled_periods_total - start.cfs_throttled_periods_total
    # Demand 2 cores, limit 1: about 1 core-second per wall second (2 s, ticks of 0.2 s: +-1 tick).
    assert 1.6 <= used <= 2.4
    assert periods > 0 and throttled == periods  # demand is above the limit in every period


def test_new_limits_visible_in_prometheus_after_a_scrape(
    make_sim: SimFactory, core: client.CoreV1Api, namespace: str, prometheus: Any
) -> None:
    from prometheus_api_client import PrometheusConnect

    sim = make_sim(NodePool(name="p", count=1), metrics_port=0)
    prometheus.set_targets([f"127.0.0.1:{sim.metrics_port}"])
    run_pod(core, namespace, make_pod("p", sim.node_names()[0], app_container("app", {"cpu": "250m"}, {"cpu": "1"})))
    prom = PrometheusConnect(url=prometheus.url, disable_ssl=True)
    query = f'kube_pod_container_resource_limits{{namespace="{namespace}",pod="p",resource="cpu"}}'

    def value() -> float | None:
        result = prom.custom_query(query)
        return float(result[0]["value"][1]) if result else None

    eventually("the old limit scraped", lambda: value() == 1.0, timeout_s=30, interval_s=0.5)
    gen = resize(core, namespace, "p", "app", {"limits": {"cpu": "1500m"}})
    eventually("resize done", lambda: settled(core, namespace, "p", gen), timeout_s=20)
    eventually("the new limit scraped", lambda: value() == 1.5, timeout_s=30, interval_s=0.5)
