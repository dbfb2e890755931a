"""The updater's cluster snapshot against the real API server and the node simulator, plus its conversion
on synthetic objects (malformed content, owner chains, 10,000 pods).

The cluster tests build what a real cluster has (a Deployment on Karpenter-labelled nodes, a bare pod, an
HPA, LimitRanges, VPAs with status written through the status subresource as the recommender writes it,
ResizePolicies) and check every field the snapshot derives from them; they also prove that the
ResizePolicy CRD's schema rejects bad objects before the updater ever reads them, and that a missing
RBAC permission is reported with the verb and resource.
"""

from __future__ import annotations

import json
import secrets
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from podtailor.kube.errors import PermanentKubeError
from podtailor.resize.types import ContainerTarget, LimitRangeView, QoS
from podtailor.resources import Resources
from podtailor.vpa import ControlledValues
from tests.conftest import SimFactory
from tests.nodesim.nodes import NodePool
from tests.waiting import eventually
from updater.kube.policy_crd import covers
from updater.kube.snapshot import ClusterReader, ServerVersion, Snapshot, build_snapshot, parse_version
from updater.policy.types import CanaryStep, FallbackMode, HpaView, NodeView, PodView

pytestmark = pytest.mark.cluster
Mi, Gi = 2**20, 2**30
KARPENTER, PODTAILOR = "karpenter.sh/nodepool", "podtailor.io/node-pool"
VPA = ("autoscaling.k8s.io", "v1", "verticalpodautoscalers")
RZP = ("podtailor.io", "v1alpha1", "resizepolicies")


def container(name: str, requests: dict[str, str], limits: dict[str, str], **extra: Any) -> dict[str, Any]:
    return {"name": name, "image": f"registry.invalid/{name}:1",
            "resources": {"requests": requests, "limits": limits}, **extra}


def deployment(pool: str) -> dict[str, Any]:
    labels = {"app": "web"}
    app = container("app", {"cpu": "200m", "memory": "128Mi"}, {"cpu": "1", "memory": "256Mi"},
                    resizePolicy=[{"resourceName": "memory", "restartPolicy": "RestartContainer"}])
    proxy = container("proxy", {"cpu": "50m", "memory": "32Mi"}, {}, restartPolicy="Always")
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "annotations": {"podtailor.io/approve-restart": "true"}},
            "spec": {"replicas": 2, "selector": {"matchLabels": labels}, "template": {
                "metadata": {"labels": labels, "annotations": {"team": "shop"}},
                "spec": {"nodeSelector": {KARPENTER: pool}, "terminationGracePeriodSeconds": 1,
                         "initContainers": [proxy], "containers": [app]}}}}


def limit_range(name: str, **item: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "LimitRange", "metadata": {"name": name},
            "spec": {"limits": [{"type": "Container", **item}, {"type": "Pod", "max": {"cpu": "64"}}]}}


def hpa(name: str, kind: str, target: str, *metrics: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "metadata": {"name": name},
            "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": kind, "name": target},
                     "minReplicas": 1, "maxReplicas": 4, "metrics": list(metrics)}}


def make_vpa(custom: Any, ns: str, name: str, spec: dict[str, Any], status: dict[str, Any]) -> None:
    """Create the VPA, then write its status through the status subresource, as the recommender does."""
    obj = custom.create_namespaced_custom_object(*VPA[:2], ns, VPA[2], {
        "apiVersion": "autoscaling.k8s.io/v1", "kind": "VerticalPodAutoscaler", "metadata": {"name": name},
        "spec": spec})
    obj["status"] = status
    custom.replace_namespaced_custom_object_status(*VPA[:2], ns, VPA[2], name, obj)


def ready_pods(core: client.CoreV1Api, ns: str, count: int) -> list[Any]:
    def probe() -> list[Any] | None:
        pods = [p for p in core.list_namespaced_pod(ns).items if p.status.phase == "Running"
                and any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])]
        return pods if len(pods) == count else None
    return eventually(f"{count} ready pods", probe, timeout_s=60)


