"""Scheduling a pass: which rollout steps when, under the global cap, and on which threads.

Owns the ``Step`` (one rollout's next step, decided before anything is performed), ``decide`` (pure: the state
machine's step for a rollout, given the slots left), how the global concurrency is divided (``free_slots``:
``max_concurrent`` less the resizes already in flight), when an idle rollout needs a look again while others
are still sending (``wake_s``), and the pass's threads (``Threads``: a thread per rollout being performed, and
``parallelism`` threads for the resizes they send).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from types import TracebackType

from updater.observe import PodObservation
from updater.policy.types import Plan, RolloutPolicy
from updater.rollout.machine import lifecycle as machine
from updater.rollout.machine.journal import BatchPhase, EntryState, Phase, Rollout

MAX_ROLLOUT_THREADS = 16
"""Rollouts performed at once in a pass (more wait their turn); their resizes share ``parallelism`` threads."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Step:
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

    @property
    def acts(self) -> bool:
        """Whether there is anything to perform: an effect, a journal that moved, or a rollout to create."""
        return bool(self.effects) or self.new != self.old or self.create


def decide(r: Rollout, obs: Mapping[str, PodObservation], now_s: float, *, slots: int, timeouts: machine.Timeouts,
           frozen: bool, workloads: machine.Workloads) -> Step:
    """The rollout's next step, decided but not performed. A Halted rollout waits for a person (``spec.retry``:
    the executor reads that, and closes it, before deciding)."""
    if r.phase == Phase.HALTED:
        return Step(old=r, new=r, effects=())
    new, effects = machine.advance(r, obs, now_s, slots=slots, timeouts=timeouts, frozen=frozen, workloads=workloads)
    return Step(old=r, new=new, effects=tuple(effects))


def open_rollouts(everything: Sequence[Rollout], plans: Sequence[tuple[RolloutPolicy, Plan]]) -> list[Rollout]:
    """The rollouts not Completed or RolledBack, of policies that exist now: a deleted policy's rollouts stop
    where they are."""
    names = {p.name for p, _ in plans}
    return [r for r in everything if r.phase not in (Phase.COMPLETED, Phase.ROLLED_BACK) and r.policy in names]


def free_slots(plans: Sequence[tuple[RolloutPolicy, Plan]], rollouts: Sequence[Rollout]) -> int:
    """Resizes that may start now: the lowest ``max_concurrent`` of the policies (50 without one), less the
    entries of ``rollouts`` already in flight."""
    in_flight = sum(1 for r in rollouts for e in r.entries if e.state in (EntryState.APPLYING, EntryState.APPLIED))
    limit = min((p.max_concurrent for p, _ in plans), default=50)
    return max(0, limit - in_flight)


def wake_s(idle: Sequence[Rollout], now_s: float, verify_poll_s: float, read_s: float) -> float | None:
    """Seconds until an idle rollout has something to do while others are still sending: its bake ends,
    or (every ``verify_poll_s``, or twice the last read's duration ``read_s``) its batch may have been verified.
    None: nothing before the pass ends."""
    waits = []
    for r in idle:
        if r.phase not in (Phase.PROGRESSING, Phase.BAKING) or r.current_batch >= len(r.batches):
            continue
        batch = r.batches[r.current_batch]
        if batch.phase == BatchPhase.BAKING and batch.bake_until_s is not None:
            waits.append(max(0.0, batch.bake_until_s - now_s))
        elif batch.phase == BatchPhase.VERIFYING:
            waits.append(max(verify_poll_s, 2 * read_s))
    return min(waits, default=None)


PerformStep = Callable[[Rollout, Rollout, Sequence[machine.Effect], Mapping[str, PodObservation], float,
                        ThreadPoolExecutor, bool], tuple[Rollout, int]]
"""``Performer.step``: old, new, effects, observations, now, the resize threads, create."""


class Threads:
    """The threads of one pass: ``each`` runs a rollout's step (at most MAX_ROLLOUT_THREADS at once), ``sends``
    the resizes of all of them (``parallelism`` at once). Leaving waits for every step started."""

    def __init__(self, parallelism: int) -> None:
        self.sends = ThreadPoolExecutor(max_workers=parallelism, thread_name_prefix="resize")
        self.each = ThreadPoolExecutor(max_workers=MAX_ROLLOUT_THREADS, thread_name_prefix="rollout")
        self.running: dict[Future[tuple[Rollout, int]], str] = {}

    def __enter__(self) -> Threads:
        return self

    def __exit__(self, kind: type[BaseException] | None, err: BaseException | None, tb: TracebackType | None) -> None:
        try:
            self.each.shutdown(wait=True)
        finally:
            self.sends.shutdown(wait=True)

    def start(self, perform: PerformStep, step: Step, obs: Mapping[str, PodObservation], now_s: float) -> None:
        """Perform the step on a thread of its own."""
        future = self.each.submit(perform, step.old, step.new, step.effects, obs, now_s, self.sends, step.create)
        self.running[future] = step.new.name

    def collect(self, wake: float | None) -> list[tuple[Rollout, int]]:
        """The performed steps' results, as they end, until none is running or ``wake`` seconds have passed
        (None: until none is running). A step that raised raises here (the others end first, on leaving)."""
        deadline = None if wake is None else time.monotonic() + wake
        results: list[tuple[Rollout, int]] = []
        while self.running and (deadline is None or time.monotonic() < deadline):
            timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
            done, _ = wait(self.running, timeout=timeout, return_when=FIRST_COMPLETED)
            for f in done:
                self.running.pop(f)
                results.append(f.result())
        return results
