"""The rollout state machine (pure): journal and observed pods in, the next journal and effects out.

Owns the lifecycle of one pool's canary rollout (DESIGN.md §2 steps 4-7): start a batch by recording
intent (``Applying``) and asking for resizes; verify each pod (observedGeneration caught up, the kubelet's
status shows the new values, no resize condition left, restart counts moved only where the policy said,
Ready); bake while watching the gates (OOM kill, unexpected restart, readiness loss, extra signals such as
a throttling spike supplied by the caller); on a failed gate or a verification timeout restore every pod
the batch touched and halt the pool. A restarting resize of a pod with the serving readiness gate is
drained first (gate False, then no ready endpoint left) and put back once its containers are ready again
(gate True, then the pod Ready). Infeasible (or Deferred past its timeout) sends a pod back to its
recorded values and leaves it for the fallback, without failing the batch. ``advance`` never performs
anything: the executor performs the returned effects and then records their outcome with ``settle``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from podtailor.resources import Resources
from podtailor.units import format_cpu, format_memory
from updater.answers import Refusal
from updater.observe import PodObservation
from updater.rollout.journal import (
    ACTIVE,
    EVICT,
    RESIZE,
    TEMPLATE,
    BatchPhase,
    BatchRecord,
    ContainerValues,
    Entry,
    EntryState,
    Phase,
    Rollout,
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Resize:
    """Patch the pod's resize subresource to ``values`` (precondition: its uid, and the spec still ``expect``)."""

    key: str
    namespace: str
    pod: str
    uid: str
    values: tuple[ContainerValues, ...]
    expect: tuple[ContainerValues, ...]
    purpose: str
    """apply | revert"""


@dataclass(frozen=True, slots=True, kw_only=True)
class Event:
    namespace: str
    pod: str | None
    reason: str
    message: str
    warning: bool = False
    kind: str = ""
    """With ``name``: the Event is about this workload (recorded on it, in its namespace)."""
    name: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class Evict:
    """Evict the pod through the Eviction API, with its uid as precondition (PDBs decide)."""

    key: str
    namespace: str
    pod: str
    uid: str


