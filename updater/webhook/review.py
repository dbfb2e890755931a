"""AdmissionReview in, AdmissionReview out: the ``/mutate`` handler's logic, failing open on anything odd.

Owns reading an ``admission.k8s.io/v1`` AdmissionReview (a pod CREATE; anything else is allowed as it is),
turning the pod's containers into values (native sidecars are the init containers with ``restartPolicy:
Always``; plain init containers only count for the QoS class), asking a ``Resolver`` (the in-memory cache) for
the pod's VPA target, deciding (``mutation.decide``) and answering with a base64 JSONPatch that replaces the
changed containers' ``resources`` (other resources, e.g. GPUs, and unchanged values are kept verbatim) and
sets the ``podtailor.io/admitted-resources`` annotation. A pod left at its own resources because the target
would exceed a ResourceQuota gets a warning and the ``podtailor.io/admission-held`` annotation (which the
updater turns into an Event: the webhook writes nothing). A boosted pod gets ``podtailor.io/startup-boost``; an
invalid startupBoost, a warning and ``podtailor.io/startup-boost-rejected`` (also an Event by the updater). A
malformed quantity (pod or VPA) gives no patch and a warning. Every exception gives ``allowed: true`` (with
the request's uid when it could be read) and the outcome ``error``: the webhook never blocks a pod.
"""

from __future__ import annotations

import base64
import copy
import json
import logging
from collections.abc import Mapping
from typing import Any, Protocol

from podtailor.kube.fields import is_sidecar, pod_containers
from podtailor.numeric import is_int
from podtailor.resize.boost import ANNOTATION as BOOST_ANNOTATION
from podtailor.resize.boost import annotation_value
from podtailor.resize.changes import RESOURCES, get
from podtailor.resize.types import ContainerChange, ContainerView
from podtailor.units import format_cpu, format_memory
from updater.kube.fields import MalformedObject, Obj, resources
from updater.kube.pods import cross_namespace_affinity, gated
from updater.observe import DRAIN_ANNOTATION, SERVING_GATE
from updater.policy.quota import BOOST_REJECTED_ANNOTATION, HELD_ANNOTATION
from updater.webhook.mutation import (
    MAX_SUMMARY_CHARS,
    AdmissionDecision,
    Outcome,
    PodResources,
    Resolution,
    decide,
    summary,
)

log = logging.getLogger("podtailor.updater.webhook")
ANNOTATION = "podtailor.io/admitted-resources"
WARNED = frozenset({Outcome.MALFORMED, Outcome.QOS_WOULD_CHANGE, Outcome.QUOTA_EXCEEDED})
"""Outcomes answered with an AdmissionReview warning (the pod is admitted as it came, and the user should know)."""
MAX_WARNING_CHARS = 250
"""The API server may truncate longer warnings (256 characters)."""


class Resolver(Protocol):
    def resolve(self, namespace: str, meta: Mapping[str, Any]) -> Resolution: ...


def _view(c: object, sidecar: bool, where: str) -> ContainerView:
    if not isinstance(c, dict) or not isinstance(c.get("name"), str):
        raise MalformedObject(f"{where}: a container without a name")
    res = c.get("resources") or {}
    if not isinstance(res, dict):
        raise MalformedObject(f"{where} container {c['name']}: resources is not a map")
    return ContainerView(name=c["name"], sidecar=sidecar,
                         requests=resources(res.get("requests"), f"{where} container {c['name']} requests"),
                         limits=resources(res.get("limits"), f"{where} container {c['name']} limits"))


def pod_resources(spec: Mapping[str, Any], where: str = "pod") -> PodResources:
    """Raises MalformedObject on a container or quantity that cannot be read."""
    inits, regular = spec.get("initContainers") or [], spec.get("containers") or []
    if not isinstance(inits, list) or not isinstance(regular, list):
        raise MalformedObject(f"{where}: containers are not lists")
    views = [(_view(c.raw, c.sidecar, where), c.init) for c in pod_containers(spec, with_init=True)]
    pod_level = spec.get("resources") or {}
    deadline = spec.get("activeDeadlineSeconds")
    return PodResources(containers=tuple(v for v, init in views if not init),
                        init_containers=tuple((v.requests, v.limits) for v, init in views if init),
                        pod_level=isinstance(pod_level, dict) and bool(pod_level.get("requests")
                                                                        or pod_level.get("limits")),
                        priority_class=str(spec.get("priorityClassName") or ""),
                        terminating=is_int(deadline) and deadline >= 0,
                        cross_namespace_affinity=cross_namespace_affinity(spec))


