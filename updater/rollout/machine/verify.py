"""Verifying a batch and watching its gates (pure): the part of the state machine that reads what the kubelet did.

A pod is verified when its observedGeneration caught up, the kubelet's status shows the new values, no resize
condition is left, its restart counts moved only where the policy said, it is Ready, and its containers' cgroups
hold what status says (``updater.cgroups``; a disagreement is waited out for its grace period). An OOM kill, an
unexpected restart or a lasting actuation error fails the batch (``fail``: the rollout rolls back); Infeasible,
or Deferred past its timeout, sends the pod back to its recorded values and leaves it for the fallback. An
eviction or template patch is verified by its workload's ready count. A cgroup that still disagrees after the
grace period fails the batch too, and its pod is left as it is (Skipped: no further patch, not even a restore).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace

from podtailor.resources import Resources
from podtailor.units import format_cpu, human_memory
from updater.answers import PendingReason
from updater.cgroups import GRACE_S
from updater.observe import PodObservation
from updater.rollout.machine.effects import (
    Effect,
    Event,
    Purpose,
    Timeouts,
    WorkloadObservation,
    resize_effect,
    same_pod,
    serving_effect,
    set_batch,
    set_entries,
    spec_matches,
)
from updater.rollout.machine.journal import (
    EVICT,
    RESIZE,
    BatchPhase,
    BatchRecord,
    ContainerValues,
    Entry,
    EntryState,
    Phase,
    Rollout,
)

MAX_TEMPLATE_REVERTS = 3
READY_TO_SERVE = "restarted and ready: serving gate set True"
"""The message of a drained entry whose pod is back and ready: its serving gate is set True (then it is verified)."""


def _actual_matches(obs: PodObservation, values: Iterable[ContainerValues]) -> bool:
    for v in values:
        c = obs.containers.get(v.name)
        if c is None or c.actual_requests != v.requests or (c.actual_limits or Resources()) != v.limits:
            return False
    return True


def restarts_ok(entry: Entry, obs: PodObservation) -> str | None:
    for name, before in entry.restarts_before.items():
        c = obs.containers.get(name)
        if c is None:
            continue
        allowed = before + (1 if name in entry.restarting else 0)
        if c.restart_count > allowed:
            return f"container {name} restarted unexpectedly ({before} -> {c.restart_count})"
    return None


def oom_since(entry: Entry, obs: PodObservation) -> str | None:
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
    if not same_pod(entry, obs):
        return replace(entry, state=EntryState.GONE, message="pod gone during verification"), ""
    assert obs is not None
    caught_up = obs.observed_generation >= (entry.generation or 0)
    if caught_up and obs.resize_pending == PendingReason.INFEASIBLE:
        cause = obs.infeasible_cause.value if obs.infeasible_cause else "unknown"
        message = f"Infeasible ({cause}): {obs.resize_pending_message}"
        return replace(entry, state=EntryState.INFEASIBLE, message=message), ""
    if caught_up and obs.resize_pending == PendingReason.DEFERRED and obs.resize_pending_since_s is not None and \
            now_s - obs.resize_pending_since_s > timeouts.deferred_s:
        message = f"Deferred for more than {timeouts.deferred_s:.0f}s: {obs.resize_pending_message}"
        return replace(entry, state=EntryState.INFEASIBLE, message=message), ""
    failure = oom_since(entry, obs) or restarts_ok(entry, obs) or _actuation_error(entry, obs, now_s, timeouts)
    if failure:
        return entry, failure
    ready = obs.containers_ready if entry.drain else obs.ready
    done = (caught_up and obs.resize_pending is None and not obs.resize_in_progress and ready
            and _actual_matches(obs, entry.after) and not obs.cgroup_disagreement)
    if done and entry.drain and not (obs.serving and obs.ready):
        return replace(entry, message=READY_TO_SERVE), ""  # the caller sets it
    if done:
        return replace(entry, state=EntryState.VERIFIED, message=""), ""
    return entry, ""


MAX_RESTORE_CHECKS = 3
"""Looks, a Deferred timeout apart, at a restore the kubelet has not applied before it is journaled NotRestored
(the kubelet itself retries on every sync, e.g. once the container's usage is below the restored limit)."""


def _restored(entry: Entry, obs: PodObservation) -> bool:
    """A restore is verified as an apply is: observedGeneration caught up with the restore, no resize pending or
    in progress, and the kubelet's status shows the recorded values."""
    return (obs.observed_generation >= (entry.generation or 0) and obs.resize_pending is None
            and not obs.resize_in_progress and _actual_matches(obs, entry.before))


def check_restore(entry: Entry, obs: PodObservation, now_s: float, timeouts: Timeouts) -> tuple[Entry, list[Effect]]:
    """An entry whose spec holds its recorded values again: Reverted once the kubelet reports them. Until then it
    stays Reverting; each Deferred timeout without them is a look (a Warning Event on the pod), and after
    MAX_RESTORE_CHECKS looks it is NotRestored, with the kubelet's reason (its pool stays Halted)."""
    if _restored(entry, obs):
        return replace(entry, state=EntryState.REVERTED, not_before_s=None, message=""), []
    if entry.not_before_s is None:
        return replace(entry, state=EntryState.REVERTING, not_before_s=now_s + timeouts.deferred_s,
                       message="restore sent: waiting for the kubelet to apply it"), []
    if now_s < entry.not_before_s:
        return entry, []
    checks = entry.attempts + 1
    why = obs.resize_error or obs.resize_pending_message or (
        f"observedGeneration {obs.observed_generation} < {entry.generation}"
        if obs.observed_generation < (entry.generation or 0) else "the kubelet still reports the rolled-out values")
    if checks < MAX_RESTORE_CHECKS:
        message = (f"restore not applied by the kubelet ({checks} of {MAX_RESTORE_CHECKS} looks, next in "
                   f"{timeouts.deferred_s:.0f}s): {why}")
        return replace(entry, attempts=checks, not_before_s=now_s + timeouts.deferred_s, message=message), [
            Event(namespace=entry.namespace, pod=entry.pod, reason="RestoreNotApplied", message=message,
                  warning=True)]
    message = f"not restored: the kubelet did not apply the recorded values after {checks} looks: {why}"
    return replace(entry, state=EntryState.NOT_RESTORED, attempts=checks, not_before_s=None, message=message), [
        Event(namespace=entry.namespace, pod=entry.pod, reason="RestoreFailed", warning=True,
              message=f"{message}; the spec holds them, the pod runs the others; its pool stays Halted")]


def restores_not_accepted(entries: Iterable[Entry], obs: Mapping[str, PodObservation]) -> list[Effect]:
    """The restore of an Infeasible pod again, while its spec still holds the new values: the first send was not
    accepted (a 409 on a moving pod, the API server's "not now"). The journal already says Infeasible (restore
    intended, the apply's generation kept), so this retry is journaled before it is sent; it is tried while
    its batch is verified, baked or rolled back."""
    out: list[Effect] = []
    for e in entries:
        o = obs.get(e.key)
        if e.state == EntryState.INFEASIBLE and e.action == RESIZE and same_pod(e, o) and o is not None \
                and spec_matches(o, e.after):
            out.append(resize_effect(e, Purpose.REVERT))
    return out


def _change_text(entry: Entry) -> str:
    """The requests that changed, as kubectl prints quantities: "app: cpu 1 -> 250m, memory 1Gi -> 512Mi"."""
    before = {c.name: c.requests for c in entry.before}
    parts = []
    for c in entry.after:
        old = before.get(c.name, Resources())
        changes = [f"{name} {'unset' if a is None else fmt(a)} -> {fmt(b)}"
                   for name, fmt, a, b in (("cpu", format_cpu, old.cpu_millicores, c.requests.cpu_millicores),
                                           ("memory", human_memory, old.memory_bytes, c.requests.memory_bytes))
                   if b is not None and a != b]
        if changes:
            parts.append(f"{c.name}: {', '.join(changes)}")
    return "; ".join(parts) or "limits only"


def cgroup_failure(r: Rollout, batch: BatchRecord, entry: Entry, obs: PodObservation) -> tuple[Rollout, list[Effect]]:
    """Status says done, the cgroup disagrees past the grace period: the runtime did not apply what the kubelet
    reports. The pod is left as it is (Skipped: a restore would be one more change stacked on an unknown state)
    and the batch fails, which halts the pool and restores the batch's other pods."""
    why = (f"status says the resize is done but the cgroup disagrees after {obs.cgroup_disagreement_s:.0f}s: "
           f"{obs.cgroup_disagreement}")
    r = set_entries(r, {entry.key: replace(entry, state=EntryState.SKIPPED,
                                           message=f"{why}; left as it is, no further patch")})
    r, effects = fail(r, batch, f"{entry.key}: {why}")
    return r, [Event(namespace=entry.namespace, pod=entry.pod, reason="CgroupMismatch", warning=True,
                     message=f"{why}; no further patch to this pod"), *effects]


def fail(r: Rollout, batch: BatchRecord, why: str) -> tuple[Rollout, list[Effect]]:
    r = set_batch(r, replace(batch, phase=BatchPhase.FAILED))
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


def verify_batch(r: Rollout, batch: BatchRecord, obs: Mapping[str, PodObservation], now_s: float,
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
        seen = obs.get(entry.key)
        if seen is not None and same_pod(entry, seen) and seen.cgroup_disagreement and \
                seen.cgroup_disagreement_s > GRACE_S:
            return cgroup_failure(r, batch, entry, seen)
        new, failure = _verify_entry(entry, seen, now_s, timeouts)
        if failure:
            return fail(r, batch, f"{entry.key}: {failure}")
        o = obs.get(entry.key)
        if new.drain and new.state == EntryState.APPLIED and new.message == READY_TO_SERVE and \
                o is not None and not o.serving:
            effects.append(serving_effect(entry, True))
        if new.state == EntryState.INFEASIBLE:
            effects += [resize_effect(entry, Purpose.REVERT),
                        Event(namespace=entry.namespace, pod=entry.pod, warning=True, reason="ResizeInfeasible",
                              message=f"in-place resize not possible, restored: {new.message}")]
        elif new.state == EntryState.VERIFIED:
            how = f"restarted {', '.join(sorted(entry.restarting))}" if entry.restarting else "no restart"
            effects.append(Event(namespace=entry.namespace, pod=entry.pod, reason="ResizeVerified",
                                 message=f"resized in place ({how}) and verified by {r.name}: {_change_text(entry)}"))
        changed[entry.key] = new
    r = set_entries(r, changed)
    if any(e.state == EntryState.PLANNED for e in r.entries_of(batch.index)):  # a reverted template: again
        return set_batch(r, replace(batch, phase=BatchPhase.APPLYING)), effects
    if all(e.state not in (EntryState.APPLIED, EntryState.EVICTED) for e in r.entries_of(batch.index)):
        batch = replace(batch, phase=BatchPhase.BAKING, bake_until_s=now_s + batch.bake_s)
        verified = sum(1 for e in r.entries_of(batch.index) if e.state == EntryState.VERIFIED)
        blocked = sum(1 for e in r.entries_of(batch.index) if e.state == EntryState.BLOCKED)
        held = f", {blocked} blocked by their PodDisruptionBudget (left as they are)" if blocked else ""
        effects.append(Event(namespace="", pod=None, reason="BatchVerified",
                             message=f"pool {r.pool}: batch {batch.index + 1}/{len(r.batches)}: {verified} pods "
                                     f"verified{held}; baking {batch.bake_s:.0f}s"))
        return set_batch(replace(r, phase=Phase.BAKING), batch), effects
    if batch.deadline_s is not None and now_s > batch.deadline_s:
        waiting = [e.key for e in r.entries_of(batch.index) if e.state in (EntryState.APPLIED, EntryState.EVICTED)]
        rolled, more = fail(r, batch, f"not verified within the timeout: {', '.join(waiting[:5])}")
        return rolled, effects + more
    return r, effects
