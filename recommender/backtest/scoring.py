"""Scores of a replayed plan: slack, OOM-equivalents, CPU over the limit and the request, changes.

Owns the metric definitions. Only scored steps count (after the warm-up). Every sample stands for its duration
(the time to the next sample, capped; see ``ReplayConfig.max_gap_steps``). Definitions, summed per series and
then over series (``Totals``), and the derived figures (``Metrics``):

- CPU slack = max(request - used, 0), in core-seconds; CPU is judged against the REQUEST (what the scheduler
  reserves), so a strategy without a CPU limit (krr-simple) is still bounded. Relative = slack / request.
- Memory slack = max(limit - used, 0) over samples with a memory reading; memory is judged against the LIMIT
  (what the container may use before an OOM kill; request = limit for krr-simple and for VPA's default 1:1
  start). Relative = slack / limit, as in Autopilot's paper.
- OOM-equivalent: a step (hour) with at least one memory reading above the memory limit counts once (a kill
  restarts the container, which meets the same limit until the next step). A series-day (24 h from the first
  scored step) is OOM-free when none of its steps has one.
- CPU minutes above the limit / above the request: the duration of samples whose usage exceeds it.
- Changes: steps that start with different applied values (any of CPU/memory request/limit).
Slack in cores and GiB is a time-weighted mean per series (total slack-seconds / total series-seconds).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

import numpy as np

from recommender.backtest.replay import Grid, Plan
from recommender.backtest.trace import Series

DAY_S = 86400.0
GIB = float(1 << 30)


@dataclass(frozen=True, slots=True, kw_only=True)
class Totals:
    """Additive sums for one or many series (add with ``+``)."""

    series: int = 0
    seconds: float = 0.0
    series_days: int = 0
    cpu_used_core_s: float = 0.0
    cpu_request_core_s: float = 0.0
    cpu_slack_core_s: float = 0.0
    cpu_over_limit_s: float = 0.0
    cpu_over_request_s: float = 0.0
    memory_seconds: float = 0.0
    memory_limit_byte_s: float = 0.0
    memory_slack_byte_s: float = 0.0
    ooms: int = 0
    oom_days: int = 0
    changes: int = 0

    def __add__(self, other: Totals) -> Totals:
        return Totals(**{f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(Totals)})


@dataclass(frozen=True, slots=True, kw_only=True)
class Metrics:
    """The figures of the report, derived from ``Totals`` (None where the trace has no such data)."""

    series: int
    series_days: int
    cpu_slack_cores: float
    cpu_slack_rel: float
    memory_slack_gib: float | None
    memory_slack_rel: float | None
    ooms_per_series_day: float | None
    oom_free_days: float | None
    cpu_over_limit_min_per_day: float
    cpu_over_request_min_per_day: float
    changes_per_series_day: float

    def to_dict(self) -> dict[str, float | int | None]:
        return asdict(self)


def _ratio(a: float, b: float) -> float:
    return a / b if b > 0 else 0.0


def metrics(t: Totals) -> Metrics:
    has_mem = t.memory_seconds > 0
    days = max(t.series_days, 1)
    return Metrics(
        series=t.series, series_days=t.series_days,
        cpu_slack_cores=_ratio(t.cpu_slack_core_s, t.seconds),
        cpu_slack_rel=_ratio(t.cpu_slack_core_s, t.cpu_request_core_s),
        memory_slack_gib=_ratio(t.memory_slack_byte_s, t.memory_seconds) / GIB if has_mem else None,
        memory_slack_rel=_ratio(t.memory_slack_byte_s, t.memory_limit_byte_s) if has_mem else None,
        ooms_per_series_day=t.ooms / days if has_mem else None,
        oom_free_days=1.0 - t.oom_days / days if has_mem else None,
        cpu_over_limit_min_per_day=t.cpu_over_limit_s / 60.0 / days,
        cpu_over_request_min_per_day=t.cpu_over_request_s / 60.0 / days,
        changes_per_series_day=t.changes / days)


def _memory_totals(series: Series, plan: Plan, grid: Grid, scored: np.ndarray,
                   t0: float) -> Totals:
    if series.memory_bytes is None:
        return Totals()
    mem, step = series.memory_bytes, grid.sample_step
    ok = ~np.isnan(mem)
    limit = plan.memory_limit[step]
    over = ok & (np.where(ok, mem, 0.0) > limit)
    over_steps = np.unique(step[over & scored])
    step_start_s = grid.edges_s[over_steps]
    use = ok & scored
    dt = grid.durations_s[use]
    lim = limit[use]
    finite = np.isfinite(lim)
    return Totals(memory_seconds=float(dt[finite].sum()), memory_limit_byte_s=float((dt * lim)[finite].sum()),
                  memory_slack_byte_s=float((dt * np.maximum(lim - mem[use], 0.0))[finite].sum()),
                  ooms=int(over_steps.size), oom_days=int(np.unique(np.floor((step_start_s - t0) / DAY_S)).size))


def score(series: Series, plan: Plan, grid: Grid) -> Totals:
    """The ``Totals`` of one replayed series (module docstring)."""
    step = grid.sample_step
    scored = step >= grid.first_scored_step
    if not np.any(scored):
        return Totals()
    t0 = float(grid.edges_s[min(grid.first_scored_step, grid.steps - 1)])
    day = np.floor((series.timestamps_s - t0) / DAY_S).astype(np.int64)
    dt = grid.durations_s[scored]
    cpu = series.cpu_cores[scored]
    req, lim = plan.cpu_request[step[scored]], plan.cpu_limit[step[scored]]
    changed = plan.changed[grid.first_scored_step:]
    memory = _memory_totals(series, plan, grid, scored, t0)
    return memory + Totals(series=1, seconds=float(dt.sum()), series_days=int(np.unique(day[scored]).size),
                  cpu_used_core_s=float((dt * cpu).sum()), cpu_request_core_s=float((dt * req).sum()),
                  cpu_slack_core_s=float((dt * np.maximum(req - cpu, 0.0)).sum()),
                  cpu_over_limit_s=float(dt[cpu > lim].sum()), cpu_over_request_s=float(dt[cpu > req].sum()),
                  changes=int(changed.sum()))
