"""Pods as values: one raw Pod dict in, a ``PodView`` (what the planner decides on) and a ``PodObservation``
(what verification and the canary gates read) out.

Owns reading a pod's containers, native sidecars (restartable init containers) and plain init containers
(last, marked ``init``) with their spec
requests and limits, resize policy, restart count and the resources the kubelet reports as actuated
(``status.containerStatuses[].resources``); the QoS class (``status.qosClass``, else computed as the
API server does); readiness; the resize conditions (PodResizePending reason and since when,
PodResizeInProgress and its Error message, and the cause of an Infeasible one); pod-level ``spec.resources``;
deletion; whether it is a mirror (static) pod; and what ResourceQuota scopes match on (priority class,
activeDeadlineSeconds, cross-namespace affinity). The pool and the
top-level workload are looked up through functions the reader passes in, so this module stays pure.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from podtailor.kube.fields import pod_containers
from podtailor.resize.types import ContainerView, PodRestartPolicy, QoS, ResizeRestart, resize_restart_policies
from podtailor.resources import Resources
from updater.answers import InProgressReason, PendingReason, ResizeCondition, infeasible_cause, pending_reason
from updater.kube.fields import (
    MalformedObject,
    Obj,
    condition,
    condition_true,
    integer,
    optional_resources,
    optional_timestamp_s,
    resources,
    string_map,
    timestamp_s,
)
from updater.observe import SERVING_GATE, ContainerObservation, PodObservation
from updater.policy.types import PodView

MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
OwnerOf = Callable[[str, str, list[Obj], Mapping[str, str]], tuple[str, str]]
"""(namespace, pod name, ownerReferences, labels) -> (workload kind, workload name)."""


def _statuses(status: Mapping[str, Any]) -> dict[str, Obj]:
    out = {s.get("name", ""): s for s in status.get("initContainerStatuses") or ()}
    out.update({s.get("name", ""): s for s in status.get("containerStatuses") or ()})
    return out


def _resize_policy(raw: object, where: str) -> dict[str, ResizeRestart]:
    try:
        return resize_restart_policies(raw, where)
    except ValueError as err:
        raise MalformedObject(str(err)) from err


def _container(c: Obj, sidecar: bool, st: Obj | None, where: str,
               init: bool = False) -> tuple[ContainerView, ContainerObservation]:
    res, actual = c.get("resources") or {}, (st or {}).get("resources")
    requests, limits = resources(res.get("requests"), f"{where}.requests"), resources(res.get("limits"),
                                                                                     f"{where}.limits")
    actual_requests = optional_resources(actual.get("requests") or {}, where) if actual is not None else None
    actual_limits = optional_resources(actual.get("limits") or {}, where) if actual is not None else None
    restarts = integer((st or {}).get("restartCount"), f"{where}.restartCount")
    view = ContainerView(name=str(c.get("name", "")), requests=requests, limits=limits, sidecar=sidecar, init=init,
                         resize_policy=_resize_policy(c.get("resizePolicy"), where), restart_count=restarts,
                         actual=actual_requests, actual_limits=actual_limits)
    terminated = _last_termination(st or {})
    obs = ContainerObservation(spec_requests=requests, spec_limits=limits, actual_requests=actual_requests,
                               actual_limits=actual_limits, restart_count=restarts,
                               last_termination_reason=terminated.get("reason"),
                               last_termination_s=optional_timestamp_s(terminated.get("finishedAt"), where),
                               ready=bool((st or {}).get("ready", False)),
                               container_id=str((st or {}).get("containerID") or "").partition("://")[2])
    return view, obs


def _last_termination(st: Obj) -> Obj:
    """The container's latest termination: ``state.terminated`` while it is down after an OOM kill (the kubelet
    moves it to ``lastState`` only when it restarts the container, after its back-off), else ``lastState``'s.
    Seen on a real node: between the kernel's kill and the restart the pod is already unready, and an OOM kill
    read only from ``lastState`` was reported as "pod lost readiness"."""
    now = (st.get("state") or {}).get("terminated") or {}
    if now.get("reason") == "OOMKilled":
        return dict(now)
    return dict((st.get("lastState") or {}).get("terminated") or {})


def gated(spec: Mapping[str, Any]) -> bool:
    """``spec.readinessGates`` has the updater's serving gate."""
    return any(g.get("conditionType") == SERVING_GATE for g in spec.get("readinessGates") or ())


