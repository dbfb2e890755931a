"""Remote read: the request the source writes, the answers it reads, and the per-step values it computes.

Answers are written by the test side's own encoder (``tests.builders.remote_read``, written from the protocol),
so a decoder slip cannot hide behind a shared helper. The per-step values are checked against worked numbers
and, on random series, against a sample-by-sample transcription of Prometheus 2's ``extrapolatedRate`` and
``max_over_time`` (loops over one window at a time, nothing shared with the vectorised code).
"""

from __future__ import annotations

import math
import struct

import cramjam
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from recommender.sources import promql
from recommender.sources.grid import GridRange
from recommender.sources.raw_grid import combine, grid_ms, peaks, rates
from recommender.sources.remote_read import (
    EQ,
    NEQ,
    RE,
    STALE_NAN_BITS,
    Matcher,
    RawSeries,
    decode_response,
    request_body,
)
from tests.builders.remote_read import decode_request, encode_response

T0 = 1_790_000_000_000  # ms, a 2026 time: six-byte varints
STALE = struct.unpack("<d", STALE_NAN_BITS.to_bytes(8, "little"))[0]


def _series(times: list[int], values: list[float], **labels: str) -> RawSeries:
    return RawSeries(labels=labels, times_ms=np.array(times, dtype=np.int64), values=np.array(values))


# ------------------------------------------------------------------------------------------------- wire
def test_request_body_holds_the_matchers_and_range() -> None:
    scope = promql.Scope(namespaces=("shop", 'a"}|.*'), pods=("web-1",), cluster=("cluster", "eu-1"))
    body = request_body([(promql.remote_matchers("container_cpu_usage_seconds_total", scope), T0 - 300_000, T0)])
    [(matchers, start, end)] = decode_request(body)
    assert (start, end) == (T0 - 300_000, T0)
    assert matchers == [
        (EQ, "__name__", "container_cpu_usage_seconds_total"),
        # Only the regex layer of escaping: a remote-read matcher value is not a PromQL string literal.
        (RE, "namespace", 'a"\\}\\|\\.\\*|shop'),
        (EQ, "pod", "web-1"),
        (NEQ, "container", ""), (NEQ, "container", "POD"),
        (EQ, "cluster", "eu-1"),
    ]


def test_answers_decode_to_the_samples_written() -> None:
    steady = [(T0 + 15_000 * i, 0.5 + i) for i in range(40)]  # one uniform run of 18-byte records
    mixed = [(T0, 0.0), (T0 + 15_000, 0.0), (T0 + 30_000, 2.5), (T0 + 45_000, -1.0), (T0 + 60_000, 0.0),
             (T0 + 75_000, math.inf), (T0 + 90_000, 7.0)]  # zeros (9-byte records) between full ones
    old = [(1_000, 1.0), (2_000, 2.0)]  # 1970: two-byte times, decoded record by record
    started = [(T0, 0.0), *steady[1:]]  # a counter from zero: one 9-byte record, then 18-byte ones
    idle = [(T0 + 15_000 * i, 0.0) for i in range(20)]  # never throttled: 9-byte records only
    answer = encode_response([
        [({"__name__": "m", "namespace": "shop", "pod": "p-1", "container": "app"}, steady),
         ({"namespace": "shop", "pod": "p-2", "container": "app", "empty": ""}, mixed),
         ({"namespace": "x"}, []), ({"pod": "started"}, started), ({"pod": "idle"}, idle)],
        [({"pod": "über-ünïcode"}, old)],
    ])
    first, second = decode_response(answer)
    assert [s.labels for s in first] == [
        {"__name__": "m", "container": "app", "namespace": "shop", "pod": "p-1"},
        {"container": "app", "empty": "", "namespace": "shop", "pod": "p-2"},
        {"namespace": "x"}, {"pod": "started"}, {"pod": "idle"}]
    for got, want in zip(first, [steady, mixed, [], started, idle], strict=True):
        assert got.times_ms.tolist() == [t for t, _ in want]
        assert got.values.tolist() == [v for _, v in want]
    assert second[0].labels == {"pod": "über-ünïcode"} and second[0].times_ms.tolist() == [1_000, 2_000]


def test_stale_markers_are_dropped_and_other_nans_kept() -> None:
    answer = encode_response([[({"pod": "p"}, [(T0, 1.0), (T0 + 1, STALE), (T0 + 2, math.nan), (T0 + 3, 4.0)])]])
    [[series]] = decode_response(answer)
    assert series.times_ms.tolist() == [T0, T0 + 2, T0 + 3]
    assert math.isnan(series.values[1]) and series.values[[0, 2]].tolist() == [1.0, 4.0]


