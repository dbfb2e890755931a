"""The updater pass: read the cluster, advance open rollouts, start rollouts for pools that need one.

Owns acting on decisions. Per pass: one snapshot of the cluster; for each open rollout one step of the
state machine, performed as "journal the intent, resize, journal the outcome", so a crash between any two
writes is resumed without resizing a pod twice (an outcome a resume works out again from the pods, such as
resizes answered or pods seen verified, waits in memory for the next write: see ``derivable``); for each
pool without an open rollout, the planner's batches become a new ResizeRollout. A Halted rollout blocks its
pool until a person sets ``spec.retry`` (then it is closed as RolledBack and the pool is planned afresh).
Concurrency is capped globally.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from podtailor.kube.errors import KubeError, TemporaryKubeError
from podtailor.resize.types import Reason
from updater.answers import Refusal
from updater.kube.refusals import refusal_of
from updater.metrics import UpdaterMetrics
from updater.observe import PodObservation
from updater.policy.quota import HELD_ANNOTATION
from updater.policy.types import Action, Plan, PodDecision, PodView, RolloutPolicy
from updater.rollout import machine
from updater.rollout.fallback import (
    fallback_entries,
    infeasible_uids,
    mark_infeasible,
    reverted_templates,
    without_reverted,
)
from updater.rollout.journal import (
    TERMINAL,
    BatchPhase,
    BatchRecord,
    ContainerValues,
    Entry,
    EntryState,
    Phase,
    Rollout,
)
from updater.rollout.writes import Conflict, rollout_name

log = logging.getLogger("podtailor.updater")
MAX_ENTRIES_PER_ROLLOUT = 1000
"""The journal is one object: about 700 bytes per entry keeps a rollout well under etcd's 1.5 MiB request
limit. A pool with more pods to change is covered by consecutive rollouts (the rest is planned next)."""
MAX_ROLLOUT_THREADS = 16
"""Rollouts performed at once in a pass (more wait their turn); their resizes share ``parallelism`` threads."""


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


class Snapshot(Protocol):
    pods: Sequence[PodView]
    observations: Mapping[str, PodObservation]


class Store(Protocol):
    def list(self) -> list[Rollout]: ...

    def create(self, r: Rollout) -> Rollout: ...

    def save(self, r: Rollout) -> Rollout: ...

    def retry_requested(self, name: str) -> bool: ...


class Resizer(Protocol):
    def resize(self, namespace: str, pod: str, uid: str, resource_version: str,
               values: Sequence[ContainerValues]) -> int: ...


class Evictions(Protocol):
    def evict(self, namespace: str, pod: str, uid: str) -> None: ...


class Templates(Protocol):
    def read(self, namespace: str, kind: str, name: str,
             containers: Sequence[str]) -> tuple[ContainerValues, ...] | None: ...

    def patch(self, namespace: str, kind: str, name: str, values: Sequence[ContainerValues]) -> None: ...


class ServingGates(Protocol):
    def set_serving(self, namespace: str, pod: str, uid: str, serving: bool) -> None: ...


class Recorder(Protocol):
    def record(self, *, namespace: str, kind: str, name: str, uid: str, reason: str, message: str,
               warning: bool = False) -> None: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class PassResult:
    started: tuple[str, ...] = ()
    advanced: tuple[str, ...] = ()
    resized: int = 0
    writes: int = 0
    plans: tuple[tuple[RolloutPolicy, Plan], ...] = field(default_factory=tuple)
    next_bake_end_s: float | None = None
    """The earliest end of a bake in progress after the pass (the clock of ``now_s``): the next pass is due
    then at the latest, so a loop with a long interval does not let a finished bake wait."""
    awaiting_pods: bool = False
    """A rollout waits for its pods after the pass (a batch being applied or verified, or a rollback): a loop
    that is told when a pod changes may pass again then instead of at its interval."""


@dataclass(frozen=True, slots=True, kw_only=True)
class _Step:
    """One rollout's step in a pass, decided (pure) before anything is performed."""

    old: Rollout
    new: Rollout
    effects: tuple[machine.Effect, ...]
    create: bool = False
    """A new rollout: created with this step's journal as its first status (the intent, before any resize)."""

    @property
    def sends(self) -> int:
        """Slots the step takes from the global concurrency: every resize, eviction or template patch."""
        return sum(1 for e in self.effects if not isinstance(e, machine.Event))


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
            sidecars = {c.name for c in pods[key].containers if c.sidecar} if key in pods else set()
            o = obs.get(key)
            restarts = {c.name: (o.containers[c.name].restart_count if o and c.name in o.containers else 0)
                        for c in d.changes}
            entries.append(Entry(
                namespace=d.namespace, pod=d.pod, uid=d.uid, workload_kind=d.workload_kind,
                workload_name=d.workload_name, batch=index,
                before=tuple(ContainerValues(name=c.name, requests=c.old_requests, limits=c.old_limits,
                                             sidecar=c.name in sidecars) for c in d.changes),
                after=tuple(ContainerValues(name=c.name, requests=c.new_requests, limits=c.new_limits,
                                            sidecar=c.name in sidecars) for c in d.changes),
                restarting=frozenset(c.name for c in d.changes if c.restarts), restarts_before=restarts,
                drain=any(c.restarts for c in d.changes) and key in pods and pods[key].gated))
    return batches, entries


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


