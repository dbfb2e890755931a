"""Exponential-bucket histograms: VPA's decaying histogram, a plain one, and a windowed one for KRR.

Owns the bucket geometry (``BucketScheme``: bucket n starts at first*(r^n - 1)/(r - 1), the last bucket is
open-ended), the three histogram flavours and their JSON-safe checkpoints. ``Histogram`` keeps one dense
float64 weight per bucket and never decays. ``DecayingHistogram`` multiplies each sample's weight by
2^((t_sample - t_ref)/half_life), with t_ref a whole multiple of the half-life, shifted (and the weights
rescaled) when an exponent would pass ``MAX_DECAY_EXPONENT`` half-lives, as VPA does. ``WindowedHistogram``
keeps one sparse sub-histogram per time slot (a day by default) so that only the last N slots can be
queried. Percentiles walk the cumulative weight and return the UPPER edge of the bucket that holds the
requested weight (the start of the last bucket for the open-ended one), so for a value q the answer lies
in [q, r*q + first]: at most (r - 1) relative plus one first-bucket width above the nearest-rank quantile.
All adds are vectorised (``np.bincount``); nothing here knows about CPU, memory or containers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from podtailor.numeric import is_finite_number, is_int
from recommender.model.types import FloatArray

EPSILON = 1e-4
"""Weights below this count as empty (VPA: 0.001 x minSampleWeight 0.1)."""
MAX_DECAY_EXPONENT = 100
"""Half-lives after the reference time before the reference shifts (VPA's renormalisation point)."""
CHECKPOINT_VERSION = 1

IntArray = NDArray[np.int64]


@dataclass(frozen=True, slots=True, kw_only=True)
class BucketScheme:
    """Geometry of an exponential-bucket histogram."""

    first_bucket_size: float
    """Width of bucket 0, in the histogram's unit (cores, bytes)."""
    ratio: float
    """Each bucket is this many times wider than the previous one (VPA: 1.05)."""
    max_value: float
    """The last bucket starts at or above this value and is open-ended."""
    num_buckets: int = field(init=False)
    starts: FloatArray = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not (self.first_bucket_size > 0 and self.ratio > 1 and self.max_value > self.first_bucket_size):
            raise ValueError("bucket scheme needs first > 0, ratio > 1 and max > first")
        scaled = self.max_value * (self.ratio - 1) / self.first_bucket_size + 1
        n = math.ceil(math.log(scaled) / math.log(self.ratio)) + 1
        object.__setattr__(self, "num_buckets", n)
        idx = np.arange(n + 1, dtype=np.float64)
        starts = self.first_bucket_size * (self.ratio**idx - 1) / (self.ratio - 1)
        object.__setattr__(self, "starts", starts)

    def bucket_start(self, index: int) -> float:
        return float(self.starts[index])

    def find_buckets(self, values: FloatArray) -> IntArray:
        """Index of the bucket holding each value (values below the first edge go to bucket 0)."""
        scaled = np.maximum(values, 0.0) * (self.ratio - 1) / self.first_bucket_size + 1
        idx = np.floor(np.log(scaled) / math.log(self.ratio)).astype(np.int64)
        idx = np.minimum(np.maximum(idx, 0), self.num_buckets - 1)  # np.clip's answer, without its wrapper
        # Correct floating-point error at the edges so that starts[idx] <= v < starts[idx + 1].
        idx -= (self.starts[idx] > values) & (idx > 0)
        idx += (self.starts[idx + 1] <= values) & (idx < self.num_buckets - 1)
        return idx

    def upper_edge(self, index: int) -> float:
        """VPA's percentile answer for a bucket: its end, or its start for the open-ended last bucket."""
        return float(self.starts[index + 1] if index < self.num_buckets - 1 else self.starts[index])

    def to_dict(self) -> dict[str, float]:
        return {"first": self.first_bucket_size, "ratio": self.ratio, "max": self.max_value}

    @staticmethod
    def from_dict(data: dict[str, Any]) -> BucketScheme:
        return BucketScheme(first_bucket_size=float(data["first"]), ratio=float(data["ratio"]),
                            max_value=float(data["max"]))


VPA_CPU_BUCKETS = BucketScheme(first_bucket_size=0.01, ratio=1.05, max_value=1000.0)
"""VPA's CPU histogram: 10 millicores, +5% per bucket, up to 1000 cores: 176 buckets."""
VPA_MEMORY_BUCKETS = BucketScheme(first_bucket_size=1e7, ratio=1.05, max_value=1e12)
"""VPA's memory histogram: 10 MB, +5% per bucket, up to 1 TB: 176 buckets."""


def _finite_non_negative(values: FloatArray | float) -> bool:
    """Every value finite and >= 0, in two reductions: a NaN or -inf fails ``min >= 0`` (NaN propagates through
    both), +inf fails ``isfinite(max)``."""
    arr = np.asarray(values, dtype=np.float64)
    if arr.size == 0:
        return True
    return bool(np.minimum.reduce(arr, axis=None) >= 0.0) and bool(np.isfinite(np.maximum.reduce(arr, axis=None)))


def _check_values(values: FloatArray, weights: FloatArray | float) -> None:
    if not _finite_non_negative(values):
        raise ValueError("histogram values must be finite and non-negative")
    if not _finite_non_negative(weights):
        raise ValueError("histogram weights must be finite and non-negative")


def percentile_of(scheme: BucketScheme, weights: FloatArray, p: float) -> float | None:
    """Upper edge of the bucket where the cumulative weight first reaches p x total; None when empty (VPA 1.8.1
    pkg/recommender/util/histogram.go ``Percentile``, which walks from the first to the last bucket holding at
    least ``Epsilon``)."""
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"percentile {p} outside [0, 1]")
    nonzero = (weights >= EPSILON).nonzero()[0]  # flatnonzero of 1-D weights, without its wrappers
    if nonzero.size == 0:
        return None
    lo, hi = int(nonzero[0]), int(nonzero[-1])
    cum = np.cumsum(weights[lo:hi + 1])
    pos = int(np.searchsorted(cum, p * cum[-1], side="left"))
    return scheme.upper_edge(lo + min(pos, hi - lo))