@pytest.fixture
def cluster_scoped(api: client.ApiClient) -> Iterator[list[tuple[str, str]]]:
    """(kind, name) of cluster-scoped objects a test created; deleted afterwards whatever happens."""
    created: list[tuple[str, str]] = []
    try:
        yield created
    finally:
        for kind, name in created:
            try:
                if kind == "PriorityClass":
                    client.SchedulingV1Api(api).delete_priority_class(name)
                else:
                    client.CustomObjectsApi(api).delete_cluster_custom_object(*RZP, name)
            except client.ApiException as err:
                if err.status != 404:
                    raise


# ------------------------------------------------------------------------------------------- cluster
def test_snapshot_reads_every_field(api: client.ApiClient, namespace: str, make_sim: SimFactory, crds: list[str],
                                    cluster_scoped: list[tuple[str, str]]) -> None:
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    pool, solo_pool = f"k{secrets.token_hex(4)}", f"p{secrets.token_hex(4)}"
    sim = make_sim(NodePool(name=pool, count=2, cpu_millicores=4000, memory_bytes=8 * Gi, label_keys=(KARPENTER,)),
                   NodePool(name=solo_pool, count=1, label_keys=(PODTAILOR,)))
    solo_node = sim.node_names(solo_pool)[0]
    priority_class = f"{namespace}-pc"
    client.SchedulingV1Api(api).create_priority_class({
        "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": priority_class},
        "value": 1234})
    cluster_scoped.append(("PriorityClass", priority_class))
    client.AppsV1Api(api).create_namespaced_deployment(namespace, deployment(pool))
    guaranteed = {"cpu": "100m", "memory": "64Mi"}
    core.create_namespaced_pod(namespace, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "solo"},
                                           "spec": {"nodeName": solo_node, "priorityClassName": priority_class,
                                                    "containers": [container("app", guaranteed, guaranteed)]}})
    ready_pods(core, namespace, 3)
    # LimitRanger admits pods on creation: added after the pods so that its max does not require limits.
    core.create_namespaced_limit_range(namespace, limit_range("a", min={"cpu": "10m"}, max={"cpu": "2"},
                                                              maxLimitRequestRatio={"cpu": "10"}))
    core.create_namespaced_limit_range(namespace, limit_range("b", min={"cpu": "50m", "memory": "16Mi"},
                                                              max={"memory": "1Gi"},
                                                              maxLimitRequestRatio={"cpu": "5", "memory": "1500m"}))
    hpas = client.AutoscalingV2Api(api)
    utilization = {"type": "Utilization", "averageUtilization": 70}
    hpas.create_namespaced_horizontal_pod_autoscaler(namespace, hpa(
        "web", "Deployment", "web", {"type": "Resource", "resource": {"name": "cpu", "target": utilization}},
        {"type": "Resource", "resource": {"name": "memory", "target": {"type": "AverageValue",
                                                                       "averageValue": "100Mi"}}}))
    hpas.create_namespaced_horizontal_pod_autoscaler(namespace, hpa(
        "db", "StatefulSet", "db", {"type": "ContainerResource", "containerResource": {
            "name": "memory", "container": "db", "target": utilization}}))
    make_vpa(custom, namespace, "web", {
        "targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
        "updatePolicy": {"updateMode": "InPlaceOrRecreate"},
        "resourcePolicy": {"containerPolicies": [
            {"containerName": "app", "minAllowed": {"cpu": "100m"}, "maxAllowed": {"memory": "1Gi"},
             "controlledValues": "RequestsOnly"},
            {"containerName": "*", "controlledResources": ["cpu"], "mode": "Off"}]}},
        {"recommendation": {"containerRecommendations": [
            {"containerName": "app", "target": {"cpu": "300m", "memory": "200Mi"},
             "lowerBound": {"cpu": "250m", "memory": "150Mi"}, "upperBound": {"cpu": "0.5", "memory": "400Mi"}},
            {"containerName": "proxy", "target": {"cpu": "60m", "memory": "40Mi"}}]},
         "conditions": [{"type": "Stale", "status": "True", "reason": "UsageHistoryUnavailable",
                         "lastTransitionTime": "2026-01-01T00:00:00Z"}]})
    # The schema lets a negative quantity through; the snapshot skips that VPA and counts it.
    make_vpa(custom, namespace, "broken", {"targetRef": {"kind": "Deployment", "name": "web"},
                                           "resourcePolicy": {"containerPolicies": [
                                               {"containerName": "app", "maxAllowed": {"memory": "-1Gi"}}]}},
             {"recommendation": {"containerRecommendations": [{"containerName": "app", "target": {"cpu": "1"}}]}})
    policy_name = f"{namespace}-rzp"
    custom.create_cluster_custom_object(*RZP, {
        "apiVersion": "podtailor.io/v1alpha1", "kind": "ResizePolicy", "metadata": {"name": policy_name},
        "spec": {"namespaces": [namespace], "nodePoolLabel": KARPENTER, "fallback": "none",
                 "steps": [{"fraction": 0}, {"fraction": 1, "bake": "1m", "gates": ["oom"]}]}})
    cluster_scoped.append(("ResizePolicy", policy_name))

    started = time.monotonic()
    snap = ClusterReader(api).read(namespaces=(namespace,))
    print(f"\nsnapshot of one namespace read in {time.monotonic() - started:.3f}s", file=sys.stderr)
    check_pods(snap, namespace, pool, solo_pool, solo_node)
    check_objects(snap, namespace, pool, solo_pool, policy_name)
    check_node_conditions(sim, api, namespace, pool)
    check_resize_conditions(sim, core, api, namespace, solo_node)


