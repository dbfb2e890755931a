"""Raw samples to the step grid, computed as Prometheus's range queries compute them.

Owns what the source's range queries would have answered, from the stored samples remote read returns
(``remote_read``): ``rate(m[w])`` and ``max_over_time(m[step - 1ms])`` at each grid time, then ``max by
(namespace, pod, container)`` across the series of one container. The rules are Prometheus 2's, the server the
tests run (2.42):

- a range selector ``m[w]`` evaluated at ``t`` holds the samples with ``t - w <= time <= t`` (both ends; from
  Prometheus 3 the start is open), stale markers left out (``remote_read`` drops them);
- ``rate`` needs two samples; the increase is last - first plus, at every drop (a counter reset), the value
  before it; it is then extrapolated (promql/functions.go, ``extrapolatedRate``): the duration to the range's
  start is first cut to the time the counter would have taken from zero at the sampled slope, and then each
  end is extrapolated all the way to the range's boundary when it is within 1.1 average sample intervals of
  it, else by half an interval; the result is divided by ``w``;
- ``max_over_time`` is the largest sample in the window (a NaN loses to any number);
- ``max by`` takes the largest value at each time (a NaN loses to any number) over the series present there.

A grid time where no series of the container has a value gets none, as in the range answer. So the same history
read either way gives the same numbers, to floating-point rounding (the increase here is a difference of running
sums): tests/integration/test_source_prometheus.py compares both reads of one Prometheus.

Every function works on all the series of one answer at once: their samples are laid end to end with each
series' times shifted by its own offset, so one ``searchsorted`` finds every window of every series, and the
result is a ``Rows``: one row per series over the grid, with where it has a value (a value may itself be NaN,
Inf or negative, as in the range answer, so that the source drops and counts it the same way). Pure.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

from recommender.model.types import FloatArray
from recommender.sources.grid import GridRange
from recommender.sources.remote_read import IntArray, RawSeries

K = TypeVar("K", bound=Hashable)
_SHIFT = 1 << 44
"""Milliseconds between two series laid end to end: above any time up to the year 2527, so no window of one
series reaches another's samples."""


@dataclass(frozen=True, slots=True)
class Rows:
    """Values (series or containers x grid times) and where there is one (elsewhere the value is NaN)."""

    values: FloatArray
    present: np.ndarray


def grid_ms(grid: GridRange) -> IntArray:
    """The grid's evaluation times in whole milliseconds."""
    return round(grid.first_s * 1000) + round(grid.step_s * 1000) * np.arange(grid.points, dtype=np.int64)


