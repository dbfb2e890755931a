"""Fallback planning (pure): which pods are replaced instead of resized, in which batches, journaled how.

Owns what the journals remember for the planner: a pod whose in-place resize was found Infeasible in an
earlier rollout is presented as Infeasible again, so it goes through the planner's fallback rules instead of
being tried in place again (VPA #10093 cached such verdicts in memory and lost them on restart; ours live in
the journal), a workload whose template GitOps kept reverting is left alone, and a pod whose eviction its
PodDisruptionBudget refused is held until its back-off ends, then tried again by a new rollout with its count
of refusals carried on (``budget_blocks``: a rollout does not wait for such a pod). Also the fallback batches:
per workload at most the disruption budget at a time (at least one pod), after the pool's in-place batches,
baked like its last canary step. ``evict`` journals one entry per pod; ``template`` one per workload (its
controller rolls them).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from podtailor.resize.types import Reason
from updater.answers import PendingReason
from updater.policy.types import Action, FallbackMode, Plan, PodDecision, PodView, RolloutPolicy
from updater.rollout.machine.journal import (
    EVICT,
    TEMPLATE,
    BatchRecord,
    ContainerValues,
    Entry,
    EntryAction,
    EntryState,
    Rollout,
)

Workload = tuple[str, str, str]


def infeasible_uids(rollouts: Sequence[Rollout]) -> dict[str, str]:
    """Pod uid -> why its in-place resize could not be done, from every journal we still have."""
    return {e.uid: e.message or "Infeasible" for r in rollouts for e in r.entries
            if e.state == EntryState.INFEASIBLE and e.action == EntryAction.RESIZE}


def mark_infeasible(pods: Sequence[PodView], infeasible: Mapping[str, str]) -> list[PodView]:
    """Present pods whose in-place resize a journal found Infeasible as the kubelet would: PodResizePending
    Infeasible. The planner then applies every fallback rule to them (budget, single replica, do-not-disrupt,
    InPlace mode, fallback disabled) exactly as for a verdict it sees live."""
    return [replace(p, resize_pending=PendingReason.INFEASIBLE)
            if p.uid in infeasible and p.resize_pending is None else p for p in pods]


def reverted_templates(rollouts: Sequence[Rollout]) -> set[Workload]:
    """Workloads whose template another field manager put back MAX_TEMPLATE_REVERTS times: left alone."""
    from updater.rollout.machine.lifecycle import MAX_TEMPLATE_REVERTS

    return {e.workload for r in rollouts for e in r.entries
            if e.action == TEMPLATE and e.state == EntryState.SKIPPED and e.attempts >= MAX_TEMPLATE_REVERTS}


def without_reverted(plan: Plan, reverted: set[Workload], policy: RolloutPolicy) -> Plan:
    """Template fallbacks for workloads whose owner (GitOps) kept reverting us become skips: never fight."""
    if policy.fallback != FallbackMode.TEMPLATE or not reverted:
        return plan
    decisions = tuple(
        replace(d, action=Action.SKIP, reason=Reason.TEMPLATE_REVERTED,
                message="its template was reverted by another field manager: not patched again until that stops "
                        "(delete the old ResizeRollout to try again)")
        if d.action == Action.FALLBACK and (d.namespace, d.workload_kind, d.workload_name) in reverted else d
        for d in plan.decisions)
    return replace(plan, decisions=decisions)


@dataclass(frozen=True, slots=True, kw_only=True)
class BudgetBlock:
    """A pod's last refusal by its PodDisruptionBudget, as a journal remembers it (a Blocked eviction)."""

    refusals: int
    """Refusals so far: the next back-off doubles from here."""
    not_before_s: float
    """Not tried again before this (the back-off's end)."""


def budget_blocks(rollouts: Sequence[Rollout]) -> dict[str, BudgetBlock]:
    """Pod uid -> its last refusal by a PodDisruptionBudget in any journal we still have (the Blocked eviction
    with the most refusals: a new rollout's entry starts from the count of the last)."""
    out: dict[str, BudgetBlock] = {}
    for e in (e for r in rollouts for e in r.entries if e.action == EVICT and e.state == EntryState.BLOCKED):
        block = BudgetBlock(refusals=e.attempts, not_before_s=e.not_before_s or 0.0)
        known = out.get(e.uid)
        if known is None or (block.refusals, block.not_before_s) > (known.refusals, known.not_before_s):
            out[e.uid] = block
    return out


def held_by_budget(plan: Plan, blocks: Mapping[str, BudgetBlock], now_s: float) -> Plan:
    """Fallbacks of pods whose eviction their PodDisruptionBudget refused become skips (reason
    ``disruption-budget``, held FALLBACK) until their back-off ends: the pod stays at its size, and no rollout is
    started for it alone before then. After that the fallback is planned again (``fallback_entries`` carries the
    refusal count on, so the back-off keeps doubling)."""
    def held(d: PodDecision) -> bool:
        block = blocks.get(d.uid)
        return d.action == Action.FALLBACK and block is not None and now_s < block.not_before_s

    if not any(held(d) for d in plan.decisions):
        return plan
    decisions = tuple(
        replace(d, action=Action.SKIP, reason=Reason.DISRUPTION_BUDGET, held=Action.FALLBACK,
                message=f"its eviction was refused by its PodDisruptionBudget ({blocks[d.uid].refusals} refusals so "
                        f"far): tried again in {blocks[d.uid].not_before_s - now_s:.0f}s, left at its current size "
                        "until then")
        if held(d) else d for d in plan.decisions)
    return replace(plan, decisions=decisions)


def _values(d: PodDecision, new: bool) -> tuple[ContainerValues, ...]:
    return tuple(ContainerValues(name=c.name, requests=c.new_requests if new else c.old_requests,
                                 limits=c.new_limits if new else c.old_limits) for c in d.changes)


def fallback_entries(decisions: Sequence[PodDecision], pool: str, policy: RolloutPolicy,
                     ready: Mapping[Workload, int], replicas: Mapping[Workload, int],
                     first_batch: int, refusals: Mapping[str, int] | None = None,
                     ) -> tuple[list[BatchRecord], list[Entry]]:
    """Batches and entries for the pool's FALLBACK decisions, numbered from ``first_batch``. ``refusals``: pod uid
    -> refusals by its PodDisruptionBudget so far (``budget_blocks``), where each eviction's back-off starts."""
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
                                 attempts=(refusals or {}).get(d.uid, 0),
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