def check_pods(snap: Snapshot, ns: str, pool: str, solo_pool: str, solo_node: str) -> None:
    assert len(snap.pods) == 3 and len(snap.observations) == 3
    web = sorted((p for p in snap.pods if p.workload_kind == "Deployment"), key=lambda p: p.name)
    assert [(p.workload_name, p.pool, p.qos, p.priority, p.restart_policy) for p in web] == [
        ("web", pool, QoS.BURSTABLE, 0, "Always")] * 2
    pod = web[0]
    assert pod.node.startswith(f"n{ns[-6:]}-") and pod.ready and not pod.deleting  # make_sim's node names
    assert pod.generation == 1 and pod.observed_generation == 1
    assert pod.annotations == {"team": "shop"} and pod.labels["app"] == "web"
    assert abs(pod.created_s - time.time()) < 120 and pod.pod_level is None
    assert (pod.resize_pending, pod.resize_in_progress, pod.resize_error) == (None, False, None)
    proxy, app = pod.containers  # sidecars first, as kubelet starts them
    assert (proxy.name, proxy.sidecar, proxy.resize_policy, proxy.restart_count) == ("proxy", True, {}, 0)
    assert proxy.requests == Resources(cpu_millicores=50, memory_bytes=32 * Mi) and proxy.limits == Resources()
    assert (app.name, app.sidecar, app.resize_policy) == ("app", False, {"memory": "RestartContainer"})
    assert app.requests == app.actual == Resources(cpu_millicores=200, memory_bytes=128 * Mi)
    assert app.limits == app.actual_limits == Resources(cpu_millicores=1000, memory_bytes=256 * Mi)
    solo = next(p for p in snap.pods if p.name == "solo")
    assert (solo.workload_kind, solo.workload_name, solo.pool, solo.node) == ("Pod", "solo", solo_pool, solo_node)
    assert (solo.qos, solo.priority) == (QoS.GUARANTEED, 1234)
    obs = snap.observations[f"{ns}/solo"]
    assert obs.ready and obs.phase == "Running" and obs.node == solo_node and obs.uid == solo.uid
    assert obs.containers["app"].actual_requests == Resources(cpu_millicores=100, memory_bytes=64 * Mi)
    assert obs.containers["app"].ready and obs.containers["app"].last_termination_reason is None


