"""The updater's writes: ResizeRollout objects (the journal), pod resizes, and Events.

Owns every write the updater makes to the API server. ``RolloutStore`` creates rollouts and saves their status
with the read resourceVersion (a 409 means another writer moved first: the caller re-reads next pass).
``PodResizer`` patches ``pods/resize`` with the pod's uid and resourceVersion as preconditions and only the
containers that change; a 403 is raised as ``Refused`` with its kind (exceeded quota, above the node's
allocatable), so the state machine acts on the kind and never on the text; ``Evictor`` types a
PodDisruptionBudget's refusal the same way. ``EventRecorder`` writes core Events and never fails the caller.
"""

from __future__ import annotations

import builtins
import datetime as dt
import json
import logging
import re
from collections.abc import Sequence
from typing import Any

from kubernetes import client

from podtailor.kube import events
from podtailor.kube.errors import KubeError, classify, is_not_found
from podtailor.kube.listing import REQUEST_TIMEOUT_S, Listing
from podtailor.resources import Resources, parse_resources, quantities
from updater.kube.informer import Informer, resource_version
from updater.kube.refusals import write_error
from updater.rollout.machine.journal import ContainerValues, Rollout, from_object, to_status

GROUP, VERSION, PLURAL = "podtailor.io", "v1alpha1", "resizerollouts"
log = logging.getLogger("podtailor.updater")


class Conflict(Exception):
    """The object changed since it was read (409): re-read and re-decide."""


def rollout_name(policy: str, pool: str, now_s: float) -> str:
    stamp = dt.datetime.fromtimestamp(now_s, dt.UTC).strftime("%Y%m%d-%H%M%S")
    base = re.sub(r"[^a-z0-9.-]+", "-", f"{policy}-{pool or 'no-pool'}".lower()).strip("-.")[:200]
    return f"{base}-{stamp}"


class RolloutStore:
    """The journal's reads and writes. Lists on every ``list`` unless ``start_watching`` was called: then the
    rollouts come from a watch-fed cache while it is current (our own writes are put in it at once), and each
    object is converted once per resourceVersion."""

    def __init__(self, api_client: client.ApiClient) -> None:
        self.api: Any = client.CustomObjectsApi(api_client)
        self.informer: Informer | None = None
        self._converted: dict[str, tuple[str, Rollout]] = {}

    def start_watching(self, watch_client: client.ApiClient | None = None) -> None:
        api: Any = self.api if watch_client is None else client.CustomObjectsApi(watch_client)
        listing = Listing(group=GROUP, resource=PLURAL, namespaced=False,
                          call=lambda *_, **kw: api.list_cluster_custom_object(GROUP, VERSION, PLURAL, **kw))
        self.informer = Informer(listing).start()

    def stop_watching(self) -> None:
        if self.informer is not None:
            self.informer.stop()
            self.informer = None

    def list(self) -> list[Rollout]:
        cached = self.informer.items() if self.informer is not None else None
        if cached is not None:
            return self._convert(cached)
        try:
            body = self.api.list_cluster_custom_object(GROUP, VERSION, PLURAL, _request_timeout=REQUEST_TIMEOUT_S)
        except Exception as err:
            raise classify(err, "list ResizeRollouts") from err
        return [from_object(o) for o in body["items"]]

    def _convert(self, objs: Sequence[dict[str, Any]]) -> builtins.list[Rollout]:
        """``from_object`` of each, reusing the conversion of a (name, resourceVersion) seen before."""
        seen: dict[str, tuple[str, Rollout]] = {}
        for obj in objs:
            name, version = str(obj["metadata"]["name"]), resource_version(obj)
            known = self._converted.get(name)
            seen[name] = known if known is not None and known[0] == version and version else (version,
                                                                                              from_object(obj))
        self._converted = seen
        return [r for _, r in seen.values()]

    def get(self, name: str) -> Rollout | None:
        try:
            return from_object(self.api.get_cluster_custom_object(GROUP, VERSION, PLURAL, name,
                                                                  _request_timeout=REQUEST_TIMEOUT_S))
        except Exception as err:
            if is_not_found(err):
                return None
            raise classify(err, f"read ResizeRollout {name}") from err

    def create(self, r: Rollout) -> Rollout:
        body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "ResizeRollout",
                "metadata": {"name": r.name, "labels": {"podtailor.io/pool": re.sub(r"[^A-Za-z0-9._-]", "_",
                                                                                    r.pool)[:63].strip("._-")}},
                "spec": {"pool": r.pool, "policy": r.policy, "batchCount": len(r.batches)}}
        try:
            obj = self.api.create_cluster_custom_object(GROUP, VERSION, PLURAL, body,
                                                        _request_timeout=REQUEST_TIMEOUT_S)
        except Exception as err:
            raise classify(err, f"create ResizeRollout {r.name}") from err
        created = from_object(obj)
        if self.informer is not None:
            self.informer.observe(obj)
        return self.save(Rollout(**{**_fields(r), "resource_version": created.resource_version}))

    def save(self, r: Rollout) -> Rollout:
        """Write the status with the read resourceVersion; returns the rollout with the new version."""
        obj = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "ResizeRollout",
               "metadata": {"name": r.name, "resourceVersion": r.resource_version},
               "spec": {"pool": r.pool, "policy": r.policy, "batchCount": len(r.batches)}, "status": to_status(r)}
        try:
            out = self.api.replace_cluster_custom_object_status(GROUP, VERSION, PLURAL, r.name, obj,
                                                              _request_timeout=REQUEST_TIMEOUT_S)
        except client.ApiException as err:
            if err.status == 409:
                raise Conflict(r.name) from err
            raise classify(err, f"write ResizeRollout {r.name}") from err
        except Exception as err:
            raise classify(err, f"write ResizeRollout {r.name}") from err
        if self.informer is not None:
            self.informer.observe(out)
        return Rollout(**{**_fields(r), "resource_version": str(out["metadata"]["resourceVersion"])})

    def retry_requested(self, name: str) -> bool:
        try:
            obj = self.api.get_cluster_custom_object(GROUP, VERSION, PLURAL, name, _request_timeout=REQUEST_TIMEOUT_S)
        except Exception:
            return False
        return bool((obj.get("spec") or {}).get("retry"))


