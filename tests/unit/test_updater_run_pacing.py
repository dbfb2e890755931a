"""How ``podtailor-updater run`` waits between passes (``pause_after_pass``): the interval, a bake's end, and,
while a batch waits for the kubelets, the next change of a watched pod, never sooner than MIN_PASS_GAP_S."""

from __future__ import annotations

import threading
import time

from updater.__main__ import MIN_PASS_GAP_S, pause_after_pass
from updater.rollout.act.executor import PassResult


def waited(result: PassResult, interval_s: float, change_after_s: float | None, watching: bool = True) -> float:
    stop, changed = threading.Event(), threading.Event()
    started = time.monotonic()
    if change_after_s is not None:
        threading.Timer(change_after_s, changed.set).start()
    pause_after_pass(result, started, interval_s, stop, changed if watching else None)
    return time.monotonic() - started


def test_a_pod_change_while_verifying_ends_the_wait_but_not_before_the_minimum_gap() -> None:
    verifying = PassResult(awaiting_pods=True)
    # Upper bounds: far below the 10 s interval, with room for thread wake-ups on a loaded 2-core machine.
    # A change at 0.1 s: the next pass starts at the 0.5 s minimum gap, not at the 10 s interval.
    assert MIN_PASS_GAP_S <= waited(verifying, 10.0, 0.1) < MIN_PASS_GAP_S + 1.0
    # A change at 1.0 s: right then.
    assert 1.0 <= waited(verifying, 10.0, 1.0) < 2.0
    # Not watching (the caches are off): the interval, whatever the pods do.
    assert 1.5 <= waited(verifying, 1.5, 0.1, watching=False) < 2.5


def test_without_a_batch_to_verify_a_pod_change_does_not_wake_the_loop() -> None:
    bake_end = time.time() + 0.8
    baking = PassResult(awaiting_pods=False, next_bake_end_s=bake_end)
    # The bake ends 0.8 s from now: the pass is due 0.05 s after it, by the wall clock the bake is set in;
    # the change at 0.1 s is ignored. (Measured from waited()'s own start, which comes a little after
    # bake_end is set, the wait is that little less than 0.85 s.) 1 ms: the wall and monotonic clocks are
    # read microseconds apart.
    took = waited(baking, 10.0, 0.1)
    assert time.time() >= bake_end + 0.05 - 0.001 and took < 2.0
    idle = PassResult()
    assert 0.6 <= waited(idle, 0.6, 0.1) < 1.6
