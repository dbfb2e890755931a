"""Building journals and reading them (pure): a new rollout's batches and entries, and what of a step's progress
needs writing.

Owns turning a plan into the journal of a new ResizeRollout (``journal_for``: the plan's batches for a pool,
an entry per pod, the fallback's batches after them, capped at ``MAX_ENTRIES_PER_ROLLOUT``), and the rules the
executor writes by: ``derivable`` (progress a resume works out again from the pods, so it is not written) and
``bake_until`` (when a bake in progress ends).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace

from updater.observe import PodObservation
from updater.policy.types import Action, Plan, PodDecision, PodView, RolloutPolicy
from updater.rollout.machine.fallback import fallback_entries
from updater.rollout.machine.journal import BatchPhase, BatchRecord, ContainerValues, Entry, EntryState, Phase, Rollout

MAX_ENTRIES_PER_ROLLOUT = 1000
"""The journal is one object: about 700 bytes per entry keeps a rollout well under etcd's 1.5 MiB request
limit. A pool with more pods to change is covered by consecutive rollouts (the rest is planned next)."""


def actionable(plan: Plan) -> list[PodDecision]:
    return [d for d in plan.decisions if d.action in (Action.RESIZE_ONLINE, Action.RESIZE_RESTART)]


def cap_entries(batches: Sequence[BatchRecord], entries: Sequence[Entry],
                limit: int) -> tuple[list[BatchRecord], list[Entry]]:
    """Whole batches, in order, while the entries fit under ``limit`` (the first batch always)."""
    kept: list[BatchRecord] = []
    count = 0
    for b in batches:
        n = sum(1 for e in entries if e.batch == b.index)
        if kept and count + n > limit:
            break
        kept.append(b)
        count += n
    indexes = {b.index for b in kept}
    return kept, [e for e in entries if e.batch in indexes]


def entries_for(decisions: Sequence[PodDecision], plan: Plan, pool: str,
                obs: Mapping[str, PodObservation], pods: Mapping[str, PodView]) -> tuple[list[BatchRecord],
                                                                                        list[Entry]]:
    """The journal of a new rollout: the plan's batches for ``pool`` and an entry per pod in them."""
    by_key = {d.key: d for d in decisions}
    batches: list[BatchRecord] = []
    entries: list[Entry] = []
    for b in (b for b in plan.batches if b.pool == pool):
        index = len(batches)
        batches.append(BatchRecord(index=index, step=b.step, bake_s=b.bake_s, gates=tuple(b.gates)))
        for key in b.pods:
            d = by_key[key]
            views = pods[key].containers if key in pods else ()
            sidecars, inits = {c.name for c in views if c.sidecar}, {c.name for c in views if c.init}
            o = obs.get(key)
            restarts = {c.name: (o.containers[c.name].restart_count if o and c.name in o.containers else 0)
                        for c in d.changes}
            entries.append(Entry(
                namespace=d.namespace, pod=d.pod, uid=d.uid, workload_kind=d.workload_kind,
                workload_name=d.workload_name, batch=index,
                before=tuple(ContainerValues(name=c.name, requests=c.old_requests, limits=c.old_limits,
                                             sidecar=c.name in sidecars, init=c.name in inits) for c in d.changes),
                after=tuple(ContainerValues(name=c.name, requests=c.new_requests, limits=c.new_limits,
                                            sidecar=c.name in sidecars, init=c.name in inits) for c in d.changes),
                restarting=frozenset(c.name for c in d.changes if c.restarts), restarts_before=restarts,
                pod_level_before=d.old_pod_level if d.new_pod_level is not None else None,
                pod_level_after=d.new_pod_level,
                drain=any(c.restarts for c in d.changes) and key in pods and pods[key].gated))
    return batches, entries


def pools_to_start(plan: Plan) -> list[str]:
    """The pools the plan has something for (a batch or a fallback), in name order."""
    return sorted({b.pool for b in plan.batches} | {d.pool for d in plan.decisions if d.action == Action.FALLBACK})


def journal_for(policy: RolloutPolicy, plan: Plan, pool: str, obs: Mapping[str, PodObservation],
                pods: Mapping[str, PodView], ready: Mapping[tuple[str, str, str], int],
                replicas: Mapping[tuple[str, str, str], int],
                refusals: Mapping[str, int] | None = None) -> tuple[list[BatchRecord], list[Entry]]:
    """The batches and entries of a new rollout for ``pool``: the in-place batches, then the fallback's, as many
    whole batches as fit in one journal. ``refusals``: pod uid -> refusals of its eviction by its
    PodDisruptionBudget in earlier rollouts (its back-off goes on from there)."""
    batches, entries = entries_for(plan.decisions, plan, pool, obs, pods)
    more_batches, more = fallback_entries(plan.decisions, pool, policy, ready, replicas, len(batches), refusals)
    return cap_entries(batches + more_batches, entries + more, MAX_ENTRIES_PER_ROLLOUT)


def derivable(saved: Rollout, new: Rollout) -> bool:
    """Whether ``new`` is ahead of ``saved`` (its journal) only in progress that resuming from ``saved`` works
    out again from the pods, so it needs no write of its own: resizes answered (Applying -> Applied, resume
    finds the new spec) and pods seen Verified without the batch moving on (Applied -> Verified, verification
    looks again), with the batch Applying -> Verifying once all its entries are answered. Anything else (a
    refusal, a phase, a bake's clock, a message) is written."""
    if (saved.name, saved.phase, saved.current_batch, saved.message, saved.rollback_all, saved.resource_version,
            len(saved.entries), len(saved.batches)) != (new.name, new.phase, new.current_batch, new.message,
                                                          new.rollback_all, new.resource_version, len(new.entries),
                                                          len(new.batches)):
        return False
    for a, b in zip(saved.batches, new.batches, strict=True):
        if a != b and ((a.phase, b.phase) != (BatchPhase.APPLYING, BatchPhase.VERIFYING)
                       or replace(a, phase=b.phase) != b):
            return False
    moves = {(EntryState.APPLYING, EntryState.APPLIED), (EntryState.APPLIED, EntryState.VERIFIED)}
    for x, y in zip(saved.entries, new.entries, strict=True):
        if x == y:
            continue
        if (x.state, y.state) not in moves or replace(x, state=y.state, generation=y.generation,
                                                      applied_s=y.applied_s, message=y.message) != y:
            return False
    return True


def bake_until(r: Rollout) -> float | None:
    """When the bake of the rollout's current batch ends, while the rollout is baking it; None otherwise."""
    if r.phase != Phase.BAKING or r.current_batch >= len(r.batches):
        return None
    b = r.batches[r.current_batch]
    return b.bake_until_s if b.phase == BatchPhase.BAKING else None


def awaiting_pods(rollouts: Iterable[Rollout]) -> bool:
    """Whether a rollout waits for its pods (a batch being applied or verified, or a rollback)."""
    return any(r.phase == Phase.ROLLING_BACK or (
        r.phase in (Phase.PROGRESSING, Phase.BAKING) and r.current_batch < len(r.batches)
        and r.batches[r.current_batch].phase in (BatchPhase.APPLYING, BatchPhase.VERIFYING))
        for r in rollouts)
