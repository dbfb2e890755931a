"""Unit tests of the ``krr-simple`` strategy (robusta-dev/krr ``simple`` defaults, peers.md 1.1)."""

from __future__ import annotations

import numpy as np

from podtailor.resources import CurrentResources, Resources
from recommender.model.registry import get_strategy
from recommender.model.types import ContainerPolicy, OomKill, Recommendation, Samples, UsageBatch

NOW = 1_700_000_000.0
DAY = 86400.0
MIB = 1024**2
STEP = 75.0  # KRR's default timeframe


def batch(cpu: list[float], mem: list[float], *, end: float = NOW, ooms: tuple[OomKill, ...] = ()) -> UsageBatch:
    def samples(values: list[float]) -> Samples:
        ts = end - STEP * np.arange(len(values))[::-1]
        return Samples(timestamps_s=ts, values=np.array(values, dtype=np.float64))
    return UsageBatch(cpu_cores=samples(cpu), cpu_interval_s=STEP, memory_peak_bytes=samples(mem),
                      memory_interval_s=STEP, oom_kills=ooms)


def recommend(*batches: UsageBatch, current: CurrentResources | None = None, **overrides: object) -> Recommendation:
    strategy = get_strategy("krr-simple", **overrides)
    state = strategy.new_state()
    for b in batches:
        state.add(b)
    return strategy.recommend(state, now_s=NOW, policy=ContainerPolicy(), current=current or CurrentResources())[0]


def test_p95_cpu_and_max_memory_plus_15_percent() -> None:
    cpu = [i / 1000 for i in range(1, 201)]  # 1m .. 200m
    mem = [1e8] * 199 + [4e8]
    rec = recommend(batch(cpu, mem))
    # Nearest-rank p95 of 200 samples is the 190th = 190m; the 1% bucket's upper edge is within
    # [190m, 1.01 x 190m + 1m = 192.9m], rounded up to the millicore.
    assert rec.target.cpu_millicores is not None and 190 <= rec.target.cpu_millicores <= 193
    # Memory: 4e8 x 1.15 = 460e6 bytes = 438.69 MiB -> 439 MiB.
    assert rec.target.memory_bytes == 439 * MIB
    assert rec.lower_bound == rec.target == rec.upper_bound
    assert rec.limits == Resources(memory_bytes=439 * MIB)  # no CPU limit; memory limit = request
    assert rec.confidence == 1.0


def test_not_enough_points() -> None:
    rec = recommend(batch([0.1] * 99, [1e8] * 120))
    assert rec.target.cpu_millicores is None
    assert "cpu: not enough data (99 < 100 points)" in rec.reasons
    assert rec.target.memory_bytes == 110 * MIB  # 1e8 x 1.15 = 115e6 = 109.67 MiB -> 110 MiB


def test_floors() -> None:
    rec = recommend(batch([0.0001] * 100, [1e6] * 100))
    assert rec.target == Resources(cpu_millicores=10, memory_bytes=100 * MIB)


def test_window_is_fourteen_days() -> None:
    old = batch([2.0] * 100, [9e8] * 100, end=NOW - 20 * DAY)
    new = batch([0.1] * 100, [1e8] * 100)
    rec = recommend(old, new)
    assert rec.target.cpu_millicores is not None and rec.target.cpu_millicores <= 102  # 0.1 x 1.01 + 1m
    assert rec.target.memory_bytes == 110 * MIB


def test_oomkill_data_is_opt_in() -> None:
    oom = OomKill(timestamp_s=NOW - 100.0, memory_limit_bytes=1024 * MIB)
    b = batch([0.1] * 100, [1e8] * 100, ooms=(oom,))
    assert recommend(b).target.memory_bytes == 110 * MIB
    # 1 GiB x 1.25 = 1280 MiB.
    assert recommend(b, use_oomkill_data=True).target.memory_bytes == 1280 * MIB
