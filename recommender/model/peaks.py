"""Peak bookkeeping: VPA's one-peak-per-aggregation-interval memory feed and per-slot maxima.

Owns ``IntervalPeaks`` (a running max per aggregation interval, time-stamped at the interval end, that
replaces its own earlier entry in a decaying histogram when a higher sample arrives, with the OOM peak kept
apart from the usage peak so that repeated OOMs in one interval do not compound, as VPA's
``model/container.go`` does), ``SlotMax`` (maximum and sample count per time slot, so that "the max over
the last N days" and "how many points in the window" are cheap) and ``cost_level`` (the level that minimises
provisioned memory plus the expected cost of overruns, from a window of slot maxima). Samples may arrive in
any order within a batch; they are sorted here. Pure numpy; no knowledge of strategies or policies.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from podtailor.numeric import is_finite_number, is_int
from recommender.model.histogram import DecayingHistogram
from recommender.model.quantiles import linear_quantiles
from recommender.model.types import FloatArray


@dataclass(frozen=True, slots=True, kw_only=True)
class SortedSamples:
    timestamps_s: FloatArray
    values: FloatArray


def sort_samples(timestamps_s: FloatArray, values: FloatArray) -> SortedSamples:
    """Stable sort by timestamp (batches may arrive out of order)."""
    order = np.argsort(timestamps_s, kind="stable")
    return SortedSamples(timestamps_s=timestamps_s[order], values=values[order])


def split_at(samples: SortedSamples, timestamp_s: float) -> tuple[SortedSamples, SortedSamples]:
    """Samples at or before ``timestamp_s``, and those after it."""
    cut = int(np.searchsorted(samples.timestamps_s, timestamp_s, side="right"))
    return (SortedSamples(timestamps_s=samples.timestamps_s[:cut], values=samples.values[:cut]),
            SortedSamples(timestamps_s=samples.timestamps_s[cut:], values=samples.values[cut:]))


class IntervalPeaks:
    """One memory peak per aggregation interval in a decaying histogram (VPA semantics).

    VPA starts the first interval at the first sample (model/container.go, ``addMemorySample``: the first
    sample's time is the window's end, later windows follow it by whole intervals). With ``aligned`` the
    intervals are whole multiples of the interval instead (hours at 3600 s), so the peaks do not depend on
    where a history happens to start: a history read with hourly summaries of its older part (one per hour,
    one step before each whole hour) gives the same hourly peaks as the same history read at full
    resolution, which a first sample at another time would shift by up to an hour."""

    __slots__ = ("aligned", "hist", "interval_s", "last_sample_s", "oom_peak", "usage_peak", "window_end_s")

    def __init__(self, hist: DecayingHistogram, interval_s: float, *, aligned: bool = False) -> None:
        self.hist = hist
        self.aligned = aligned
        self.interval_s = float(interval_s)
        self.window_end_s: float | None = None
        self.usage_peak = 0.0
        self.oom_peak = 0.0
        self.last_sample_s: float | None = None

    @property
    def current_peak(self) -> float:
        return max(self.usage_peak, self.oom_peak)

    def _raise_current(self, usage: float = 0.0, oom: float = 0.0) -> None:
        """Raise the current interval's peak; replace its histogram entry if the max grew."""
        assert self.window_end_s is not None
        old = self.current_peak
        self.usage_peak = max(self.usage_peak, usage)
        self.oom_peak = max(self.oom_peak, oom)
        if self.current_peak > old:
            self.hist.subtract(old, self.window_end_s)
            self.hist.add(np.array([self.current_peak]), np.array([self.window_end_s]))

    def _open_windows(self, timestamps_s: FloatArray, values: FloatArray, *, is_oom: bool) -> None:
        """Samples at or after the current window end: one new peak per interval they fall in."""
        assert self.window_end_s is not None
        k = np.floor((timestamps_s - self.window_end_s) / self.interval_s).astype(np.int64)
        starts = np.concatenate([[True], k[1:] != k[:-1]]).nonzero()[0]
        peaks = np.maximum.reduceat(values, starts)
        ends = (self.window_end_s + (k[starts] + 1) * self.interval_s).astype(np.float64)
        self.hist.add(peaks, ends)
        self.window_end_s = float(ends[-1])
        self.usage_peak, self.oom_peak = (0.0, float(peaks[-1])) if is_oom else (float(peaks[-1]), 0.0)

    def add(self, samples: SortedSamples) -> None:
        """Fold time-sorted usage peaks in; samples older than the last one seen are dropped (as VPA)."""
        ts, vals = samples.timestamps_s, samples.values
        if self.last_sample_s is not None:
            keep = ts >= self.last_sample_s
            ts, vals = ts[keep], vals[keep]
        if ts.size == 0:
            return
        if self.window_end_s is None:
            self.window_end_s = self._first_end(float(ts[0]))
        current = ts < self.window_end_s
        if np.any(current):
            self._raise_current(usage=float(vals[current].max()))
        if not np.all(current):
            self._open_windows(ts[~current], vals[~current], is_oom=False)
        self.last_sample_s = float(ts[-1])

    def add_oom(self, timestamp_s: float, needed: float) -> bool:
        """Inject an OOM peak; OOMs older than (last sample - one interval) are dropped (VPA #8548)."""
        if self.last_sample_s is not None and timestamp_s < self.last_sample_s - self.interval_s:
            return False
        if self.window_end_s is None:
            self.window_end_s = self._first_end(timestamp_s)
        if timestamp_s < self.window_end_s:
            self._raise_current(oom=needed)
        else:
            self._open_windows(np.array([timestamp_s]), np.array([needed]), is_oom=True)
        self.last_sample_s = max(self.last_sample_s or timestamp_s, timestamp_s)
        return True

    def _first_end(self, timestamp_s: float) -> float:
        """Where the window before the first sample ends: at the sample (VPA), or at the start of its aligned
        interval, so that the sample opens the interval it falls in."""
        return math.floor(timestamp_s / self.interval_s) * self.interval_s if self.aligned else timestamp_s

    def to_checkpoint(self) -> dict[str, Any]:
        return {"hist": self.hist.to_checkpoint(), "interval_s": self.interval_s, **self.window_to_checkpoint()}

    def window_to_checkpoint(self) -> dict[str, Any]:
        """The current interval's bookkeeping alone (for windows that share another's histogram)."""
        return {"window_end_s": self.window_end_s, "usage_peak": self.usage_peak, "oom_peak": self.oom_peak,
                "last_sample_s": self.last_sample_s, "aligned": self.aligned}

    @staticmethod
    def window_from_checkpoint(hist: DecayingHistogram, interval_s: float, data: dict[str, Any]) -> IntervalPeaks:
        peaks = IntervalPeaks(hist, interval_s, aligned=bool(data.get("aligned", False)))
        # The API server drops a null that the CRD schema does not mark nullable (apiextensions-apiserver,
        # pkg/apiserver/schema/defaulting/prunenulls.go, PruneNonNullableNullsWithoutDefaults), so a checkpoint
        # read back from the cluster lacks the keys that were None when it was written.
        peaks.window_end_s = _opt_float(data.get("window_end_s"))
        peaks.usage_peak = float(data["usage_peak"])
        peaks.oom_peak = float(data["oom_peak"])
        peaks.last_sample_s = _opt_float(data.get("last_sample_s"))
        return peaks

    @staticmethod
    def from_checkpoint(data: dict[str, Any]) -> IntervalPeaks:
        return IntervalPeaks.window_from_checkpoint(DecayingHistogram.from_checkpoint(data["hist"]),
                                                    float(data["interval_s"]), data)