def cost_share_of(scheme: BucketScheme, weights: FloatArray, *, margin_fraction: float,
                  overrun_cost: float) -> float | None:
    """The share of the weight at or below the level b that minimises  b x (1 + margin) + overrun_cost x S(b),
    with b one of the buckets' upper edges (the percentile convention) and S(b) the share of the weight in the
    buckets above b; None when empty. Ties go to the higher level. A flat distribution puts its weight in few
    buckets, so dropping its top costs a large share for little saved and b is high; a bursty one has a long
    thin tail, whose top buckets hold little weight, so b is low. ``overrun_cost`` is in the histogram's unit
    per unit share (cores per share of the time over the level)."""
    nonzero = (weights >= EPSILON).nonzero()[0]  # flatnonzero of 1-D weights, without its wrappers
    if nonzero.size == 0:
        return None
    lo, hi = int(nonzero[0]), int(nonzero[-1])
    cum = np.cumsum(weights[lo:hi + 1])
    share = cum / cum[-1]
    edges = scheme.starts[lo + 1:hi + 2].copy()
    if hi == scheme.num_buckets - 1:  # the open-ended last bucket answers its start
        edges[-1] = scheme.starts[hi]
    cost = edges * (1.0 + margin_fraction) + overrun_cost * (1.0 - share)
    best = (cost <= cost.min()).nonzero()[0]
    return float(share[best[-1]])


def _sparse(weights: FloatArray) -> dict[str, Any]:
    """The weights from the first non-empty bucket to the last (``weights_from``: the first's index), an empty
    bucket among them as the int 0 (an exact 0.0 when read back), which packs smaller than a float."""
    filled = np.flatnonzero(weights)
    if filled.size == 0:
        return {"weights_from": 0, "weights": []}
    span = weights[int(filled[0]):int(filled[-1]) + 1].tolist()
    return {"weights_from": int(filled[0]),
            "weights": [0 if w == 0 and math.copysign(1.0, w) > 0 else w for w in span]}


def _dense(scheme: BucketScheme, data: dict[str, Any]) -> FloatArray:
    """Either form: the range above, or the map of bucket index to weight that earlier checkpoints hold."""
    weights = np.zeros(scheme.num_buckets)
    sparse = data["weights"]
    if isinstance(sparse, dict):
        for key, value in sparse.items():
            if not 0 <= int(key) < scheme.num_buckets:
                raise ValueError(f"histogram weights: bucket {key} of {scheme.num_buckets}")
            weights[int(key)] = float(value)
        return weights
    start = data["weights_from"]
    if (not is_int(start) or not isinstance(sparse, list) or start < 0
            or start + len(sparse) > scheme.num_buckets):
        raise ValueError(f"histogram weights: {len(sparse)} from bucket {start!r} do not fit "
                         f"{scheme.num_buckets} buckets")
    if not all(is_finite_number(w) for w in sparse):
        raise ValueError("histogram weights: not all finite numbers")
    span = np.array(sparse, dtype=np.float64)
    weights[start:start + span.size] = span
    return weights


