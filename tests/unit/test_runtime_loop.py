"""The run loop of both ``run`` commands (``podtailor.runtime.loop.RunLoop``): first pass at once, the interval,
a pass's own due time, wake-ups, failures logged and counted but never fatal, overruns, and a clean stop.

The loop runs on real time, so the tests wait for passes to start (events, not fixed sleeps) and measure the
gaps between them in units of ``U``, with tolerances of a fraction of a unit: a loaded 2-core CI machine may
start a thread late, but the loop must never start a pass early."""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable

from podtailor.runtime.loop import Due, RunLoop

log = logging.getLogger("test.loop")
U = 0.5
"""One time unit of these tests, in seconds."""


class Passes:
    """Start times of the passes (``time.monotonic``), and what each returns; a pass may be held until the
    test lets it go (``hold``) or take a fixed time (``take_s``)."""

    def __init__(self, answer: Callable[[int], Due | None] = lambda _: None, take_s: float = 0.0,
                 hold: threading.Event | None = None) -> None:
        self.starts: list[float] = []
        self.answer, self.take_s, self.hold = answer, take_s, hold
        self.changed = threading.Condition()

    def __call__(self) -> Due | None:
        with self.changed:
            self.starts.append(time.monotonic())
            n = len(self.starts)
            self.changed.notify_all()
        if self.hold is not None and n == 1:
            self.hold.wait(30)
        time.sleep(self.take_s)
        return self.answer(n)

    def wait_for(self, n: int, timeout_s: float = 15.0) -> None:
        with self.changed:
            assert self.changed.wait_for(lambda: len(self.starts) >= n, timeout_s), self.starts

    def gaps(self) -> list[float]:
        return [b - a for a, b in zip(self.starts, self.starts[1:], strict=False)]


def stopped(loop: RunLoop) -> None:
    loop.stop()
    assert loop.join(timeout_s=10)


def test_first_pass_at_once_then_every_interval() -> None:
    passes = Passes()
    loop = RunLoop(passes, interval_s=U, log=log)
    started = time.monotonic()
    loop.start()
    passes.wait_for(4)
    stopped(loop)
    assert passes.starts[0] - started < U
    gaps = passes.gaps()[:3]
    assert all(g > 0.9 * U for g in gaps), gaps  # never early
    assert sum(gaps) < 3 * U + 1.5 * U, gaps  # late by less than 1.5 U in all, even on a loaded machine


def test_a_failed_pass_is_logged_counted_and_retried_at_the_next_interval() -> None:
    failures: list[Exception] = []

    def answer(n: int) -> Due | None:
        if n == 1:
            raise RuntimeError("API server down")
        return None

    passes = Passes(answer)
    loop = RunLoop(passes, interval_s=U, log=log, failed=failures.append)
    loop.start()
    passes.wait_for(2)
    stopped(loop)
    assert [str(e) for e in failures[:1]] == ["API server down"]
    assert passes.gaps()[0] > 0.9 * U


def test_a_pass_sets_its_next_and_a_wake_brings_it_forward_not_before_its_floor() -> None:
    passes = Passes(lambda n: Due(60.0, woken_after_s=2 * U) if n == 1 else Due(60.0))
    loop = RunLoop(passes, interval_s=60.0, log=log)
    loop.start()
    passes.wait_for(1)
    time.sleep(0.2 * U)
    loop.wake()  # before the floor: the next pass at 2 U
    passes.wait_for(2)
    loop.wake()  # the second pass asked for no wake: nothing
    time.sleep(2 * U)
    stopped(loop)
    assert len(passes.starts) == 2
    assert 1.95 * U < passes.gaps()[0] < 3.5 * U, passes.starts


def test_a_wake_during_the_pass_counts_when_it_ends() -> None:
    release = threading.Event()
    passes = Passes(lambda n: Due(60.0, woken_after_s=U), hold=release)
    loop = RunLoop(passes, interval_s=60.0, log=log)
    loop.start()
    passes.wait_for(1)
    loop.wake()  # during the pass
    time.sleep(2 * U)
    ended = time.monotonic()
    release.set()  # the pass ends after its floor: the next one at once
    passes.wait_for(2)
    stopped(loop)
    assert len(passes.starts) == 2 and passes.starts[1] - ended < U, (passes.starts, ended)


def test_an_overrun_pass_is_followed_at_once_or_at_the_next_slot() -> None:
    at_once = Passes(take_s=1.2 * U)
    loop = RunLoop(at_once, interval_s=U, log=log)
    loop.start()
    at_once.wait_for(2)
    stopped(loop)
    assert 1.15 * U < at_once.gaps()[0] < 1.9 * U, at_once.starts  # when the pass ended, not at 2 U
    slotted = Passes(take_s=1.2 * U)
    loop = RunLoop(slotted, interval_s=U, log=log, skip_missed=True)
    loop.start()
    slotted.wait_for(2)
    stopped(loop)
    assert 1.95 * U < slotted.gaps()[0] < 3 * U, slotted.starts  # the next slot after the overrun: 2 U


def test_stop_starts_no_pass_and_join_waits_for_the_one_in_progress() -> None:
    release = threading.Event()
    passes = Passes(hold=release)
    loop = RunLoop(passes, interval_s=0.1 * U, log=log)
    loop.start()
    passes.wait_for(1)
    loop.stop()
    assert not loop.join(timeout_s=0.1)  # the first pass still runs
    release.set()
    assert loop.join(timeout_s=10)
    time.sleep(U)
    assert len(passes.starts) == 1
    loop.start()  # after stop: nothing
    time.sleep(U)
    assert len(passes.starts) == 1


def test_leave_flushes_what_was_written_and_exits_with_the_code_while_a_daemon_thread_runs() -> None:
    script = textwrap.dedent("""
        import logging, sys, threading, time
        from podtailor.runtime.loop import leave
        threading.Thread(target=lambda: [time.sleep(0.001) for _ in iter(int, 1)], daemon=True).start()
        logging.basicConfig(stream=sys.stderr, level=logging.INFO)
        logging.getLogger("t").info("checkpoint written")
        sys.stdout.write("buffered, no newline")
        leave(3)
        print("never")
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False)
    assert (done.returncode, done.stdout) == (3, "buffered, no newline")
    assert "checkpoint written" in done.stderr
