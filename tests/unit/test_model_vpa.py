"""Unit tests of the ``vpa`` strategy against the numbers of VPA's recommender (vpa.md 1.2-1.7)."""

from __future__ import annotations

import numpy as np
import pytest

from podtailor.resources import CurrentResources, Resources
from recommender.model.common import lower_multiplier, upper_multiplier
from recommender.model.histogram import VPA_MEMORY_BUCKETS
from recommender.model.policy import MAX_RESOURCE_AMOUNT
from recommender.model.registry import get_strategy
from recommender.model.types import ContainerPolicy, OomKill, Recommendation, Samples, UsageBatch
from recommender.model.vpa import VpaParams, VpaState

NOW = 1_700_000_000.0
HOUR, DAY = 3600.0, 86400.0
MIB = 1024**2
GIB = 1024 * MIB


def series(n: int, step: float, value: float, end: float = NOW) -> Samples:
    ts = end - step * np.arange(n)[::-1]
    return Samples(timestamps_s=ts, values=np.full(n, value))


def batch(cpu: Samples, mem: Samples | None = None, step: float = HOUR, ooms: tuple[OomKill, ...] = ()) -> UsageBatch:
    return UsageBatch(cpu_cores=cpu, cpu_interval_s=step, memory_peak_bytes=mem or Samples.empty(),
                      memory_interval_s=step, oom_kills=ooms)


def recommend(state: VpaState, policy: ContainerPolicy | None = None) -> Recommendation:
    return get_strategy("vpa").recommend(state, now_s=NOW, policy=policy or ContainerPolicy(),
                                         current=CurrentResources())[0]


def edge(first: float, n: int) -> float:
    """Start of bucket n of a VPA histogram: first (1.05^n - 1) / 0.05."""
    return first * (1.05**n - 1) / 0.05


def test_confidence_multipliers_match_vpa_table() -> None:
    # upper x(1 + 1/c): 12h -> c = 0.5 -> 3; 24h -> 2; 7 days -> 1 + 1/7 = 1.142857.
    assert upper_multiplier(0.5) == pytest.approx(3.0)
    assert upper_multiplier(1.0) == pytest.approx(2.0)
    assert upper_multiplier(7.0) == pytest.approx(1.142857, abs=1e-6)
    # lower x(1 + 0.001/c)^-2: 5 min -> c = 5/1440 -> (1.288)^-2 = 0.6028; 30 min -> (1.048)^-2 = 0.9105;
    # 60 min -> (1.024)^-2 = 0.9537; 12h -> (1.002)^-2 = 0.996. The table rounds to one or two digits,
    # hence abs=0.015.
    assert lower_multiplier(5 / 1440) == pytest.approx(0.6, abs=0.015)
    assert lower_multiplier(30 / 1440) == pytest.approx(0.9, abs=0.015)
    assert lower_multiplier(60 / 1440) == pytest.approx(0.95, abs=0.015)
    assert lower_multiplier(0.5) == pytest.approx(0.996012, abs=1e-6)  # 1 / 1.004004
    assert upper_multiplier(0.0) == float("inf") and lower_multiplier(0.0) == 0.0


def test_constant_usage_targets() -> None:
    strategy = get_strategy("vpa")
    state = strategy.new_state()
    assert isinstance(state, VpaState)
    # 8 days of one-minute samples, c = min(lifespan 8 days - 1 min, 11520 / 1440 = 8) ~ 8.
    n = 8 * 1440
    state.add(batch(series(n, 60.0, 0.5), series(n, 60.0, 5e8), step=60.0))
    rec = recommend(state)
    # CPU 0.5 sits in bucket 25 (log_1.05(3.5) = 25.7): p90 = start(26) = 0.511135 cores. In VPA's whole
    # millicores, each step truncated (logic/estimator.go, model/types.go ScaleResource): 511m + int(511 x 0.15)
    # = 511 + 76 = 587m.
    assert rec.target.cpu_millicores == 587
    # Memory 5e8 sits in bucket 25 too (log_1.05(5e8 x 0.05/1e7 + 1) = log_1.05(3.5)): start(26) = 511134537.6 B,
    # 511134537 + int(511134537 x 0.15) = 511134537 + 76670180 = 587804717 B.
    assert rec.target.memory_bytes == int(edge(1e7, 26)) + int(int(edge(1e7, 26)) * 0.15) == 587804717
    # Upper: p95 is the same bucket; c = min(11519 min / 1440, 8) = 7.99931 days -> x(1 + 1/c) = 1.125011:
    # int(587 x 1.125011) = int(660.38) = 660m.
    assert rec.upper_bound.cpu_millicores == 660
    # Lower: p50 is the same bucket, x(1 + 0.001/c)^-2 = 0.99975: int(586.85) = 586m.
    assert rec.lower_bound.cpu_millicores == 586
    assert rec.confidence == pytest.approx(7.99931 / 8, abs=1e-5)  # c / 8-day full window