def cross_namespace_affinity(spec: Mapping[str, Any]) -> bool:
    """Some pod affinity or anti-affinity term (required or preferred) names namespaces or has a namespace
    selector: ResourceQuota's CrossNamespacePodAffinity scope (``usesCrossNamespacePodAffinity``,
    ``pkg/quota/v1/evaluator/core/pods.go``, v1.37.2)."""
    affinity = spec.get("affinity") or {}
    for kind in ("podAffinity", "podAntiAffinity"):
        terms = affinity.get(kind) or {}
        required = list(terms.get("requiredDuringSchedulingIgnoredDuringExecution") or ())
        weighted = terms.get("preferredDuringSchedulingIgnoredDuringExecution") or ()
        preferred = [t.get("podAffinityTerm") or {} for t in weighted]
        if any(t.get("namespaces") or t.get("namespaceSelector") is not None for t in required + preferred):
            return True
    return False


def _guaranteed(requests: Resources, limits: Resources) -> bool:
    return (limits.cpu_millicores is not None and limits.memory_bytes is not None
            and requests.cpu_millicores in (None, limits.cpu_millicores)
            and requests.memory_bytes in (None, limits.memory_bytes))


def compute_qos(spec: Mapping[str, Any], where: str) -> QoS:
    """QoS as the API server computes it (pod-level resources, when set, decide alone)."""
    pod_level = spec.get("resources")
    if pod_level and (pod_level.get("requests") or pod_level.get("limits")):
        pairs = [(resources(pod_level.get("requests"), where), resources(pod_level.get("limits"), where))]
    else:
        everything = list(spec.get("initContainers") or ()) + list(spec.get("containers") or ())
        pairs = [(resources((c.get("resources") or {}).get("requests"), where),
                  resources((c.get("resources") or {}).get("limits"), where)) for c in everything]
    if all(r == Resources() and lim == Resources() for r, lim in pairs):
        return QoS.BEST_EFFORT
    return QoS.GUARANTEED if all(_guaranteed(r, lim) for r, lim in pairs) else QoS.BURSTABLE


def _qos(status: Mapping[str, Any], spec: Mapping[str, Any], where: str) -> QoS:
    try:
        return QoS(str(status.get("qosClass")))
    except ValueError:
        return compute_qos(spec, where)


def _pending(cond: Obj | None, where: str) -> PendingReason | None:
    if cond is None:
        return None
    try:
        return pending_reason(cond.get("reason"))
    except ValueError as err:
        raise MalformedObject(f"{where}: {err}") from err


def _restart_policy(raw: object, where: str) -> PodRestartPolicy:
    try:
        return PodRestartPolicy(str(raw or PodRestartPolicy.ALWAYS))
    except ValueError:
        raise MalformedObject(f"{where}.spec.restartPolicy: {raw!r} is not Always, OnFailure or Never") from None


def _resize_state(status: Mapping[str, Any], where: str) -> dict[str, Any]:
    pending = condition(status, ResizeCondition.PENDING)
    progress = condition(status, ResizeCondition.IN_PROGRESS)
    return {
        "resize_pending": _pending(pending, f"{where}.PodResizePending"),
        "resize_pending_since_s": optional_timestamp_s((pending or {}).get("lastTransitionTime"),
                                                       f"{where}.PodResizePending"),
        "resize_in_progress": progress is not None,
        "resize_error": str(progress.get("message") or "") if progress
        and progress.get("reason") == InProgressReason.ERROR
        else None,
    }