def _check_version(data: dict[str, Any], kind: str) -> None:
    if data.get("version") != CHECKPOINT_VERSION or data.get("kind") != kind:
        raise ValueError(f"unsupported histogram checkpoint {data.get('kind')!r} v{data.get('version')!r}")


class Histogram:
    """A non-decaying histogram: dense weights, one per bucket."""

    __slots__ = ("scheme", "weights")

    def __init__(self, scheme: BucketScheme) -> None:
        self.scheme = scheme
        self.weights: FloatArray = np.zeros(scheme.num_buckets)

    @property
    def total_weight(self) -> float:
        return float(self.weights.sum())

    def is_empty(self) -> bool:
        return not bool(np.any(self.weights >= EPSILON))

    def add(self, values: FloatArray, weights: FloatArray | float = 1.0) -> None:
        """Add many samples at once; ``weights`` is one weight per sample or a shared scalar."""
        values = np.asarray(values, dtype=np.float64)
        _check_values(values, weights)
        w = np.broadcast_to(np.asarray(weights, dtype=np.float64), values.shape)
        self.weights += np.bincount(self.scheme.find_buckets(values), weights=w,
                                    minlength=self.scheme.num_buckets)

    def subtract(self, value: float, weight: float) -> None:
        """Remove weight from the bucket of ``value``; a bucket left below EPSILON is cleared."""
        idx = int(self.scheme.find_buckets(np.array([value]))[0])
        self.weights[idx] = max(self.weights[idx] - weight, 0.0)
        if self.weights[idx] < EPSILON:
            self.weights[idx] = 0.0

    def percentile(self, p: float) -> float | None:
        return percentile_of(self.scheme, self.weights, p)

    def to_checkpoint(self) -> dict[str, Any]:
        return {"kind": "plain", "version": CHECKPOINT_VERSION, "scheme": self.scheme.to_dict(),
                **_sparse(self.weights)}

    @staticmethod
    def from_checkpoint(data: dict[str, Any]) -> Histogram:
        _check_version(data, "plain")
        hist = Histogram(BucketScheme.from_dict(data["scheme"]))
        hist.weights = _dense(hist.scheme, data)
        return hist


class DecayingHistogram:
    """VPA's decaying histogram: weight x 2^((t - t_ref)/half_life), t_ref a whole multiple of half_life
    (VPA 1.8.1 pkg/recommender/util/decaying_histogram.go ``decayFactor``, ``shiftReferenceTimestamp``)."""

    __slots__ = ("half_life_s", "hist", "reference_s")

    def __init__(self, scheme: BucketScheme, half_life_s: float) -> None:
        if not half_life_s > 0:
            raise ValueError("half-life must be positive")
        self.hist = Histogram(scheme)
        self.half_life_s = float(half_life_s)
        self.reference_s: float | None = None

    @property
    def scheme(self) -> BucketScheme:
        return self.hist.scheme

    def is_empty(self) -> bool:
        return self.hist.is_empty()

    def _shift_reference(self, timestamp_s: float) -> None:
        new_ref = math.floor(timestamp_s / self.half_life_s) * self.half_life_s
        if self.reference_s is not None:
            exponent = round((self.reference_s - new_ref) / self.half_life_s)
            self.hist.weights *= math.ldexp(1.0, exponent)
            self.hist.weights[self.hist.weights < EPSILON] = 0.0
        self.reference_s = new_ref

    def _decay(self, timestamps_s: FloatArray) -> FloatArray:
        """Decay factors for the timestamps, shifting the reference first if the newest needs it."""
        newest = float(np.max(timestamps_s))
        limit = None if self.reference_s is None else self.reference_s + MAX_DECAY_EXPONENT * self.half_life_s
        if limit is None or newest > limit:
            self._shift_reference(newest)
        assert self.reference_s is not None
        return np.exp2((timestamps_s - self.reference_s) / self.half_life_s)

    def add(self, values: FloatArray, timestamps_s: FloatArray, weight: float | FloatArray = 1.0) -> None:
        """Add samples (any order) with a base weight, decayed by their timestamps."""
        values = np.asarray(values, dtype=np.float64)
        timestamps_s = np.asarray(timestamps_s, dtype=np.float64)
        if values.size == 0:
            return
        if not np.all(np.isfinite(timestamps_s)):
            raise ValueError("timestamps must be finite")
        _check_values(values, weight)
        self.hist.add(values, np.asarray(weight, dtype=np.float64) * self._decay(timestamps_s))

    def subtract(self, value: float, timestamp_s: float, weight: float = 1.0) -> None:
        if self.reference_s is None:
            return
        factor = math.exp2((timestamp_s - self.reference_s) / self.half_life_s)
        self.hist.subtract(value, weight * factor)

    def percentile(self, p: float) -> float | None:
        return self.hist.percentile(p)

    def cost_share(self, *, margin_fraction: float, overrun_cost: float) -> float | None:
        """``cost_share_of`` over the decayed weights."""
        return cost_share_of(self.scheme, self.hist.weights, margin_fraction=margin_fraction,
                             overrun_cost=overrun_cost)

    def to_checkpoint(self) -> dict[str, Any]:
        return {"kind": "decaying", "version": CHECKPOINT_VERSION, "scheme": self.scheme.to_dict(),
                "half_life_s": self.half_life_s, "reference_s": self.reference_s,
                **_sparse(self.hist.weights)}

    @staticmethod
    def from_checkpoint(data: dict[str, Any]) -> DecayingHistogram:
        _check_version(data, "decaying")
        hist = DecayingHistogram(BucketScheme.from_dict(data["scheme"]), float(data["half_life_s"]))
        ref = data.get("reference_s")  # a null is pruned by the API server (see peaks.window_from_checkpoint)
        hist.reference_s = None if ref is None else float(ref)
        hist.hist.weights = _dense(hist.scheme, data)
        return hist


