"""The real history a strategy has seen, and the CPU sample rules the podtailor-style states share.

Owns ``Observed`` (first/last sample time and samples x interval of one resource, for the confidence c =
min(span, samples x interval) in days), ``SeenSpan`` (the first and last real sample over both resources),
and ``throttle_corrected``.

Throttling model: when a CPU interval had a throttled fraction f > 0 of its CFS periods, the container hit
its quota and the observed usage is censored at the limit; the demand is taken as usage x (1 + f). This is a
first-order correction (f = 1 doubles the sample), an upward bias where the evidence says the container
wanted more, not an estimate of the true demand.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from recommender.model.common import DAY_S
from recommender.model.peaks import sort_samples
from recommender.model.types import FloatArray, Samples


@dataclass(slots=True)
class Observed:
    """Real history of one resource: first/last sample time and sum of sample intervals."""

    first_s: float | None = None
    last_s: float | None = None
    seconds: float = 0.0

    def note(self, timestamps_s: FloatArray, interval_s: float) -> None:
        if timestamps_s.size == 0:
            return
        first, last = float(timestamps_s.min()), float(timestamps_s.max())
        self.first_s = first if self.first_s is None else min(self.first_s, first)
        self.last_s = last if self.last_s is None else max(self.last_s, last)
        self.seconds += float(timestamps_s.size) * interval_s

    def days(self) -> float:
        """c = min(span, samples x interval), in days."""
        if self.first_s is None or self.last_s is None:
            return 0.0
        return min((self.last_s - self.first_s) / DAY_S, self.seconds / DAY_S)


def throttle_corrected(cpu: Samples, throttled: Samples) -> FloatArray:
    """CPU values x (1 + f), f matched by timestamp (elementwise when both arrays share their timestamps;
    otherwise the largest f seen at that timestamp). Samples with no throttling data are unchanged."""
    if len(throttled) == 0:
        return cpu.values
    if throttled.timestamps_s.shape == cpu.timestamps_s.shape and np.array_equal(throttled.timestamps_s,
                                                                                cpu.timestamps_s):
        return cpu.values * (1.0 + throttled.values)
    th = sort_samples(throttled.timestamps_s, throttled.values)
    starts = np.flatnonzero(np.concatenate([[True], th.timestamps_s[1:] != th.timestamps_s[:-1]]))
    keys, fmax = th.timestamps_s[starts], np.maximum.reduceat(th.values, starts)
    idx = np.clip(np.searchsorted(keys, cpu.timestamps_s), 0, keys.size - 1)
    f = np.where(keys[idx] == cpu.timestamps_s, fmax[idx], 0.0)
    return cpu.values * (1.0 + f)


class SeenSpan:
    """The first and last real sample over both resources, for a state that keeps ``cpu_seen`` and
    ``memory_seen``."""

    cpu_seen: Observed
    memory_seen: Observed

    @property
    def first_sample_s(self) -> float | None:
        known = [t for t in (self.cpu_seen.first_s, self.memory_seen.first_s) if t is not None]
        return min(known) if known else None

    @property
    def last_sample_s(self) -> float | None:
        known = [t for t in (self.cpu_seen.last_s, self.memory_seen.last_s) if t is not None]
        return max(known) if known else None