@pytest.mark.parametrize("body", [b"not snappy at all", bytes(cramjam.snappy.compress_raw(b"\x0a\x05\x0a\x03"))])
def test_a_body_that_is_not_an_answer_is_refused(body: bytes) -> None:
    with pytest.raises(ValueError):
        decode_response(body)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.tuples(st.integers(0, 2**40), st.one_of(
    st.just(0.0), st.floats(allow_nan=False), st.floats(-1e3, 1e3))), max_size=30), min_size=1, max_size=5))
def test_any_answer_round_trips(series: list[list[tuple[int, float]]]) -> None:
    written = [({"pod": f"p{i}"}, sorted(s)) for i, s in enumerate(series)]
    [decoded] = decode_response(encode_response([written]))
    for (labels, samples), got in zip(written, decoded, strict=True):
        assert got.labels == labels
        assert got.times_ms.tolist() == [t for t, _ in samples]
        assert got.values.tolist() == [v for _, v in samples]


# ----------------------------------------------------------------------------------------- per step
def test_rate_extrapolates_as_prometheus_does() -> None:
    # A counter sampled every 60 s at 1 core: 0, 60, 120 ... read at t = T0 + 600 s with a 300 s window.
    # Window [T0 + 300 s, T0 + 600 s] holds the samples at 300..600 s: 6 samples, increase 300, sampled 300 s,
    # both ends on the boundary (distance 0 < 1.1 x 60): extrapolated over 300 s -> 300 / 300 = 1.0 core.
    counter = _series([T0 + 60_000 * i for i in range(11)], [60.0 * i for i in range(11)])
    got = rates([counter], np.array([T0 + 600_000]), 300_000)
    assert got.values.tolist() == [[1.0]] and got.present.tolist() == [[True]]
    # Read at T0 + 630 s: window [330, 630] holds 360..600 (5 samples, increase 240 over 240 s); the start is
    # 30 s away (< 66 s): extrapolate 30 s; the end 30 s away: 30 s. 240 x (300 / 240) / 300 = 1.0.
    assert rates([counter], np.array([T0 + 630_000]), 300_000).values.tolist() == [[1.0]]


def test_rate_counts_resets_and_cuts_extrapolation_at_zero() -> None:
    # 10, 20, 5 (reset: +20), 15 over 0..180 s, read at 180 s with a 240 s window: increase = 15 - 10 + 20 = 25
    # over 180 s. To the window's start 60 s (< 66 s), but the counter would reach zero 10 / 25 x 180 = 72 s
    # before its first sample: 60 stays. End 0. 25 x (240 / 180) / 240 = 0.1388...
    c = _series([T0, T0 + 60_000, T0 + 120_000, T0 + 180_000], [10.0, 20.0, 5.0, 15.0])
    got = rates([c], np.array([T0 + 180_000]), 240_000).values[0, 0]
    assert got == pytest.approx(25 * (240 / 180) / 240, rel=1e-12)
    # A counter that starts near zero: 1, 11, 21 over 0..120 s, window 300 s at 120 s. To start 180 s is past
    # 1.1 x 60, so half an interval would do (30 s), but zero is 1 / 20 x 120 = 6 s before the first sample
    # (2.42 takes the zero point first, then compares with the threshold: 6 < 66, extrapolate 6 s).
    young = _series([T0, T0 + 60_000, T0 + 120_000], [1.0, 11.0, 21.0])
    assert rates([young], np.array([T0 + 120_000]), 300_000).values[0, 0] == pytest.approx(20 * (126 / 120) / 300)


def test_rate_needs_two_samples_and_peak_one() -> None:
    one = _series([T0], [3.0])
    at = np.array([T0, T0 + 60_000])
    r, p = rates([one], at, 60_000), peaks([one], at, 59_999)
    assert r.present.tolist() == [[False, False]] and np.isnan(r.values).all()
    assert p.present.tolist() == [[True, False]] and p.values[0, 0] == 3.0


def test_peaks_take_the_largest_sample_of_each_window_and_nan_loses() -> None:
    s = _series([T0 + 10_000 * i for i in range(12)], [1, 5, math.nan, 2, 9, 0, math.nan, math.nan, 4, 4, 3, 8])
    at = np.array([T0 + 50_000, T0 + 110_000])  # windows (t - 60 s, t]: samples 0..5 and 6..11
    got = peaks([s], at, 59_999)
    assert got.values.tolist() == [[9.0, 8.0]]
    only_nan = peaks([_series([T0], [math.nan])], np.array([T0]), 59_999)
    assert only_nan.present.tolist() == [[True]] and math.isnan(only_nan.values[0, 0])