def check_objects(snap: Snapshot, ns: str, pool: str, solo_pool: str, policy_name: str) -> None:
    assert snap.resize_subresource_supported and snap.pod_level_resize_supported
    assert (snap.server_version.major, snap.server_version.minor) >= (1, 37)
    assert snap.approvals == {(ns, "Deployment", "web")}
    ours = {n.name: n for n in snap.nodes if n.name.startswith((ns, f"n{ns[-6:]}-"))}
    assert sorted(n.pool for n in ours.values()) == sorted([pool, pool, solo_pool])
    assert all(n.ready and not n.memory_pressure and not n.unschedulable for n in ours.values())
    big = next(n for n in ours.values() if n.pool == pool)
    assert big.allocatable == Resources(cpu_millicores=4000, memory_bytes=8 * Gi)
    assert sorted(snap.hpas, key=lambda h: h.workload_name) == [
        HpaView(namespace=ns, workload_kind="StatefulSet", workload_name="db", utilization_resources=frozenset(
            {"memory"})),
        HpaView(namespace=ns, workload_kind="Deployment", workload_name="web", utilization_resources=frozenset(
            {"cpu"}))]  # the memory metric is an AverageValue, not a utilization
    # Tightest of both: min cpu max(10m, 50m), max cpu 2 (only a), max memory 1Gi, ratios min(10, 5) and 1.5.
    assert snap.limit_ranges == (LimitRangeView(
        namespace=ns, min=Resources(cpu_millicores=50, memory_bytes=16 * Mi),
        max=Resources(cpu_millicores=2000, memory_bytes=Gi), max_limit_request_ratio_cpu=5.0,
        max_limit_request_ratio_memory=1.5),)
    assert snap.skipped == {"VerticalPodAutoscaler": 1}
    (target,) = snap.targets
    assert (target.vpa_name, target.workload_kind, target.workload_name, target.update_mode) == (
        "web", "Deployment", "web", "InPlaceOrRecreate")
    assert target.stale and target.replicas == 2
    assert target.containers["app"] == ContainerTarget(
        name="app", target=Resources(cpu_millicores=300, memory_bytes=200 * Mi),
        lower_bound=Resources(cpu_millicores=250, memory_bytes=150 * Mi),
        upper_bound=Resources(cpu_millicores=500, memory_bytes=400 * Mi),
        controlled_values=ControlledValues.REQUESTS_ONLY, min_allowed=Resources(cpu_millicores=100),
        max_allowed=Resources(memory_bytes=Gi))
    proxy_target = Resources(cpu_millicores=60, memory_bytes=40 * Mi)  # no bounds written: the target is both
    assert target.containers["proxy"] == ContainerTarget(
        name="proxy", target=proxy_target, lower_bound=proxy_target, upper_bound=proxy_target,
        controlled_resources=frozenset({"cpu"}), mode_off=True)
    (policy,) = [p for p in snap.policies if p.name == policy_name]
    assert snap.policy_for(ns) == policy and covers(policy, ns)
    # The server filled in the schema's defaults (bake 5m, maxConcurrent 50, ...).
    assert policy.steps == (CanaryStep(fraction=0.0, bake_s=300.0), CanaryStep(fraction=1.0, bake_s=60.0,
                                                                                gates=("oom",)))
    assert (policy.pool_label_key, policy.fallback, policy.max_concurrent) == (KARPENTER, FallbackMode.NONE, 50)


def check_node_conditions(sim: Any, api: client.ApiClient, ns: str, pool: str) -> None:
    down, pressed = sim.node_names(pool)
    sim.set_node_ready(down, False)
    sim.set_memory_pressure(pressed, True)
    reader = ClusterReader(api)

    def nodes() -> dict[str, NodeView] | None:
        found = {n.name: n for n in reader.read(KARPENTER, namespaces=(ns,)).nodes}
        return found if not found[down].ready and found[pressed].memory_pressure else None

    found = eventually("node conditions in the snapshot", nodes, timeout_s=20, interval_s=0.2)
    assert found[pressed].ready and not found[down].memory_pressure
    # With the policy's label key given, nodes without it have no pool (no fallback to other keys).
    assert {n.pool for n in found.values() if n.name.startswith((ns, f"n{ns[-6:]}-"))} == {pool, ""}