def test_hourly_prometheus_history_gets_vpa_low_confidence() -> None:
    # vpa.md 1.5 gotcha: 8 days at 1h = 192 samples -> c = min(191/24 = 7.958, 192/1440 = 0.1333) = 0.1333,
    # so the upper bound is x(1 + 7.5) = x8.5.
    state = get_strategy("vpa").new_state()
    assert isinstance(state, VpaState)
    state.add(batch(series(192, HOUR, 0.5), series(192, HOUR, 5e8)))
    assert state.confidence_days(VpaParams()) == pytest.approx(0.1333, abs=1e-4)  # 4 digits as in the comment
    rec = recommend(state)
    # int(587m x 8.5) = int(4989.5) = 4989m.
    assert rec.upper_bound.cpu_millicores == 4989


def test_floors_split_over_containers() -> None:
    state = get_strategy("vpa").new_state()
    state.add(batch(series(100, 60.0, 0.001), series(100, 60.0, 1e6), step=60.0))
    rec = recommend(state, ContainerPolicy(containers_in_pod=2))
    # VPA's pod minimum split in two, truncated (logic/recommender.go GetRecommendedPodResources: ScaleResource
    # of the minimum by 1/containers): int(25m / 2) = 12m; 250 MiB / 2 = 131072000 bytes.
    assert rec.target == Resources(cpu_millicores=12, memory_bytes=125 * MIB)


def test_no_cpu_history_means_infinite_upper_capped() -> None:
    state = get_strategy("vpa").new_state()
    state.add(batch(Samples.empty(), series(3, HOUR, 5e8)))
    rec = recommend(state)
    assert rec.target.cpu_millicores is None and "no cpu history" in rec.reasons
    # c = 0 (no CPU samples): upper x inf -> MaxResourceAmount 1e14 bytes ("100T").
    assert rec.upper_bound.memory_bytes == MAX_RESOURCE_AMOUNT


def test_memory_keeps_one_peak_per_day() -> None:
    state = get_strategy("vpa").new_state()
    assert isinstance(state, VpaState)
    t0 = NOW - 3 * DAY
    mem = Samples(timestamps_s=np.array([t0, t0 + HOUR, t0 + 2 * HOUR]), values=np.array([1e8, 3e8, 2e8]))
    state.add(batch(Samples.empty(), mem))
    # First sample opens the interval [t0, t0 + 24h); the peak 3e8 replaced 1e8: one entry of weight
    # 2^((t0 + 24h - ref)/24h) in the bucket of 3e8.
    weights = state.memory.hist.hist.weights
    assert np.count_nonzero(weights) == 1 and state.memory.window_end_s == t0 + DAY
    ref = state.memory.hist.reference_s
    assert ref is not None
    assert weights.sum() == pytest.approx(2 ** ((t0 + DAY - ref) / DAY), rel=1e-12)
    state.add(batch(Samples.empty(), series(1, HOUR, 1e8, end=t0 + 2 * DAY + 5.0)))
    # t0 + 2d + 5s lies in the interval ending at t0 + 3d: a second peak.
    assert np.count_nonzero(state.memory.hist.hist.weights) == 2 and state.memory.window_end_s == t0 + 3 * DAY


def test_oom_bump_is_injected_as_peak() -> None:
    state = get_strategy("vpa").new_state()
    assert isinstance(state, VpaState)
    oom = OomKill(timestamp_s=NOW - 30.0, memory_request_bytes=1024 * MIB, memory_limit_bytes=1024 * MIB)
    state.add(batch(series(10, 60.0, 0.2), series(10, 60.0, 5e8), step=60.0, ooms=(oom,)))
    # used = max(request 1 GiB, peak 5e8) = 1 GiB; bump = max(1 GiB + 100 MiB, 1.2 GiB) = 1.2 GiB.
    assert state.memory.oom_peak == pytest.approx(1.2 * 1024 * MIB)
    # Repeated OOMs in one interval do not compound: the bump ignores the OOM peak.
    state.add(batch(Samples.empty(), ooms=(oom,)))
    assert state.memory.oom_peak == pytest.approx(1.2 * 1024 * MIB)
    assert np.count_nonzero(state.memory.hist.hist.weights) == 1


