"""Unit tests of the per-container memory margin (``peaks.jump_margin``, ``memory_margin.mode`` "jump"): the
quantile of how far an hour's peak rose above the day before it, within bounds, the same at every size."""

from __future__ import annotations

import math

import numpy as np
import pytest

from podtailor.resources import CurrentResources
from recommender.model.peaks import jump_margin
from recommender.model.podtailor_state import PodtailorState
from recommender.model.registry import get_strategy
from recommender.model.types import ContainerPolicy, Samples, UsageBatch

NOW = 1_700_000_000.0
HOUR = 3600.0
GIB = float(2**30)
BOUNDS = (0.02, 0.15)


def margin(peaks: np.ndarray, quantile: float = 0.99) -> float | None:
    return jump_margin(peaks, lookback=24, quantile=quantile, bounds=BOUNDS)


def test_flat_peaks_get_the_floor_and_a_jumpy_history_the_ceiling() -> None:
    assert margin(np.ones(200)) == 0.02  # no hour ever rose above the day before it
    # Every 10th hour 8% above the level: every counted hour (from hour 24 on) has such an hour within the
    # day before it, so none rises above its day's max.
    x = np.where(np.arange(200) % 10 == 9, 1.08, 1.0)
    assert margin(x) == 0.02
    # A level that steps up 10% once a day: at each step, the previous 24 hours' max is 10% lower. 8 of the
    # 176 counted hours (hours 24, 48, ..., 192) jump 10%: p99 is 10%, p50 nothing (the floor).
    steps = 1.1 ** (np.arange(200) // 24)
    assert margin(steps) == pytest.approx(0.10)
    assert margin(steps, quantile=0.5) == 0.02
    # Bursts to 3x the idle level: the ceiling, however tall.
    bursts = np.where(np.arange(200) % 50 == 49, 3.0, 1.0)
    assert margin(bursts) == 0.15


def test_the_margin_does_not_depend_on_the_size() -> None:
    rng = np.random.default_rng(7)
    x = rng.lognormal(0.0, 0.05, 217)
    assert margin(x * 1e-3) == pytest.approx(margin(x)) and margin(x * 1e9) == pytest.approx(margin(x))


def test_missing_hours_and_short_histories() -> None:
    x = 1.1 ** (np.arange(200) // 24)
    gappy = x.copy()
    gappy[::3] = np.nan  # a third of the hours missing: the others still see their day's max
    assert margin(gappy) == pytest.approx(0.10)
    assert margin(np.ones(47)) is None  # 23 hours with a day before them: fewer than 24
    assert margin(np.ones(48)) == 0.02
    assert margin(np.full(100, np.nan)) is None
    assert margin(np.zeros(100)) is None  # no positive max to rise above
    assert jump_margin(np.ones(10), lookback=24, quantile=0.99, bounds=BOUNDS) is None
    # A young container, padded with the window's empty slots before its first peak: its first day is not
    # compared against partial lookbacks (it would give a margin from one day of history).
    young = np.concatenate([np.full(192, np.nan), 1.01 ** np.arange(25)])
    assert margin(young) is None
    assert margin(np.concatenate([np.full(144, np.nan), np.ones(48)])) == 0.02


def hourly_memory(values: np.ndarray) -> UsageBatch:
    ts = (NOW - HOUR * np.arange(values.size)[::-1]).astype(np.float64)
    return UsageBatch(cpu_cores=Samples(timestamps_s=ts, values=np.full(values.size, 0.1)), cpu_interval_s=HOUR,
                      memory_peak_bytes=Samples(timestamps_s=ts, values=values.astype(np.float64)),
                      memory_interval_s=HOUR)


def memory_target(values: np.ndarray, **params: float | str) -> int:
    strategy = get_strategy("podtailor", **params)
    state = strategy.new_state()
    assert isinstance(state, PodtailorState)
    state.add(hourly_memory(values))
    rec, _ = strategy.recommend(state, now_s=NOW, policy=ContainerPolicy(), current=CurrentResources())
    assert rec.target.memory_bytes is not None
    return rec.target.memory_bytes


def test_the_default_margin_is_per_container() -> None:
    flat = np.full(9 * 24, 2 * GIB)
    # The default: the largest rise over the day before (none here), within 5%..15%: the 5% floor.
    assert memory_target(flat) == math.ceil(2 * GIB * 1.05)
    assert memory_target(flat, **{"memory_margin.mode": "fixed"}) == math.ceil(2 * GIB * 1.15)  # the fixed 15%
    assert memory_target(flat, **{"memory_margin.jump_quantile": 0.99},
                         **{"memory_margin.min_fraction": 0.02}) == math.ceil(2 * GIB * 1.02)
    # A history that rose 10% a day: 10% above the max (the level chosen is the max: a steady container).
    rising = 2 * GIB * 1.1 ** (np.arange(9 * 24) // 24)
    assert memory_target(rising) == math.ceil(float(rising.max()) * 1.10)
    # Fewer than 24 hours with a whole day of peaks before them: the fixed margin.
    assert memory_target(flat[:47]) == math.ceil(2 * GIB * 1.15)
    assert memory_target(flat[:48]) == math.ceil(2 * GIB * 1.05)


def test_the_margin_is_held_until_the_memory_target_moves() -> None:
    # Jumps hour over hour (lookback 1 h), p95: a flat history gets the 2% floor.
    strategy = get_strategy("podtailor", **{"memory_margin.jump_quantile": 0.95, "memory_margin.jump_lookback_s": HOUR},
                            **{"memory_margin.min_fraction": 0.02})
    state = strategy.new_state()
    assert isinstance(state, PodtailorState)
    hours = 9 * 24
    state.add(hourly_memory(np.full(hours, 2 * GIB)))
    first, state = strategy.recommend(state, now_s=NOW, policy=ContainerPolicy(), current=CurrentResources())
    assert isinstance(state, PodtailorState)
    assert first.target.memory_bytes == math.ceil(2 * GIB * 1.02) and state.memory_margin == 0.02
    applied = CurrentResources(requests=first.target, limits=first.limits)

    def after(values: np.ndarray, offset_h: int) -> tuple[int | None, float | None]:
        nonlocal state
        ts = NOW + HOUR * (offset_h + np.arange(values.size, dtype=np.float64))
        state.add(UsageBatch(cpu_cores=Samples(timestamps_s=ts, values=np.full(values.size, 0.1)),
                             cpu_interval_s=HOUR, memory_peak_bytes=Samples(timestamps_s=ts, values=values),
                             memory_interval_s=HOUR))
        rec, new = strategy.recommend(state, now_s=float(ts[-1]) + HOUR, policy=ContainerPolicy(), current=applied)
        assert isinstance(new, PodtailorState)
        state = new
        return rec.target.memory_bytes, state.memory_margin

    # Two days of hourly dips to 1.8 GiB: every return to 2 GiB rises 11%, so the fresh margin would be 11%
    # and the target 2.22 GiB, a rise, applied at once. The level (2 GiB) has not moved: the held 2% stays.
    dips = np.where(np.arange(48) % 2 == 0, 1.8 * GIB, 2 * GIB)
    assert after(dips, 1) == (applied.requests.memory_bytes, 0.02)
    # A new top (2.1 GiB) moves the target: the margin is refreshed with it (11%, from the dips' returns).
    target, held = after(np.array([2.1 * GIB]), 49)
    assert held == pytest.approx(2 / 1.8 - 1)
    assert target == math.ceil(2.1 * GIB * (1 + held))


def test_a_zero_fixed_margin_is_still_allowed_without_the_jump_margin() -> None:
    flat = np.full(9 * 24, 2 * GIB)
    assert memory_target(flat, **{"memory_margin.fraction": 0.0, "memory_margin.mode": "fixed"}) == math.ceil(2 * GIB)


@pytest.mark.parametrize("params", [{"memory_margin.jump_quantile": 1.5},
                                    {"memory_margin.jump_quantile": math.nan},
                                    {"memory_margin.jump_quantile": 0.99, "memory_margin.min_fraction": 0.2},
                                    {"memory_margin.jump_quantile": 0.99, "memory_margin.fraction": 0.0},
                                    {"memory_margin.fraction": 0.04},  # below the default jump floor, 5%
                                    {"memory_margin.min_fraction": -0.01},
                                    {"memory_margin.jump_lookback_s": 60.0},
                                    {"memory_margin.mode": "sometimes"}])
def test_bad_margin_settings_are_refused(params: dict[str, float | str]) -> None:
    with pytest.raises(ValueError, match=r"memory_margin[.:]"):
        get_strategy("podtailor", **params)