class WindowedHistogram:
    """Non-decaying sub-histograms per time slot (slot = floor(t / slot_s)), stored sparse, so that a
    query can cover only the last N seconds. A queried window includes every slot that overlaps it, so it
    reaches back up to one slot further than asked; slots older than ``retention_s`` are dropped on add."""

    __slots__ = ("retention_s", "scheme", "slot_s", "slots")

    def __init__(self, scheme: BucketScheme, *, slot_s: float = 86400.0, retention_s: float = 15 * 86400.0) -> None:
        self.scheme = scheme
        self.slot_s = float(slot_s)
        self.retention_s = float(retention_s)
        self.slots: dict[int, tuple[IntArray, FloatArray]] = {}

    def add(self, values: FloatArray, timestamps_s: FloatArray, weight: float = 1.0) -> None:
        values = np.asarray(values, dtype=np.float64)
        timestamps_s = np.asarray(timestamps_s, dtype=np.float64)
        if values.size == 0:
            return
        _check_values(values, weight)
        slot_ids = np.floor(timestamps_s / self.slot_s).astype(np.int64)
        buckets = self.scheme.find_buckets(values)
        for slot in np.unique(slot_ids).tolist():
            mask = slot_ids == slot
            self._merge(int(slot), buckets[mask], np.full(int(mask.sum()), weight))
        newest = int(slot_ids.max())
        keep_from = newest - math.ceil(self.retention_s / self.slot_s)
        for slot in [s for s in self.slots if s < keep_from]:
            del self.slots[slot]

    def _merge(self, slot: int, buckets: IntArray, weights: FloatArray) -> None:
        if slot in self.slots:
            old_b, old_w = self.slots[slot]
            buckets = np.concatenate([old_b, buckets])
            weights = np.concatenate([old_w, weights])
        uniq, inverse = np.unique(buckets, return_inverse=True)
        self.slots[slot] = (uniq, np.bincount(inverse, weights=weights).astype(np.float64))

    def window(self, now_s: float, window_s: float) -> Histogram:
        """The slots overlapping [now - window, now], merged into one plain histogram."""
        first = math.floor((now_s - window_s) / self.slot_s)
        last = math.floor(now_s / self.slot_s)
        merged = Histogram(self.scheme)
        for slot, (buckets, weights) in self.slots.items():
            if first <= slot <= last:
                np.add.at(merged.weights, buckets, weights)
        return merged

    def percentile(self, p: float, *, now_s: float, window_s: float) -> float | None:
        return self.window(now_s, window_s).percentile(p)

    def to_checkpoint(self) -> dict[str, Any]:
        slots = {str(s): {str(int(b)): float(w) for b, w in zip(bs, ws, strict=True)}
                 for s, (bs, ws) in sorted(self.slots.items())}
        return {"kind": "windowed", "version": CHECKPOINT_VERSION, "scheme": self.scheme.to_dict(),
                "slot_s": self.slot_s, "retention_s": self.retention_s, "slots": slots}

    @staticmethod
    def from_checkpoint(data: dict[str, Any]) -> WindowedHistogram:
        _check_version(data, "windowed")
        hist = WindowedHistogram(BucketScheme.from_dict(data["scheme"]), slot_s=float(data["slot_s"]),
                                 retention_s=float(data["retention_s"]))
        for slot, sparse in data["slots"].items():
            buckets = np.array(sorted(int(b) for b in sparse), dtype=np.int64)
            weights = np.array([float(sparse[str(b)]) for b in buckets.tolist()])
            hist.slots[int(slot)] = (buckets, weights)
        return hist
