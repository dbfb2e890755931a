"""The rollout state machine (pure): journal and observed pods in, the next journal and effects out.

Owns the lifecycle of one pool's canary rollout (DESIGN.md §2 steps 4-7): start a batch by recording
intent (``Applying``) and asking for resizes; verify each pod (observedGeneration caught up, the kubelet's
status shows the new values, no resize condition left, restart counts moved only where the policy said,
Ready); bake while watching the gates (OOM kill, unexpected restart, readiness loss, extra signals such as
a throttling spike supplied by the caller); on a failed gate or a verification timeout restore every pod
the batch touched and halt the pool. A restarting resize of a pod with the serving readiness gate is
drained first (gate False, then no ready endpoint left) and put back once its containers are ready again
(gate True, then the pod Ready). Infeasible (or Deferred past its timeout) sends a pod back to its
recorded values and leaves it for the fallback, without failing the batch. An eviction refused by the pod's
PodDisruptionBudget leaves that pod Blocked without holding up its batch (the rule: ``answered``). ``advance``
never performs anything: the executor performs the returned effects and then records their outcome with
``settle``.

The effects and the journal edits every phase uses are in ``machine_effects.py``; verifying and the gates in
``machine_verify.py``; applying, baking, rollback and ``settle`` here.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import replace
from typing import assert_never

from updater.answers import Refusal
from updater.observe import PodObservation
from updater.rollout.machine.effects import (
    WAITING,
    Effect,
    Event,
    Evict,
    PatchTemplate,
    Purpose,
    Resize,
    SetServing,
    Timeouts,
    WorkloadObservation,
    Workloads,
    answered,
    resize_effect,
    same_pod,
    serving_effect,
    set_batch,
    set_entries,
    spec_matches,
)
from updater.rollout.machine.journal import (
    ACTIVE,
    EVICT,
    RESIZE,
    TEMPLATE,
    BatchPhase,
    BatchRecord,
    Entry,
    EntryState,
    Phase,
    Rollout,
)
from updater.rollout.machine.verify import (
    MAX_TEMPLATE_REVERTS,
    check_restore,
    fail,
    oom_since,
    restarts_ok,
    restores_not_accepted,
    verify_batch,
)

__all__ = ["MAX_TEMPLATE_REVERTS", "WAITING", "Effect", "Event", "Evict", "PatchTemplate", "Purpose", "Resize",
           "SetServing",
           "Timeouts", "WorkloadObservation", "Workloads", "advance", "answered", "blocked_event", "settle",
           "spec_matches"]


# ----------------------------------------------------------------------------------------------- applying
def _drain(entry: Entry, obs: PodObservation) -> tuple[Entry, list[Effect]] | None:
    """Before a gated pod's restarting resize: set its gate False, then wait until no EndpointSlice lists it
    as ready (the EndpointSlice controller follows the pod's Ready). None: drained, go on with the resize."""
    if obs.serving is not False:
        return replace(entry, state=EntryState.DRAINING, message="draining: serving gate set False"), [
            serving_effect(entry, False)]
    if obs.endpoint_ready:
        return replace(entry, state=EntryState.DRAINING, message="draining: waiting for the endpoints"), []
    return None


def _start_or_resume(entry: Entry, obs: PodObservation | None, now_s: float) -> tuple[Entry, list[Effect]]:
    """An entry in Planned, Draining or Applying: decide from the live spec whether the resize still has to be
    sent (a gated pod's restarting resize is drained first)."""
    if not same_pod(entry, obs):
        return replace(entry, state=EntryState.GONE, message="pod gone before the resize"), []
    assert obs is not None
    if entry.drain and entry.state in (EntryState.PLANNED, EntryState.DRAINING) and spec_matches(obs, entry.before):
        waiting = _drain(entry, obs)
        if waiting is not None:
            return waiting
        entry = replace(entry, message="")
    if spec_matches(obs, entry.after):
        return replace(entry, state=EntryState.APPLIED, generation=obs.generation,
                       applied_s=entry.applied_s or now_s), []
    if not spec_matches(obs, entry.before):
        return replace(entry, state=EntryState.SKIPPED, message="resources changed by someone else since planned"), []
    return replace(entry, state=EntryState.APPLYING, applied_s=now_s), [resize_effect(entry, Purpose.APPLY)]


def _start_evict(entry: Entry, obs: PodObservation | None, now_s: float) -> tuple[Entry, list[Effect]]:
    """An eviction in Planned, Blocked (retry time reached) or Evicting (resume after a crash)."""
    if obs is None or obs.uid != entry.uid:
        gone = EntryState.EVICTED if entry.state == EntryState.EVICTING else EntryState.GONE
        return replace(entry, state=gone), []
    effect = Evict(key=entry.key, namespace=entry.namespace, pod=entry.pod, uid=entry.uid)
    return replace(entry, state=EntryState.EVICTING, applied_s=entry.applied_s or now_s), [effect]


def _start_template(entry: Entry, work: WorkloadObservation | None, now_s: float) -> tuple[Entry, list[Effect]]:
    if work is None or work.template is None:
        return replace(entry, state=EntryState.GONE, message="workload gone"), []
    if work.template == entry.after:
        return replace(entry, state=EntryState.APPLIED, applied_s=entry.applied_s or now_s), []
    if work.template != entry.before and entry.attempts == 0:
        return replace(entry, state=EntryState.SKIPPED, message="template changed by someone else since planned"), []
    effect = PatchTemplate(key=entry.key, namespace=entry.namespace, kind=entry.workload_kind,
                           name=entry.workload_name, values=entry.after)
    return replace(entry, state=EntryState.APPLYING, applied_s=now_s), [effect]


def _start(entry: Entry, obs: Mapping[str, PodObservation], work: Mapping[tuple[str, str, str], WorkloadObservation],
           now_s: float) -> tuple[Entry, list[Effect]]:
    if entry.action == EVICT:
        return _start_evict(entry, obs.get(entry.key), now_s)
    if entry.action == TEMPLATE:
        return _start_template(entry, work.get(entry.workload), now_s)
    return _start_or_resume(entry, obs.get(entry.key), now_s)


def _due(entry: Entry, slots: int, now_s: float) -> bool:
    if entry.state in (EntryState.APPLYING, EntryState.DRAINING):
        return True
    if entry.state in (EntryState.EVICTING, EntryState.BLOCKED):  # Evicting: resumed, or after a "not now"
        return entry.not_before_s is None or now_s >= entry.not_before_s
    return entry.state == EntryState.PLANNED and slots > 0


def _apply_batch(r: Rollout, batch: BatchRecord, obs: Mapping[str, PodObservation], now_s: float,
                 slots: int, timeouts: Timeouts,
                 work: Mapping[tuple[str, str, str], WorkloadObservation]) -> tuple[Rollout, list[Effect]]:
    if batch.phase == BatchPhase.APPLYING and batch.deadline_s is not None and now_s > batch.deadline_s:
        waiting = [e.key for e in r.entries_of(batch.index) if e.state in WAITING]
        return fail(r, batch, f"not applied within the timeout: {', '.join(waiting[:5])}")  # never left Applying
    effects: list[Effect] = []
    changed: dict[str, Entry] = {}
    for entry in r.entries_of(batch.index):
        if _due(entry, slots, now_s):
            new, eff = _start(entry, obs, work, now_s)
            slots -= sum(1 for e in eff if not isinstance(e, Event))
            changed[entry.key] = new
            effects += eff
    r = set_entries(r, changed)
    if batch.phase == BatchPhase.PENDING:
        batch = replace(batch, phase=BatchPhase.APPLYING, started_s=now_s, deadline_s=now_s + timeouts.verify_s)
        effects.append(Event(namespace="", pod=None, reason="BatchStarted",
                             message=f"pool {r.pool}: batch {batch.index + 1}/{len(r.batches)} started"))
    if answered(r.entries_of(batch.index)):  # Blocked entries do not hold the batch
        batch = replace(batch, phase=BatchPhase.VERIFYING)
    return set_batch(r, batch), effects


# ------------------------------------------------------------------------------------------------ baking
def _bake_batch(r: Rollout, batch: BatchRecord, obs: Mapping[str, PodObservation], now_s: float,
                signals: Mapping[str, str]) -> tuple[Rollout, list[Effect]]:
    for entry in r.entries_of(batch.index):
        if entry.state != EntryState.VERIFIED or entry.action != RESIZE:
            continue
        o = obs.get(entry.key)
        if not same_pod(entry, o):
            continue  # gone after verification: nothing to watch or restore
        assert o is not None
        gates = set(batch.gates)
        failure = (("oom" in gates and oom_since(entry, o)) or ("restarts" in gates and restarts_ok(entry, o))
                   or ("ready" in gates and not o.ready and "pod lost readiness")
                   or (signals.get(entry.key) if "throttling" in gates else None))
        if failure:
            return fail(r, batch, f"{entry.key}: {failure}")
    if batch.bake_until_s is not None and now_s >= batch.bake_until_s:
        r = set_batch(r, replace(batch, phase=BatchPhase.DONE))
        nxt = batch.index + 1
        if nxt >= len(r.batches):
            return _complete(replace(r, current_batch=nxt))
        return replace(r, phase=Phase.PROGRESSING, current_batch=nxt), []
    return r, []


def _complete(r: Rollout) -> tuple[Rollout, list[Effect]]:
    """Every batch baked. Pods left unchanged (a refused resize or eviction, gone, Infeasible) are counted in the
    message and make the completion a Warning, so "Completed" never hides work that was not done. Pods Blocked
    by their PodDisruptionBudget are left to the pool's next rollout (``answered``)."""
    changed = sum(1 for e in r.entries if e.state == EntryState.VERIFIED)
    left = Counter(e.state.value for e in r.entries if e.state != EntryState.VERIFIED)
    message = f"all batches baked: {changed} of {len(r.entries)} pods changed"
    if left:
        message += "; not changed: " + ", ".join(f"{n} {state}" for state, n in sorted(left.items()))
    if EntryState.BLOCKED.value in left:
        message += " (Blocked: refused by their PodDisruptionBudget, tried again by the next rollout after a back-off)"
    return replace(r, phase=Phase.COMPLETED, message=message), [
        Event(namespace="", pod=None, reason="RolloutCompleted", warning=bool(left),
              message=f"pool {r.pool}: completed; {message}")]


# ----------------------------------------------------------------------------------------------- rollback
def _rollback(r: Rollout, obs: Mapping[str, PodObservation], now_s: float,
              timeouts: Timeouts) -> tuple[Rollout, list[Effect]]:
    """Restore every pod the failed batches (or, for ``rollback``, all batches) changed, then halt: a pod is
    Reverted only once the kubelet reports its recorded values (``check_restore``), else NotRestored."""
    failed = {b.index for b in r.batches if b.phase == BatchPhase.FAILED}
    effects: list[Effect] = []
    changed: dict[str, Entry] = {}
    for entry in r.entries:
        if not (r.rollback_all or entry.batch in failed) or entry.action != RESIZE:
            continue  # an eviction cannot be undone; a template patch is left to its owner
        if entry.state == EntryState.DRAINING:  # drained, never resized: serve again
            o = obs.get(entry.key)
            if same_pod(entry, o) and o is not None and o.serving is False:
                effects.append(serving_effect(entry, True))
            changed[entry.key] = replace(entry, state=EntryState.SKIPPED, message="rolled back before its resize")
            continue
        if entry.state == EntryState.INFEASIBLE:
            effects += restores_not_accepted([entry], obs)  # its batch failed before its restore was accepted
            continue
        if entry.state not in ACTIVE and entry.state != EntryState.REVERTING:
            continue
        o = obs.get(entry.key)
        if not same_pod(entry, o):
            changed[entry.key] = replace(entry, state=EntryState.GONE, message="pod gone before the rollback")
            continue
        assert o is not None
        if entry.drain and o.serving is False:
            effects.append(serving_effect(entry, True))  # whatever happens next, the pod serves again
        if spec_matches(o, entry.before):
            if entry.state == EntryState.REVERTING:  # our restore reached the pod (its answer may have been lost)
                entry = replace(entry, generation=max(entry.generation or 0, o.generation))
            changed[entry.key], more = check_restore(entry, o, now_s, timeouts)
            effects += more
        elif spec_matches(o, entry.after):
            changed[entry.key] = replace(entry, state=EntryState.REVERTING, not_before_s=None)
            effects.append(resize_effect(entry, Purpose.REVERT))
        else:
            changed[entry.key] = replace(entry, state=EntryState.SKIPPED,
                                         message="changed by someone else: not restored")
    r = set_entries(r, changed)
    if any(e.state == EntryState.REVERTING for e in r.entries):
        return r, effects
    stuck = [e.key for e in r.entries if e.state == EntryState.NOT_RESTORED]
    final = Phase.ROLLED_BACK if r.rollback_all and not stuck else Phase.HALTED
    message = f"{r.message}; not restored: {len(stuck)} pods ({', '.join(stuck[:5])})" if stuck else r.message
    done = Event(namespace="", pod=None, reason="RolloutRolledBack", warning=final == Phase.HALTED,
                 message=f"pool {r.pool}: {'restore incomplete' if stuck else 'restored'}; {message}")
    return replace(r, phase=final, message=message), [*effects, done]


# ------------------------------------------------------------------------------------------------ driver
DEFAULT_TIMEOUTS = Timeouts()


def advance(r: Rollout, obs: Mapping[str, PodObservation], now_s: float, *, slots: int = 1 << 30,
            timeouts: Timeouts = DEFAULT_TIMEOUTS, signals: Mapping[str, str] | None = None, frozen: bool = False,
            workloads: Workloads | None = None, gate_failure: str = "",
            ) -> tuple[Rollout, list[Effect]]:
    """One step. ``slots``: resizes this rollout may start now (global concurrency); ``signals``: extra gate
    failures by pod key (e.g. a throttling spike); ``frozen``: the pool is unhealthy, start nothing new;
    ``gate_failure``: a failed canary analysis of the current batch (``machine.analysis``), which fails it
    like any gate: its pods are restored and the pool halts."""
    if r.phase == Phase.ROLLING_BACK:
        return _rollback(r, obs, now_s, timeouts)
    if r.phase not in (Phase.PROGRESSING, Phase.BAKING) or r.current_batch >= len(r.batches):
        return r, []
    batch = r.batches[r.current_batch]
    if gate_failure:
        return fail(r, batch, gate_failure)
    if batch.phase in (BatchPhase.PENDING, BatchPhase.APPLYING):
        if frozen and batch.phase == BatchPhase.PENDING:
            return replace(r, message=f"pool {r.pool} frozen: waiting for healthy nodes"), []
        return _apply_batch(r, batch, obs, now_s, slots, timeouts, workloads or {})
    resend = restores_not_accepted(r.entries_of(batch.index), obs)
    if batch.phase == BatchPhase.VERIFYING:
        verified, effects = verify_batch(r, batch, obs, now_s, timeouts, workloads or {})
        return verified, resend + effects
    if batch.phase == BatchPhase.BAKING:
        baked, effects = _bake_batch(r, batch, obs, now_s, signals or {})
        if baked.phase == Phase.PROGRESSING and baked.current_batch > r.current_batch and not frozen:
            nxt, more = advance(baked, obs, now_s, slots=slots, timeouts=timeouts, signals=signals, frozen=frozen,
                                workloads=workloads)  # the bake is over: start the next batch now, not next pass
            return nxt, resend + effects + more
        return baked, resend + effects
    return r, []


def settle(r: Rollout, key: str, purpose: Purpose, *, ok: bool, generation: int | None, now_s: float,
           error: str = "", retry_after_s: float = 0.0, refusal: Refusal = Refusal.NONE) -> Rollout:
    """Record the outcome of a performed effect. ``refusal`` is the kind of a refusal (``ok`` False), as the
    executor classified it: a resize above the node's allocatable (the API server's 403, 1.36+) is Infeasible
    and goes to the fallback; an exceeded quota is skipped, never handed to the fallback (its replacement would
    be refused too); so is a node that does not declare the feature the change needs (it waits for the node:
    the planner reads ``declaredFeatures`` and writes nothing before the node declares it); an eviction is
    settled by ``_evicted``; anything else is skipped."""
    entry = next(e for e in r.entries if e.key == key)
    match purpose:
        case Purpose.EVICT:
            return set_entries(r, {key: _evicted(entry, ok=ok, now_s=now_s, error=error,
                                                 retry_after_s=retry_after_s, refusal=refusal)})
        case Purpose.SERVING:
            return r if ok else set_entries(r, {key: replace(entry, message=f"serving gate not set: {error}")})
        case Purpose.TEMPLATE:
            return set_entries(r, {key: replace(entry, state=EntryState.APPLIED, applied_s=now_s) if ok else
                                   replace(entry, state=EntryState.SKIPPED, message=error)})
        case Purpose.APPLY:
            new = replace(entry, state=EntryState.APPLIED, generation=generation, applied_s=now_s) if ok else \
                replace(entry, state=EntryState.INFEASIBLE if refusal == Refusal.ABOVE_ALLOCATABLE
                        else EntryState.SKIPPED, message=_refused(refusal, error))
            r = set_entries(r, {key: new})
            batch = r.batches[min(r.current_batch, len(r.batches) - 1)]
            if batch.phase == BatchPhase.APPLYING and answered(r.entries_of(batch.index)):
                r = set_batch(r, replace(batch, phase=BatchPhase.VERIFYING))
            return r
        case Purpose.REVERT:
            if entry.state == EntryState.INFEASIBLE:
                new = replace(entry, message=entry.message if ok else f"{entry.message}; restore failed: {error}")
            else:  # accepted is not landed: Reverting, with the restore's generation, until the kubelet reports it
                new = replace(entry, state=EntryState.REVERTING, generation=generation if ok else entry.generation,
                              not_before_s=None, message=error)
            return set_entries(r, {key: new})
        case _:
            assert_never(purpose)


def _refused(refusal: Refusal, error: str) -> str:
    """The message of a refused resize: what refused it and, where it waits, what happens next."""
    match refusal:
        case Refusal.QUOTA:
            return f"quota: {error}"
        case Refusal.NODE_FEATURE:
            return (f"node feature: {error}; left at its size, not retried: planned again once the node declares "
                    "the feature")
        case _:
            return error


def _evicted(entry: Entry, *, ok: bool, now_s: float, error: str, retry_after_s: float, refusal: Refusal) -> Entry:
    """An eviction's outcome: Evicted; Blocked when the pod's PodDisruptionBudget refused it, and Evicting again
    when the API server said "not now", both backing off (10 s, doubling, at most 5 min, or the server's
    Retry-After if longer); else Skipped."""
    wait = max(min(10.0 * 2 ** entry.attempts, 300.0), retry_after_s)  # 10 s, doubling, at most 5 min
    if ok:
        return replace(entry, state=EntryState.EVICTED, applied_s=now_s)
    if refusal == Refusal.DISRUPTION_BUDGET:  # the pod's outcome: Blocked, its batch goes on (``answered``)
        return replace(entry, state=EntryState.BLOCKED, attempts=entry.attempts + 1, not_before_s=now_s + wait,
                       message=f"eviction refused by its PodDisruptionBudget (refusal {entry.attempts + 1}): "
                               f"{error}; left at its current size, tried again in {wait:.0f}s")
    if refusal == Refusal.NOT_NOW:  # the API server's "not now" (API Priority and Fairness): the batch waits
        return replace(entry, state=EntryState.EVICTING, attempts=entry.attempts + 1, not_before_s=now_s + wait,
                       message=f"eviction not accepted for now: {error}; tried again in {wait:.0f}s")
    return replace(entry, state=EntryState.SKIPPED, message=error)


def blocked_event(r: Rollout, key: str) -> Event:
    """The Warning Event on a pod whose eviction its PodDisruptionBudget refused (``settle`` wrote why in its
    entry): what happened, and what happens next."""
    entry = next(e for e in r.entries if e.key == key)
    return Event(namespace=entry.namespace, pod=entry.pod, reason="EvictionBlocked", warning=True,
                 message=f"{entry.message}; the rollout {r.name} goes on with the pool's other pods")
