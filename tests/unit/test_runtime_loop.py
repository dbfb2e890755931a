"""The run loop of both ``run`` commands (``podtailor.runtime.loop.RunLoop``): first pass at once, the interval,
a pass's own due time, wake-ups, failures logged and counted but never fatal, overruns, and a clean stop."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from podtailor.runtime.loop import Due, RunLoop

log = logging.getLogger("test.loop")


class Passes:
    """Start times of the passes (``time.monotonic``, from the test's start), and what each returns."""

    def __init__(self, answer: Callable[[int], Due | None] = lambda _: None, take_s: float = 0.0) -> None:
        self.t0 = time.monotonic()
        self.starts: list[float] = []
        self.answer, self.take_s = answer, take_s
        self.lock = threading.Lock()

    def __call__(self) -> Due | None:
        with self.lock:
            self.starts.append(time.monotonic() - self.t0)
            n = len(self.starts)
        time.sleep(self.take_s)
        return self.answer(n)


def run_for(loop: RunLoop, seconds: float) -> None:
    loop.start()
    time.sleep(seconds)
    loop.stop()
    assert loop.join(timeout_s=5)


def test_first_pass_at_once_then_every_interval() -> None:
    passes = Passes()
    run_for(RunLoop(passes, interval_s=0.3, log=log), 1.05)
    assert passes.starts[0] < 0.2
    assert len(passes.starts) == 4, passes.starts  # 0, 0.3, 0.6, 0.9
    gaps = [b - a for a, b in zip(passes.starts, passes.starts[1:], strict=False)]
    assert all(0.25 < g < 0.5 for g in gaps), gaps


def test_a_failed_pass_is_logged_counted_and_retried_at_the_next_interval() -> None:
    failures: list[Exception] = []

    def answer(n: int) -> Due | None:
        if n == 1:
            raise RuntimeError("API server down")
        return None

    passes = Passes(answer)
    run_for(RunLoop(passes, interval_s=0.3, log=log, failed=failures.append), 0.5)
    assert [str(e) for e in failures] == ["API server down"] and len(passes.starts) == 2


def test_a_pass_sets_its_next_and_a_wake_brings_it_forward_not_before_its_floor() -> None:
    passes = Passes(lambda n: Due(10.0, woken_after_s=0.3) if n == 1 else Due(10.0))
    loop = RunLoop(passes, interval_s=10.0, log=log)
    loop.start()
    time.sleep(0.1)
    loop.wake()  # before the floor: the next pass at 0.3 s
    time.sleep(0.5)
    loop.wake()  # the second pass asked for no wake: nothing
    time.sleep(0.3)
    loop.stop()
    assert loop.join(timeout_s=5)
    assert len(passes.starts) == 2 and 0.28 < passes.starts[1] < 0.5, passes.starts


def test_a_wake_during_the_pass_counts_when_it_ends() -> None:
    passes = Passes(lambda n: Due(10.0, woken_after_s=0.2), take_s=0.3)
    loop = RunLoop(passes, interval_s=10.0, log=log)
    loop.start()
    time.sleep(0.1)
    loop.wake()
    time.sleep(0.4)
    loop.stop()
    assert loop.join(timeout_s=5)
    assert len(passes.starts) == 2 and 0.28 < passes.starts[1] < 0.45, passes.starts


def test_an_overrun_pass_is_followed_at_once_or_at_the_next_slot() -> None:
    at_once = Passes(take_s=0.4)
    run_for(RunLoop(at_once, interval_s=0.3, log=log), 0.6)
    assert len(at_once.starts) == 2 and at_once.starts[1] < 0.5, at_once.starts
    slotted = Passes(take_s=0.4)
    run_for(RunLoop(slotted, interval_s=0.3, log=log, skip_missed=True), 0.8)
    assert len(slotted.starts) == 2 and 0.55 < slotted.starts[1] < 0.75, slotted.starts


def test_stop_starts_no_pass_and_join_waits_for_the_one_in_progress() -> None:
    passes = Passes(take_s=0.3)
    loop = RunLoop(passes, interval_s=0.05, log=log)
    loop.start()
    time.sleep(0.1)
    loop.stop()
    assert not loop.join(timeout_s=0.05)  # the first pass still runs
    assert loop.join(timeout_s=5)
    time.sleep(0.2)
    assert len(passes.starts) == 1
    loop.start()  # after stop: nothing
    time.sleep(0.1)
    assert len(passes.starts) == 1
