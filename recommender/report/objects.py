"""Raw Kubernetes objects (plain JSON dicts) to the report's values: workloads, pods, nodes, HPAs, LimitRanges.

Owns the pure half of discovery: the label-selector match (kubectl syntax: ``k=v``, ``k==v``, ``k!=v``,
``k``, ``!k``, ``k in (a,b)``, ``k notin (a,b)``), a pod template's containers (native sidecars, regular
containers, plain init containers, with requests, limits and resizePolicy) and pod-level resources, replicas
per kind, the
top-level owner of a pod (pod -> ReplicaSet -> Deployment or Rollout, pod -> Job -> CronJob, StatefulSet and
DaemonSet directly, no owner or a Node -> the pod itself, as the Prometheus owner index keys them), node
pools (``podtailor.nodepool``, as the updater reads them) and the resources an HPA scales
on by utilization. Containers, HPAs and LimitRanges are read by ``podtailor.kube.fields`` as the updater reads
them; here an unreadable value counts as unset (the API server validated it) instead of skipping the object.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from podtailor.kube import fields
from podtailor.nodepool import node_pool
from podtailor.resize.types import NOT_REQUIRED, ResizeRestart
from podtailor.resources import CurrentResources, parse_resources
from recommender.report.types import ContainerSpec, NodeInfo, PodInfo, Role

Obj = dict[str, Any]
_SET = re.compile(r"^\s*([^\s!=]+)\s+(in|notin)\s+\(([^)]*)\)\s*$")


class SelectorError(ValueError):
    """A label selector that cannot be parsed (bad input)."""


def _split_selector(text: str) -> list[str]:
    parts, depth, start = [], 0, 0
    for i, char in enumerate(text):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p.strip() for p in parts if p.strip()]


def parse_selector(text: str) -> list[tuple[str, str, frozenset[str]]]:
    """(key, operator, values) requirements; operators: =, !=, in, notin, exists, !exists."""
    out = []
    for part in _split_selector(text):
        m = _SET.match(part)
        if m:
            out.append((m[1], m[2], frozenset(v.strip() for v in m[3].split(",") if v.strip())))
        elif "!=" in part:
            key, value = part.split("!=", 1)
            out.append((key.strip(), "!=", frozenset({value.strip()})))
        elif "=" in part:
            key, value = part.replace("==", "=", 1).split("=", 1)
            out.append((key.strip(), "=", frozenset({value.strip()})))
        elif part.startswith("!"):
            out.append((part[1:].strip(), "!exists", frozenset()))
        else:
            out.append((part, "exists", frozenset()))
        if not out[-1][0] or re.search(r"[\s()=!,]", out[-1][0]):
            raise SelectorError(f"bad label selector {text!r} near {part!r}")
    return out


def matches(requirements: list[tuple[str, str, frozenset[str]]], labels: Mapping[str, str]) -> bool:
    for key, op, values in requirements:
        present, value = key in labels, labels.get(key)
        ok = {"=": present and value in values, "in": present and value in values,
              "!=": not present or value not in values, "notin": not present or value not in values,
              "exists": present, "!exists": not present}[op]
        if not ok:
            return False
    return True


def _container(c: Obj, role: Role) -> ContainerSpec:
    res = c.get("resources") or {}
    # Lenient, as the report reads everything: a restartPolicy the API does not define is left out, which
    # forecasts no restart for that resource, as NotRequired does.
    policy = {str(p.get("resourceName")): ResizeRestart(p.get("restartPolicy", NOT_REQUIRED))
              for p in c.get("resizePolicy") or ()
              if isinstance(p, dict) and p.get("restartPolicy", NOT_REQUIRED) in set(ResizeRestart)}
    return ContainerSpec(name=str(c.get("name", "")), role=role, resize_policy=policy, current=CurrentResources(
        requests=parse_resources(res.get("requests"), where="requests", lenient=True),
        limits=parse_resources(res.get("limits"), where="limits", lenient=True)))


def containers(pod_spec: Mapping[str, Any], *, with_init: bool = True) -> tuple[ContainerSpec, ...]:
    """Native sidecars, regular containers, then (``with_init``) plain init containers; an unreadable
    quantity (the API server validated them) counts as unset."""
    return tuple(_container(c.raw, Role.SIDECAR if c.sidecar else Role.INIT if c.init else Role.CONTAINER)
                 for c in fields.pod_containers(pod_spec, with_init=with_init))


def pod_level(pod_spec: Mapping[str, Any]) -> CurrentResources | None:
    """A pod spec's pod-level ``resources`` (None: it declares neither requests nor limits); an unreadable
    quantity counts as unset."""
    res = pod_spec.get("resources") or {}
    if not isinstance(res, Mapping) or not (res.get("requests") or res.get("limits")):
        return None
    return CurrentResources(requests=parse_resources(res.get("requests"), where="requests", lenient=True),
                            limits=parse_resources(res.get("limits"), where="limits", lenient=True))


def template_spec(kind: str, obj: Obj) -> Obj:
    spec = obj.get("spec") or {}
    if kind == "Pod":
        return spec
    if kind == "CronJob":
        spec = (spec.get("jobTemplate") or {}).get("spec") or {}
    return (spec.get("template") or {}).get("spec") or {}


def replicas(kind: str, obj: Obj) -> int:
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    if kind == "DaemonSet":
        return int(status.get("desiredNumberScheduled") or 0)
    if kind == "Job":
        return int(spec.get("parallelism", 1) or 0)
    if kind == "CronJob":
        return int(((spec.get("jobTemplate") or {}).get("spec") or {}).get("parallelism", 1) or 0)
    if kind == "Pod":
        return 1
    value = spec.get("replicas", 1)
    return int(value if value is not None else 1)


def controller_of(obj: Obj) -> tuple[str, str] | None:
    """(kind, name) of the controlling owner reference (else the first one), None without owners."""
    refs = [r for r in (obj.get("metadata") or {}).get("ownerReferences") or () if isinstance(r, dict)]
    ref = next((r for r in refs if r.get("controller")), refs[0] if refs else None)
    return None if ref is None else (str(ref.get("kind", "")), str(ref.get("name", "")))


class OwnerMap:
    """Top-level workload of a pod, from the ReplicaSets and Jobs of its namespace."""

    def __init__(self, replicasets: list[Obj], jobs: list[Obj]) -> None:
        self.parents: dict[tuple[str, str, str], tuple[str, str] | None] = {}
        for kind, objs in (("ReplicaSet", replicasets), ("Job", jobs)):
            for obj in objs:
                meta = obj.get("metadata") or {}
                self.parents[(kind, str(meta.get("namespace", "")), str(meta.get("name", "")))] = controller_of(obj)

    def top(self, pod: Obj) -> tuple[str, str]:
        meta = pod.get("metadata") or {}
        ns, name = str(meta.get("namespace", "")), str(meta.get("name", ""))
        owner = controller_of(pod)
        if owner is None or owner[0] == "Node":
            return ("Pod", name)
        if owner[0] in ("ReplicaSet", "Job"):
            parent = self.parents.get((owner[0], ns, owner[1]))
            return parent if parent is not None else owner
        return owner


def pod_info(pod: Obj) -> PodInfo:
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    return PodInfo(name=str(meta.get("name", "")), node=str(spec.get("nodeName") or ""),
                   restart_policy=str(spec.get("restartPolicy") or "Always"),
                   containers=containers(spec, with_init=False))


def node_info(obj: Obj, pool_label: str | None) -> NodeInfo:
    meta = obj.get("metadata") or {}
    labels = meta.get("labels") or {}
    return NodeInfo(name=str(meta.get("name", "")), pool=str(node_pool(labels, pool_label)),
                    allocatable=parse_resources((obj.get("status") or {}).get("allocatable"), where="allocatable",
                                                lenient=True))


def hpa_target(obj: Obj) -> tuple[tuple[str, str, str], frozenset[str]] | None:
    """((namespace, kind, name) of the scale target, cpu and memory where scaled on by utilization); None
    without a target. An HPA without metrics scales on 80% CPU utilization (the controller's default)."""
    try:
        target = fields.hpa_target(obj)
    except fields.MalformedObject:
        return None
    return (target.namespace, target.kind, target.name), target.utilization & {"cpu", "memory"}
