"""The updater pass: read the cluster, advance open rollouts, start rollouts for pools that need one.

Owns acting on decisions. Per pass: one snapshot of the cluster; for each open rollout one step of the
state machine, performed as "journal the intent, resize, journal the outcome", so a crash between any two
writes is resumed without resizing a pod twice (an outcome a resume works out again from the pods, such as
resizes answered or pods seen verified, waits in memory for the next write: see ``derivable``); for each
pool without an open rollout, the planner's batches become a new ResizeRollout. A Halted rollout blocks its
pool until a person sets ``spec.retry`` (then it is closed as RolledBack and the pool is planned afresh).
Concurrency is capped globally.

The ``Executor`` coordinates; the parts are: ``ports.py`` (what it is given, as types), ``machine/entries.py``
(the journal of a new rollout, and what progress needs writing), ``machine/schedule.py`` (deciding the steps
under the cap), ``threads.py`` (the pass's threads), ``perform.py`` (the API calls and what their answers mean
for the journal) and ``recording.py`` (Events and metrics).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Generic, TypeVar, cast, overload

from podtailor.kube.errors import KubeError
from updater.kube.writes import rollout_name
from updater.metrics import UpdaterMetrics
from updater.observe import PodObservation
from updater.policy.types import Plan, PodView, RolloutPolicy
from updater.rollout.act.analysis import AnalysisRunner
from updater.rollout.act.perform import Performer
from updater.rollout.act.ports import (
    CgroupCheck,
    Evictions,
    PassSnapshot,
    Planner,
    PolicyOf,
    Read,
    Reads,
    Recorder,
    Resizer,
    ServingGates,
    Store,
    Templates,
    Tuning,
    Writers,
)
from updater.rollout.act.recording import Recording
from updater.rollout.act.threads import Threads
from updater.rollout.machine import lifecycle as machine
from updater.rollout.machine.analysis import checks_for
from updater.rollout.machine.entries import actionable, awaiting_pods, bake_until, journal_for, pools_to_start
from updater.rollout.machine.fallback import (
    budget_blocks,
    held_by_budget,
    infeasible_uids,
    mark_infeasible,
    reverted_templates,
    without_reverted,
)
from updater.rollout.machine.journal import BatchPhase, ContainerValues, EntryAction, Phase, Rollout
from updater.rollout.machine.schedule import Step, decide, free_slots, open_rollouts, wake_s

__all__ = ["Executor", "PassResult", "actionable"]
log = logging.getLogger("podtailor.updater")
T = TypeVar("T")
Plans = list[tuple[RolloutPolicy, Plan]]


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


class _In(Generic[T]):
    """An attribute of the executor kept in one of its parts: ``executor.resizer`` is ``executor.writers.resizer``
    (read and set: the commands and the drills swap a port after construction)."""

    def __init__(self, part: str) -> None:
        self.part, self.name = part, ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, obj: None, owner: type | None = None) -> _In[T]: ...

    @overload
    def __get__(self, obj: Executor, owner: type | None = None) -> T: ...

    def __get__(self, obj: Executor | None, owner: type | None = None) -> T | _In[T]:
        return self if obj is None else cast(T, getattr(getattr(obj, self.part), self.name))

    def __set__(self, obj: Executor, value: T) -> None:
        setattr(getattr(obj, self.part), self.name, value)


class Executor:
    """The pass's coordinator. Its ports are kept in groups (``reads``, ``writers``, ``tuning``, and the
    ``recording`` of Events and metrics) shared with the ``performer``; the keyword arguments, and the
    attributes of the same names, are those groups' fields."""

    read = _In[Read]("reads")
    read_fresh = _In[Read | None]("reads")
    planner = _In[Planner]("reads")
    policy_of = _In[PolicyOf]("reads")
    store = _In[Store]("writers")
    resizer = _In[Resizer]("writers")
    evictor = _In[Evictions | None]("writers")
    templates = _In[Templates | None]("writers")
    gates = _In[ServingGates | None]("writers")
    recorder = _In[Recorder]("recording")
    metrics = _In[UpdaterMetrics | None]("recording")
    timeouts = _In[machine.Timeouts | None]("tuning")
    parallelism = _In[int]("tuning")
    verify_poll_s = _In[float]("tuning")

    def __init__(self, *, read: Read, planner: Planner, store: Store, resizer: Resizer, recorder: Recorder,
                 policy: PolicyOf, timeouts: machine.Timeouts | None = None, evictor: Evictions | None = None,
                 templates: Templates | None = None, metrics: UpdaterMetrics | None = None, parallelism: int = 8,
                 verify_poll_s: float = 1.0, read_fresh: Read | None = None,
                 gates: ServingGates | None = None, cgroups: CgroupCheck | None = None,
                 analyses: AnalysisRunner | None = None) -> None:
        self.reads = Reads(read=read, planner=planner, policy_of=policy, read_fresh=read_fresh, cgroups=cgroups)
        self.writers = Writers(store=store, resizer=resizer, evictor=evictor, templates=templates, gates=gates)
        self.tuning = Tuning(timeouts=timeouts, parallelism=max(1, parallelism), verify_poll_s=verify_poll_s)
        self.recording = Recording(recorder, metrics)
        self.performer = Performer(self.writers, self.recording)
        self.fresh_reads = 0
        """Reads through ``read_fresh`` (a bake had ended)."""
        self.read_s = 0.0
        """How long the last read of the journals and the cluster took."""
        self.workloads: dict[tuple[str, str, str], machine.WorkloadObservation] = {}
        self.analyses = analyses
        """Canary analyses on the application's metrics (None: no Prometheus configured; the policies have none)."""

    @property
    def writes(self) -> int:
        """Writes to the API server by this executor (journal saves, resizes, evictions, patches, gates)."""
        return self.performer.writes

    # ------------------------------------------------------------------------------------------- reading
    def plan(self, now_s: float, rollouts: Sequence[Rollout] | None = None) -> tuple[PassSnapshot, Plans]:
        """One plan per policy, over the pods that policy covers (``policy(snapshot)`` groups them); pods whose
        in-place resize a journal found Infeasible go to the fallback, and pods whose eviction a journal shows
        refused by their PodDisruptionBudget are held until their back-off ends."""
        snap = self.read()
        journals = rollouts if rollouts is not None else self.store.list()
        return snap, self._plans(snap, journals, now_s)

    def as_known(self, journals: Sequence[Rollout]) -> list[Rollout]:
        """Each journal, or our version of it that is ahead only in derivable progress (``Performer.as_known``)."""
        return self.performer.as_known(journals)

    def _plans(self, snap: PassSnapshot, journals: Sequence[Rollout], now_s: float) -> Plans:
        known, reverted, blocks = infeasible_uids(journals), reverted_templates(journals), budget_blocks(journals)
        plans = []
        for policy, pods in self.policy_of(snap):
            raw = self.planner(
                pods=mark_infeasible(pods, known), targets=snap.targets, hpas=snap.hpas,
                limit_ranges=snap.limit_ranges, nodes=snap.nodes, policy=policy, now_s=now_s,
                approvals=snap.approvals, pod_level_resize_supported=snap.pod_level_resize_supported,
                quotas=snap.quotas, features=snap.features)
            plans.append((policy, held_by_budget(without_reverted(raw, reverted, policy), blocks, now_s)))
        return plans

    def _read(self, now_s: float, pool: ThreadPoolExecutor) -> tuple[list[Rollout], PassSnapshot, Plans]:
        """The journals and the cluster, read at the same time, and the plans."""
        t0 = time.monotonic()
        read_fresh = self.read_fresh
        if read_fresh is None:
            journals = pool.submit(self.store.list)
            snap = self.read()
            everything = self.as_known(journals.result())
        else:  # the journals first (from their cache): they say whether a bake has ended
            everything = self.as_known(self.store.list())
            if any((until := bake_until(r)) is not None and now_s >= until for r in everything):
                self.fresh_reads += 1
                snap = read_fresh()
            else:
                snap = self.read()
        if self.reads.cgroups is not None:  # what the verifying pods' cgroups hold, beside their status
            snap = self.reads.cgroups.checked(snap, everything, now_s)
        self.read_s = time.monotonic() - t0
        return everything, snap, self._plans(snap, everything, now_s)

    def _workloads(self, snap: PassSnapshot, rollouts: Sequence[Rollout]) -> dict[tuple[str, str, str],
                                                                                   machine.WorkloadObservation]:
        """Ready pods per workload, and the pod template of workloads with a template fallback in flight."""
        ready: dict[tuple[str, str, str], int] = {}
        for p in snap.pods:
            key = (p.namespace, p.workload_kind, p.workload_name)
            ready[key] = ready.get(key, 0) + int(p.ready and not p.deleting)
        templates: dict[tuple[str, str, str], tuple[ContainerValues, ...] | None] = {}
        for r in rollouts:
            for e in r.entries:
                if e.action == EntryAction.TEMPLATE and self.templates is not None and e.workload not in templates:
                    templates[e.workload] = self.templates.read(e.namespace, e.workload_kind, e.workload_name,
                                                                [v.name for v in e.after])
        keys = set(ready) | set(templates)
        return {k: machine.WorkloadObservation(ready=ready.get(k, 0), template=templates.get(k)) for k in keys}

    def _close_if_retried(self, r: Rollout) -> Rollout:
        """A Halted rollout whose ``spec.retry`` a person set: closed as RolledBack (saved now), so its pool is
        planned afresh. Any other rollout as it is."""
        if r.phase != Phase.HALTED or not self.store.retry_requested(r.name):
            return r
        return self.performer.save(replace(r, phase=Phase.ROLLED_BACK, message=f"closed by retry; {r.message}"))

    # -------------------------------------------------------------------------------------------- a pass
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
        with Threads(self.parallelism) as threads:
            everything, snap, plans = self._read(now_s, threads.each)
            self.recording.admission_held(snap.pods)
            self.keep_gates(snap.observations, everything)
            first_plans, now = plans, now_s
            steps, started = self._round(now, everything, snap, plans, touched, start_new=True)
            while True:
                for step in steps:
                    advanced.append(step.old.name)
                    latest[step.new.name] = step.new
                    if step.acts:
                        touched[step.new.name] = step.new
                        threads.start(self.performer.step, step, snap.observations, now)
                if not threads.running:
                    break
                # The rollouts decided just now with nothing to do: when does one of them need a look again?
                wake = wake_s([step.new for step in steps if step.new.name not in touched], now, self.verify_poll_s,
                              self.read_s)
                steps = []
                for r, n in threads.collect(wake):  # a crash (any other exception) is raised here
                    touched[r.name], latest[r.name], resized = r, r, resized + n
                if not threads.running:
                    break
                now = now_s + (time.monotonic() - t0)
                try:
                    everything, snap, plans = self._read(now, threads.each)
                except KubeError as err:  # the next pass re-reads; finish what is in flight
                    log.warning("re-read during the pass failed", extra={"error": str(err)})
                    continue
                steps, _ = self._round(now, everything, snap, plans, touched, start_new=False)
        last = {**{r.name: r for r in everything}, **latest}
        self.recording.open_rollouts(last.values())
        if self.analyses is not None:
            self.analyses.forget({n for n, r in last.items() if r.phase in (Phase.PROGRESSING, Phase.BAKING)})
        self.recording.quota_held(first_plans)
        bake_ends = [until for r in latest.values() if (until := bake_until(r)) is not None]
        return PassResult(started=tuple(started), advanced=tuple(dict.fromkeys(advanced)), resized=resized,
                          writes=self.writes - writes_before, plans=tuple(first_plans),
                          next_bake_end_s=min(bake_ends, default=None), awaiting_pods=awaiting_pods(last.values()))

    def _round(self, now_s: float, everything: Sequence[Rollout], snap: PassSnapshot, plans: Plans,
               touched: Mapping[str, Rollout], start_new: bool) -> tuple[list[Step], list[str]]:
        """Decide the steps of the open rollouts not yet performed in this pass and, with ``start_new``,
        create the rollouts of pools that need one; returns the steps and the names of the new rollouts."""
        rollouts = open_rollouts(everything, plans)
        fresh = [r for r in rollouts if r.name not in touched]
        self.workloads = self._workloads(snap, fresh)
        slots = free_slots(plans, [*fresh, *touched.values()])
        by_name = {p.name: (p, plan) for p, plan in plans}
        steps: list[Step] = []
        for r in sorted(fresh, key=lambda r: r.name):
            policy, plan = by_name.get(r.policy, (None, None))
            frozen = plan is not None and r.pool in plan.frozen_pools
            r = self._close_if_retried(r)
            failure, events = self._analysis_gate(r, policy, snap, now_s)
            step = decide(r, snap.observations, now_s, slots=slots, timeouts=self._timeouts(policy),
                          frozen=frozen, workloads=self.workloads, gate_failure=failure)
            slots = max(0, slots - step.sends)
            steps.append(replace(step, effects=(*events, *step.effects)))
        started: list[str] = []
        if not start_new:
            return steps, started
        busy = {(r.policy, r.pool) for r in rollouts}
        pods = {f"{p.namespace}/{p.name}": p for p in snap.pods}
        ready = {k: v.ready for k, v in self.workloads.items()}
        replicas = {(t.namespace, t.workload_kind, t.workload_name): t.replicas for t in snap.targets}
        refusals = {uid: block.refusals for uid, block in budget_blocks(everything).items()}
        for policy, plan in plans:
            for pool in pools_to_start(plan):
                if (policy.name, pool) in busy or slots <= 0 or pool in plan.frozen_pools:
                    continue
                batches, entries = journal_for(policy, plan, pool, snap.observations, pods, ready, replicas,
                                               refusals)
                if not entries:
                    continue
                draft = Rollout(name=rollout_name(policy.name, pool, now_s), pool=pool, policy=policy.name,
                                batches=tuple(batches), entries=tuple(entries))
                started.append(draft.name)
                self.workloads.update(self._workloads(snap, [draft]))  # read its templates before its first step
                failure, events = self._analysis_gate(draft, policy, snap, now_s)  # baselines before any resize
                step = decide(draft, snap.observations, now_s, slots=slots, timeouts=self._timeouts(policy),
                              frozen=False, workloads=self.workloads, gate_failure=failure)
                slots = max(0, slots - step.sends)
                steps.append(replace(step, effects=(*events, *step.effects), create=True))
        return steps, started

    def _analysis_gate(self, r: Rollout, policy: RolloutPolicy | None, snap: PassSnapshot,
                       now_s: float) -> tuple[str, list[machine.Effect]]:
        """The canary analyses of the rollout's current batch (``AnalysisRunner.gate``): a failure, and Events."""
        if self.analyses is None:
            return self._unmeasurable(r, policy, snap), []
        failure, events = self.analyses.gate(r, policy, snap.analyses, now_s)
        return failure, list(events)

    @staticmethod
    def _unmeasurable(r: Rollout, policy: RolloutPolicy | None, snap: PassSnapshot) -> str:
        """Without a Prometheus, a batch that has analyses to run is failed before it is sent, never passed."""
        if r.phase not in (Phase.PROGRESSING, Phase.BAKING) or r.current_batch >= len(r.batches) or \
                r.batches[r.current_batch].phase != BatchPhase.PENDING:
            return ""
        if not (policy and policy.analyses) and not any(e.workload in snap.analyses for e in r.entries):
            return ""  # nothing declared anywhere (the common case; a snapshot without analyses is not read)
        checks, problems = checks_for(r, r.current_batch, policy.analyses if policy else (), snap.analyses)
        if checks or problems:
            return "the batch has canary analyses but the updater was started without --prometheus-url"
        return ""

    def _timeouts(self, policy: RolloutPolicy | None) -> machine.Timeouts:
        if self.timeouts is not None:
            return self.timeouts
        if policy is None:
            return machine.Timeouts()
        return machine.Timeouts(verify_s=policy.in_progress_timeout_s, deferred_s=policy.deferred_timeout_s)

    # --------------------------------------------------------------------------------- outside a pass
    def perform(self, old: Rollout, new: Rollout, effects: Sequence[machine.Effect],
                obs: Mapping[str, PodObservation], now_s: float) -> tuple[Rollout, int]:
        """Perform one decided step outside a pass (the ``rollback`` command); returns the rollout as saved
        and how many effects succeeded."""
        with ThreadPoolExecutor(max_workers=self.parallelism, thread_name_prefix="resize") as sends:
            return self.performer.step(old, new, tuple(effects), obs, now_s, sends)

    def keep_gates(self, observations: Mapping[str, PodObservation], rollouts: Sequence[Rollout]) -> int:
        """Serving gates set True where nothing of ours keeps them False (``Performer.keep_gates``)."""
        return self.performer.keep_gates(observations, rollouts)

    def _note_admission_held(self, pods: Sequence[PodView]) -> None:
        self.recording.admission_held(pods)
