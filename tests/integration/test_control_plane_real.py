"""The local control plane is real: controllers, scheduler and API validation do their own work.

Each test would fail against a fake: the controller manager must create ReplicaSets and Pods, the
scheduler must bind, and the API server must apply its own resize validation (messages from
``ValidatePodResize`` in kube-apiserver 1.37). The kubelet's part (status writes) is played by hand here,
in the smallest form the API server needs; the node simulator does it properly.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from tests.harness.cluster import ClusterState
from tests.waiting import eventually

pytestmark = pytest.mark.cluster


def _container(requests: dict[str, str], limits: dict[str, str]) -> dict[str, Any]:
    return {"name": "app", "image": "registry.invalid/app:1", "resources": {"requests": requests, "limits": limits}}


def _pod(name: str, node: str | None, requests: dict[str, str], limits: dict[str, str]) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [_container(requests, limits)]}
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def _mark_running(core: client.CoreV1Api, ns: str, name: str, *, with_resources: bool) -> None:
    """Write the status a kubelet writes for a started container (optionally without ``resources``)."""
    pod = core.read_namespaced_pod(name, ns)
    res = pod.spec.containers[0].resources
    status: dict[str, Any] = {
        "name": "app", "image": "registry.invalid/app:1", "imageID": "registry.invalid/app@sha256:0",
        "containerID": "sim://app", "ready": True, "started": True, "restartCount": 0,
        "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}},
    }
    if with_resources:
        status["resources"] = {"requests": res.requests, "limits": res.limits}
        status["allocatedResources"] = res.requests
    body = {"status": {"phase": "Running", "containerStatuses": [status]}}
    core.patch_namespaced_pod_status(name, ns, body)


def _resize_error(core: client.CoreV1Api, ns: str, name: str, resources: dict[str, Any]) -> tuple[int, str]:
    patch = {"spec": {"containers": [{"name": "app", "resources": resources}]}}
    with pytest.raises(client.ApiException) as info:
        core.patch_namespaced_pod_resize(name, ns, patch)
    body = json.loads(info.value.body)
    return int(info.value.status), str(body["message"])


@pytest.fixture
def node(api: client.ApiClient, namespace: str) -> Iterator[str]:
    """A Node object with capacity and a Ready condition (the part of a kubelet the scheduler needs)."""
    core = client.CoreV1Api(api)
    name = f"node-{namespace}"[:63]
    capacity = {"cpu": "4", "memory": "8Gi", "pods": "110"}
    core.create_node({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}})
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    core.patch_node_status(name, {"status": {
        "capacity": capacity, "allocatable": capacity,
        "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                        "lastHeartbeatTime": now, "lastTransitionTime": now}],
    }})
    try:
        yield name
    finally:
        core.delete_node(name)


def test_apiserver_reports_the_built_version(cluster: ClusterState) -> None:
    # The build pins the newest 1.37 patch and stamps it into the binary.
    assert cluster.version.startswith("v1.37."), cluster.version


def test_deployment_becomes_replicaset_and_pods(api: client.ApiClient, namespace: str) -> None:
    apps, core = client.AppsV1Api(api), client.CoreV1Api(api)
    labels = {"app": "web"}
    apps.create_namespaced_deployment(namespace, {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
        "spec": {"replicas": 3, "selector": {"matchLabels": labels},
                 "template": {"metadata": {"labels": labels},
                              "spec": {"containers": [_container({"cpu": "100m"}, {})]}}},
    })
    rs = eventually("a ReplicaSet owned by the Deployment",
                    lambda: apps.list_namespaced_replica_set(namespace).items)[0]
    assert rs.metadata.owner_references[0].kind == "Deployment"
    assert rs.metadata.owner_references[0].name == "web"
    pods = eventually("3 pods owned by the ReplicaSet",
                      lambda: (p := core.list_namespaced_pod(namespace).items) and len(p) == 3 and p)
    assert {p.metadata.owner_references[0].name for p in pods} == {rs.metadata.name}


def test_scheduler_binds_pod_to_the_node(api: client.ApiClient, namespace: str, node: str) -> None:
    core = client.CoreV1Api(api)
    pod = _pod("p", None, {"cpu": "500m", "memory": "256Mi"}, {})
    # Target our node only: other tests' nodes may exist in the shared cluster.
    pod["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
    core.patch_node(node, {"metadata": {"labels": {"kubernetes.io/hostname": node}}})
    core.create_namespaced_pod(namespace, pod)
    bound = eventually("the scheduler to bind the pod",
                       lambda: core.read_namespaced_pod("p", namespace).spec.node_name)
    assert bound == node
    # A pod that fits nowhere stays unbound and the scheduler says why.
    big = _pod("big", None, {"cpu": "64"}, {})
    big["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
    core.create_namespaced_pod(namespace, big)
    cond = eventually("PodScheduled=False on the oversized pod", lambda: next(
        (c for c in core.read_namespaced_pod("big", namespace).status.conditions or []
         if c.type == "PodScheduled" and c.status == "False"), None))
    assert "Insufficient cpu" in cond.message


def test_resize_of_running_container_without_status_resources_is_rejected(
    api: client.ApiClient, namespace: str, node: str
) -> None:
    core = client.CoreV1Api(api)
    core.create_namespaced_pod(namespace, _pod("old-kubelet", node, {"cpu": "100m"}, {"cpu": "200m"}))
    _mark_running(core, namespace, "old-kubelet", with_resources=False)
    code, message = _resize_error(core, namespace, "old-kubelet",
                                  {"requests": {"cpu": "150m"}, "limits": {"cpu": "200m"}})
    assert code == 422
    assert "Pod running on node without support for resize" in message


def test_resize_that_changes_qos_class_is_rejected(api: client.ApiClient, namespace: str, node: str) -> None:
    core = client.CoreV1Api(api)
    req, lim = {"cpu": "100m", "memory": "64Mi"}, {"cpu": "200m", "memory": "128Mi"}
    core.create_namespaced_pod(namespace, _pod("burstable", node, req, lim))
    _mark_running(core, namespace, "burstable", with_resources=True)
    # requests == limits for every resource would turn Burstable into Guaranteed.
    code, message = _resize_error(core, namespace, "burstable", {"requests": lim, "limits": lim})
    assert code == 422
    assert "Pod QOS Class may not change as a result of resizing" in message
    # The same server accepts a QoS-preserving resize and bumps the generation (1 -> 2).
    before = core.read_namespaced_pod("burstable", namespace)
    ok = {"spec": {"containers": [{"name": "app", "resources": {"requests": {"cpu": "150m"}}}]}}
    after = core.patch_namespaced_pod_resize("burstable", namespace, ok)
    assert after.spec.containers[0].resources.requests["cpu"] == "150m"
    assert after.metadata.generation == before.metadata.generation + 1


def test_resize_of_other_resources_is_rejected(api: client.ApiClient, namespace: str, node: str) -> None:
    core = client.CoreV1Api(api)
    req = {"cpu": "100m", "ephemeral-storage": "1Gi"}
    core.create_namespaced_pod(namespace, _pod("storage", node, req, {}))
    _mark_running(core, namespace, "storage", with_resources=True)
    code, message = _resize_error(core, namespace, "storage", {"requests": {"cpu": "100m",
                                                                            "ephemeral-storage": "2Gi"}})
    assert code == 422
    assert "only cpu and memory resources are mutable" in message
