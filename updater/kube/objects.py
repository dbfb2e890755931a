"""Nodes, VPAs, HPAs and LimitRanges as the planner's values: one raw API dict in, one frozen value out.

Owns the conversions the snapshot needs besides pods: a Node into ``NodeView`` (pool by ``podtailor.nodepool``,
Ready and MemoryPressure from its conditions, allocatable, cordoned); a VerticalPodAutoscaler into
``WorkloadTarget`` (``status.recommendation.containerRecommendations`` target and bounds joined with
``spec.resourcePolicy.containerPolicies``, the "*" policy as default; stale when our recommender's
``Stale`` condition is True); an autoscaling/v2 HPA into ``HpaView`` (the base's ``hpa_target`` with the
workload identity the planner keys on); and a namespace's LimitRanges merged into one ``LimitRangeView``
(the base's ``limit_range``; Container type only, the tightest min, max and limit/request ratio win).
Malformed content raises ``MalformedObject``; the reader skips that object.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from podtailor.kube.fields import hpa_target
from podtailor.nodepool import node_pool
from podtailor.resize.boost import BoostError, CpuBoost, parse_boost
from podtailor.resize.changes import limit_ranges_by_namespace
from podtailor.resize.types import ContainerTarget, LimitRangeView
from updater.kube.fields import MalformedObject, Obj, condition_true, resources, string_map
from updater.policy.types import HpaView, NodeView, WorkloadTarget

UPDATE_MODES = frozenset({"Off", "Initial", "Recreate", "InPlaceOrRecreate", "InPlace", "Auto"})


def convert_node(obj: Obj, pool_label: str | None) -> NodeView:
    meta, status = obj.get("metadata") or {}, obj.get("status") or {}
    name = str(meta.get("name", ""))
    return NodeView(name=name, pool=node_pool(string_map(meta.get("labels"), f"node {name} labels"), pool_label),
                    ready=condition_true(status, "Ready"), memory_pressure=condition_true(status, "MemoryPressure"),
                    allocatable=resources(status.get("allocatable"), f"node {name} allocatable"),
                    unschedulable=bool((obj.get("spec") or {}).get("unschedulable", False)))


# ------------------------------------------------------------------------------------------------ VPAs
def _policies(spec: Mapping[str, Any], where: str) -> dict[str, Obj]:
    raw = (spec.get("resourcePolicy") or {}).get("containerPolicies") or []
    if not isinstance(raw, list) or not all(isinstance(p, dict) and isinstance(p.get("containerName"), str)
                                            for p in raw):
        raise MalformedObject(f"{where}: containerPolicies need a containerName each")
    return {p["containerName"]: p for p in raw}


def _boost(spec: Mapping[str, Any], policy: Obj, where: str) -> tuple[CpuBoost | None, str]:
    """The container's CPU startup boost: its policy's ``startupBoost`` when it has one, else the VPA's (VPA's
    ``getContainerStartupBoostPolicy``, ``pkg/admission-controller/resource/pod/patch/resource_updates.go``,
    v1.8.1). An invalid one is (None, why): the VPA stays usable, its pods are admitted unboosted."""
    raw, field = (policy["startupBoost"], "containerPolicy.startupBoost") if policy.get("startupBoost") is not None \
        else (spec.get("startupBoost"), "spec.startupBoost")
    try:
        return parse_boost(raw, f"{where} {field}"), ""
    except BoostError as err:
        return None, str(err)[:300]


def _container_target(rec: Obj, policy: Obj, where: str,
                      boost: tuple[CpuBoost | None, str] = (None, "")) -> ContainerTarget:
    target = resources(rec.get("target"), f"{where}.target")
    controlled = policy.get("controlledResources", ["cpu", "memory"])
    if not isinstance(controlled, list) or not set(controlled) <= {"cpu", "memory"}:
        raise MalformedObject(f"{where}: controlledResources {controlled!r} may hold only cpu and memory")
    values = policy.get("controlledValues", "RequestsAndLimits")
    if values not in ("RequestsAndLimits", "RequestsOnly"):
        raise MalformedObject(f"{where}: controlledValues {values!r} is not RequestsAndLimits or RequestsOnly")
    return ContainerTarget(
        name=str(rec["containerName"]), target=target,
        lower_bound=resources(rec["lowerBound"], f"{where}.lowerBound") if "lowerBound" in rec else target,
        upper_bound=resources(rec["upperBound"], f"{where}.upperBound") if "upperBound" in rec else target,
        controlled_resources=frozenset(controlled), controlled_values=str(values),
        min_allowed=resources(policy.get("minAllowed"), f"{where}.minAllowed"),
        max_allowed=resources(policy.get("maxAllowed"), f"{where}.maxAllowed"), mode_off=policy.get("mode") == "Off",
        startup_boost=boost[0], boost_error=boost[1])


def convert_vpa(obj: Obj, replicas: int) -> WorkloadTarget:
    meta, spec, status = obj.get("metadata") or {}, obj.get("spec") or {}, obj.get("status") or {}
    where = f"VPA {meta.get('namespace')}/{meta.get('name')}"
    ref = spec.get("targetRef") or {}
    if not isinstance(ref.get("kind"), str) or not isinstance(ref.get("name"), str):
        raise MalformedObject(f"{where}: spec.targetRef needs kind and name")
    mode = (spec.get("updatePolicy") or {}).get("updateMode", "Recreate")
    if mode not in UPDATE_MODES:
        raise MalformedObject(f"{where}: updateMode {mode!r} is not a VPA update mode")
    policies = _policies(spec, where)
    containers = {}
    for rec in (status.get("recommendation") or {}).get("containerRecommendations") or ():
        name = rec.get("containerName") if isinstance(rec, dict) else None
        if not isinstance(name, str):
            raise MalformedObject(f"{where}: a container recommendation without containerName")
        policy = policies.get(name) or policies.get("*") or {}
        containers[name] = _container_target(rec, policy, f"{where} container {name}",
                                             _boost(spec, policy, f"{where} container {name}"))
    return WorkloadTarget(namespace=str(meta.get("namespace", "")), workload_kind=ref["kind"],
                          workload_name=ref["name"], vpa_name=str(meta.get("name", "")), update_mode=str(mode),
                          containers=containers, stale=condition_true(status, "Stale"), replicas=replicas)


def vpa_target_key(obj: Obj) -> tuple[str, str, str]:
    """(namespace, kind, name) of the VPA's target workload ("" parts when absent)."""
    ref = (obj.get("spec") or {}).get("targetRef") or {}
    return (str((obj.get("metadata") or {}).get("namespace", "")), str(ref.get("kind", "")),
            str(ref.get("name", "")))


# ------------------------------------------------------------------------------------ HPAs, LimitRanges
def convert_hpa(obj: Obj) -> HpaView:
    target = hpa_target(obj)
    return HpaView(namespace=target.namespace, workload_kind=target.kind, workload_name=target.name,
                   utilization_resources=target.utilization)


def merge_by_namespace(views: Iterable[LimitRangeView]) -> tuple[LimitRangeView, ...]:
    """One view per namespace that has some Container limit, sorted by namespace."""
    empty = LimitRangeView(namespace="")
    return tuple(v for _, v in sorted(limit_ranges_by_namespace(views).items())
                 if (v.min, v.max, v.max_limit_request_ratio_cpu, v.max_limit_request_ratio_memory)
                 != (empty.min, empty.max, None, None))


__all__ = ["convert_hpa", "convert_node", "convert_vpa", "merge_by_namespace"]