def _fields(r: Rollout) -> dict[str, Any]:
    return {f: getattr(r, f) for f in r.__dataclass_fields__}


def container_resources(v: ContainerValues) -> dict[str, Any]:
    """One container's entry in a resize or template patch: its name, requests, and limits when it has any."""
    res: dict[str, Any] = {"requests": quantities(v.requests)}
    if quantities(v.limits):
        res["limits"] = quantities(v.limits)
    return {"name": v.name, "resources": res}


def resize_body(uid: str, resource_version: str, values: Sequence[ContainerValues],
                pod_level: Resources | None = None) -> dict[str, Any]:
    """The ``pods/resize`` patch: the pod's uid and resourceVersion as preconditions, and only the containers
    that change, sidecars (restartable init containers) and plain init containers under ``initContainers``
    (strategic merge matches both lists by name); ``pod_level``: the pod-level requests, written in the same
    patch (the API server checks the result: pod-level >= the containers' aggregate), limits left alone."""
    spec: dict[str, Any] = {}
    regular = [container_resources(v) for v in values if not (v.sidecar or v.init)]
    inits = [container_resources(v) for v in values if v.sidecar or v.init]
    if regular:
        spec["containers"] = regular
    if inits:
        spec["initContainers"] = inits
    if pod_level is not None:
        spec["resources"] = {"requests": quantities(pod_level)}
    return {"metadata": {"uid": uid, "resourceVersion": resource_version}, "spec": spec}


class PodResizer:
    def __init__(self, api_client: client.ApiClient, field_manager: str = "podtailor-updater") -> None:
        self.core: Any = client.CoreV1Api(api_client)
        self.field_manager = field_manager

    def resize(self, namespace: str, pod: str, uid: str, resource_version: str,
               values: Sequence[ContainerValues], pod_level: Resources | None = None) -> int:
        """Patch pods/resize; returns the pod's new generation. Raises Conflict on 409, KubeError otherwise."""
        body = resize_body(uid, resource_version, values, pod_level)
        try:
            out = self.core.patch_namespaced_pod_resize(pod, namespace, body, field_manager=self.field_manager,
                                                        _preload_content=False, _request_timeout=REQUEST_TIMEOUT_S)
        except client.ApiException as err:
            if err.status == 409:
                raise Conflict(f"{namespace}/{pod}") from err
            raise write_error(err, f"resize pod {namespace}/{pod}") from err
        except Exception as err:
            raise classify(err, f"resize pod {namespace}/{pod}") from err
        return int(json.loads(out.data)["metadata"]["generation"])


_API_VERSIONS = {"Pod": "v1", "Deployment": "apps/v1", "StatefulSet": "apps/v1", "DaemonSet": "apps/v1",
                 "ReplicaSet": "apps/v1", "Job": "batch/v1", "CronJob": "batch/v1"}


class EventRecorder:
    """The executor's ``Recorder`` on the base Event writer (``podtailor.kube.events``, best effort): the
    involved object's apiVersion follows from its kind (a ResizeRollout, cluster-scoped, when not listed)."""

    def __init__(self, api_client: client.ApiClient, component: str = "podtailor-updater") -> None:
        self.events = events.EventRecorder(api_client, component)

    def record(self, *, namespace: str, kind: str, name: str, uid: str, reason: str, message: str,
               warning: bool = False) -> None:
        obj = events.ObjectRef(api_version=_API_VERSIONS.get(kind, f"{GROUP}/{VERSION}"), kind=kind, name=name,
                               namespace=namespace, uid=uid)
        self.events.record(obj, reason, message, warning=warning)