def _bake_until(r: Rollout) -> float | None:
    """When the bake of the rollout's current batch ends, while the rollout is baking it; None otherwise."""
    if r.phase != Phase.BAKING or r.current_batch >= len(r.batches):
        return None
    b = r.batches[r.current_batch]
    return b.bake_until_s if b.phase == BatchPhase.BAKING else None


class Executor:
    def __init__(self, *, read: Callable[[], Any], planner: Callable[..., Plan], store: Store, resizer: Resizer,
                 recorder: Recorder, policy: Callable[[Any], list[tuple[RolloutPolicy, Sequence[PodView]]]],
                 timeouts: machine.Timeouts | None = None, evictor: Evictions | None = None,
                 templates: Templates | None = None, metrics: UpdaterMetrics | None = None, parallelism: int = 8,
                 verify_poll_s: float = 1.0, read_fresh: Callable[[], Any] | None = None,
                 gates: ServingGates | None = None) -> None:
        self.read, self.planner, self.store, self.resizer, self.recorder = read, planner, store, resizer, recorder
        self.read_fresh = read_fresh
        """A read that lists pods from the API server even where ``read`` serves them from a watch-fed cache: used
        when a bake has ended, so the step that starts the next batch never rests on a view that may be up to a
        silent watch's bound old (an OOM kill in the last seconds of the bake must halt the pool, not be missed)."""
        self.fresh_reads = 0
        self.evictor, self.templates, self.gates = evictor, templates, gates
        self.parallelism = max(1, parallelism)
        """Resize requests in flight at once within a pass, over all rollouts (each carries its own preconditions)."""
        self.verify_poll_s = verify_poll_s
        """While a pass is still sending, how often an idle rollout's batch is re-read for verification (at
        least twice the last read's duration apart, so a slow read on a big cluster is not repeated back to back)."""
        self.read_s = 0.0
        self.policy_of = policy
        self.timeouts = timeouts
        self.metrics = metrics
        self.writes = 0
        self._writes_lock = threading.Lock()
        self.workloads: dict[tuple[str, str, str], machine.WorkloadObservation] = {}
        self._ahead: dict[str, Rollout] = {}
        """Rollouts known here to be further on than their journal only in what a crash would work out again
        (see ``derivable``): not written; used while the journal is still at the version they were built on."""
        self._ahead_lock = threading.Lock()
        self._held_noted: set[str] = set()
        """Uids of pods whose admission-held annotation has been recorded as an Event by this process."""

    def plan(self, now_s: float, rollouts: Sequence[Rollout] | None = None) -> tuple[Any, list[tuple[RolloutPolicy,
                                                                                                      Plan]]]:
        """One plan per policy, over the pods that policy covers (``policy(snapshot)`` groups them); pods whose
        in-place resize a journal found Infeasible go to the fallback."""
        snap = self.read()
        journals = rollouts if rollouts is not None else self.store.list()
        return snap, self._plans(snap, journals, now_s)

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

    def _plans(self, snap: Any, journals: Sequence[Rollout], now_s: float) -> list[tuple[RolloutPolicy, Plan]]:
        known, reverted = infeasible_uids(journals), reverted_templates(journals)
        plans = []
        for policy, pods in self.policy_of(snap):
            raw = self.planner(
                pods=mark_infeasible(pods, known), targets=snap.targets, hpas=snap.hpas,
                limit_ranges=snap.limit_ranges, nodes=snap.nodes, policy=policy, now_s=now_s,
                approvals=snap.approvals, pod_level_resize_supported=snap.pod_level_resize_supported,
                quotas=getattr(snap, "quotas", ()), features=getattr(snap, "features", None))
            plans.append((policy, without_reverted(raw, reverted, policy)))
        return plans

    def _read(self, now_s: float, pool: ThreadPoolExecutor) -> tuple[list[Rollout], Any, list[tuple[RolloutPolicy,
                                                                                                     Plan]]]:
        """The journals and the cluster, read at the same time, and the plans."""
        t0 = time.monotonic()
        if self.read_fresh is None:
            journals = pool.submit(self.store.list)
            snap = self.read()
            everything = self.as_known(journals.result())
        else:  # the journals first (from their cache): they say whether a bake has ended
            everything = self.as_known(self.store.list())
            if any((until := _bake_until(r)) is not None and now_s >= until for r in everything):
                self.fresh_reads += 1
                snap = self.read_fresh()
            else:
                snap = self.read()
        self.read_s = time.monotonic() - t0
        return everything, snap, self._plans(snap, everything, now_s)

    def run_pass(self, now_s: float) -> PassResult:
        """Decide every open rollout's step (one after another, pure: the global slots are divided up front,
        by rollout name), then perform the steps at once, a thread per rollout. While some are still sending,
        the idle rollouts whose bake has ended or whose batch awaits verification are re-read and stepped
        too, so one pool's large batch does not hold back the others. Returns when every step is done."""
        t0, writes_before = time.monotonic(), self.writes
        advanced: list[str] = []
        latest: dict[str, Rollout] = {}  # each rollout as this pass last knew it
        resized = 0
        touched: dict[str, Rollout] = {}  # performed in this pass: our newest version of it
        running: dict[Future[tuple[Rollout, int]], str] = {}
        with ThreadPoolExecutor(max_workers=self.parallelism, thread_name_prefix="resize") as sends, \
                ThreadPoolExecutor(max_workers=MAX_ROLLOUT_THREADS, thread_name_prefix="rollout") as each:
            everything, snap, plans = self._read(now_s, each)
            self._note_admission_held(snap.pods)
            self.keep_gates(snap.observations, everything)
            first_plans, now = plans, now_s
            steps, started = self._round(now, everything, snap, plans, touched, start_new=True)
            while True:
                for step in steps:
                    advanced.append(step.old.name)
                    latest[step.new.name] = step.new
                    if step.effects or step.new != step.old or step.create:
                        touched[step.new.name] = step.new
                        running[each.submit(self._perform, step.old, step.new, step.effects, snap.observations,
                                            now, sends, create=step.create)] = step.new.name
                if not running:
                    break
                # The rollouts decided just now with nothing to do: when does one of them need a look again?
                wake = self._wake_s([step.new for step in steps if step.new.name not in touched], now)
                deadline = None if wake is None else time.monotonic() + wake
                steps = []
                while running and (deadline is None or time.monotonic() < deadline):
                    timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
                    done, _ = wait(running, timeout=timeout, return_when=FIRST_COMPLETED)
                    for f in done:
                        running.pop(f)
                        r, n = f.result()  # a crash (any other exception) is raised here, after the others end
                        touched[r.name], latest[r.name], resized = r, r, resized + n
                if not running:
                    break
                now = now_s + (time.monotonic() - t0)
                try:
                    everything, snap, plans = self._read(now, each)
                except KubeError as err:  # the next pass re-reads; finish what is in flight
                    log.warning("re-read during the pass failed", extra={"error": str(err)})
                    continue
                steps, _ = self._round(now, everything, snap, plans, touched, start_new=False)
        self._publish_open({**{r.name: r for r in everything}, **latest}.values())
        self._publish_quota(first_plans)
        bake_ends = [until for r in latest.values() if (until := _bake_until(r)) is not None]
        awaiting = any(r.phase == Phase.ROLLING_BACK or (
            r.phase in (Phase.PROGRESSING, Phase.BAKING) and r.current_batch < len(r.batches)
            and r.batches[r.current_batch].phase in (BatchPhase.APPLYING, BatchPhase.VERIFYING))
            for r in {**{r.name: r for r in everything}, **latest}.values())
        return PassResult(started=tuple(started), advanced=tuple(dict.fromkeys(advanced)), resized=resized,
                          writes=self.writes - writes_before, plans=tuple(first_plans),
                          next_bake_end_s=min(bake_ends, default=None), awaiting_pods=awaiting)

    def _round(self, now_s: float, everything: Sequence[Rollout], snap: Any,
               plans: Sequence[tuple[RolloutPolicy, Plan]], touched: Mapping[str, Rollout],
               start_new: bool) -> tuple[list[_Step], list[str]]:
        """Decide the steps of the open rollouts not yet performed in this pass and, with ``start_new``,
        create the rollouts of pools that need one; returns the steps and the names of the new rollouts."""
        names = {p.name for p, _ in plans}
        # Only the rollouts of policies that exist now: a deleted policy's rollouts stop where they are.
        rollouts = [r for r in everything if r.phase not in (Phase.COMPLETED, Phase.ROLLED_BACK)
                    and r.policy in names]
        fresh = [r for r in rollouts if r.name not in touched]
        self.workloads = self._workloads(snap, fresh)
        counted = [*fresh, *touched.values()]
        in_flight = sum(1 for r in counted for e in r.entries if e.state in (EntryState.APPLYING, EntryState.APPLIED))
        limit = min((p.max_concurrent for p, _ in plans), default=50)
        slots = max(0, limit - in_flight)
        by_name = {p.name: (p, plan) for p, plan in plans}
        steps: list[_Step] = []
        for r in sorted(fresh, key=lambda r: r.name):
            policy, plan = by_name.get(r.policy, (None, None))
            frozen = plan is not None and r.pool in plan.frozen_pools
            step = self._decide(r, snap, now_s, slots, self._timeouts(policy), frozen=frozen)
            slots = max(0, slots - step.sends)
            steps.append(step)
        started: list[str] = []
        if not start_new:
            return steps, started
        busy = {(r.policy, r.pool) for r in rollouts}
        pods = {f"{p.namespace}/{p.name}": p for p in snap.pods}
        ready = {k: v.ready for k, v in self.workloads.items()}
        replicas = {(t.namespace, t.workload_kind, t.workload_name): t.replicas for t in snap.targets}
        for policy, plan in plans:
            pools = {b.pool for b in plan.batches} | {d.pool for d in plan.decisions if d.action == Action.FALLBACK}
            for pool in sorted(pools):
                if (policy.name, pool) in busy or slots <= 0 or pool in plan.frozen_pools:
                    continue
                batches, entries = entries_for(plan.decisions, plan, pool, snap.observations, pods)
                more_batches, more = fallback_entries(plan.decisions, pool, policy, ready, replicas, len(batches))
                batches, entries = cap_entries(batches + more_batches, entries + more, MAX_ENTRIES_PER_ROLLOUT)
                if not entries:
                    continue
                draft = Rollout(name=rollout_name(policy.name, pool, now_s), pool=pool, policy=policy.name,
                                batches=tuple(batches), entries=tuple(entries))
                started.append(draft.name)
                self.workloads.update(self._workloads(snap, [draft]))  # read its templates before its first step
                step = self._decide(draft, snap, now_s, slots, self._timeouts(policy), frozen=False)
                slots = max(0, slots - step.sends)
                steps.append(replace(step, create=True))
        return steps, started

    def _wake_s(self, idle: Sequence[Rollout], now_s: float) -> float | None:
        """Seconds until an idle rollout has something to do while others are still sending: its bake ends,
        or (every ``verify_poll_s``, or twice the last read's duration) its batch may have been verified. None:
        nothing before the pass ends."""
        waits = []
        for r in idle:
            if r.phase not in (Phase.PROGRESSING, Phase.BAKING) or r.current_batch >= len(r.batches):
                continue
            batch = r.batches[r.current_batch]
            if batch.phase == BatchPhase.BAKING and batch.bake_until_s is not None:
                waits.append(max(0.0, batch.bake_until_s - now_s))
            elif batch.phase == BatchPhase.VERIFYING:
                waits.append(max(self.verify_poll_s, 2 * self.read_s))
        return min(waits, default=None)

    def _timeouts(self, policy: RolloutPolicy | None) -> machine.Timeouts:
        if self.timeouts is not None:
            return self.timeouts
        if policy is None:
            return machine.Timeouts()
        return machine.Timeouts(verify_s=policy.in_progress_timeout_s, deferred_s=policy.deferred_timeout_s)

    # ----------------------------------------------------------------------------------------------------
    def _decide(self, r: Rollout, snap: Any, now_s: float, slots: int, timeouts: machine.Timeouts,
                frozen: bool) -> _Step:
        """The rollout's next step, decided but not performed (a Halted one closed here if retry was asked)."""
        if r.phase == Phase.HALTED:
            if self.store.retry_requested(r.name):
                r = self._save(replace(r, phase=Phase.ROLLED_BACK, message=f"closed by retry; {r.message}"))
            return _Step(old=r, new=r, effects=())
        new, effects = machine.advance(r, snap.observations, now_s, slots=slots, timeouts=timeouts, frozen=frozen,
                                       workloads=self.workloads)
        return _Step(old=r, new=new, effects=tuple(effects))

    def perform(self, old: Rollout, new: Rollout, effects: Sequence[machine.Effect],
                obs: Mapping[str, PodObservation], now_s: float) -> tuple[Rollout, int]:
        """Perform one decided step outside a pass (the ``rollback`` command); returns the rollout as saved
        and how many effects succeeded."""
        with ThreadPoolExecutor(max_workers=self.parallelism, thread_name_prefix="resize") as sends:
            return self._perform(old, new, tuple(effects), obs, now_s, sends)

    def _workloads(self, snap: Any, rollouts: Sequence[Rollout]) -> dict[tuple[str, str, str],
                                                                          machine.WorkloadObservation]:
        """Ready pods per workload, and the pod template of workloads with a template fallback in flight."""
        ready: dict[tuple[str, str, str], int] = {}
        for p in snap.pods:
            key = (p.namespace, p.workload_kind, p.workload_name)
            ready[key] = ready.get(key, 0) + int(p.ready and not p.deleting)
        templates: dict[tuple[str, str, str], tuple[ContainerValues, ...] | None] = {}
        for r in rollouts:
            for e in r.entries:
                if e.action == "template" and self.templates is not None and e.workload not in templates:
                    templates[e.workload] = self.templates.read(e.namespace, e.workload_kind, e.workload_name,
                                                                [v.name for v in e.after])
        keys = set(ready) | set(templates)
        return {k: machine.WorkloadObservation(ready=ready.get(k, 0), template=templates.get(k)) for k in keys}

    def _perform(self, old: Rollout, r: Rollout, effects: Sequence[machine.Effect],
                 obs: Mapping[str, PodObservation], now_s: float, sends: ThreadPoolExecutor,
                 create: bool = False) -> tuple[Rollout, int]:
        resizes = [e for e in effects if not isinstance(e, machine.Event)]
        try:
            if create:  # the object and its first status: the intent is durable before anything is done
                r = self.store.create(r)
                self._count(2)
                self._event(r, machine.Event(namespace="", pod=None, reason="RolloutStarted", message=(
                    f"pool {r.pool}: {len(r.entries)} pods in {len(r.batches)} batches")))
            elif resizes or not derivable(old, r):
                r = self._save(r)  # the intent is durable before anything is done
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
                    r, ok = self._fallback(r, rz, now_s)
                done += ok
            if resizes and (done < len(resizes) or not derivable(intent, r)):
                r = self._save(r)  # a refusal or a "not now" is written, as is all but plain answers
            elif resizes:
                self._keep_ahead(r)  # every resize answered: the journal's Applying says as much after a crash
        except Conflict:
            log.info("rollout changed by another writer; re-reading next pass", extra={"rollout": r.name})
            return r, 0
        for ev in effects:
            if isinstance(ev, machine.Event):
                self._event(r, ev, obs)
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
                return rz.key, self.resizer.resize(rz.namespace, rz.pod, rz.uid, o.resource_version, rz.values)
            except (Conflict, KubeError) as err:
                return rz.key, err

        if len(resizes) <= 1:
            return dict(send(rz) for rz in resizes)
        return dict(sends.map(send, resizes))

    def _settle_resize(self, r: Rollout, rz: machine.Resize, outcome: int | Exception | None,
                       now_s: float) -> tuple[Rollout, int]:
        if outcome is None or isinstance(outcome, Conflict | TemporaryKubeError):
            # The pod moved on, or the API server said "not now" (429, 5xx, timeout): the entry stays Applying
            # and the next pass re-reads the pod and resumes from its spec.
            self._count_resize("retry")
            return r, 0
        if isinstance(outcome, Exception):
            kind = refusal_of(outcome)
            log.warning("resize refused", extra={"pod": rz.key, "purpose": rz.purpose, "error": str(outcome),
                                                 "refusal": kind.value})
            self._count_resize("quota" if kind == Refusal.QUOTA else "refused")
            return machine.settle(r, rz.key, rz.purpose, ok=False, generation=None, now_s=now_s,
                                  error=str(outcome), refusal=kind), 0
        self._count(1)
        self._count_resize("ok")
        return machine.settle(r, rz.key, rz.purpose, ok=True, generation=outcome, now_s=now_s), 1

    def _set_serving(self, r: Rollout, fx: machine.SetServing, now_s: float) -> tuple[Rollout, int]:
        try:
            if self.gates is None:
                raise KubeError("no serving-gate writer configured")
            self.gates.set_serving(fx.namespace, fx.pod, fx.uid, fx.serving)
            self._count(1)
        except KubeError as err:
            log.warning("serving gate not set", extra={"key": fx.key, "serving": fx.serving, "error": str(err)})
            return machine.settle(r, fx.key, "serving", ok=False, generation=None, now_s=now_s, error=str(err)), 0
        return machine.settle(r, fx.key, "serving", ok=True, generation=None, now_s=now_s), 1

    def keep_gates(self, observations: Mapping[str, PodObservation], rollouts: Sequence[Rollout]) -> int:
        """Set the serving gate True on gated pods that have no such condition yet (new pods: until then they
        are never Ready) or whose gate is False without a drain of ours in progress (a drain that a crash or a
        rollback left behind). Returns how many were set."""
        if self.gates is None:
            return 0
        draining = {e.uid for r in rollouts if r.phase not in TERMINAL for e in r.entries
                    if e.drain and e.state in (EntryState.DRAINING, EntryState.APPLYING, EntryState.APPLIED)}
        count = 0
        for o in observations.values():
            if o.gated and not o.deleting and o.serving is not True and o.uid not in draining:
                try:
                    self.gates.set_serving(o.namespace, o.name, o.uid, True)
                    self._count(1)
                    count += 1
                except KubeError as err:
                    log.warning("serving gate not set", extra={"pod": o.key, "error": str(err)})
        return count

    def _fallback(self, r: Rollout, fx: machine.Evict | machine.PatchTemplate, now_s: float) -> tuple[Rollout, int]:
        purpose = "evict" if isinstance(fx, machine.Evict) else "template"
        try:
            if isinstance(fx, machine.Evict):
                if self.evictor is None:
                    raise KubeError("no evictor configured")
                self.evictor.evict(fx.namespace, fx.pod, fx.uid)
            else:
                if self.templates is None:
                    raise KubeError("no template patcher configured")
                self.templates.patch(fx.namespace, fx.kind, fx.name, fx.values)
            self._count(1)
        except KubeError as err:
            log.warning("fallback refused", extra={"key": fx.key, "purpose": purpose, "error": str(err)})
            self._count_fallback(purpose, "retry" if isinstance(err, TemporaryKubeError) else "refused")
            return machine.settle(r, fx.key, purpose, ok=False, generation=None, now_s=now_s, error=str(err),
                                  retry_after_s=err.retry_after_s, refusal=refusal_of(err)), 0
        self._count_fallback(purpose, "ok")
        return machine.settle(r, fx.key, purpose, ok=True, generation=None, now_s=now_s), 1

    def _count_resize(self, outcome: str) -> None:
        if self.metrics is not None:
            self.metrics.resizes.labels(outcome=outcome).inc()

    def _count_fallback(self, mode: str, outcome: str) -> None:
        if self.metrics is not None:
            self.metrics.fallbacks.labels(mode=mode, outcome=outcome).inc()

    def _publish_open(self, rollouts: Iterable[Rollout]) -> None:
        """The open-rollouts gauge: rollouts not Completed or RolledBack, by pool and phase, as of this pass."""
        if self.metrics is None:
            return
        counts = Counter((r.pool, r.phase.value) for r in rollouts if r.phase not in TERMINAL)
        self.metrics.open_rollouts.clear()
        for (pool, state), n in counts.items():
            self.metrics.open_rollouts.labels(pool=pool, state=state).set(n)

    def _note_admission_held(self, pods: Sequence[PodView]) -> None:
        """A Warning Event, once per pod, on each pod the webhook left at its own resources because its target
        would exceed a ResourceQuota (``HELD_ANNOTATION``): the webhook is read-only, the updater records it."""
        current = set()
        for p in pods:
            why = p.annotations.get(HELD_ANNOTATION)
            if not why:
                continue
            current.add(p.uid)
            if p.uid not in self._held_noted:
                self.recorder.record(namespace=p.namespace, kind="Pod", name=p.name, uid=p.uid,
                                     reason="TargetExceedsQuota", message=why, warning=True)
        self._held_noted = current

    def _publish_quota(self, plans: Sequence[tuple[RolloutPolicy, Plan]]) -> None:
        """Pods whose resize or fallback a ResourceQuota holds back in this pass's plans, by what was held."""
        if self.metrics is None:
            return
        held = Counter("fallback" if d.held == Action.FALLBACK else "resize"
                       for _, plan in plans for d in plan.decisions if d.reason == Reason.QUOTA)
        for action in ("resize", "fallback"):
            self.metrics.quota_held.labels(action=action).set(held.get(action, 0))

    def _save(self, r: Rollout) -> Rollout:
        self._count(1)
        saved = self.store.save(r)
        with self._ahead_lock:
            self._ahead.pop(r.name, None)
        return saved

    def _keep_ahead(self, r: Rollout) -> None:
        with self._ahead_lock:
            self._ahead[r.name] = r

    def _count(self, writes: int) -> None:
        with self._writes_lock:  # rollouts are performed on threads of their own
            self.writes += writes

    def _event(self, r: Rollout, ev: machine.Event, obs: Mapping[str, PodObservation] | None = None) -> None:
        if ev.pod:
            o = (obs or {}).get(f"{ev.namespace}/{ev.pod}")
            self.recorder.record(namespace=ev.namespace, kind="Pod", name=ev.pod, uid=o.uid if o else "",
                                 reason=ev.reason, message=ev.message, warning=ev.warning)
        elif ev.kind and ev.name:  # about a workload: where its owners look
            self.recorder.record(namespace=ev.namespace, kind=ev.kind, name=ev.name, uid="", reason=ev.reason,
                                 message=ev.message, warning=ev.warning)
        else:
            self.recorder.record(namespace="", kind="ResizeRollout", name=r.name, uid="", reason=ev.reason,
                                 message=ev.message, warning=ev.warning)


def actionable(plan: Plan) -> list[PodDecision]:
    return [d for d in plan.decisions if d.action in (Action.RESIZE_ONLINE, Action.RESIZE_RESTART)]
