"""Nodes, VPAs, HPAs and LimitRanges as the planner's values: one raw API dict in, one frozen value out.

Owns the conversions the snapshot needs besides pods: a Node into ``NodeView`` (pool from a label key,
Ready and MemoryPressure from its conditions, allocatable, cordoned); a VerticalPodAutoscaler into
``WorkloadTarget`` (``status.recommendation.containerRecommendations`` target and bounds joined with
``spec.resourcePolicy.containerPolicies``, the "*" policy as default; stale when our recommender's
``Stale`` condition is True); an autoscaling/v2 HPA into ``HpaView`` (the resources it scales on by
Utilization, Resource and ContainerResource metrics alike); and a namespace's LimitRanges merged into
one ``LimitRangeView`` (Container type only; the tightest min, max and limit/request ratio win).
Malformed content raises ``MalformedObject``; the reader skips that object.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from podtailor.resize.types import ContainerTarget, LimitRangeView
from podtailor.resources import Resources
from podtailor.units import QuantityError, parse_quantity
from updater.kube.fields import MalformedObject, Obj, condition_true, resources, string_map
from updater.policy.types import HpaView, NodeView, WorkloadTarget

POOL_LABEL_KEYS = (
    "karpenter.sh/nodepool", "cloud.google.com/gke-nodepool", "eks.amazonaws.com/nodegroup",
    "kubernetes.azure.com/agentpool", "agentpool", "podtailor.io/node-pool", "node.kubernetes.io/instance-type",
)
"""Tried in this order when the policy names no pool label; the instance type is the last resort."""
UPDATE_MODES = frozenset({"Off", "Initial", "Recreate", "InPlaceOrRecreate", "InPlace", "Auto"})


def node_pool(labels: Mapping[str, str], key: str | None) -> str:
    """The pool of a node: the value of ``key`` when one is given (and "" when the node lacks it), else the
    value of the first of POOL_LABEL_KEYS the node has, else ""."""
    if key:
        return labels.get(key, "")
    return next((labels[k] for k in POOL_LABEL_KEYS if labels.get(k)), "")


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


def _container_target(rec: Obj, policy: Obj, where: str) -> ContainerTarget:
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
        max_allowed=resources(policy.get("maxAllowed"), f"{where}.maxAllowed"), mode_off=policy.get("mode") == "Off")


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
        containers[name] = _container_target(rec, policy, f"{where} container {name}")
    return WorkloadTarget(namespace=str(meta.get("namespace", "")), workload_kind=ref["kind"],
                          workload_name=ref["name"], vpa_name=str(meta.get("name", "")), update_mode=str(mode),
                          containers=containers, stale=condition_true(status, "Stale"), replicas=replicas)


def vpa_target_key(obj: Obj) -> tuple[str, str, str]:
    """(namespace, kind, name) of the VPA's target workload ("" parts when absent)."""
    ref = (obj.get("spec") or {}).get("targetRef") or {}
    return (str((obj.get("metadata") or {}).get("namespace", "")), str(ref.get("kind", "")),
            str(ref.get("name", "")))


# ------------------------------------------------------------------------------------------------ HPAs
def convert_hpa(obj: Obj) -> HpaView:
    meta, spec = obj.get("metadata") or {}, obj.get("spec") or {}
    where = f"HPA {meta.get('namespace')}/{meta.get('name')}"
    ref = spec.get("scaleTargetRef") or {}
    if not isinstance(ref.get("kind"), str) or not isinstance(ref.get("name"), str):
        raise MalformedObject(f"{where}: spec.scaleTargetRef needs kind and name")
    metrics = spec.get("metrics")
    utilization: set[str] = set() if metrics else {"cpu"}  # no metrics: the controller's 80% CPU default
    for metric in metrics or ():
        source = {"Resource": "resource", "ContainerResource": "containerResource"}.get(metric.get("type", ""))
        body = (metric.get(source) or {}) if source else {}
        if (body.get("target") or {}).get("type") == "Utilization" and isinstance(body.get("name"), str):
            utilization.add(body["name"])
    return HpaView(namespace=str(meta.get("namespace", "")), workload_kind=ref["kind"], workload_name=ref["name"],
                   utilization_resources=frozenset(utilization))


# ----------------------------------------------------------------------------------------- LimitRanges
def _ratio(raw: object, where: str) -> float | None:
    if raw is None:
        return None
    try:
        return float(parse_quantity(raw))  # type: ignore[arg-type]
    except (QuantityError, TypeError) as err:
        raise MalformedObject(f"{where}: {err}") from None


def _tighter(a: int | None, b: int | None, pick: Any) -> int | None:
    return b if a is None else a if b is None else pick(a, b)


def _merge(a: Resources, b: Resources, pick: Any) -> Resources:
    return Resources(cpu_millicores=_tighter(a.cpu_millicores, b.cpu_millicores, pick),
                     memory_bytes=_tighter(a.memory_bytes, b.memory_bytes, pick))


def _ratio_min(a: float | None, b: float | None) -> float | None:
    return b if a is None else a if b is None else min(a, b)


def container_limits(obj: Obj) -> LimitRangeView:
    """The Container-type limits of one LimitRange object (several items of that type merged)."""
    meta = obj.get("metadata") or {}
    where = f"LimitRange {meta.get('namespace')}/{meta.get('name')}"
    view = LimitRangeView(namespace=str(meta.get("namespace", "")))
    for i, item in enumerate((obj.get("spec") or {}).get("limits") or ()):
        if item.get("type") != "Container":
            continue
        ratio = item.get("maxLimitRequestRatio") or {}
        view = merge_limit_ranges(view, LimitRangeView(
            namespace=view.namespace, min=resources(item.get("min"), f"{where} limits[{i}].min"),
            max=resources(item.get("max"), f"{where} limits[{i}].max"),
            max_limit_request_ratio_cpu=_ratio(ratio.get("cpu"), f"{where} limits[{i}].maxLimitRequestRatio.cpu"),
            max_limit_request_ratio_memory=_ratio(ratio.get("memory"),
                                                  f"{where} limits[{i}].maxLimitRequestRatio.memory")))
    return view


def merge_limit_ranges(a: LimitRangeView, b: LimitRangeView) -> LimitRangeView:
    """The tightest of both: the higher min, the lower max, the lower ratio (unset loses to set)."""
    return LimitRangeView(namespace=a.namespace, min=_merge(a.min, b.min, max), max=_merge(a.max, b.max, min),
                          max_limit_request_ratio_cpu=_ratio_min(a.max_limit_request_ratio_cpu,
                                                                 b.max_limit_request_ratio_cpu),
                          max_limit_request_ratio_memory=_ratio_min(a.max_limit_request_ratio_memory,
                                                                    b.max_limit_request_ratio_memory))


def merge_by_namespace(views: Iterable[LimitRangeView]) -> tuple[LimitRangeView, ...]:
    merged: dict[str, LimitRangeView] = {}
    for view in views:
        merged[view.namespace] = merge_limit_ranges(merged[view.namespace], view) if view.namespace in merged \
            else view
    empty = LimitRangeView(namespace="")
    return tuple(v for _, v in sorted(merged.items())
                 if (v.min, v.max, v.max_limit_request_ratio_cpu, v.max_limit_request_ratio_memory)
                 != (empty.min, empty.max, None, None))


__all__ = ["POOL_LABEL_KEYS", "container_limits", "convert_hpa", "convert_node", "convert_vpa",
           "merge_by_namespace", "node_pool"]