def test_old_oom_is_dropped() -> None:
    state = get_strategy("vpa").new_state()
    assert isinstance(state, VpaState)
    state.add(batch(Samples.empty(), series(1, HOUR, 5e8)))
    state.add(batch(Samples.empty(), ooms=(OomKill(timestamp_s=NOW - 2 * DAY, memory_request_bytes=GIB),)))
    assert state.memory.oom_peak == 0.0  # older than last sample - 24h



def _two_pods(days: int) -> UsageBatch:
    """Two pods of one workload sampled hourly for ``days`` days: one at 200 MiB, one at 800 MiB."""
    low, high = series(24 * days, HOUR, 200 * MIB), series(24 * days, HOUR, 800 * MIB)
    ts = np.concatenate([low.timestamps_s, high.timestamps_s])
    order = np.argsort(ts, kind="stable")
    mem = Samples(timestamps_s=ts[order], values=np.concatenate([low.values, high.values])[order])
    index = np.concatenate([np.zeros(len(low), np.int32), np.ones(len(high), np.int32)])[order]
    return UsageBatch(cpu_cores=series(24 * days, HOUR, 0.5), cpu_interval_s=HOUR, memory_peak_bytes=mem,
                      memory_interval_s=HOUR, memory_pods=("web-a", "web-b"), memory_pod_index=index)


def test_memory_keeps_one_peak_per_pod_and_day() -> None:
    # VPA: a peak per container of each pod and interval (model/container.go addMemorySample per ContainerState).
    # Two pods for 4 days: 4 intervals x 2 pods = 8 peaks, half at 200 MiB, half at 800 MiB (pooled, it would be
    # 4 peaks, all at 800 MiB).
    state = get_strategy("vpa").new_state()
    assert isinstance(state, VpaState)
    state.add(_two_pods(4))
    weights = state.memory.hist.hist.weights
    assert np.count_nonzero(weights) == 2 and set(state.pod_windows) == {"web-a", "web-b"}
    rec = recommend(state)
    # p50 reaches half the (decayed, but equally so for both pods) weight in the 200 MiB bucket; p90 needs the
    # 800 MiB one. So target comes from 800 MiB, and lowerBound from 200 MiB: its bucket edge 215.8 MB x 1.15 x
    # (1 + 0.001 / (96 / 1440))^-2 = 240.7 MB, below the 250 MiB pod minimum, which it becomes (pooled, the p50
    # would be 800 MiB too).
    high_edge = VPA_MEMORY_BUCKETS.upper_edge(int(VPA_MEMORY_BUCKETS.find_buckets(np.array([800.0 * MIB]))[0]))
    assert rec.target.memory_bytes == int(high_edge) + int(int(high_edge) * 0.15)
    assert rec.lower_bound.memory_bytes == 250 * MIB
    # The checkpoint keeps each pod's window (v2) and restores it; a v1 checkpoint restores without them.
    data = state.to_checkpoint()
    again = get_strategy("vpa").restore(data)
    assert isinstance(again, VpaState) and set(again.pod_windows) == {"web-a", "web-b"}
    assert again.pod_windows["web-b"].usage_peak == 800 * MIB
    v1 = {k: v for k, v in data.items() if k != "pod_windows"} | {"version": 1}
    old = get_strategy("vpa").restore(v1)
    assert isinstance(old, VpaState) and old.pod_windows == {}


def test_a_gone_pods_window_is_forgotten_but_its_peaks_stay() -> None:
    state = get_strategy("vpa").new_state()
    assert isinstance(state, VpaState)
    state.add(_two_pods(1))
    # Three days later only web-a reports: web-b's window is past the 2-interval horizon and dropped.
    later = series(3, HOUR, 300 * MIB, end=NOW + 3 * DAY)
    state.add(UsageBatch(cpu_cores=series(3, HOUR, 0.5, end=NOW + 3 * DAY), cpu_interval_s=HOUR,
                         memory_peak_bytes=later, memory_interval_s=HOUR, memory_pods=("web-a",),
                         memory_pod_index=np.zeros(3, np.int32)))
    assert set(state.pod_windows) == {"web-a"}
    assert np.count_nonzero(state.memory.hist.hist.weights) == 3  # 200, 800 and 300 MiB peaks
