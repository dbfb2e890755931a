"""The recommender's port to the API server: VPAs, their target workloads, status writes, checkpoints.

Owns every call the recommender makes to Kubernetes. ``KubeAdapter`` lists VPA objects (parsed once, as
``recommender.kube.served`` values), resolves a VPA's
``targetRef`` (Deployment, StatefulSet, DaemonSet, ReplicaSet, Job, CronJob) to the containers of its pod
template (plain init containers included, marked) with their current requests and limits, writes ``status``
through the status subresource with
the object's resourceVersion (re-reading and rebuilding on 409), and stores one ``RecommenderCheckpoint``
per VPA, owned by it; for a DaemonSet, its pods' node pools and the per-pool annotation
(``podtailor.poolrecs``), written by a metadata merge patch. Failures become ``KubeError``s (``errors.py``);
a missing object is ``None``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kubernetes import client

from podtailor.kube.errors import KubeError, TemporaryKubeError, classify, is_not_found
from podtailor.kube.fields import pod_containers
from podtailor.nodepool import node_pool
from podtailor.poolrecs import ANNOTATION
from podtailor.resources import CurrentResources, parse_resources
from podtailor.vpa import GROUP, PLURAL, VERSION, TargetRef
from recommender.kube.checkpoint import owned_by
from recommender.kube.served import UnparsableVpa, VpaIdentity, VpaSpec, read_vpa
from recommender.kube.vpa_status import StatusBuilder

CHECKPOINT_GROUP, CHECKPOINT_VERSION, CHECKPOINT_PLURAL = "podtailor.io", "v1alpha1", "recommendercheckpoints"
Obj = dict[str, Any]


@dataclass(frozen=True, slots=True, kw_only=True)
class ContainerTemplate:
    name: str
    current: CurrentResources
    sidecar: bool = False
    init: bool = False
    """A plain (non-sidecar) init container: recommended from its own history, outside the pod's floor share."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Workload:
    namespace: str
    kind: str
    name: str
    containers: tuple[ContainerTemplate, ...]


def containers_of(pod_spec: Mapping[str, Any]) -> tuple[ContainerTemplate, ...]:
    """Native sidecars (restartable init containers), regular containers, then plain init containers of a pod
    spec; an unreadable quantity (the API server validated them) counts as unset, never as zero."""
    out = []
    for c, sidecar, init in pod_containers(pod_spec, with_init=True):
        res = c.get("resources") or {}
        out.append(ContainerTemplate(name=c["name"], sidecar=sidecar, init=init, current=CurrentResources(
            requests=parse_resources(res.get("requests"), where="requests", lenient=True),
            limits=parse_resources(res.get("limits"), where="limits", lenient=True))))
    return tuple(out)


def _pod_spec(kind: str, obj: Obj) -> Obj:
    spec = obj.get("spec") or {}
    if kind == "CronJob":
        spec = ((spec.get("jobTemplate") or {}).get("spec")) or {}
    return ((spec.get("template") or {}).get("spec")) or {}


