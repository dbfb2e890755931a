"""The planner: snapshot values in, a ``Plan`` out (decide every pod, then batch the actionable ones).

Owns ``plan()``, the pure entry point of the updater's core, and ``summary()`` for the ``plan`` command. It
indexes the inputs once (targets and HPAs by workload, LimitRanges by namespace, merged tightest-wins when a
namespace has several; nodes by name), computes the frozen pools and whether a maintenance window is open,
decides each pod (``decide.py``), turns what a ResourceQuota would refuse into skips (``quota.py``) and
batches the RESIZE_ONLINE and RESIZE_RESTART pods per pool (``batching.py``). FALLBACK pods are in the
decisions but in no batch: the executor's fallback path takes them. Nothing here acts, logs or reads the
clock.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

from podtailor.resize.changes import limit_ranges_by_namespace
from podtailor.resize.types import LimitRangeView
from updater.answers import ServerFeatures, features_for
from updater.policy.batching import Candidate, build_batches, frozen_pools
from updater.policy.decide import Context, WorkloadKey, decide, workload_key
from updater.policy.quota import apply_quotas
from updater.policy.types import Action, HpaView, NodeView, Plan, PodView, QuotaView, RolloutPolicy, WorkloadTarget
from updater.policy.windows import restart_allowed_now

ACTIONABLE = frozenset({Action.RESIZE_ONLINE, Action.RESIZE_RESTART})


def _index_hpas(hpas: Iterable[HpaView]) -> dict[WorkloadKey, frozenset[str]]:
    out: dict[WorkloadKey, frozenset[str]] = defaultdict(frozenset)
    for h in hpas:
        key = (h.namespace, h.workload_kind, h.workload_name)
        out[key] = out[key] | h.utilization_resources
    return dict(out)


def plan(*, pods: Iterable[PodView], targets: Iterable[WorkloadTarget], hpas: Iterable[HpaView],
         limit_ranges: Iterable[LimitRangeView], nodes: Iterable[NodeView], policy: RolloutPolicy, now_s: float,
         approvals: frozenset[WorkloadKey] = frozenset(), pod_level_resize_supported: bool = True,
         quotas: Iterable[QuotaView] = (), features: ServerFeatures | None = None) -> Plan:
    """Decide every pod, hold what the namespaces' ResourceQuotas would refuse (``quota.py``) and batch the
    resizes. ``approvals`` holds (namespace, workload kind, workload name) of workloads whose restarting
    changes are approved; ``features``: what the server's version answers (None: the newest); ``now_s`` is UTC
    epoch seconds."""
    node_list = list(nodes)
    frozen = frozen_pools(node_list, policy.unhealthy_pool_fraction)
    ctx = Context(
        policy=policy, now_s=now_s,
        targets={(t.namespace, t.workload_kind, t.workload_name): t for t in targets},
        hpa_resources=_index_hpas(hpas), limit_ranges=limit_ranges_by_namespace(limit_ranges),
        nodes={n.name: n for n in node_list}, frozen=frozen, approvals=approvals,
        pod_level_resize_supported=pod_level_resize_supported, features=features or features_for(1, 37),
        restart_window_open=restart_allowed_now(policy.maintenance_windows, now_s))
    by_key = {f"{p.namespace}/{p.name}": p for p in pods}
    decisions = apply_quotas([decide(pod, ctx)[0] for pod in by_key.values()], by_key, quotas)
    candidates = []
    for decision in decisions:
        if decision.action in ACTIONABLE:
            pod = by_key[decision.key]
            target = ctx.targets[workload_key(pod)]
            candidates.append(Candidate(
                key=decision.key, pool=pod.pool, workload=workload_key(pod), replicas=target.replicas,
                restarts=decision.action == Action.RESIZE_RESTART, priority=pod.priority, qos=pod.qos,
                created_s=pod.created_s))
    return Plan(decisions=decisions, batches=build_batches(candidates, policy), frozen_pools=frozen)


def _counts(values: Iterable[str]) -> dict[str, int]:
    return dict(sorted(Counter(values).items()))


def summary(result: Plan) -> dict[str, Any]:
    """Counts for the ``plan`` command: totals, and per pool the actions, reasons and batch sizes."""
    by_pool: dict[str, list[Any]] = defaultdict(list)
    for d in result.decisions:
        by_pool[d.pool].append(d)
    batches: dict[str, list[int]] = defaultdict(list)
    for b in result.batches:
        batches[b.pool].append(len(b.pods))
    pools: dict[str, Mapping[str, Any]] = {}
    for pool in sorted(set(by_pool) | set(result.frozen_pools)):
        items = by_pool.get(pool, [])
        pools[pool] = {"pods": len(items), "actions": _counts(d.action.value for d in items),
                       "reasons": _counts(d.reason.value for d in items), "batches": batches.get(pool, []),
                       "frozen": result.frozen_pools.get(pool)}
    return {"pods": len(result.decisions), "actions": _counts(d.action.value for d in result.decisions),
            "reasons": _counts(d.reason.value for d in result.decisions), "batches": len(result.batches),
            "frozen_pools": dict(result.frozen_pools), "pools": pools}
