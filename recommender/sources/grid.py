"""The step grid of range queries: which evaluation times a pass asks for, and how long ranges are chunked.

Owns the incremental rule. Evaluation times are whole multiples of the step (``k * step``). A pass over
``(start_s, end_s]`` asks for every grid time ``t`` with ``start_s < t <= end_s``: the first is
``floor(start_s / step) * step + step`` and the last ``floor(end_s / step) * step``. So consecutive passes
``(a, b]`` then ``(b, c]`` neither overlap nor leave a gap, whatever ``a``, ``b`` and ``c`` are, and a
sample stamped ``t`` describes the interval ``(t - step, t]``. Prometheus refuses a range query returning
more than 11,000 points per series, so a range is split into chunks of at most ``max_points`` grid times.
Pure.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True, slots=True, kw_only=True)
class GridRange:
    """Grid times ``first_s, first_s + step_s, ..., last_s`` (both ends included, as query_range does)."""

    first_s: float
    last_s: float
    step_s: float

    def __post_init__(self) -> None:
        if self.step_s <= 0 or self.last_s < self.first_s:
            raise ValueError("a grid range needs a positive step and last >= first")

    @property
    def points(self) -> int:
        return round((self.last_s - self.first_s) / self.step_s) + 1


def aligned_range(start_s: float, end_s: float, step_s: float) -> GridRange | None:
    """The grid times in ``(start_s, end_s]``, or None when there is none yet."""
    if not (math.isfinite(start_s) and math.isfinite(end_s)) or step_s <= 0:
        raise ValueError("start and end must be finite and the step positive")
    first = math.floor(start_s / step_s) * step_s + step_s
    last = math.floor(end_s / step_s) * step_s
    if last < first:
        return None
    return GridRange(first_s=float(first), last_s=float(last), step_s=float(step_s))


def chunks(grid: GridRange, max_points: int) -> list[GridRange]:
    """Consecutive sub-ranges of at most ``max_points`` grid times that together cover ``grid`` once."""
    if max_points < 1:
        raise ValueError("max_points must be at least 1")
    out: list[GridRange] = []
    total = grid.points
    for offset in range(0, total, max_points):
        count = min(max_points, total - offset)
        first = grid.first_s + offset * grid.step_s
        out.append(GridRange(first_s=first, last_s=first + (count - 1) * grid.step_s, step_s=grid.step_s))
    return out


def split_grid(grid: GridRange, *, full_resolution_s: float, summary_step_s: float,
               ) -> tuple[GridRange | None, GridRange | None]:
    """``grid`` as (full-resolution part, summary part) for a ``HistoryPlan``: the grid times younger than
    ``full_resolution_s`` before ``grid.last_s`` stay, the older ones give way to one time per
    ``summary_step_s`` (a whole multiple of the step, else nothing is summarized). Summary times sit one step
    before a multiple of the summary step (``k * summary - step``), so a summary at ``t`` covers exactly the
    grid times ``t - summary + step .. t`` of full resolution, which share one slot ``floor(t / summary)``:
    the hour maxima a strategy keeps per slot come out the same either way. The first summary is the first
    such time at or after ``grid.first_s``: it may reach up to ``summary - step`` before the pass's range
    (a little more history, never a gap); its samples are then stamped at ``grid.first_s``, where a full
    read starts (``samples.from_pass_start``). Returns (``grid``, None) when nothing is old enough."""
    step = grid.step_s
    ratio = summary_step_s / step
    if math.isinf(full_resolution_s) or ratio <= 1 or abs(ratio - round(ratio)) > 1e-9:
        return grid, None
    cut = math.floor((grid.last_s - full_resolution_s + step) / summary_step_s) * summary_step_s - step
    first = math.ceil((grid.first_s + step) / summary_step_s) * summary_step_s - step
    if cut < first:
        return grid, None
    coarse = GridRange(first_s=float(first), last_s=float(cut), step_s=float(summary_step_s))
    return GridRange(first_s=float(cut + step), last_s=grid.last_s, step_s=step), coarse