class KubeAdapter:
    """Everything the recommender reads from and writes to the API server."""

    def __init__(self, api_client: client.ApiClient) -> None:
        self.custom: Any = client.CustomObjectsApi(api_client)
        self.core: Any = client.CoreV1Api(api_client)
        self.api_client = api_client
        self.readers: dict[str, Callable[[str, str], Any]] = {
            "Deployment": client.AppsV1Api(api_client).read_namespaced_deployment,
            "StatefulSet": client.AppsV1Api(api_client).read_namespaced_stateful_set,
            "DaemonSet": client.AppsV1Api(api_client).read_namespaced_daemon_set,
            "ReplicaSet": client.AppsV1Api(api_client).read_namespaced_replica_set,
            "Job": client.BatchV1Api(api_client).read_namespaced_job,
            "CronJob": client.BatchV1Api(api_client).read_namespaced_cron_job,
        }

    def _call(self, action: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except Exception as err:
            if is_not_found(err):
                raise
            raise classify(err, action) from err

    def list_vpas(self, namespaces: Sequence[str] = ()) -> list[VpaSpec | UnparsableVpa]:
        """The VPAs, each parsed once (``recommender.kube.served.read_vpa``)."""
        return [read_vpa(obj) for obj in self._list_vpa_objects(namespaces)]

    def _list_vpa_objects(self, namespaces: Sequence[str]) -> list[Obj]:
        if not namespaces:
            body = self._call("list VPAs", self.custom.list_cluster_custom_object, GROUP, VERSION, PLURAL)
            return list(body["items"])
        items: list[Obj] = []
        for ns in namespaces:
            body = self._call(f"list VPAs in {ns}", self.custom.list_namespaced_custom_object, GROUP, VERSION, ns,
                              PLURAL)
            items.extend(body["items"])
        return items

    def workload(self, namespace: str, ref: TargetRef) -> Workload | None:
        reader = self.readers.get(ref.kind)
        if reader is None:
            return None
        try:
            resp = self._call(f"read {ref.kind} {namespace}/{ref.name}", reader, ref.name, namespace,
                              _preload_content=False)
        except client.ApiException as err:
            if is_not_found(err):
                return None
            raise
        obj = json.loads(resp.data)
        return Workload(namespace=namespace, kind=ref.kind, name=ref.name, containers=containers_of(
            _pod_spec(ref.kind, obj)))

    def update_vpa_status(self, vpa: VpaIdentity, build: StatusBuilder, attempts: int = 4) -> bool:
        """Read the VPA, let ``build(current_status)`` return the new status (None: no change), write it with
        the read resourceVersion; on 409 read again and rebuild. Returns whether anything was written."""
        for _ in range(attempts):
            try:
                obj = self.custom.get_namespaced_custom_object(GROUP, VERSION, vpa.namespace, PLURAL, vpa.name)
            except Exception as err:
                if is_not_found(err):
                    return False  # the VPA was deleted meanwhile: nothing to write
                raise classify(err, f"read VPA {vpa.namespace}/{vpa.name}") from err
            if obj["metadata"].get("uid") != vpa.uid:
                return False  # deleted and recreated: the next pass serves the new object
            status = build(dict(obj.get("status") or {}))
            if status is None:
                return False
            obj["status"] = status
            try:
                self.custom.replace_namespaced_custom_object_status(GROUP, VERSION, vpa.namespace, PLURAL,
                                                                    vpa.name, obj)
                return True
            except Exception as err:
                if isinstance(err, client.ApiException) and err.status == 409:
                    continue
                if is_not_found(err):
                    return False
                raise classify(err, f"write VPA status {vpa.namespace}/{vpa.name}") from err
        raise TemporaryKubeError(f"write VPA status {vpa.namespace}/{vpa.name}: still conflicting after "
                                 f"{attempts} attempts", status=409)

    def load_checkpoint(self, vpa: VpaIdentity) -> Obj | None:
        try:
            obj: Obj = self.custom.get_namespaced_custom_object(CHECKPOINT_GROUP, CHECKPOINT_VERSION, vpa.namespace,
                                                                CHECKPOINT_PLURAL, vpa.name)
        except Exception as err:
            if is_not_found(err):
                return None
            raise classify(err, f"read checkpoint {vpa.namespace}/{vpa.name}") from err
        if not owned_by(obj, vpa.uid):
            return None  # left over from an earlier VPA of the same name
        return obj

    def save_checkpoint(self, vpa: VpaIdentity, spec: Mapping[str, object]) -> None:
        owners = [{"apiVersion": f"{GROUP}/{VERSION}", "kind": "VerticalPodAutoscaler", "name": vpa.name,
                   "uid": vpa.uid}]
        body = {"apiVersion": f"{CHECKPOINT_GROUP}/{CHECKPOINT_VERSION}", "kind": "RecommenderCheckpoint",
                "metadata": {"name": vpa.name, "namespace": vpa.namespace, "ownerReferences": owners},
                "spec": spec}
        action = f"write checkpoint {vpa.namespace}/{vpa.name}"
        try:
            self.custom.create_namespaced_custom_object(CHECKPOINT_GROUP, CHECKPOINT_VERSION, vpa.namespace,
                                                        CHECKPOINT_PLURAL, body)
            return
        except Exception as err:
            if not (isinstance(err, client.ApiException) and err.status == 409):
                raise classify(err, action) from err
        try:
            self.custom.patch_namespaced_custom_object(CHECKPOINT_GROUP, CHECKPOINT_VERSION, vpa.namespace,
                                                       CHECKPOINT_PLURAL, vpa.name,
                                                       {"metadata": {"ownerReferences": owners}, "spec": spec})
        except Exception as err:
            raise classify(err, action) from err

    def pod_pools(self, namespace: str, daemonset: str, pool_label: str) -> dict[str, str]:
        """The DaemonSet's pods (by controller owner reference), each with its node's pool
        (``podtailor.nodepool.node_pool``); a pod not yet scheduled is left out."""
        pods = self._call(f"list pods in {namespace}", self.core.list_namespaced_pod, namespace,
                          _preload_content=False)
        nodes = self._call("list nodes", self.core.list_node, _preload_content=False)
        pool_of = {str(n["metadata"]["name"]): node_pool(n["metadata"].get("labels") or {}, pool_label)
                   for n in json.loads(nodes.data)["items"]}
        out = {}
        for pod in json.loads(pods.data)["items"]:
            meta, node = pod["metadata"], (pod.get("spec") or {}).get("nodeName")
            if node and any(ref.get("controller") and ref.get("kind") == "DaemonSet" and ref.get("name") == daemonset
                            for ref in meta.get("ownerReferences") or ()):
                out[str(meta["name"])] = pool_of.get(node, "")
        return out

    def write_pool_annotation(self, vpa: VpaIdentity, value: str | None) -> bool:
        """Set (None: remove) the VPA's per-pool annotation by a merge patch of its metadata, with its uid as
        a precondition; nothing is sent when the VPA already carries that value."""
        action = f"write VPA {vpa.namespace}/{vpa.name} {ANNOTATION}"
        try:
            obj = self.custom.get_namespaced_custom_object(GROUP, VERSION, vpa.namespace, PLURAL, vpa.name)
            if obj["metadata"].get("uid") != vpa.uid or (obj["metadata"].get("annotations") or {}).get(
                    ANNOTATION) == value:
                return False
            self.custom.patch_namespaced_custom_object(GROUP, VERSION, vpa.namespace, PLURAL, vpa.name, {
                "metadata": {"uid": vpa.uid, "annotations": {ANNOTATION: value}}})
            return True
        except Exception as err:
            if is_not_found(err) or (isinstance(err, client.ApiException) and err.status == 409):
                return False  # gone or replaced meanwhile: the next pass serves what is there
            raise classify(err, action) from err


__all__ = ["ContainerTemplate", "KubeAdapter", "KubeError", "Workload", "containers_of"]