class _Laid:
    """The series of one answer laid end to end, and every (series, grid time) window's first and last index."""

    def __init__(self, series: Sequence[RawSeries], at_ms: IntArray, width_ms: int) -> None:
        sizes = np.array([s.times_ms.size for s in series], dtype=np.int64)
        self.starts = np.zeros(len(series) + 1, dtype=np.int64)
        np.cumsum(sizes, out=self.starts[1:])
        ids = np.repeat(np.arange(len(series), dtype=np.int64), sizes)
        empty = np.empty(0)
        local = np.concatenate([s.times_ms for s in series]) if series else empty.astype(np.int64)
        self.times = local + ids * _SHIFT
        self.values = np.concatenate([s.values for s in series]) if series else empty
        ends = at_ms[None, :] + (np.arange(len(series), dtype=np.int64) * _SHIFT)[:, None]
        step = int(at_ms[1] - at_ms[0]) if at_ms.size > 1 else 0
        if step > 0 and bool(np.all(np.diff(at_ms) == step)):
            # Evenly spaced grid times (the source's grids): count instead of searching. The window at grid
            # index j holds the samples with at[j] - width <= t <= at[j], so the first index is the count of
            # the samples before at[j] - width and the last is the count up to at[j], minus one; a sample
            # counts from the grid index its time maps to on, found by one integer division each.
            a0 = int(at_ms[0])
            self.first = self._counted_from(ids, (local + width_ms - a0) // step + 1, at_ms.size)
            self.last = self._counted_from(ids, -((a0 - local) // step), at_ms.size) - 1
        else:  # any other times: a binary search per (series, time), same answers
            self.first = np.searchsorted(self.times, ends - width_ms, side="left")
            self.last = np.searchsorted(self.times, ends, side="right") - 1
        self.ends = ends

    def _counted_from(self, ids: IntArray, from_index: IntArray, points: int) -> IntArray:
        """For each (series, grid index j), the global count of samples before that series' own plus those of
        its own whose ``from_index`` <= j: ``searchsorted`` over the laid times, computed with one bincount."""
        series = self.starts.size - 1
        cells = ids * (points + 1) + np.clip(from_index, 0, points)
        counts = np.bincount(cells, minlength=series * (points + 1)).reshape(series, points + 1)[:, :points]
        out: IntArray = np.cumsum(counts, axis=1) + self.starts[:-1, None]
        return out


def rates(series: Sequence[RawSeries], at_ms: IntArray, window_ms: int) -> Rows:
    """``rate(m[window])`` of each counter (rows) at each of ``at_ms`` (columns); none where the window holds
    under two samples."""
    out = np.full((len(series), at_ms.size), np.nan)
    if not series:
        return Rows(out, ~np.isnan(out))
    laid = _Laid(series, at_ms, window_ms)
    ok = laid.last - laid.first >= 1
    if not ok.any():
        return Rows(out, ok)
    t, v = laid.times, laid.values
    lo, hi = laid.first[ok], laid.last[ok]
    drops = np.zeros(v.size)
    drops[1:] = np.where(v[1:] < v[:-1], v[:-1], 0.0)
    running = np.cumsum(drops)  # the value lost at each reset, summed: adds back what a reset took away
    # (a drop from one series' last sample to the next one's first is never inside a window: windows stay in
    # their own series, and the sum over (lo, hi] starts after a series' first sample)
    increase = (v[hi] - v[lo]) + (running[hi] - running[lo])
    end_ms = laid.ends[ok]
    to_start = (t[lo] - (end_ms - window_ms)) / 1000.0
    to_end = (end_ms - t[hi]) / 1000.0
    sampled = (t[hi] - t[lo]) / 1000.0
    average = sampled / (hi - lo)
    first_v = v[lo]
    with np.errstate(divide="ignore", invalid="ignore"):
        to_zero = np.where((increase > 0) & (first_v >= 0), sampled * (first_v / increase), np.inf)
        to_start = np.minimum(to_start, to_zero)
        threshold = average * 1.1
        span = (sampled + np.where(to_start < threshold, to_start, average / 2)
                + np.where(to_end < threshold, to_end, average / 2))
        out[ok] = increase * (span / sampled) / (window_ms / 1000.0)
    return Rows(out, ok)


def peaks(series: Sequence[RawSeries], at_ms: IntArray, window_ms: int) -> Rows:
    """``max_over_time(m[window])`` of each series (rows) at each of ``at_ms`` (columns); none where the window
    holds no sample."""
    out = np.full((len(series), at_ms.size), np.nan)
    if not series:
        return Rows(out, ~np.isnan(out))
    laid = _Laid(series, at_ms, window_ms)
    ok = laid.last >= laid.first
    if ok.any():
        out[ok] = _range_max(laid.values, laid.first[ok], laid.last[ok])
    return Rows(out, ok)


def _range_max(v: FloatArray, lo: IntArray, hi: IntArray) -> FloatArray:
    """max(v[lo[i]..hi[i]]) for each i (inclusive, non-empty), NaN only where every value is NaN (fmax).
    Windows may overlap or skip samples, so a sparse table of maxima over powers of two answers each window
    with two look-ups."""
    levels = [v]
    width = 1
    longest = int((hi - lo).max()) + 1
    while width * 2 <= longest:
        prev = levels[-1]
        levels.append(np.fmax(prev[:-width], prev[width:]))
        width *= 2
    k = np.floor(np.log2(hi - lo + 1)).astype(np.int64)
    result = np.empty(lo.size)
    for level in np.unique(k):
        sel = k == level
        table = levels[int(level)]
        result[sel] = np.fmax(table[lo[sel]], table[hi[sel] - (1 << int(level)) + 1])
    return result


def combine(rows: Rows, keys: Sequence[K]) -> dict[K, Rows]:
    """``max by`` the row keys: one 1-row ``Rows`` per key, present where any of its rows is, and the largest
    of those values (a NaN loses to any number: ``fmax``, as PromQL's ``max`` aggregation)."""
    out: dict[K, Rows] = {}
    for value, present, key in zip(rows.values, rows.present, keys, strict=True):
        seen = out.get(key)
        out[key] = Rows(value, present) if seen is None else Rows(
            np.fmax(seen.values, value), seen.present | present)
    return out