def _new_resources(raw: Obj, change: ContainerChange) -> Obj:
    out = copy.deepcopy(raw.get("resources") or {})
    for kind, old, new in (("requests", change.old_requests, change.new_requests),
                           ("limits", change.old_limits, change.new_limits)):
        values = dict(out.get(kind) or {})
        for name in RESOURCES:
            value = get(new, name)
            if value is not None and value != get(old, name):
                values[name] = format_cpu(value) if name == "cpu" else format_memory(value)
        if values:
            out[kind] = values
    return out


def annotation_ops(pod: Mapping[str, Any], values: Mapping[str, str]) -> list[Obj]:
    """RFC 6902 operations that set ``values`` as annotations: one ``add`` per key when the pod has annotations,
    else one ``add`` of the whole map (several such adds would each replace the last)."""
    if not values:
        return []
    meta = pod.get("metadata") or {}
    if isinstance(meta.get("annotations"), dict):
        return [{"op": "add", "path": "/metadata/annotations/" + key.replace("~", "~0").replace("/", "~1"),
                 "value": value} for key, value in values.items()]
    return [{"op": "add", "path": "/metadata/annotations", "value": dict(values)}]


def _annotations(decision: AdmissionDecision) -> dict[str, str]:
    """The annotations of a decision: what it admitted (mutated), the startup boost it gave, why a boost was
    rejected, why a quota held it."""
    out = {}
    if decision.outcome is Outcome.MUTATED:
        out[ANNOTATION] = summary(decision)
    if decision.boosts:
        out[BOOST_ANNOTATION] = annotation_value(decision.boosts)
    if decision.boost_errors:
        out[BOOST_REJECTED_ANNOTATION] = "; ".join(decision.boost_errors)[:MAX_SUMMARY_CHARS]
    if decision.outcome is Outcome.QUOTA_EXCEEDED:
        out[HELD_ANNOTATION] = decision.message[:MAX_SUMMARY_CHARS]
    return out


def json_patch(pod: Mapping[str, Any], decision: AdmissionDecision) -> list[Obj]:
    """RFC 6902 operations: ``add`` (which replaces) of each changed container's resources, and the annotations."""
    changes = {c.name: c for c in decision.changes}
    spec, ops = pod.get("spec") or {}, []
    for key, only_sidecars in (("initContainers", True), ("containers", False)):
        for i, c in enumerate(spec.get(key) or []):
            if (only_sidecars and not is_sidecar(c)) or c.get("name") not in changes:
                continue
            ops.append({"op": "add", "path": f"/spec/{key}/{i}/resources",
                        "value": _new_resources(c, changes[c["name"]])})
    return ops + annotation_ops(pod, _annotations(decision))


def response(uid: str, patch: list[Obj] | None = None, warnings: tuple[str, ...] = ()) -> Obj:
    """An AdmissionReview answer that always allows; with a base64 JSONPatch when ``patch`` is given."""
    body: Obj = {"uid": uid, "allowed": True}
    if patch:
        body["patchType"] = "JSONPatch"
        body["patch"] = base64.b64encode(json.dumps(patch, separators=(",", ":")).encode()).decode()
    if warnings:
        body["warnings"] = [w[:MAX_WARNING_CHARS] for w in warnings]
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": body}


def _is_pod_create(request: Mapping[str, Any]) -> bool:
    resource = request.get("resource") or {}
    return (request.get("operation") == "CREATE" and resource.get("resource") == "pods"
            and resource.get("group", "") == "" and not request.get("subResource")
            and isinstance(request.get("object"), dict))