def _opt_float(value: Any) -> float | None:
    return None if value is None else float(value)


def cost_level(peaks: FloatArray, *, margin_fraction: float, overrun_cost: float) -> float | None:
    """The base level b among ``peaks`` minimising  b x (1 + margin) + overrun_cost x S(b), with S(b) the share
    of the peaks above b (the chance that the next slot's peak exceeds b, from this series' own window).

    Both terms are per slot: the first is what b provisions, the second what it risks (``overrun_cost`` is the
    price of one overrun, an OOM kill, in the units of the first term: bytes x slots). With overrun_cost large
    enough, b is the max (nothing dropped); a lower b is chosen only when the slots it leaves uncovered are rare
    enough: dropping the top k of n peaks saves (max - b)(1 + margin) and costs overrun_cost x k / n. Returns b
    (the margin is the caller's), or None without peaks. Ties go to the higher level."""
    p = np.sort(np.asarray(peaks, dtype=np.float64))
    p = p[np.isfinite(p)]
    if p.size == 0:
        return None
    above = p.size - np.searchsorted(p, p, side="right")
    cost = p * (1.0 + margin_fraction) + overrun_cost * above / p.size
    best = (cost <= cost.min()).nonzero()[0]
    return float(p[best[-1]])


def jump_margin(peaks: FloatArray, *, lookback: int, quantile: float, bounds: tuple[float, float],
                min_points: int = 24) -> float | None:
    """A per-container memory margin: the ``quantile`` of how far a slot's peak rose above the max of the
    ``lookback`` slots before it, max(peak / that max - 1, 0), over ``peaks`` (consecutive slots, NaN where
    none), clipped to ``bounds``. None with fewer than ``min_points`` slots that have both a peak and a
    positive max before them; slots before the first peak are not part of any lookback. The ratios do not
    depend on the container's size, so neither does the margin: a container whose peaks rise little from one
    day to the next needs less room above its level than a fixed margin gives (#18: the Google jobs' smooth
    memory, RESULTS.md "The jump margin held")."""
    x = np.asarray(peaks, dtype=np.float64)
    seen = np.isfinite(x).nonzero()[0]
    # A slot counts only with its whole lookback after the first peak: a young container's first hours, each
    # against the few before it, are not a day-over-day rise (they gave 3% margins after one day of history).
    x = x[seen[0]:] if seen.size else x[:0]
    if lookback < 1 or x.size <= lookback:
        return None
    before = np.lib.stride_tricks.sliding_window_view(x[:-1], lookback)
    with np.errstate(invalid="ignore"):  # an all-NaN lookback is NaN, and not counted below
        prev = np.fmax.reduce(before, axis=1)
    cur = x[lookback:]
    good = np.isfinite(prev) & np.isfinite(cur) & (prev > 0)
    if int(good.sum()) < min_points:
        return None
    jumps = np.sort(np.maximum(cur[good] / prev[good] - 1.0, 0.0))
    low, high = bounds
    level = float(linear_quantiles(jumps, np.array([quantile]))[0])  # np.quantile's answer, without its overhead
    return min(max(level, low), high)  # np.clip's order: the lower bound first, then the upper