def check_resize_conditions(sim: Any, core: client.CoreV1Api, api: client.ApiClient, ns: str, node: str) -> None:
    # 3 cores of fillers beside solo (two, within the namespace's LimitRanges): the API server admits a 2-core
    # resize (it fits the node's allocatable), the kubelet defers it (it does not fit beside them). Since
    # 1.36 that is Deferred, not Infeasible.
    each = {"cpu": "1500m", "memory": "64Mi"}
    for name in ("filler-a", "filler-b"):
        core.create_namespaced_pod(ns, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
                                        "spec": {"nodeName": node, "containers": [{
                                            "name": "app", "image": "registry.invalid/app:1",
                                            "resources": {"requests": each, "limits": each}}]}})
        eventually(f"{name} running", lambda n=name: core.read_namespaced_pod(n, ns).status.phase == "Running",
                   timeout_s=20)
    before = time.time()
    core.patch_namespaced_pod_resize("solo", ns, {"spec": {"containers": [
        {"name": "app", "resources": {"requests": {"cpu": "2"}, "limits": {"cpu": "2"}}}]}})
    reader = ClusterReader(api)

    def solo() -> tuple[PodView, Any] | None:
        snap = reader.read(namespaces=(ns,))
        pod = next(p for p in snap.pods if p.name == "solo")
        return (pod, snap.observations[f"{ns}/solo"]) if pod.resize_pending else None

    pod, obs = eventually("Deferred in the snapshot", solo, timeout_s=20, interval_s=0.2)
    assert pod.resize_pending == obs.resize_pending == "Deferred"
    assert pod.resize_pending_since_s is not None and pod.resize_pending_since_s >= int(before) - 1
    assert obs.resize_pending_message == (
        "Node didn't have enough resource: cpu, requested: 2000, used: 3000, capacity: 4000")
    assert (pod.generation, pod.observed_generation) == (2, 2)
    (app,) = pod.containers
    assert app.requests == Resources(cpu_millicores=2000, memory_bytes=64 * Mi)  # the spec moved ...
    assert app.actual == Resources(cpu_millicores=100, memory_bytes=64 * Mi)  # ... the container did not


def test_the_crd_schema_rejects_bad_policies(api: client.ApiClient, crds: list[str],
                                             cluster_scoped: list[tuple[str, str]]) -> None:
    custom = client.CustomObjectsApi(api)
    cases = [
        ([{"fraction": 0.5}, {"fraction": 0.2}, {"fraction": 1}], {}, "step fractions must increase"),
        ([{"fraction": 0}, {"fraction": 0.5}], {}, "the last step must cover every pod (fraction 1)"),
        ([{"fraction": 1, "bake": "5min"}], {}, 'spec.steps[0].bake: Invalid value: "5min"'),
        ([{"fraction": 1}], {"minPodAge": "1d"}, 'spec.minPodAge: Invalid value: "1d"'),
        ([{"fraction": 1}], {"maintenanceWindows": [{"days": ["Mon"], "start": "24:00", "end": "24:00"}]},
         'spec.maintenanceWindows[0].start: Invalid value: "24:00"'),
    ]
    for i, (steps, extra, message) in enumerate(cases):
        name = f"bad-{secrets.token_hex(4)}-{i}"
        cluster_scoped.append(("ResizePolicy", name))  # in case the server wrongly accepts it
        with pytest.raises(client.ApiException) as info:
            custom.create_cluster_custom_object(*RZP, {"apiVersion": "podtailor.io/v1alpha1", "kind": "ResizePolicy",
                                                       "metadata": {"name": name},
                                                       "spec": {"steps": steps, **extra}})
        assert info.value.status == 422
        assert message in json.loads(info.value.body)["message"]


