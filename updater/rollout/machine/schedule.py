"""Scheduling a pass (pure): which rollout steps when, under the global cap.

Owns the ``Step`` (one rollout's next step, decided before anything is performed), ``decide`` (the state
machine's step for a rollout, given the slots left), how the global concurrency is divided (``free_slots``:
``max_concurrent`` less the resizes already in flight), and when an idle rollout needs a look again while others
are still sending (``wake_s``). The threads that perform the steps are in ``updater.rollout.act.threads``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from updater.observe import PodObservation
from updater.policy.types import Plan, RolloutPolicy
from updater.rollout.machine import lifecycle as machine
from updater.rollout.machine.journal import BatchPhase, EntryState, Phase, Rollout


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
           frozen: bool, workloads: machine.Workloads, gate_failure: str = "") -> Step:
    """The rollout's next step, decided but not performed. A Halted rollout waits for a person (``spec.retry``:
    the executor reads that, and closes it, before deciding). ``gate_failure``: a failed canary analysis."""
    if r.phase == Phase.HALTED:
        return Step(old=r, new=r, effects=())
    new, effects = machine.advance(r, obs, now_s, slots=slots, timeouts=timeouts, frozen=frozen, workloads=workloads,
                                   gate_failure=gate_failure)
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
