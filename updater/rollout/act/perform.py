"""Performing a decided step: "journal the intent, resize, journal the outcome", through the write ports.

Owns the API calls of a pass (``Writers``: the journal store, resizes, evictions, template patches, serving
gates) and what their answers mean for the journal: each answer is read into its kind once, here (a "not
now" from the API server, or ``updater.kube.refusals.refusal_of`` for a refusal), and handed to
``machine.settle`` as that kind, never as text to match. A step's progress that a resume works out again
from the pods is kept in memory instead of written (``entries.derivable``; ``as_known`` gives it back while
the journal is still at the version it was built on). Counts every write.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor

from podtailor.kube.errors import KubeError, TemporaryKubeError
from updater.answers import Refusal
from updater.kube.refusals import refusal_of
from updater.kube.writes import Conflict
from updater.observe import PodObservation
from updater.rollout.act.ports import Writers
from updater.rollout.act.recording import Recording
from updater.rollout.machine import lifecycle as machine
from updater.rollout.machine.entries import derivable
from updater.rollout.machine.journal import TERMINAL, EntryState, Rollout

log = logging.getLogger("podtailor.updater")
Outcome = int | Exception | None
"""A resize's answer: the pod's new generation, the error, or None (not sent: the pod is not observed)."""


class Performer:
    def __init__(self, writers: Writers, recording: Recording) -> None:
        self.writers, self.recording = writers, recording
        self.writes = 0
        self._writes_lock = threading.Lock()
        self._ahead: dict[str, Rollout] = {}
        """Rollouts known here to be further on than their journal only in what a crash would work out again
        (see ``derivable``): not written; used while the journal is still at the version they were built on."""
        self._ahead_lock = threading.Lock()

    # ----------------------------------------------------------------------------------------- the journal
    def as_known(self, journals: Sequence[Rollout]) -> list[Rollout]:
        """Each journal, or our version of it that is ahead only in derivable progress, when the journal is still
        at the version ours was built on (any other writer's change wins, and ours is dropped)."""
        with self._ahead_lock:
            out, kept = [], {}
            for r in journals:
                mine = self._ahead.get(r.name)
                if mine is not None and mine.resource_version == r.resource_version:
                    kept[r.name] = mine
                out.append(kept.get(r.name, r))
            self._ahead = kept
            return out

    def save(self, r: Rollout) -> Rollout:
        self.count(1)
        saved = self.writers.store.save(r)
        with self._ahead_lock:
            self._ahead.pop(r.name, None)
        return saved

    def _keep_ahead(self, r: Rollout) -> None:
        with self._ahead_lock:
            self._ahead[r.name] = r

    def count(self, writes: int) -> None:
        with self._writes_lock:  # rollouts are performed on threads of their own
            self.writes += writes

    # ------------------------------------------------------------------------------------------------ a step
    def step(self, old: Rollout, r: Rollout, effects: Sequence[machine.Effect], obs: Mapping[str, PodObservation],
             now_s: float, sends: ThreadPoolExecutor, create: bool = False) -> tuple[Rollout, int]:
        """Perform one decided step (``old`` -> ``r``); returns the rollout as this process knows it and how
        many effects succeeded."""
        resizes = [e for e in effects if not isinstance(e, machine.Event)]
        try:
            if create:  # the object and its first status: the intent is durable before anything is done
                r = self.writers.store.create(r)
                self.count(2)
                self.recording.event(r, machine.Event(namespace="", pod=None, reason="RolloutStarted", message=(
                    f"pool {r.pool}: {len(r.entries)} pods in {len(r.batches)} batches")))
            elif resizes or not derivable(old, r):
                r = self.save(r)  # the intent is durable before anything is done
            elif r != old:
                self._keep_ahead(r)  # nothing to send, and nothing a resume would not work out again
            done, intent = 0, r
            sent = self._send_resizes([rz for rz in resizes if isinstance(rz, machine.Resize)], obs, sends)
            for rz in resizes:
                if isinstance(rz, machine.Resize):
                    r, ok = self._settle_resize(r, rz, sent.get(rz.key), now_s)
                elif isinstance(rz, machine.SetServing):
                    r, ok = self._set_serving(r, rz, now_s)
                else:
                    r, ok = self._fallback(r, rz, obs, now_s)
                done += ok
            if resizes and (done < len(resizes) or not derivable(intent, r)):
                r = self.save(r)  # a refusal or a "not now" is written, as is all but plain answers
            elif resizes:
                self._keep_ahead(r)  # every resize answered: the journal's Applying says as much after a crash
        except Conflict:
            log.info("rollout changed by another writer; re-reading next pass", extra={"rollout": r.name})
            return r, 0
        for ev in effects:
            if isinstance(ev, machine.Event):
                self.recording.event(r, ev, obs)
        return r, done

    def _send_resizes(self, resizes: Sequence[machine.Resize], obs: Mapping[str, PodObservation],
                      sends: ThreadPoolExecutor) -> dict[str, int | Exception]:
        """Send the resizes of one step through the pass's bounded pool; outcome per pod key: generation or
        error."""
        def send(rz: machine.Resize) -> tuple[str, int | Exception]:
            o = obs.get(rz.key)
            if o is None:
                return rz.key, Conflict(rz.key)
            try:
                return rz.key, self.writers.resizer.resize(rz.namespace, rz.pod, rz.uid, o.resource_version,
                                                           rz.values, pod_level=rz.pod_level)
            except (Conflict, KubeError) as err:
                return rz.key, err

        if len(resizes) <= 1:
            return dict(send(rz) for rz in resizes)
        return dict(sends.map(send, resizes))

    def _settle_resize(self, r: Rollout, rz: machine.Resize, outcome: Outcome, now_s: float) -> tuple[Rollout, int]:
        if outcome is None or isinstance(outcome, Conflict | TemporaryKubeError):
            # The pod moved on, or the API server said "not now" (429, 5xx, timeout): the entry stays Applying
            # and the next pass re-reads the pod and resumes from its spec.
            self.recording.resize("retry")
            return r, 0
        if isinstance(outcome, Exception):
            kind = refusal_of(outcome)
            log.warning("resize refused", extra={"pod": rz.key, "purpose": rz.purpose, "error": str(outcome),
                                                 "refusal": kind.value})
            self.recording.resize("quota" if kind == Refusal.QUOTA else "refused")
            return machine.settle(r, rz.key, rz.purpose, ok=False, generation=None, now_s=now_s,
                                  error=str(outcome), refusal=kind), 0
        self.count(1)
        self.recording.resize("ok")
        return machine.settle(r, rz.key, rz.purpose, ok=True, generation=outcome, now_s=now_s), 1

    def _set_serving(self, r: Rollout, fx: machine.SetServing, now_s: float) -> tuple[Rollout, int]:
        try:
            if self.writers.gates is None:
                raise KubeError("no serving-gate writer configured")
            self.writers.gates.set_serving(fx.namespace, fx.pod, fx.uid, fx.serving)
            self.count(1)
        except KubeError as err:
            log.warning("serving gate not set", extra={"key": fx.key, "serving": fx.serving, "error": str(err)})
            return machine.settle(r, fx.key, machine.Purpose.SERVING, ok=False, generation=None, now_s=now_s,
                                  error=str(err)), 0
        return machine.settle(r, fx.key, machine.Purpose.SERVING, ok=True, generation=None, now_s=now_s), 1

    def _fallback(self, r: Rollout, fx: machine.Evict | machine.PatchTemplate, obs: Mapping[str, PodObservation],
                  now_s: float) -> tuple[Rollout, int]:
        """Evict or patch. A refusal is settled by its kind; one by the pod's PodDisruptionBudget also gets a
        Warning Event on the pod (``machine.blocked_event``), and its batch goes on without it."""
        purpose = machine.Purpose.EVICT if isinstance(fx, machine.Evict) else machine.Purpose.TEMPLATE
        try:
            if isinstance(fx, machine.Evict):
                if self.writers.evictor is None:
                    raise KubeError("no evictor configured")
                self.writers.evictor.evict(fx.namespace, fx.pod, fx.uid)
            else:
                if self.writers.templates is None:
                    raise KubeError("no template patcher configured")
                self.writers.templates.patch(fx.namespace, fx.kind, fx.name, fx.values)
            self.count(1)
        except KubeError as err:
            kind = refusal_of(err)
            budget = kind == Refusal.DISRUPTION_BUDGET
            self.recording.fallback(purpose, "retry" if budget or isinstance(err, TemporaryKubeError) else "refused")
            r = machine.settle(r, fx.key, purpose, ok=False, generation=None, now_s=now_s, error=str(err),
                               retry_after_s=err.retry_after_s, refusal=kind)
            if budget:
                log.info("eviction blocked by the pod's disruption budget; the batch goes on, the pod is tried again "
                         "after its back-off", extra={"key": fx.key, "rollout": r.name, "error": str(err)})
                self.recording.event(r, machine.blocked_event(r, fx.key), obs)
            else:
                log.warning("fallback refused", extra={"key": fx.key, "purpose": purpose, "error": str(err),
                                                       "refusal": kind.value})
            return r, 0
        self.recording.fallback(purpose, "ok")
        return machine.settle(r, fx.key, purpose, ok=True, generation=None, now_s=now_s), 1

    # ------------------------------------------------------------------------------------------ serving gates
    def keep_gates(self, observations: Mapping[str, PodObservation], rollouts: Sequence[Rollout]) -> int:
        """Set the serving gate True on gated pods that have no such condition yet (new pods: until then they
        are never Ready) or whose gate is False without a drain of ours in progress (a drain that a crash or a
        rollback left behind). Returns how many were set."""
        gates = self.writers.gates
        if gates is None:
            return 0
        draining = {e.uid for r in rollouts if r.phase not in TERMINAL for e in r.entries
                    if e.drain and e.state in (EntryState.DRAINING, EntryState.APPLYING, EntryState.APPLIED)}
        count = 0
        for o in observations.values():
            if o.gated and not o.deleting and o.serving is not True and o.uid not in draining:
                try:
                    gates.set_serving(o.namespace, o.name, o.uid, True)
                    self.count(1)
                    count += 1
                except KubeError as err:
                    log.warning("serving gate not set", extra={"pod": o.key, "error": str(err)})
        return count