def test_a_missing_permission_names_verb_and_resource(api: client.ApiClient, namespace: str) -> None:
    core = client.CoreV1Api(api)
    core.create_namespaced_service_account(namespace, {"metadata": {"name": "reader"}})
    token = core.create_namespaced_service_account_token("reader", namespace, {
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 600}})
    config = client.Configuration(host=api.configuration.host)
    config.ssl_ca_cert = api.configuration.ssl_ca_cert
    config.api_key = {"BearerToken": f"Bearer {token.status.token}"}
    with client.ApiClient(config) as unprivileged, pytest.raises(PermanentKubeError) as info:
        ClusterReader(unprivileged).read()
    assert info.value.status == 403
    assert "needs RBAC verb 'list' on resource 'pods' (apiGroup '') cluster-wide" in str(info.value)


# -------------------------------------------------------------------------- conversion without a cluster
VERSION = ServerVersion(major=1, minor=37, git_version="v1.37.2")


def raw_pod(ns: str, name: str, owner: tuple[str, str] | None = None, cpu: str = "250m", node: str = "n1",
            **labels: str) -> dict[str, Any]:
    refs = [{"apiVersion": "apps/v1", "kind": owner[0], "name": owner[1], "uid": "u", "controller": True}] \
        if owner else []
    res = {"requests": {"cpu": cpu, "memory": "256Mi"}, "limits": {"memory": "512Mi"}}
    return {"metadata": {"namespace": ns, "name": name, "uid": f"uid-{name}", "resourceVersion": "7",
                         "generation": 1, "creationTimestamp": "2026-03-01T10:00:00Z", "labels": labels,
                         "ownerReferences": refs},
            "spec": {"nodeName": node, "containers": [{"name": "app", "resources": res}]},
            "status": {"phase": "Running", "qosClass": "Burstable", "observedGeneration": 1,
                       "conditions": [{"type": "Ready", "status": "True"}],
                       "containerStatuses": [{"name": "app", "ready": True, "restartCount": 0, "resources": res}]}}


def controlled(kind: str, ns: str, name: str, owner: tuple[str, str] | None = None,
               **spec: Any) -> dict[str, Any]:
    refs = [{"kind": owner[0], "name": owner[1], "controller": True}] if owner else []
    return {"metadata": {"namespace": ns, "name": name, "ownerReferences": refs}, "spec": spec}