class SlotMax:
    """Maximum value and sample count per time slot (slot = floor(t / slot_s)), pruned to a retention."""

    __slots__ = ("counts", "maxima", "retention_s", "slot_s")

    def __init__(self, *, slot_s: float = 86400.0, retention_s: float = 15 * 86400.0) -> None:
        self.slot_s = float(slot_s)
        self.retention_s = float(retention_s)
        self.maxima: dict[int, float] = {}
        self.counts: dict[int, int] = {}

    def add(self, samples: SortedSamples) -> None:
        if samples.values.size == 0:
            return
        slots = np.floor(samples.timestamps_s / self.slot_s).astype(np.int64)
        starts = np.concatenate([[True], slots[1:] != slots[:-1]]).nonzero()[0]
        maxima = np.maximum.reduceat(samples.values, starts)
        counts = np.diff(np.append(starts, slots.size))
        new_slots = slots[starts].tolist()
        if self.maxima.keys().isdisjoint(new_slots):  # slots not seen before (a cold read): no merging
            self.maxima.update(zip(new_slots, maxima.tolist(), strict=True))
            self.counts.update(zip(new_slots, counts.tolist(), strict=True))
        else:
            for slot, peak, count in zip(new_slots, maxima.tolist(), counts.tolist(), strict=True):
                self.maxima[slot] = max(self.maxima.get(slot, peak), peak)
                self.counts[slot] = self.counts.get(slot, 0) + count
        keep_from = int(slots[-1]) - math.ceil(self.retention_s / self.slot_s)
        for slot in [s for s in self.maxima if s < keep_from]:
            del self.maxima[slot]
            del self.counts[slot]

    def _slots_in(self, now_s: float, window_s: float) -> list[int]:
        first = math.floor((now_s - window_s) / self.slot_s)
        last = math.floor(now_s / self.slot_s)
        return [s for s in self.maxima if first <= s <= last]

    def max(self, *, now_s: float, window_s: float) -> float | None:
        """Max over the slots overlapping [now - window, now]; None if there are none."""
        slots = self._slots_in(now_s, window_s)
        return max((self.maxima[s] for s in slots), default=None)

    def values(self, *, now_s: float, window_s: float) -> list[float]:
        """The per-slot maxima of the slots overlapping [now - window, now], oldest first."""
        return [self.maxima[s] for s in sorted(self._slots_in(now_s, window_s))]

    def count(self, *, now_s: float, window_s: float) -> int:
        return sum(self.counts[s] for s in self._slots_in(now_s, window_s))

    def series(self, *, now_s: float, window_s: float) -> FloatArray:
        """The per-slot maxima of every slot overlapping [now - window, now], oldest first, NaN where a slot has
        no sample (so that position i is slot first + i, which ``jump_margin`` needs)."""
        first = math.floor((now_s - window_s) / self.slot_s)
        last = math.floor(now_s / self.slot_s)
        out = np.full(max(last - first + 1, 0), np.nan)
        for s in self._slots_in(now_s, window_s):
            out[s - first] = self.maxima[s]
        return out

    def to_checkpoint(self) -> dict[str, Any]:
        """The slots as one contiguous range from ``first``: per slot its maximum (an int when integral, as memory
        bytes are, which packs smaller; null where the slot has no sample) and its sample count (0 there)."""
        first = min(self.maxima, default=0)
        span = range(first, max(self.maxima, default=first - 1) + 1)
        return {"slot_s": self.slot_s, "retention_s": self.retention_s, "first": first,
                "maxima": [_compact(self.maxima[s]) if s in self.maxima else None for s in span],
                "counts": [self.counts.get(s, 0) for s in span]}

    @staticmethod
    def from_checkpoint(data: dict[str, Any]) -> SlotMax:
        """Either form: the range above, or the per-slot map earlier checkpoints hold (``{"slot": [max, n]}``)."""
        out = SlotMax(slot_s=float(data["slot_s"]), retention_s=float(data["retention_s"]))
        if "slots" in data:
            for slot, (peak, count) in data["slots"].items():
                out.maxima[int(slot)] = float(peak)
                out.counts[int(slot)] = int(count)
            return out
        first, maxima, counts = data["first"], data["maxima"], data["counts"]
        if not (is_int(first) and isinstance(maxima, list) and isinstance(counts, list)
                and len(maxima) == len(counts)):
            raise ValueError("slot maxima: first is not an integer, or maxima and counts differ in length")
        for i, (peak, count) in enumerate(zip(maxima, counts, strict=True)):
            if not (is_int(count) and count >= 0 and (peak is None) == (count == 0)):
                raise ValueError(f"slot maxima: slot {first + i} has count {count!r} with maximum {peak!r}")
            if peak is not None:
                if not is_finite_number(peak):
                    raise ValueError(f"slot maxima: {peak!r} is not a finite number")
                out.maxima[first + i] = float(peak)
                out.counts[first + i] = count
        return out


def _compact(value: float) -> float | int:
    """``value`` as an int when that is exact (restored with ``float``, it is the same value; not -0.0)."""
    return int(value) if value.is_integer() and abs(value) < 2**53 and math.copysign(1.0, value) > 0 else value