def test_max_by_container_merges_its_series() -> None:
    a = _series([T0, T0 + 60_000], [1.0, 2.0])
    b = _series([T0 + 60_000, T0 + 120_000], [math.nan, 5.0])
    rows = peaks([a, b], np.array([T0, T0 + 60_000, T0 + 120_000]), 59_999)
    merged = combine(rows, ["k", "k"])["k"]
    assert merged.present.tolist() == [True, True, True]
    assert merged.values.tolist() == [1.0, 2.0, 5.0]


def _reference_rate(times: list[int], values: list[float], at: int, width: int) -> float | None:
    """Prometheus 2.42's extrapolatedRate for one window, transcribed loop by loop."""
    window = [(t, v) for t, v in zip(times, values, strict=True) if at - width <= t <= at]
    if len(window) < 2:
        return None
    result = window[-1][1] - window[0][1]
    last = 0.0
    for _, v in window:
        if v < last:
            result += last
        last = v
    to_start = (window[0][0] - (at - width)) / 1000
    to_end = (at - window[-1][0]) / 1000
    sampled = (window[-1][0] - window[0][0]) / 1000
    average = sampled / (len(window) - 1)
    if result > 0 and window[0][1] >= 0:
        to_start = min(to_start, sampled * (window[0][1] / result))
    threshold = average * 1.1
    span = (sampled + (to_start if to_start < threshold else average / 2)
            + (to_end if to_end < threshold else average / 2))
    return result * (span / sampled) / (width / 1000)


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 90), st.floats(0, 50)), min_size=0, max_size=40),
       st.lists(st.tuples(st.integers(1, 90), st.floats(0, 50)), min_size=0, max_size=40),
       st.integers(30, 400))
def test_rates_and_peaks_equal_a_window_by_window_reading(steps_a: list[tuple[int, float]],
                                                          steps_b: list[tuple[int, float]], width_s: int) -> None:
    """Two series at once (their windows must not mix), irregular gaps, resets (a step may go down)."""
    def build(steps: list[tuple[int, float]]) -> RawSeries:
        times = np.cumsum([T0] + [g * 1000 for g, _ in steps])[1:].tolist()
        return _series(times, [v for _, v in steps])

    series = [build(steps_a), build(steps_b)]
    grid = GridRange(first_s=T0 / 1000 + 60, last_s=T0 / 1000 + 3600, step_s=60)
    at = grid_ms(grid)
    got_rates, got_peaks = rates(series, at, width_s * 1000), peaks(series, at, width_s * 1000)
    for row, s in enumerate(series):
        times, values = s.times_ms.tolist(), s.values.tolist()
        for col, t in enumerate(at.tolist()):
            want = _reference_rate(times, values, t, width_s * 1000)
            assert got_rates.present[row, col] == (want is not None)
            if want is not None:
                assert got_rates.values[row, col] == pytest.approx(want, rel=1e-9, abs=1e-12)
            inside = [v for u, v in zip(times, values, strict=True) if t - width_s * 1000 <= u <= t]
            assert got_peaks.present[row, col] == bool(inside)
            if inside:
                assert got_peaks.values[row, col] == max(inside)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.tuples(st.integers(0, 70), st.floats(0, 50)), max_size=30), min_size=1, max_size=4),
       st.integers(0, 200), st.integers(1, 300), st.integers(1, 90), st.integers(1, 40))
def test_an_even_grid_counts_the_windows_a_binary_search_finds(
        steps: list[list[tuple[int, float]]], offset_s: int, width_s: int, step_s: int, points: int) -> None:
    """The even-grid path of the windows (counting) against the binary search the same windows take one grid
    time at a time: gaps of zero (equal times), samples before the first and after the last grid time, windows
    narrower than a step and wider than the history."""
    def build(gaps: list[tuple[int, float]]) -> RawSeries:
        times = np.cumsum([T0] + [g * 1000 for g, _ in gaps])[1:].tolist()
        return _series(times, [v for _, v in gaps])

    series = [build(g) for g in steps]
    at = T0 + offset_s * 1000 + step_s * 1000 * np.arange(points, dtype=np.int64)
    whole_r, whole_p = rates(series, at, width_s * 1000), peaks(series, at, width_s * 1000)
    for col in range(points):
        one_r, one_p = rates(series, at[col:col + 1], width_s * 1000), peaks(series, at[col:col + 1], width_s * 1000)
        np.testing.assert_array_equal(whole_r.present[:, col], one_r.present[:, 0])
        np.testing.assert_array_equal(whole_r.values[:, col], one_r.values[:, 0])
        np.testing.assert_array_equal(whole_p.present[:, col], one_p.present[:, 0])
        np.testing.assert_array_equal(whole_p.values[:, col], one_p.values[:, 0])


def test_remote_matchers_keep_a_single_value_exact() -> None:
    scope = promql.Scope(namespaces=("a.b",))
    assert promql.remote_matchers("m", scope)[1] == Matcher(kind=EQ, name="namespace", value="a.b")