def _decide(request: Mapping[str, Any], resolver: Resolver) -> tuple[AdmissionDecision, Obj]:
    pod: Obj = request["object"]
    meta = pod.get("metadata") or {}
    namespace = str(request.get("namespace") or meta.get("namespace") or "")
    where = f"pod {namespace}/{meta.get('name') or meta.get('generateName') or '?'}"
    resolution = resolver.resolve(namespace, meta)
    if resolution.error:
        return AdmissionDecision(outcome=Outcome.MALFORMED, message=f"podtailor: {resolution.error}"), pod
    try:
        views = pod_resources(pod.get("spec") or {}, where)
    except MalformedObject as err:
        return AdmissionDecision(outcome=Outcome.MALFORMED, message=f"podtailor: {err}"), pod
    target = resolution.target_on(pod_node(pod.get("spec") or {}))
    return decide(views, target, resolution.constraints, resolution.quotas), pod


def pod_node(spec: Mapping[str, Any]) -> str | None:
    """The node a new pod is bound for: ``spec.nodeName``, else the one node a DaemonSet pod's required node
    affinity names (the DaemonSet controller's ``matchFields`` on ``metadata.name``, set by
    ``ReplaceDaemonSetPodNodeNameNodeAffinity`` in ``pkg/controller/daemon/util/daemonset_util.go``); None
    when neither says."""
    if isinstance(spec.get("nodeName"), str) and spec["nodeName"]:
        return str(spec["nodeName"])
    required = (((spec.get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution") or {})
    terms = required.get("nodeSelectorTerms") if isinstance(required, Mapping) else None
    for term in terms if isinstance(terms, list) else ():
        for field in (term.get("matchFields") or ()) if isinstance(term, Mapping) else ():
            values = field.get("values") if isinstance(field, Mapping) else None
            if (field.get("key"), field.get("operator")) == ("metadata.name", "In") and isinstance(values, list) \
                    and len(values) == 1 and isinstance(values[0], str):
                return values[0]
    return None


def gate_patch(pod: Mapping[str, Any]) -> list[Obj]:
    """For a pod whose template opts in (``DRAIN_ANNOTATION: "true"``), the serving readiness gate, so the
    updater can take it out of its Services' endpoints before a restarting resize; [] otherwise."""
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    if (meta.get("annotations") or {}).get(DRAIN_ANNOTATION) != "true" or gated(spec):
        return []
    gate = {"conditionType": SERVING_GATE}
    if isinstance(spec.get("readinessGates"), list):
        return [{"op": "add", "path": "/spec/readinessGates/-", "value": gate}]
    return [{"op": "add", "path": "/spec/readinessGates", "value": [gate]}]


def admit(body: bytes, resolver: Resolver) -> tuple[Obj, Outcome]:
    """The response to one AdmissionReview body and what was done; never raises."""
    uid = ""
    try:
        review = json.loads(body)
        request = review.get("request") or {}
        uid = str(request.get("uid") or "")
        if review.get("kind") != "AdmissionReview" or not uid:
            raise ValueError("not an AdmissionReview with a request uid")
        if not _is_pod_create(request):
            return response(uid), Outcome.IGNORED
        decision, pod = _decide(request, resolver)
        gate = gate_patch(pod)
        rejected = tuple(f"podtailor: startupBoost not applied: {e}" for e in decision.boost_errors)
        if rejected:
            log.warning("startup boost rejected; pod admitted unboosted",
                        extra={"namespace": request.get("namespace"), "reason": "; ".join(decision.boost_errors)})
        if decision.outcome is Outcome.MUTATED:
            return response(uid, json_patch(pod, decision) + gate, warnings=rejected), decision.outcome
        warnings = (decision.message,) if decision.outcome in WARNED else ()
        if warnings:
            log.warning("pod admitted unchanged", extra={"namespace": request.get("namespace"),
                                                         "outcome": decision.outcome.value,
                                                         "reason": decision.message})
        notes = annotation_ops(pod, _annotations(decision))
        return response(uid, notes + gate, warnings=warnings + rejected), decision.outcome
    except Exception as err:  # the one broad catch: fail open, whatever went wrong
        log.error("admission failed; pod allowed unchanged", extra={"uid": uid, "error": str(err)[:500]})
        return response(uid), Outcome.ERROR
