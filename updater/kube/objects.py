"""Nodes, VPAs, HPAs and LimitRanges as the planner's values: one raw API dict in, one frozen value out. Owns the
conversions the snapshot needs besides pods: a Node into ``NodeView`` (pool by ``podtailor.nodepool``, Ready and
MemoryPressure from its conditions, allocatable, cordoned, the features it declares); a VerticalPodAutoscaler into
``WorkloadTarget`` (read by ``podtailor.vpa``: each container recommendation's target and bounds, a bound not
written being the target, joined with the container's policy, the "*" policy as default; stale when our
recommender's ``Stale`` condition is True; a DaemonSet's per-pool values from ``podtailor.poolrecs``, an unusable
annotation refused whole with the reason kept in ``pool_problem``; a VPA the base refuses, such as one with
minAllowed above maxAllowed, is malformed); an autoscaling/v2 HPA into ``HpaView`` (the base's ``hpa_target`` with
the workload identity the planner keys on); and a namespace's LimitRanges merged into one ``LimitRangeView`` (the
base's ``limit_range``; Container type only, the tightest min, max and limit/request ratio win). Malformed content
raises ``MalformedObject``; the reader skips that object.
"""

from __future__ import annotations

from collections.abc import Iterable

from podtailor.kube.fields import hpa_target
from podtailor.nodepool import node_pool
from podtailor.poolrecs import ANNOTATION as POOL_ANNOTATION
from podtailor.poolrecs import PoolRecsError, decode
from podtailor.resize.changes import limit_ranges_by_namespace
from podtailor.resize.types import ContainerTarget, LimitRangeView
from podtailor.vpa import RecommendedContainerResources, Vpa, VpaConfigError, parse_status, parse_vpa
from updater.kube.fields import MalformedObject, Obj, condition_true, resources, string_map
from updater.policy.types import HpaView, NodeView, WorkloadTarget

UPDATE_MODES = frozenset({"Off", "Initial", "Recreate", "InPlaceOrRecreate", "InPlace", "Auto"})


def convert_node(obj: Obj, pool_label: str | None) -> NodeView:
    meta, status = obj.get("metadata") or {}, obj.get("status") or {}
    name = str(meta.get("name", ""))
    return NodeView(name=name, pool=node_pool(string_map(meta.get("labels"), f"node {name} labels"), pool_label),
                    ready=condition_true(status, "Ready"), memory_pressure=condition_true(status, "MemoryPressure"),
                    allocatable=resources(status.get("allocatable"), f"node {name} allocatable"),
                    unschedulable=bool((obj.get("spec") or {}).get("unschedulable", False)),
                    declared_features=_declared_features(status.get("declaredFeatures"), name))


def _declared_features(raw: object, node: str) -> frozenset[str]:
    """``status.declaredFeatures`` (a list of names, absent before 1.35 and on a node that declares none)."""
    if raw is None:
        return frozenset()
    if not isinstance(raw, list) or not all(isinstance(f, str) for f in raw):
        raise MalformedObject(f"node {node} status.declaredFeatures: not a list of names")
    return frozenset(raw)


# ------------------------------------------------------------------------------------------------ VPAs
def _container_target(rec: RecommendedContainerResources, vpa: Vpa) -> ContainerTarget:
    name = rec.container_name
    policy, (boost, boost_error) = vpa.policy_for(name), vpa.boost_for(name)
    return ContainerTarget(
        name=name, target=rec.target,
        lower_bound=rec.target if rec.lower_bound is None else rec.lower_bound,
        upper_bound=rec.target if rec.upper_bound is None else rec.upper_bound,
        controlled_resources=policy.controlled_resources, controlled_values=policy.controlled_values,
        min_allowed=policy.min_allowed, max_allowed=policy.max_allowed, mode_off=policy.mode_off,
        startup_boost=boost,
        boost_error=f"VPA {vpa.namespace}/{vpa.name} container {name} {boost_error}" if boost_error else "")


def convert_vpa(obj: Obj, replicas: int) -> WorkloadTarget:
    """The VPA's spec and recommendation (``podtailor.vpa``) as the planner's target; a VPA that cannot be
    used as written (min above max, an unknown mode, an unreadable entry) raises MalformedObject."""
    try:
        vpa, status = parse_vpa(obj), parse_status(obj)
    except VpaConfigError as err:
        meta = obj.get("metadata") or {}
        raise MalformedObject(f"VPA {meta.get('namespace')}/{meta.get('name')}: {err}") from None
    pools, problem = _pool_targets(vpa)
    return WorkloadTarget(namespace=vpa.namespace, workload_kind=vpa.target.kind, workload_name=vpa.target.name,
                          vpa_name=vpa.name, update_mode=vpa.update_mode,
                          containers={n: _container_target(r, vpa) for n, r in status.recommendations.items()},
                          stale=status.stale, replicas=replicas, pools=pools, pool_problem=problem)


def _pool_targets(vpa: Vpa) -> tuple[dict[str, dict[str, ContainerTarget]], str]:
    """The per-pool annotation's targets (``podtailor.poolrecs.decode``), or none and why it was refused."""
    if POOL_ANNOTATION not in vpa.annotations:
        return {}, ""
    try:
        per_pool = decode(vpa.annotations[POOL_ANNOTATION])
        return {pool: {n: _container_target(r, vpa) for n, r in recs.items()}
                for pool, recs in per_pool.pools.items()}, ""
    except (PoolRecsError, VpaConfigError) as err:
        return {}, f"annotation {POOL_ANNOTATION} refused, the status value serves every pool: {err}"


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
