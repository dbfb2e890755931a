"""Fallback planning (pure): which pods are replaced instead of resized, in which batches, journaled how.

Owns two decisions on top of the planner's: a pod whose in-place resize was found Infeasible in an earlier
rollout goes to the fallback instead of being tried in place again (VPA #10093 cached such verdicts in
memory and lost them on restart; ours live in the journal), and the fallback batches: per workload at most
the disruption budget at a time (at least one pod), after the pool's in-place batches, baked like its last
canary step. ``evict`` journals one entry per pod; ``template`` one per workload (its controller rolls them).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import replace

from updater.policy.types import Action, FallbackMode, Plan, PodDecision, Reason, RolloutPolicy
from updater.rollout.journal import EVICT, TEMPLATE, BatchRecord, ContainerValues, Entry, EntryState, Rollout

Workload = tuple[str, str, str]


def infeasible_uids(rollouts: Sequence[Rollout]) -> dict[str, str]:
    """Pod uid -> why its in-place resize could not be done, from every journal we still have."""
    return {e.uid: e.message or "Infeasible" for r in rollouts for e in r.entries
            if e.state == EntryState.INFEASIBLE and e.action == "resize"}


def with_history(plan: Plan, infeasible: Mapping[str, str], policy: RolloutPolicy) -> Plan:
    """Turn in-place decisions for pods known to be infeasible into fallbacks (or skips when disabled)."""
    moved: set[str] = set()
    decisions: list[PodDecision] = []
    for d in plan.decisions:
        if d.action in (Action.RESIZE_ONLINE, Action.RESIZE_RESTART) and d.uid in infeasible:
            moved.add(d.key)
            action = Action.SKIP if policy.fallback == FallbackMode.NONE else Action.FALLBACK
            d = replace(d, action=action, reason=Reason.INFEASIBLE,
                        message=f"in place was infeasible earlier ({infeasible[d.uid][:200]})"
                                + ("; fallback disabled" if action == Action.SKIP else ""))
        decisions.append(d)
    batches = tuple(b for b in (replace(b, pods=tuple(p for p in b.pods if p not in moved)) for b in plan.batches)
                    if b.pods)
    return replace(plan, decisions=tuple(decisions), batches=batches)


def _values(d: PodDecision, new: bool) -> tuple[ContainerValues, ...]:
    return tuple(ContainerValues(name=c.name, requests=c.new_requests if new else c.old_requests,
                                 limits=c.new_limits if new else c.old_limits) for c in d.changes)


def fallback_entries(decisions: Sequence[PodDecision], pool: str, policy: RolloutPolicy,
                     ready: Mapping[Workload, int], replicas: Mapping[Workload, int],
                     first_batch: int) -> tuple[list[BatchRecord], list[Entry]]:
    """Batches and entries for the pool's FALLBACK decisions, numbered from ``first_batch``."""
    mine = [d for d in decisions if d.action == Action.FALLBACK and d.pool == pool and d.changes]
    if not mine or policy.fallback == FallbackMode.NONE:
        return [], []
    bake = policy.steps[-1].bake_s if policy.steps else 0.0
    if policy.fallback == FallbackMode.TEMPLATE:
        return _template_entries(mine, first_batch, bake, ready)
    per_workload: dict[Workload, list[PodDecision]] = defaultdict(list)
    for d in mine:
        per_workload[(d.namespace, d.workload_kind, d.workload_name)].append(d)
    rounds: list[list[PodDecision]] = []
    for work, pods in sorted(per_workload.items()):
        budget = max(1, math.floor(policy.disruption_budget * replicas.get(work, 1)))
        for i in range(0, len(pods), budget):
            index = i // budget
            while len(rounds) <= index:
                rounds.append([])
            rounds[index].extend(pods[i:i + budget])
    batches, entries = [], []
    for offset, group in enumerate(rounds):
        index = first_batch + offset
        batches.append(BatchRecord(index=index, step=len(policy.steps) - 1, bake_s=bake, gates=()))
        for d in group:
            work = (d.namespace, d.workload_kind, d.workload_name)
            entries.append(Entry(namespace=d.namespace, pod=d.pod, uid=d.uid, workload_kind=d.workload_kind,
                                 workload_name=d.workload_name, batch=index, before=_values(d, False),
                                 after=_values(d, True), action=EVICT, ready_before=ready.get(work, 0),
                                 message=f"{d.reason.value}: {d.message}"[:500]))
    return batches, entries


def _template_entries(decisions: Sequence[PodDecision], first_batch: int, bake: float,
                      ready: Mapping[Workload, int]) -> tuple[list[BatchRecord], list[Entry]]:
    seen: dict[Workload, PodDecision] = {}
    for d in decisions:
        if d.workload_kind in ("Deployment", "StatefulSet", "DaemonSet"):
            seen.setdefault((d.namespace, d.workload_kind, d.workload_name), d)
    if not seen:
        return [], []
    entries = [Entry(namespace=ns, pod=f"{kind.lower()}-{name}", uid="", workload_kind=kind, workload_name=name,
                     batch=first_batch, before=_values(d, False), after=_values(d, True), action=TEMPLATE,
                     ready_before=ready.get((ns, kind, name), 0), message=f"{d.reason.value}: {d.message}"[:500])
               for (ns, kind, name), d in sorted(seen.items())]
    return [BatchRecord(index=first_batch, step=0, bake_s=bake, gates=())], entries