def test_owner_chains_and_malformed_objects_without_a_cluster() -> None:
    raw = {
        "ReplicaSet": [controlled("ReplicaSet", "a", "web-abc", ("Deployment", "web"), replicas=3),
                       controlled("ReplicaSet", "a", "lone", replicas=1)],
        "Job": [controlled("Job", "a", "nightly-123", ("CronJob", "nightly"))],
        "CronJob": [controlled("CronJob", "a", "nightly", jobTemplate={"spec": {"parallelism": 2}})],
        "Node": [{"metadata": {"name": "n1", "labels": {"agentpool": "blue", "podtailor.io/node-pool": "x"}},
                  "status": {"allocatable": {"cpu": "4", "memory": "16Gi"}}},
                 {"metadata": {"name": "n2"}, "status": {"allocatable": {"cpu": "four"}}}],
        "Pod": [raw_pod("a", "web-abc-1", ("ReplicaSet", "web-abc")),
                raw_pod("a", "new-def-1", ("ReplicaSet", "new-def"), **{"pod-template-hash": "def"}),
                raw_pod("a", "lone-1", ("ReplicaSet", "lone")), raw_pod("a", "n-1", ("Job", "nightly-123")),
                raw_pod("a", "db-0", ("StatefulSet", "db")), raw_pod("a", "bad", cpu="1.5.0"),
                {**raw_pod("a", "done"), "status": {"phase": "Failed"}}],
        "HorizontalPodAutoscaler": [{"metadata": {"namespace": "a", "name": "h"},
                                     "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "web"}}}],
        "ResizePolicy": [{"metadata": {"name": "typo"}, "spec": {"fallback": "delete"}}],
    }
    snap = build_snapshot(raw, VERSION)
    owners = {p.name: (p.workload_kind, p.workload_name) for p in snap.pods}
    assert owners == {"web-abc-1": ("Deployment", "web"), "new-def-1": ("Deployment", "new"),
                      "lone-1": ("ReplicaSet", "lone"), "n-1": ("CronJob", "nightly"), "db-0": ("StatefulSet", "db")}
    assert snap.skipped == {"Node": 1, "Pod": 1}
    assert [n.pool for n in snap.nodes] == ["blue"]  # "agentpool" comes before podtailor.io/node-pool
    assert {p.pool for p in snap.pods} == {"blue"}
    assert snap.observations["a/done"].phase == "Failed" and "a/bad" not in snap.observations
    assert snap.hpas[0].utilization_resources == {"cpu"}  # no metrics: the HPA controller's CPU default
    assert snap.policies == () and "fallback" in snap.policy_errors[0]
    with pytest.raises(ValueError, match="fallback: 'delete'"):
        snap.policy_for("a")
    assert not build_snapshot({}, ServerVersion(major=1, minor=35, git_version="")).pod_level_resize_supported
    assert not build_snapshot({}, ServerVersion(major=1, minor=31, git_version="")).resize_subresource_supported
    assert parse_version("1", "36+", "v1.36.1-eks") == ServerVersion(major=1, minor=36, git_version="v1.36.1-eks")
    assert parse_version("", "", "v1.33.0") == ServerVersion(major=1, minor=33, git_version="v1.33.0")


def test_ten_thousand_pods_convert_quickly() -> None:
    """Not a pass/fail on time (machines differ); prints the measurement for the benchmark notes."""
    pods = [raw_pod(f"ns{i % 50}", f"web-{i}", ("ReplicaSet", f"web{i % 500}-h"), cpu=f"{100 + i % 40}m",
                    node=f"n{i % 200}") for i in range(10_000)]
    raw = {"Pod": pods, "ReplicaSet": [controlled("ReplicaSet", f"ns{j % 50}", f"web{j}-h", ("Deployment", f"web{j}"))
                                       for j in range(500)],
           "Node": [{"metadata": {"name": f"n{k}", "labels": {KARPENTER: "p"}}, "status": {}} for k in range(200)]}
    body = json.dumps({"items": pods}).encode()
    started = time.perf_counter()
    json.loads(body)
    parsed = time.perf_counter()
    snap = build_snapshot(raw, VERSION)
    done = time.perf_counter()
    print(f"\n10,000 pods: json.loads {parsed - started:.3f}s, conversion {done - parsed:.3f}s", file=sys.stderr)
    assert len(snap.pods) == 10_000 and len(snap.observations) == 10_000
    assert snap.pods[123].workload_kind == "Deployment" and snap.pods[123].pool == "p"


def test_list_errors_are_classified_and_an_absent_crd_is_an_empty_list() -> None:
    from podtailor.kube.errors import TemporaryKubeError
    from podtailor.kube.listing import Listing, list_raw

    def failing(status: int) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            raise client.ApiException(status=status, reason="boom")
        return call

    assert list_raw(Listing(group="podtailor.io", resource="resizepolicies", call=failing(404), optional=True)) == []
    with pytest.raises(PermanentKubeError, match="list verticalpodautoscalers in namespace a: 404"):
        list_raw(Listing(group="autoscaling.k8s.io", resource="verticalpodautoscalers", call=failing(404)), "a")
    with pytest.raises(TemporaryKubeError, match="list pods cluster-wide: 503"):
        list_raw(Listing(group="", resource="pods", call=failing(503)))
    with pytest.raises(TemporaryKubeError, match="the list expired while paging"):
        list_raw(Listing(group="", resource="pods", call=failing(410)))
    with pytest.raises(PermanentKubeError, match="needs RBAC verb 'list' on resource 'jobs' \\(apiGroup 'batch'\\) in "
                                                 "namespace a"):
        list_raw(Listing(group="batch", resource="jobs", call=failing(403)), "a")
