"""The threads of a pass: a thread per rollout step being performed, and a shared pool for the resizes they send.

Owns ``Threads`` (at most ``MAX_ROLLOUT_THREADS`` steps at once, ``parallelism`` sends at once; leaving waits for
every step started) and ``PerformStep``, the signature of ``Performer.step`` they run. Which steps run, and when,
is decided beforehand by the pure ``updater.rollout.machine.schedule``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from types import TracebackType

from updater.observe import PodObservation
from updater.rollout.machine import lifecycle as machine
from updater.rollout.machine.journal import Rollout
from updater.rollout.machine.schedule import Step

MAX_ROLLOUT_THREADS = 16
"""Rollouts performed at once in a pass (more wait their turn); their resizes share ``parallelism`` threads."""


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