def convert_pod(obj: Obj, pool_of_node: Mapping[str, str], owner_of: OwnerOf) -> tuple[PodView | None,
                                                                                         PodObservation]:
    """Both values of one pod; the PodView is None unless the pod is Running on a node.
    Raises MalformedObject on a field that cannot be read."""
    meta, spec, status = obj.get("metadata") or {}, obj.get("spec") or {}, obj.get("status") or {}
    ns, name = str(meta.get("namespace", "")), str(meta.get("name", ""))
    where = f"pod {ns}/{name}"
    statuses = _statuses(status)
    pairs = [_container(c, sidecar, statuses.get(c.get("name", "")), f"{where} container {c.get('name')}", init)
             for c, sidecar, init in pod_containers(spec, with_init=True)]
    resize = _resize_state(status, where)
    common: dict[str, Any] = {
        "namespace": ns, "name": name, "uid": str(meta.get("uid", "")),
        "resource_version": str(meta.get("resourceVersion", "")),
        "generation": integer(meta.get("generation"), f"{where}.generation"),
        "observed_generation": integer(status.get("observedGeneration"), f"{where}.observedGeneration"),
        "ready": condition_true(status, "Ready"), "node": str(spec.get("nodeName") or ""),
        "deleting": meta.get("deletionTimestamp") is not None,
    }
    pending = condition(status, ResizeCondition.PENDING)
    pending_message = str((pending or {}).get("message") or "")
    gate = condition(status, SERVING_GATE)
    observation = PodObservation(**common, containers={v.name: o for v, o in pairs},
                                 resize_pending_message=pending_message, gated=gated(spec),
                                 serving=None if gate is None else gate.get("status") == "True",
                                 containers_ready=condition_true(status, "ContainersReady"),
                                 infeasible_cause=infeasible_cause(pending_message)
                                 if resize["resize_pending"] == PendingReason.INFEASIBLE else None,
                                 phase=str(status.get("phase", "")), **resize)
    if status.get("phase") != "Running" or not common["node"]:
        return None, observation
    kind, workload = owner_of(ns, name, list(meta.get("ownerReferences") or ()), meta.get("labels") or {})
    progress = condition(status, ResizeCondition.IN_PROGRESS)
    annotations = string_map(meta.get("annotations"), f"{where}.annotations")
    view = PodView(
        **common, **resize, pool=pool_of_node.get(common["node"], ""), workload_kind=kind, workload_name=workload,
        static=MIRROR_ANNOTATION in annotations, gated=gated(spec),
        priority_class=str(spec.get("priorityClassName") or ""),
        terminating=integer(spec.get("activeDeadlineSeconds"), f"{where}.activeDeadlineSeconds", -1) >= 0,
        cross_namespace_affinity=cross_namespace_affinity(spec),
        priority=integer(spec.get("priority"), f"{where}.priority"), qos=_qos(status, spec, where),
        created_s=timestamp_s(meta.get("creationTimestamp"), f"{where}.creationTimestamp"),
        restart_policy=_restart_policy(spec.get("restartPolicy"), where), containers=tuple(v for v, _ in pairs),
        annotations=annotations,
        labels=string_map(meta.get("labels"), f"{where}.labels"),
        pod_level=optional_resources((spec.get("resources") or {}).get("requests"), f"{where}.spec.resources"),
        pod_level_limits=optional_resources((spec.get("resources") or {}).get("limits"), f"{where}.spec.resources"),
        resize_in_progress_since_s=optional_timestamp_s((progress or {}).get("lastTransitionTime"),
                                                        f"{where}.PodResizeInProgress"),
        ready_since_s=optional_timestamp_s((condition(status, "Ready") or {}).get("lastTransitionTime"),
                                           f"{where}.Ready") if common["ready"] else None,
    )
    return view, observation