@dataclass(frozen=True, slots=True, kw_only=True)
class PatchTemplate:
    """Set the workload's pod-template resources (our own field manager) so its controller rolls the pods."""

    key: str
    namespace: str
    kind: str
    name: str
    values: tuple[ContainerValues, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkloadObservation:
    ready: int
    """Ready, non-terminating pods of the workload now."""
    template: tuple[ContainerValues, ...] | None = None
    """The pod template's resources for the containers the journal names (None: not read)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SetServing:
    """Set the pod's serving gate condition (``pods/status``, uid precondition): False takes it out of its
    Services' endpoints before a restarting resize, True puts it back."""

    key: str
    namespace: str
    pod: str
    uid: str
    serving: bool


Effect = Resize | Event | Evict | PatchTemplate | SetServing
MAX_TEMPLATE_REVERTS = 3
WAITING = frozenset({EntryState.PLANNED, EntryState.APPLYING, EntryState.EVICTING, EntryState.BLOCKED,
                     EntryState.DRAINING})


@dataclass(frozen=True, slots=True, kw_only=True)
class Timeouts:
    verify_s: float = 3600.0
    deferred_s: float = 300.0


def spec_matches(obs: PodObservation, values: Iterable[ContainerValues]) -> bool:
    for v in values:
        c = obs.containers.get(v.name)
        if c is None or c.spec_requests != v.requests or c.spec_limits != v.limits:
            return False
    return True


def _actual_matches(obs: PodObservation, values: Iterable[ContainerValues]) -> bool:
    for v in values:
        c = obs.containers.get(v.name)
        if c is None or c.actual_requests != v.requests or (c.actual_limits or _none()) != v.limits:
            return False
    return True


def _none() -> object:
    from podtailor.resources import Resources

    return Resources()


def _same_pod(entry: Entry, obs: PodObservation | None) -> bool:
    return obs is not None and obs.uid == entry.uid and not obs.deleting


def _resize(entry: Entry, purpose: str) -> Resize:
    values, expect = (entry.after, entry.before) if purpose == "apply" else (entry.before, entry.after)
    return Resize(key=entry.key, namespace=entry.namespace, pod=entry.pod, uid=entry.uid, values=values,
                  expect=expect, purpose=purpose)


def _set_entries(r: Rollout, changed: Mapping[str, Entry]) -> Rollout:
    return replace(r, entries=tuple(changed.get(e.key, e) for e in r.entries))


def _set_batch(r: Rollout, batch: BatchRecord) -> Rollout:
    return replace(r, batches=tuple(batch if b.index == batch.index else b for b in r.batches))


# ----------------------------------------------------------------------------------------------- applying
def _serving(entry: Entry, serving: bool) -> SetServing:
    return SetServing(key=entry.key, namespace=entry.namespace, pod=entry.pod, uid=entry.uid, serving=serving)


def _drain(entry: Entry, obs: PodObservation) -> tuple[Entry, list[Effect]] | None:
    """Before a gated pod's restarting resize: set its gate False, then wait until no EndpointSlice lists it
    as ready (the EndpointSlice controller follows the pod's Ready). None: drained, go on with the resize."""
    if obs.serving is not False:
        return replace(entry, state=EntryState.DRAINING, message="draining: serving gate set False"), [
            _serving(entry, False)]
    if obs.endpoint_ready:
        return replace(entry, state=EntryState.DRAINING, message="draining: waiting for the endpoints"), []
    return None


def _start_or_resume(entry: Entry, obs: PodObservation | None, now_s: float) -> tuple[Entry, list[Effect]]:
    """An entry in Planned, Draining or Applying: decide from the live spec whether the resize still has to be
    sent (a gated pod's restarting resize is drained first)."""
    if not _same_pod(entry, obs):
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
    return replace(entry, state=EntryState.APPLYING, applied_s=now_s), [_resize(entry, "apply")]


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
    if entry.state in (EntryState.APPLYING, EntryState.EVICTING, EntryState.DRAINING):
        return True
    if entry.state == EntryState.BLOCKED:
        return entry.not_before_s is None or now_s >= entry.not_before_s
    return entry.state == EntryState.PLANNED and slots > 0


def _apply_batch(r: Rollout, batch: BatchRecord, obs: Mapping[str, PodObservation], now_s: float,
                 slots: int, timeouts: Timeouts,
                 work: Mapping[tuple[str, str, str], WorkloadObservation]) -> tuple[Rollout, list[Effect]]:
    effects: list[Effect] = []
    changed: dict[str, Entry] = {}
    for entry in r.entries_of(batch.index):
        if _due(entry, slots, now_s):
            new, eff = _start(entry, obs, work, now_s)
            slots -= sum(1 for e in eff if not isinstance(e, Event))
            changed[entry.key] = new
            effects += eff
    r = _set_entries(r, changed)
    if batch.phase == BatchPhase.PENDING:
        batch = replace(batch, phase=BatchPhase.APPLYING, started_s=now_s, deadline_s=now_s + timeouts.verify_s)
        effects.append(Event(namespace="", pod=None, reason="BatchStarted",
                             message=f"pool {r.pool}: batch {batch.index + 1}/{len(r.batches)} started"))
    if not any(e.state in WAITING for e in r.entries_of(batch.index)):
        batch = replace(batch, phase=BatchPhase.VERIFYING)
    return _set_batch(r, batch), effects


# ---------------------------------------------------------------------------------------------- verifying
def _restarts_ok(entry: Entry, obs: PodObservation) -> str | None:
    for name, before in entry.restarts_before.items():
        c = obs.containers.get(name)
        if c is None:
            continue
        allowed = before + (1 if name in entry.restarting else 0)
        if c.restart_count > allowed:
            return f"container {name} restarted unexpectedly ({before} -> {c.restart_count})"
    return None


def _oom_since(entry: Entry, obs: PodObservation) -> str | None:
    for name, c in obs.containers.items():
        if c.last_termination_reason == "OOMKilled" and c.last_termination_s is not None and \
                entry.applied_s is not None and c.last_termination_s >= entry.applied_s - 1:
            return f"container {name} was OOM-killed after the resize"
    return None


def _actuation_error(entry: Entry, obs: PodObservation, now_s: float, timeouts: Timeouts) -> str | None:
    """PodResizeInProgress with reason Error for longer than the Deferred timeout. The kubelet retries on every
    sync, so a short error may clear; one that lasts is most often a memory limit below the container's current
    usage (1.34+), which is a target the pod cannot live with: a gate failure, like an OOM kill after a
    decrease, so the pool halts and the batch's pods are restored (this pod still runs its old values)."""
    if obs.resize_error is None or entry.applied_s is None or now_s - entry.applied_s <= timeouts.deferred_s:
        return None
    return (f"the kubelet has not been able to apply the resize for {now_s - entry.applied_s:.0f}s: "
            f"{obs.resize_error or 'PodResizeInProgress reason Error'}")


def _verify_entry(entry: Entry, obs: PodObservation | None, now_s: float, timeouts: Timeouts) -> tuple[Entry, str]:
    """Returns the entry's new state and, for a gate failure, a non-empty reason."""
    if not _same_pod(entry, obs):
        return replace(entry, state=EntryState.GONE, message="pod gone during verification"), ""
    assert obs is not None
    caught_up = obs.observed_generation >= (entry.generation or 0)
    if caught_up and obs.resize_pending == "Infeasible":
        cause = obs.infeasible_cause.value if obs.infeasible_cause else "unknown"
        message = f"Infeasible ({cause}): {obs.resize_pending_message}"
        return replace(entry, state=EntryState.INFEASIBLE, message=message), ""
    if caught_up and obs.resize_pending == "Deferred" and obs.resize_pending_since_s is not None and \
            now_s - obs.resize_pending_since_s > timeouts.deferred_s:
        message = f"Deferred for more than {timeouts.deferred_s:.0f}s: {obs.resize_pending_message}"
        return replace(entry, state=EntryState.INFEASIBLE, message=message), ""
    failure = _oom_since(entry, obs) or _restarts_ok(entry, obs) or _actuation_error(entry, obs, now_s, timeouts)
    if failure:
        return entry, failure
    ready = obs.containers_ready if entry.drain else obs.ready
    done = (caught_up and obs.resize_pending is None and not obs.resize_in_progress and ready
            and _actual_matches(obs, entry.after))
    if done and entry.drain and not (obs.serving and obs.ready):
        return replace(entry, message="restarted and ready: serving gate set True"), ""  # the caller sets it
    if done:
        return replace(entry, state=EntryState.VERIFIED, message=""), ""
    return entry, ""


def _change_text(entry: Entry) -> str:
    """The requests that changed, as kubectl prints quantities: "app: cpu 1 -> 250m, memory 1Gi -> 512Mi"."""
    before = {c.name: c.requests for c in entry.before}
    parts = []
    for c in entry.after:
        old = before.get(c.name, Resources())
        changes = [f"{name} {'unset' if a is None else fmt(a)} -> {fmt(b)}"
                   for name, fmt, a, b in (("cpu", format_cpu, old.cpu_millicores, c.requests.cpu_millicores),
                                           ("memory", format_memory, old.memory_bytes, c.requests.memory_bytes))
                   if b is not None and a != b]
        if changes:
            parts.append(f"{c.name}: {', '.join(changes)}")
    return "; ".join(parts) or "limits only"


def _fail(r: Rollout, batch: BatchRecord, why: str) -> tuple[Rollout, list[Effect]]:
    r = _set_batch(r, replace(batch, phase=BatchPhase.FAILED))
    r = replace(r, phase=Phase.ROLLING_BACK, message=f"batch {batch.index + 1} failed: {why}")
    return r, [Event(namespace="", pod=None, reason="RolloutGateFailed", warning=True,
                     message=f"pool {r.pool}: batch {batch.index + 1} failed ({why}); restoring the pods it touched")]


def _verify_fallback(entry: Entry, work: WorkloadObservation | None) -> tuple[Entry, list[Effect]]:
    """An eviction is done when the workload is back to its ready count (the replacement, admitted at the
    target, is up); a template patch when the template still holds our values and the pods are ready. A
    template put back by another field manager (GitOps) is patched again at most MAX_TEMPLATE_REVERTS times."""
    ready = work is not None and work.ready >= entry.ready_before
    if entry.action == EVICT:
        return (replace(entry, state=EntryState.VERIFIED), []) if ready else (entry, [])
    if work is None or work.template is None:
        return replace(entry, state=EntryState.GONE, message="workload gone"), []
    if work.template == entry.after:
        return (replace(entry, state=EntryState.VERIFIED), []) if ready else (entry, [])
    reverts = entry.attempts + 1
    if reverts >= MAX_TEMPLATE_REVERTS:
        msg = f"template reverted by another field manager {reverts} times: stopped, not fighting it"
        return replace(entry, state=EntryState.SKIPPED, attempts=reverts, message=msg), [Event(
            namespace=entry.namespace, pod=None, reason="TemplateReverted", message=msg, warning=True,
            kind=entry.workload_kind, name=entry.workload_name)]
    msg = f"template reverted by another field manager ({reverts}); patching again"
    return replace(entry, state=EntryState.PLANNED, attempts=reverts, message=msg), [Event(
        namespace=entry.namespace, pod=None, reason="TemplateReverted", message=msg, warning=True,
        kind=entry.workload_kind, name=entry.workload_name)]


def _verify_batch(r: Rollout, batch: BatchRecord, obs: Mapping[str, PodObservation], now_s: float,
                  timeouts: Timeouts,
                  work: Mapping[tuple[str, str, str], WorkloadObservation]) -> tuple[Rollout, list[Effect]]:
    effects: list[Effect] = []
    changed: dict[str, Entry] = {}
    for entry in r.entries_of(batch.index):
        if entry.action != RESIZE and entry.state in (EntryState.EVICTED, EntryState.APPLIED):
            new_entry, more = _verify_fallback(entry, work.get(entry.workload))
            changed[entry.key], effects = new_entry, effects + more
            continue
        if entry.state != EntryState.APPLIED:
            continue
        new, failure = _verify_entry(entry, obs.get(entry.key), now_s, timeouts)
        if failure:
            return _fail(r, batch, f"{entry.key}: {failure}")
        o = obs.get(entry.key)
        if new.drain and new.state == EntryState.APPLIED and new.message.startswith("restarted and ready") and \
                o is not None and not o.serving:
            effects.append(_serving(entry, True))
        if new.state == EntryState.INFEASIBLE:
            effects += [_resize(entry, "revert"), Event(namespace=entry.namespace, pod=entry.pod, warning=True,
                        reason="ResizeInfeasible", message=f"in-place resize not possible, restored: {new.message}")]
        elif new.state == EntryState.VERIFIED:
            how = f"restarted {', '.join(sorted(entry.restarting))}" if entry.restarting else "no restart"
            effects.append(Event(namespace=entry.namespace, pod=entry.pod, reason="ResizeVerified",
                                 message=f"resized in place ({how}) and verified by {r.name}: {_change_text(entry)}"))
        changed[entry.key] = new
    r = _set_entries(r, changed)
    if any(e.state == EntryState.PLANNED for e in r.entries_of(batch.index)):  # a reverted template: again
        return _set_batch(r, replace(batch, phase=BatchPhase.APPLYING)), effects
    if all(e.state not in (EntryState.APPLIED, EntryState.EVICTED) for e in r.entries_of(batch.index)):
        batch = replace(batch, phase=BatchPhase.BAKING, bake_until_s=now_s + batch.bake_s)
        verified = sum(1 for e in r.entries_of(batch.index) if e.state == EntryState.VERIFIED)
        effects.append(Event(namespace="", pod=None, reason="BatchVerified",
                             message=f"pool {r.pool}: batch {batch.index + 1}/{len(r.batches)}: {verified} pods "
                                     f"verified; baking {batch.bake_s:.0f}s"))
        return _set_batch(replace(r, phase=Phase.BAKING), batch), effects
    if batch.deadline_s is not None and now_s > batch.deadline_s:
        waiting = [e.key for e in r.entries_of(batch.index) if e.state in (EntryState.APPLIED, EntryState.EVICTED)]
        rolled, more = _fail(r, batch, f"not verified within the timeout: {', '.join(waiting[:5])}")
        return rolled, effects + more
    return r, effects


# ------------------------------------------------------------------------------------------------ baking
def _bake_batch(r: Rollout, batch: BatchRecord, obs: Mapping[str, PodObservation], now_s: float,
                signals: Mapping[str, str]) -> tuple[Rollout, list[Effect]]:
    for entry in r.entries_of(batch.index):
        if entry.state != EntryState.VERIFIED or entry.action != RESIZE:
            continue
        o = obs.get(entry.key)
        if not _same_pod(entry, o):
            continue  # gone after verification: nothing to watch or restore
        assert o is not None
        gates = set(batch.gates)
        failure = (("oom" in gates and _oom_since(entry, o)) or ("restarts" in gates and _restarts_ok(entry, o))
                   or ("ready" in gates and not o.ready and "pod lost readiness")
                   or (signals.get(entry.key) if "throttling" in gates else None))
        if failure:
            return _fail(r, batch, f"{entry.key}: {failure}")
    if batch.bake_until_s is not None and now_s >= batch.bake_until_s:
        r = _set_batch(r, replace(batch, phase=BatchPhase.DONE))
        nxt = batch.index + 1
        if nxt >= len(r.batches):
            return _complete(replace(r, current_batch=nxt))
        return replace(r, phase=Phase.PROGRESSING, current_batch=nxt), []
    return r, []


def _complete(r: Rollout) -> tuple[Rollout, list[Effect]]:
    """Every batch baked. Pods left unchanged (a refused resize or eviction, gone, Infeasible) are counted in the
    message and make the completion a Warning, so "Completed" never hides work that was not done."""
    changed = sum(1 for e in r.entries if e.state == EntryState.VERIFIED)
    left = Counter(e.state.value for e in r.entries if e.state != EntryState.VERIFIED)
    message = f"all batches baked: {changed} of {len(r.entries)} pods changed"
    if left:
        message += "; not changed: " + ", ".join(f"{n} {state}" for state, n in sorted(left.items()))
    return replace(r, phase=Phase.COMPLETED, message=message), [
        Event(namespace="", pod=None, reason="RolloutCompleted", warning=bool(left),
              message=f"pool {r.pool}: completed; {message}")]


# ----------------------------------------------------------------------------------------------- rollback
def _rollback(r: Rollout, obs: Mapping[str, PodObservation]) -> tuple[Rollout, list[Effect]]:
    failed = {b.index for b in r.batches if b.phase == BatchPhase.FAILED}
    effects: list[Effect] = []
    changed: dict[str, Entry] = {}
    for entry in r.entries:
        if not (r.rollback_all or entry.batch in failed) or entry.action != RESIZE:
            continue  # an eviction cannot be undone; a template patch is left to its owner
        if entry.state == EntryState.DRAINING:  # drained, never resized: serve again
            o = obs.get(entry.key)
            if _same_pod(entry, o) and o is not None and o.serving is False:
                effects.append(_serving(entry, True))
            changed[entry.key] = replace(entry, state=EntryState.SKIPPED, message="rolled back before its resize")
            continue
        if entry.state not in ACTIVE and entry.state != EntryState.REVERTING:
            continue
        o = obs.get(entry.key)
        if not _same_pod(entry, o):
            changed[entry.key] = replace(entry, state=EntryState.GONE, message="pod gone before the rollback")
            continue
        assert o is not None
        if entry.drain and o.serving is False:
            effects.append(_serving(entry, True))  # whatever happens next, the pod serves again
        if spec_matches(o, entry.before):
            changed[entry.key] = replace(entry, state=EntryState.REVERTED)
        elif spec_matches(o, entry.after):
            changed[entry.key] = replace(entry, state=EntryState.REVERTING)
            effects.append(_resize(entry, "revert"))
        else:
            changed[entry.key] = replace(entry, state=EntryState.SKIPPED,
                                         message="changed by someone else: not restored")
    r = _set_entries(r, changed)
    if any(e.state == EntryState.REVERTING for e in r.entries):
        return r, effects
    final = Phase.ROLLED_BACK if r.rollback_all else Phase.HALTED
    done = Event(namespace="", pod=None, reason="RolloutRolledBack", warning=not r.rollback_all,
                 message=f"pool {r.pool}: restored; {r.message}")
    return replace(r, phase=final), [*effects, done]


# ------------------------------------------------------------------------------------------------ driver
def advance(r: Rollout, obs: Mapping[str, PodObservation], now_s: float, *, slots: int = 1 << 30,
            timeouts: Timeouts = Timeouts(), signals: Mapping[str, str] | None = None, frozen: bool = False,
            workloads: Mapping[tuple[str, str, str], WorkloadObservation] | None = None,
            ) -> tuple[Rollout, list[Effect]]:
    """One step. ``slots``: resizes this rollout may start now (global concurrency); ``signals``: extra gate
    failures by pod key (e.g. a throttling spike); ``frozen``: the pool is unhealthy, start nothing new."""
    if r.phase == Phase.ROLLING_BACK:
        return _rollback(r, obs)
    if r.phase not in (Phase.PROGRESSING, Phase.BAKING) or r.current_batch >= len(r.batches):
        return r, []
    batch = r.batches[r.current_batch]
    if batch.phase in (BatchPhase.PENDING, BatchPhase.APPLYING):
        if frozen and batch.phase == BatchPhase.PENDING:
            return replace(r, message=f"pool {r.pool} frozen: waiting for healthy nodes"), []
        return _apply_batch(r, batch, obs, now_s, slots, timeouts, workloads or {})
    if batch.phase == BatchPhase.VERIFYING:
        return _verify_batch(r, batch, obs, now_s, timeouts, workloads or {})
    if batch.phase == BatchPhase.BAKING:
        baked, effects = _bake_batch(r, batch, obs, now_s, signals or {})
        if baked.phase == Phase.PROGRESSING and baked.current_batch > r.current_batch and not frozen:
            nxt, more = advance(baked, obs, now_s, slots=slots, timeouts=timeouts, signals=signals, frozen=frozen,
                                workloads=workloads)  # the bake is over: start the next batch now, not next pass
            return nxt, effects + more
        return baked, effects
    return r, []


def settle(r: Rollout, key: str, purpose: str, *, ok: bool, generation: int | None, now_s: float,
           error: str = "", retry_after_s: float = 0.0, refusal: Refusal = Refusal.NONE) -> Rollout:
    """Record the outcome of a performed effect. ``refusal`` is the kind of a refusal (``ok`` False), as the
    executor classified it: a resize above the node's allocatable (the API server's 403, 1.36+) is Infeasible
    and goes to the fallback; an exceeded quota is skipped, never handed to the fallback (its replacement would
    be refused too); an eviction's "not now" (429) backs off; anything else is skipped."""
    entry = next(e for e in r.entries if e.key == key)
    if purpose == "evict":
        if ok:
            new = replace(entry, state=EntryState.EVICTED, applied_s=now_s)
        elif refusal == Refusal.NOT_NOW:  # a disruption budget says not now, or API Priority and Fairness
            wait = max(min(10.0 * 2 ** entry.attempts, 300.0), retry_after_s)
            new = replace(entry, state=EntryState.BLOCKED, attempts=entry.attempts + 1, not_before_s=now_s + wait,
                          message=f"eviction refused for now (disruption budget); retry in {wait:.0f}s")
        else:
            new = replace(entry, state=EntryState.SKIPPED, message=error)
        return _set_entries(r, {key: new})
    if purpose == "serving":
        return r if ok else _set_entries(r, {key: replace(entry, message=f"serving gate not set: {error}")})
    if purpose == "template":
        new = replace(entry, state=EntryState.APPLIED, applied_s=now_s) if ok else \
            replace(entry, state=EntryState.SKIPPED, message=error)
        return _set_entries(r, {key: new})
    if purpose == "apply":
        new = replace(entry, state=EntryState.APPLIED, generation=generation, applied_s=now_s) if ok else \
            replace(entry, state=EntryState.INFEASIBLE if refusal == Refusal.ABOVE_ALLOCATABLE else EntryState.SKIPPED,
                    message=f"quota: {error}" if refusal == Refusal.QUOTA else error)
    elif entry.state == EntryState.INFEASIBLE:
        new = replace(entry, message=entry.message if ok else f"{entry.message}; restore failed: {error}")
    else:
        new = replace(entry, state=EntryState.REVERTED if ok else EntryState.REVERTING, message=error)
    r = _set_entries(r, {key: new})
    batch = r.batches[min(r.current_batch, len(r.batches) - 1)]
    if purpose == "apply" and batch.phase == BatchPhase.APPLYING and not any(
            e.state in (EntryState.PLANNED, EntryState.APPLYING, EntryState.DRAINING)
            for e in r.entries_of(batch.index)):
        r = _set_batch(r, replace(batch, phase=BatchPhase.VERIFYING))
    return r
