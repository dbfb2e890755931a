"""Unit tests of the exponential-bucket histograms: geometry, percentiles, decay, windows, checkpoints."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from recommender.model.histogram import (
    VPA_CPU_BUCKETS,
    VPA_MEMORY_BUCKETS,
    BucketScheme,
    DecayingHistogram,
    Histogram,
    WindowedHistogram,
    cost_share_of,
)

NOW = 1_700_000_000.0
DAY = 86400.0


def cpu_edge(n: int) -> float:
    """Start of VPA CPU bucket n: 0.01 (1.05^n - 1) / 0.05 = 0.2 (1.05^n - 1)."""
    return 0.2 * (1.05**n - 1)


def test_vpa_bucket_count_is_176() -> None:
    # ceil(log_1.05(1000 x 0.05 / 0.01 + 1)) + 1 = ceil(ln 5001 / ln 1.05) + 1 = ceil(174.57) + 1 = 176;
    # memory: 1e12 x 0.05 / 1e7 = 5000, the same.
    assert VPA_CPU_BUCKETS.num_buckets == 176
    assert VPA_MEMORY_BUCKETS.num_buckets == 176


def test_bucket_edges_and_lookup() -> None:
    # 0.5 core: log_1.05(0.5 x 0.05 / 0.01 + 1) = log_1.05(3.5) = 25.68, so bucket 25 = [0.47727, 0.51113).
    idx = VPA_CPU_BUCKETS.find_buckets(np.array([0.0, 0.0099, 0.01, 0.5, cpu_edge(26), 5000.0]))
    assert idx.tolist() == [0, 0, 1, 25, 26, 175]
    assert VPA_CPU_BUCKETS.bucket_start(26) == pytest.approx(cpu_edge(26), rel=1e-12)  # float arithmetic only


def test_percentile_is_upper_edge_of_bucket() -> None:
    hist = Histogram(VPA_CPU_BUCKETS)
    hist.add(np.array([0.5]), 0.1)
    # One sample in bucket 25: every percentile is that bucket's end,
    # start(26) = 0.2 (1.05^26 - 1) = 0.2 x 2.55567 = 0.511135.
    for p in (0.0, 0.5, 0.9, 1.0):
        assert hist.percentile(p) == pytest.approx(cpu_edge(26), rel=1e-12)
    assert hist.percentile(0.9) == pytest.approx(0.511135, abs=1e-6)  # 6 digits as in the comment


def test_percentile_walks_cumulative_weight() -> None:
    hist = Histogram(VPA_CPU_BUCKETS)
    # 9 samples at 0.05 (bucket: log_1.05(1.25) = 4.57 -> 4) and 1 at 2.0 (log_1.05(11) = 49.15 -> 49).
    hist.add(np.array([0.05] * 9 + [2.0]))
    assert hist.percentile(0.9) == pytest.approx(cpu_edge(5), rel=1e-12)  # cumulative 9/10 reached in bucket 4
    assert hist.percentile(0.91) == pytest.approx(cpu_edge(50), rel=1e-12)


def test_last_bucket_returns_its_start() -> None:
    hist = Histogram(VPA_CPU_BUCKETS)
    hist.add(np.array([1e6]))
    assert hist.percentile(0.5) == pytest.approx(cpu_edge(175), rel=1e-12)


def test_cost_share_worked_numbers() -> None:
    # Buckets of first width 1 and ratio 2 up to 100: starts 0, 1, 3, 7, 15, 31, 63, 127 (the last, 8th bucket
    # open-ended, answering its start). 75% of the weight in [0, 1), 25% in [7, 15): upper edges 1 and 15.
    scheme = BucketScheme(first_bucket_size=1.0, ratio=2.0, max_value=100.0)
    assert scheme.num_buckets == 8
    weights = np.zeros(8)
    weights[0], weights[3] = 75.0, 25.0
    # Level 1 costs 1 + price x 0.25, level 15 costs 15: price 40 -> 11 < 15, the share at level 1 (0.75).
    assert cost_share_of(scheme, weights, margin_fraction=0.0, overrun_cost=40.0) == 0.75
    assert cost_share_of(scheme, weights, margin_fraction=0.0, overrun_cost=80.0) == 1.0  # 21 > 15
    assert cost_share_of(scheme, weights, margin_fraction=0.0, overrun_cost=56.0) == 1.0  # 15 = 15: ties go up
    # The margin scales the provisioned term: 1.5 + 0.25 x 80 = 21.5 < 15 x 1.5 = 22.5.
    assert cost_share_of(scheme, weights, margin_fraction=0.5, overrun_cost=80.0) == 0.75
    # The open-ended last bucket's level is its start, 127: 1 + 0.25 x 400 = 101 < 127, 1 + 130 > 127.
    weights[3], weights[7] = 0.0, 25.0
    assert cost_share_of(scheme, weights, margin_fraction=0.0, overrun_cost=400.0) == 0.75
    assert cost_share_of(scheme, weights, margin_fraction=0.0, overrun_cost=520.0) == 1.0
    assert cost_share_of(scheme, np.zeros(8), margin_fraction=0.0, overrun_cost=1.0) is None


def test_empty_histogram_has_no_percentile() -> None:
    assert Histogram(VPA_CPU_BUCKETS).percentile(0.9) is None
    with pytest.raises(ValueError):
        Histogram(VPA_CPU_BUCKETS).percentile(1.5)


def test_decay_weights_by_half_life() -> None:
    hist = DecayingHistogram(VPA_CPU_BUCKETS, DAY)
    hist.add(np.array([0.05, 2.0]), np.array([NOW - DAY, NOW]), 0.1)
    assert hist.reference_s is not None and hist.reference_s % DAY == 0
    # The 2.0 sample is one half-life newer, so it weighs twice the 0.05 one: p60 lands in its bucket.
    w = hist.hist.weights
    assert w[49] / w[4] == pytest.approx(2.0, rel=1e-12)
    assert hist.percentile(0.3) == pytest.approx(cpu_edge(5), rel=1e-12)
    assert hist.percentile(0.4) == pytest.approx(cpu_edge(50), rel=1e-12)


def test_decay_renormalises_after_100_half_lives() -> None:
    hist = DecayingHistogram(VPA_CPU_BUCKETS, DAY)
    hist.add(np.array([0.05]), np.array([NOW]))
    first_ref = hist.reference_s
    assert first_ref is not None
    hist.add(np.array([2.0]), np.array([first_ref + 101 * DAY]))
    assert hist.reference_s == first_ref + 101 * DAY  # shifted to a whole multiple of the half-life
    # The old sample now weighs at most 2^-100 of a fresh one: below epsilon, gone.
    assert hist.percentile(0.0) == pytest.approx(cpu_edge(50), rel=1e-12)


def test_subtract_clears_bucket() -> None:
    hist = DecayingHistogram(VPA_MEMORY_BUCKETS, DAY)
    hist.add(np.array([3e8]), np.array([NOW]))
    hist.subtract(3e8, NOW)
    assert hist.is_empty()


def test_values_must_be_finite_and_non_negative() -> None:
    for bad in (math.nan, math.inf, -1.0):
        with pytest.raises(ValueError):
            Histogram(VPA_CPU_BUCKETS).add(np.array([bad]))


def test_windowed_histogram_queries_last_days() -> None:
    fine = BucketScheme(first_bucket_size=0.001, ratio=1.01, max_value=1000.0)
    hist = WindowedHistogram(fine, slot_s=DAY, retention_s=15 * DAY)
    hist.add(np.array([5.0]), np.array([NOW - 20 * DAY]))  # dropped by retention once newer data arrives
    hist.add(np.array([1.0] * 10), np.array([NOW - 10 * DAY] * 10))
    hist.add(np.array([0.1] * 10), np.array([NOW - 1000.0] * 10))
    assert hist.window(NOW, 14 * DAY).total_weight == 20
    assert hist.window(NOW, 2 * DAY).total_weight == 10
    p = hist.percentile(1.0, now_s=NOW, window_s=14 * DAY)
    # Error bound: exact 1.0 <= answer <= 1.01 x 1.0 + 0.001.
    assert p is not None and 1.0 <= p <= 1.011
    assert all(s >= int(NOW // DAY) - 15 for s in hist.slots)


def test_fine_buckets_error_bound_against_numpy() -> None:
    rng = np.random.default_rng(7)
    values = rng.lognormal(-1.0, 1.0, 5000)
    fine = BucketScheme(first_bucket_size=0.001, ratio=1.01, max_value=1000.0)
    hist = Histogram(fine)
    hist.add(values)
    for p in (0.5, 0.9, 0.95, 0.99):
        exact = float(np.quantile(values, p, method="inverted_cdf"))  # nearest rank, as the walk
        got = hist.percentile(p)
        assert got is not None and exact <= got <= 1.01 * exact + 0.001


def test_checkpoints_round_trip_through_json() -> None:
    hist = DecayingHistogram(VPA_CPU_BUCKETS, DAY)
    hist.add(np.array([0.05, 0.3, 2.0]), np.array([NOW - 5000.0, NOW - 100.0, NOW]), 0.1)
    data = json.loads(json.dumps(hist.to_checkpoint()))
    assert data["version"] == 1
    back = DecayingHistogram.from_checkpoint(data)
    assert np.array_equal(back.hist.weights, hist.hist.weights) and back.reference_s == hist.reference_s
    win = WindowedHistogram(VPA_CPU_BUCKETS)
    win.add(np.array([0.2, 0.4]), np.array([NOW - DAY, NOW]))
    win_back = WindowedHistogram.from_checkpoint(json.loads(json.dumps(win.to_checkpoint())))
    assert win_back.percentile(0.5, now_s=NOW, window_s=2 * DAY) == win.percentile(0.5, now_s=NOW, window_s=2 * DAY)
    with pytest.raises(ValueError):
        DecayingHistogram.from_checkpoint({**data, "version": 99})


values_strategy = st.lists(st.floats(min_value=0.0, max_value=2000.0, allow_nan=False), min_size=1, max_size=50)


@given(values=values_strategy, p1=st.floats(0.0, 1.0), p2=st.floats(0.0, 1.0))
@settings(max_examples=200, deadline=None)
def test_percentile_is_monotone_in_p(values: list[float], p1: float, p2: float) -> None:
    hist = Histogram(VPA_CPU_BUCKETS)
    hist.add(np.array(values))
    lo, hi = sorted((p1, p2))
    a, b = hist.percentile(lo), hist.percentile(hi)
    assert a is not None and b is not None and a <= b


@given(values=values_strategy, t=st.floats(NOW - 50 * DAY, NOW + 50 * DAY))
@settings(max_examples=200, deadline=None)
def test_decay_keeps_percentiles_when_samples_share_a_timestamp(values: list[float], t: float) -> None:
    plain = Histogram(VPA_CPU_BUCKETS)
    plain.add(np.array(values))
    decaying = DecayingHistogram(VPA_CPU_BUCKETS, DAY)
    decaying.add(np.array(values), np.full(len(values), t), 0.1)
    # p values chosen so that p x n is never within float noise of a whole number for n <= 50.
    ps = (0.0, 0.123, 0.377, 0.5003, 0.899, 0.951, 1.0)
    got = [decaying.percentile(p) for p in ps]
    assert got == [plain.percentile(p) for p in ps]
    assert got == sorted(got)  # type: ignore[type-var]



def test_aligned_interval_peaks_are_the_same_from_a_summary_of_the_first_hour() -> None:
    """A memory history 00:05..03:55 every 5 minutes, fed as is, and with its first hour replaced by one
    summary sample at 00:55 holding that hour's peak (as a planned read gives it). Aligned windows are whole
    hours, so both give the same hourly peaks and the same histogram; VPA's windows start at the first sample
    (00:05 or 00:55), so the two histories cut the hours differently."""
    from recommender.model.peaks import IntervalPeaks, SortedSamples

    t0 = 1_790_000_000 // 3600 * 3600.0
    times = t0 + 300.0 * np.arange(1, 48)  # 00:05 .. 03:55
    values = np.array([100.0 + (i * 37) % 50 for i in range(times.size)])
    first_hour = times < t0 + 3600.0
    summary_times = np.concatenate([[t0 + 3300.0], times[~first_hour]])
    summary_values = np.concatenate([[values[first_hour].max()], values[~first_hour]])

    def weights(ts: np.ndarray, vs: np.ndarray, aligned: bool) -> np.ndarray:
        peaks = IntervalPeaks(DecayingHistogram(BucketScheme(first_bucket_size=1.0, ratio=1.02, max_value=1e6),
                                                48 * 3600.0), 3600.0, aligned=aligned)
        peaks.add(SortedSamples(timestamps_s=ts, values=vs))
        return peaks.hist.hist.weights

    np.testing.assert_allclose(weights(times, values, True), weights(summary_times, summary_values, True), rtol=1e-12)
    assert not np.allclose(weights(times, values, False), weights(summary_times, summary_values, False))
    # The aligned peaks are the hours' own: 00-01, 01-02, 02-03 and the open 03-04.
    hourly = [values[(times >= t0 + h * 3600) & (times < t0 + (h + 1) * 3600)].max() for h in range(4)]
    scheme = BucketScheme(first_bucket_size=1.0, ratio=1.02, max_value=1e6)
    expected = set(scheme.find_buckets(np.array(hourly)).tolist())
    assert set(np.flatnonzero(weights(times, values, True)).tolist()) == expected


def test_interval_peaks_restore_from_a_checkpoint_whose_nulls_the_api_server_pruned() -> None:
    """Interval peaks with no sample yet checkpoint ``window_end_s`` and ``last_sample_s`` as null; the API server
    drops those keys from the RecommenderCheckpoint (its schema does not mark them nullable). Restoring from what
    the cluster gives back works, and the restored peaks then fold samples exactly as peaks never checkpointed."""
    from recommender.model.peaks import IntervalPeaks, SortedSamples

    def fresh() -> IntervalPeaks:
        return IntervalPeaks(DecayingHistogram(BucketScheme(first_bucket_size=1.0, ratio=1.02, max_value=1e6),
                                               48 * 3600.0), 3600.0, aligned=True)

    data = fresh().to_checkpoint()
    assert data["window_end_s"] is None and data["last_sample_s"] is None
    pruned = {k: v for k, v in data.items() if v is not None}
    restored = IntervalPeaks.from_checkpoint(pruned)
    assert restored.window_end_s is None and restored.last_sample_s is None
    t0 = 1_790_000_000 // 3600 * 3600.0
    samples = SortedSamples(timestamps_s=t0 + 300.0 * np.arange(1, 30), values=np.arange(1.0, 30.0) * 7)
    never = fresh()
    never.add(samples)
    restored.add(samples)
    np.testing.assert_array_equal(restored.hist.hist.weights, never.hist.hist.weights)
    assert restored.window_end_s == never.window_end_s