class ServingGateWriter:
    """Sets the serving readiness gate's condition through ``pods/status`` (strategic merge on the conditions
    list: the kubelet's own conditions are kept), with the pod's uid as precondition."""

    def __init__(self, api_client: client.ApiClient) -> None:
        self.core: Any = client.CoreV1Api(api_client)

    def set_serving(self, namespace: str, pod: str, uid: str, serving: bool) -> None:
        from updater.observe import SERVING_GATE

        now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        body = {"metadata": {"uid": uid}, "status": {"conditions": [{
            "type": SERVING_GATE, "status": "True" if serving else "False", "lastTransitionTime": now,
            "reason": "Serving" if serving else "DrainedForResize",
            "message": "" if serving else "podtailor: out of the endpoints for a restarting resize"}]}}
        try:
            self.core.patch_namespaced_pod_status(pod, namespace, body, _preload_content=False,
                                                  _request_timeout=REQUEST_TIMEOUT_S)
        except Exception as err:
            raise classify(err, f"set the serving gate of pod {namespace}/{pod}") from err


class Evictor:
    """Evictions through the Eviction API (PodDisruptionBudgets apply), with the pod's uid as precondition; a
    PodDisruptionBudget's refusal is raised as ``NotNow`` (or ``Refused``) of kind ``DISRUPTION_BUDGET``, its
    text naming the budget."""

    def __init__(self, api_client: client.ApiClient) -> None:
        self.core: Any = client.CoreV1Api(api_client)

    def evict(self, namespace: str, pod: str, uid: str) -> None:
        body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": pod, "namespace": namespace},
                "deleteOptions": {"preconditions": {"uid": uid}}}
        try:
            self.core.create_namespaced_pod_eviction(pod, namespace, body, _preload_content=False,
                                                  _request_timeout=REQUEST_TIMEOUT_S)
        except client.ApiException as err:
            if err.status == 404:
                return  # already gone: the outcome we wanted
            raise write_error(err, f"evict pod {namespace}/{pod}") from err  # a PDB's refusal, typed
        except Exception as err:
            raise classify(err, f"evict pod {namespace}/{pod}") from err


_TEMPLATE_KINDS = {"Deployment": "deployment", "StatefulSet": "stateful_set", "DaemonSet": "daemon_set"}


class TemplatePatcher:
    """Reads and patches the pod template of Deployments, StatefulSets and DaemonSets (own field manager)."""

    def __init__(self, api_client: client.ApiClient, field_manager: str = "podtailor-updater") -> None:
        self.apps: Any = client.AppsV1Api(api_client)
        self.field_manager = field_manager

    def read(self, namespace: str, kind: str, name: str,
             containers: Sequence[str]) -> tuple[ContainerValues, ...] | None:
        try:
            resp = getattr(self.apps, f"read_namespaced_{_TEMPLATE_KINDS[kind]}")(
                name, namespace, _preload_content=False, _request_timeout=REQUEST_TIMEOUT_S)
        except client.ApiException as err:
            if err.status == 404:
                return None
            raise classify(err, f"read {kind} {namespace}/{name}") from err
        spec = json.loads(resp.data)["spec"]["template"]["spec"]
        by_name = {c["name"]: c for c in spec.get("containers") or []}

        out = []
        for n in containers:
            c = by_name.get(n)
            if c is None:
                return None
            r = c.get("resources") or {}
            where = f"{kind} {namespace}/{name} container {n}"
            out.append(ContainerValues(name=n, requests=parse_resources(r.get("requests"), where=f"{where} requests"),
                                       limits=parse_resources(r.get("limits"), where=f"{where} limits")))
        return tuple(out)

    def patch(self, namespace: str, kind: str, name: str, values: Sequence[ContainerValues]) -> None:
        body = {"spec": {"template": {"spec": {"containers": [container_resources(v) for v in values]}}}}
        try:
            getattr(self.apps, f"patch_namespaced_{_TEMPLATE_KINDS[kind]}")(
                name, namespace, body, field_manager=self.field_manager, _preload_content=False,
                _request_timeout=REQUEST_TIMEOUT_S)
        except Exception as err:
            raise classify(err, f"patch {kind} {namespace}/{name} template") from err


__all__ = ["Conflict", "EventRecorder", "Evictor", "KubeError", "PodResizer", "RolloutStore", "ServingGateWriter",
           "TemplatePatcher", "container_resources", "resize_body", "rollout_name"]
