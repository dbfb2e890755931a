"""The time parts of a Prometheus pass, and how their answers land in the pass's usage.

Owns ``Part`` (one time chunk: its grid, its CPU rate window, its sink, range queries or remote read),
``halved`` and ``forget`` (a scope read again in shorter chunks after a "too big" answer, ``MAX_SPLITS``
times at most, with what the refused attempt read dropped first), ``keep`` (a part's series, without invalid
samples, into its usage), ``raw_metrics`` (what a remote-read part reads, with each selector's window) and
``throttled_share``/``as_series`` (a remote read's per-step rows as the series a range query would answer).
``recommender.sources.prometheus`` drives them.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

from recommender.model.types import Samples
from recommender.sources import promql
from recommender.sources.grid import GridRange, chunks
from recommender.sources.raw_grid import Rows
from recommender.sources.samples import PodKey, PodUsage, Series, drop_invalid, grid_times

__all__ = ["MAX_SPLITS", "Part", "as_series", "forget", "halved", "keep", "raw_metrics", "throttled_share"]


@dataclass(frozen=True, slots=True)
class Part:
    """One time chunk of a pass: its grid, the CPU rate window its queries use, and where its samples go
    (the full-resolution usage or the summaries')."""

    chunk: GridRange
    window_s: float
    usage: dict[PodKey, PodUsage]
    raw: bool = False
    """CPU and memory come from a remote read of the stored samples (``raw_grid``), not from range queries."""


MAX_SPLITS = 6
"""Halvings of a scope's time chunks after "too big" answers: up to 64 times as many, shorter queries."""


def halved(parts: list[Part]) -> list[Part]:
    """Each part of two grid points or more as two parts of half its length (same window, same sink)."""
    return [Part(c, p.window_s, p.usage, p.raw) for p in parts
            for c in chunks(p.chunk, max(1, (p.chunk.points + 1) // 2))]


def forget(scope: promql.Scope, parts: list[Part]) -> None:
    """Drop what a failed attempt read of ``scope`` (its namespaces and, for a page, its pods)."""
    for usage in {id(p.usage): p.usage for p in parts}.values():
        for key in [k for k in usage if k[0] in scope.namespaces and (not scope.pods or k[1] in scope.pods)]:
            del usage[key]


def keep(found: list[Series], part: Part, field_name: str, dropped: Counter[str]) -> None:
    """A part's series of one field, without invalid samples (counted in ``dropped``), into its usage."""
    for series in found:
        clean = drop_invalid(series, dropped)
        if len(clean.values):
            getattr(part.usage.setdefault(clean.pod_key, PodUsage()), field_name).append(
                Samples(timestamps_s=clean.timestamps_s, values=clean.values))


def raw_metrics(part: Part) -> list[tuple[str, float]]:
    """What a raw part reads, with the window each metric's range selector spans: the CPU counter (the
    rate window), the working set (one step, less a millisecond: ``promql.memory_peak_query``), and the
    two CFS counters of the throttled fraction (the rate window)."""
    return [("container_cpu_usage_seconds_total", part.window_s),
            ("container_memory_working_set_bytes", part.chunk.step_s - 0.001),
            ("container_cpu_cfs_throttled_periods_total", part.window_s),
            ("container_cpu_cfs_periods_total", part.window_s)]


def throttled_share(throttled: dict[PodKey, Rows], periods: dict[PodKey, Rows], sparse: bool) -> dict[PodKey, Rows]:
    """``promql.throttle_query`` from the two counters' per-container rates: throttled over periods where both
    are present and the periods' rate is above zero (``> 0`` keeps only such samples), and with ``sparse``
    only where the quotient is above zero too."""
    out = {}
    for key, thr in throttled.items():
        per = periods.get(key)
        if per is None:
            continue
        present = thr.present & per.present & (per.values > 0)
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(present, thr.values / per.values, np.nan)
        if sparse:
            present &= ratio > 0
        out[key] = Rows(ratio, present)
    return out


def as_series(per_key: dict[PodKey, Rows], grid: GridRange) -> list[Series]:
    """Each container's row as the series a range answer holds: its times with a value (none: no series)."""
    times = grid_times(grid)
    out = []
    for (namespace, pod, container), row in per_key.items():
        have = row.present
        if not have.any():
            continue
        out.append(Series(labels={"namespace": namespace, "pod": pod, "container": container},
                          timestamps_s=times if have.all() else times[have], values=row.values[have]))
    return out
