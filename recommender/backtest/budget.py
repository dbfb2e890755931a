"""The budgeted oracle: a reference that knows the future but spends no more changes and CPU overrun than VPA.

Owns ``oracle_budget`` and its level rules. The plain oracle changes its values every hour; no real strategy
with VPA's change rate can follow it, so "half the gap between VPA and the oracle" may be out of reach for any
strategy at that rate. This reference answers that question in the same run, series by series, with the budget
VPA spent on the same series (its ``Totals``: scored changes and seconds over the request):

- **Blocks.** The scored steps are cut into blocks of ``B`` steps from the first scored step; one level per
  block. With ``BudgetParams.block_hours`` unset, ``B = ceil(H / (C + 1))`` for ``H`` scored steps and ``C``
  VPA changes, so there are at most ``C + 1`` blocks and at most ``C`` changes (warm-up steps take the first
  block's values, so entering the scored range is not a change). A fixed ``block_hours`` overrides it.
- **Memory:** request = limit = the block's peak reading (no OOM-equivalent, by construction); with
  ``memory_ooms`` the levels instead spend VPA's OOM-equivalents on the series, split as CPU's seconds are.
- **CPU request:** per block one of its own sample values, chosen so that the seconds above the request, summed
  over the series' blocks, are at most VPA's seconds over the request on the same series, with the least slack
  (``budget_levels``: one price per second over, so the seconds go to the blocks where they save the most; an equal
  share per block wastes them: a block with a 2-hour burst would keep the burst's level for all its hours).
  CPU limit = the block's peak.
- A block without readings carries the previous block's level (the first one takes the next block's, and a
  series without any takes its start values).

Equal blocks are not the optimal placement of ``C`` changes (a smarter oracle would put them where usage
moves), so a slack above the half-gap target says that half the gap is out of reach for a block oracle at VPA's
change rate, not for every possible plan. Pure numpy; scored with the same code as every strategy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from recommender.backtest.replay import Grid, Plan, ReplayConfig, start_resources
from recommender.backtest.scoring import Totals
from recommender.backtest.trace import Series
from recommender.model.types import FloatArray

IntArray = np.ndarray


@dataclass(frozen=True, slots=True, kw_only=True)
class BudgetParams:
    """Parameters of the budgeted oracle (``--set``-style overrides of the ``oracle-budget`` row)."""

    block_hours: float | None = None
    """Block length in hours; None = from the baseline's change count on each series (module docstring)."""
    baseline: str = "vpa"
    """The strategy whose changes and CPU time over the request set the budget."""
    cpu_split: str = "price"
    """How the CPU seconds over the request are shared among blocks: "price" (default, ``budget_levels``) or
    "equal" (each block may be over for the baseline's share of its own time, the rule of the earlier hand
    bound; kept to show what that rule wastes)."""
    memory_ooms: bool = False
    """False: memory = the block's peak (no OOM). True: also spend the baseline's OOM-equivalents on the series
    (``budget_levels`` counting steps above the level), which is what the goals allow a real strategy."""


def block_length(scored_steps: int, baseline_changes: int) -> int:
    """Steps per block so that the blocks number at most ``baseline_changes + 1``: ceil(H / (C + 1)), >= 1."""
    if scored_steps <= 0:
        return 1
    return max(math.ceil(scored_steps / (max(baseline_changes, 0) + 1)), 1)


def _candidates(values: FloatArray, durations_s: FloatArray, block: IntArray, blocks: int,
                step: IntArray | None) -> tuple[FloatArray, IntArray, FloatArray, FloatArray]:
    """Every sample as a candidate level of its block: (level, block, overrun above it, slack under it).

    Samples sorted by block, then value from the highest down; for position i of block b with inclusive
    cumulative seconds C_i and value-seconds CX_i: slack_i = x_i (D_b - C_i) - (X_b - CX_i) (the samples after
    it, all <= x_i). The overrun counts the samples before it (a tie counts as above, which only overstates): their
    seconds, or with ``step`` given the distinct steps they fall in (the OOM-equivalents of a memory level)."""
    order = np.lexsort((-values, block))
    v, d, b = values[order], durations_s[order], block[order]
    seconds = np.bincount(b, weights=d, minlength=blocks)
    value_s = np.bincount(b, weights=d * v, minlength=blocks)
    within_s = np.cumsum(d) - np.concatenate([[0.0], np.cumsum(seconds)[:-1]])[b]
    within_value_s = np.cumsum(d * v) - np.concatenate([[0.0], np.cumsum(value_s)[:-1]])[b]
    slack = np.maximum(v * (seconds[b] - within_s) - (value_s[b] - within_value_s), 0.0)
    if step is None:
        unit = d
    else:
        unit = np.zeros(v.size)
        unit[np.unique(step[order], return_index=True)[1]] = 1.0  # a step's first (highest) sample
    per_block = np.bincount(b, weights=unit, minlength=blocks)
    over = np.cumsum(unit) - np.concatenate([[0.0], np.cumsum(per_block)[:-1]])[b] - unit
    return v, b, over, slack


def _choose(b: IntArray, over: FloatArray, slack: FloatArray, price: float) -> IntArray:
    """Per block (that has samples) the candidate minimising slack + price x over (the highest on ties)."""
    order = np.lexsort((np.arange(b.size), slack + price * over, b))
    _, first = np.unique(b[order], return_index=True)
    chosen: IntArray = order[first]
    return chosen


def budget_levels(values: FloatArray, durations_s: FloatArray, block: IntArray, blocks: int, budget: float,
                  step: IntArray | None = None) -> FloatArray:
    """Per block a level from its own samples, with at most ``budget`` overrun above the levels in total over all
    blocks (seconds above; or, with ``step``, steps with a sample above), and the least slack one price per unit
    of overrun can buy.

    For a price p every block takes the level minimising slack + p x overrun (a Lagrangian split of the budget:
    the overrun goes where it saves the most slack, e.g. a short burst in an otherwise flat block); p is the
    lowest price (bisection) whose total overrun fits in the budget. NaN for a block without samples."""
    out = np.full(blocks, np.nan)
    ok = ~np.isnan(values)
    if not np.any(ok):
        return out
    v, b, over, slack = _candidates(values[ok], durations_s[ok], block[ok], blocks,
                                    None if step is None else step[ok])
    positive = over[over > 0]
    low, high = 0.0, float(slack.max()) / float(positive.min() if positive.size else 1.0) + 1.0
    if over[_choose(b, over, slack, low)].sum() > budget:
        for _ in range(60):
            mid = 0.5 * (low + high)
            if over[_choose(b, over, slack, mid)].sum() > budget:
                low = mid
            else:
                high = mid
        low = high
    chosen = _choose(b, over, slack, low)
    out[b[chosen]] = v[chosen]
    return out


def block_peaks(values: FloatArray, block: IntArray, blocks: int) -> FloatArray:
    """Per block the max of the non-NaN values (NaN for a block without any)."""
    out = np.full(blocks, np.nan)
    ok = ~np.isnan(values)
    np.fmax.at(out, block[ok], values[ok])
    return out


def _fill(levels: FloatArray, start: float) -> FloatArray:
    """Blocks without a level carry the previous one; leading ones take the first level, all-NaN the start."""
    ok = np.flatnonzero(~np.isnan(levels))
    if ok.size == 0:
        return np.full(levels.size, start)
    idx = np.where(np.isnan(levels), -1, np.arange(levels.size))
    np.maximum.accumulate(idx, out=idx)
    return levels[np.where(idx >= 0, idx, ok[0])]


def _cpu_requests(cpu: FloatArray, seconds: FloatArray, block: IntArray, blocks: int, baseline: Totals,
                  split: str) -> FloatArray:
    """Per block the CPU request: the "price" split of the baseline's seconds over the request, or "equal"."""
    if split == "price":
        return budget_levels(cpu, seconds, block, blocks, baseline.cpu_over_request_s)
    share = baseline.cpu_over_request_s / baseline.seconds if baseline.seconds > 0 else 0.0
    allowed = share * np.bincount(block, weights=seconds, minlength=blocks)
    return np.array([budget_levels(cpu[block == k], seconds[block == k], np.zeros(int(np.sum(block == k)),
                                                                                 dtype=np.int64), 1,
                                   float(allowed[k]))[0] for k in range(blocks)])


def oracle_budget(series: Series, cfg: ReplayConfig, grid: Grid, baseline: Totals,
                  params: BudgetParams | None = None) -> Plan:
    """The budgeted oracle's plan for ``series`` given the baseline's ``Totals`` on it (module docstring)."""
    params = params or BudgetParams()
    if params.cpu_split not in ("price", "equal"):
        raise ValueError("cpu_split must be 'price' or 'equal'")
    first = min(grid.first_scored_step, grid.steps)
    scored_steps = grid.steps - first
    size = (block_length(scored_steps, baseline.changes) if params.block_hours is None
            else max(round(params.block_hours * 3600.0 / cfg.step_s), 1))
    blocks = max(math.ceil(scored_steps / size), 1)
    step_block = np.maximum(np.arange(grid.steps) - first, 0) // size
    scored = grid.sample_step >= first
    sample_block = step_block[grid.sample_step[scored]]
    start = start_resources(series, grid, cfg)
    start_cpu = (start.requests.cpu_millicores or 0) / 1000.0
    cpu, seconds = series.cpu_cores[scored], grid.durations_s[scored]
    cpu_req = _fill(_cpu_requests(cpu, seconds, sample_block, blocks, baseline, params.cpu_split), start_cpu)
    cpu_lim = _fill(block_peaks(cpu, sample_block, blocks), start_cpu)
    if series.memory_bytes is None:
        mem = np.full(blocks, math.inf)
    else:
        used = series.memory_bytes[scored]
        levels = (budget_levels(used, seconds, sample_block, blocks, float(baseline.ooms), grid.sample_step[scored])
                  if params.memory_ooms else block_peaks(used, sample_block, blocks))
        mem = _fill(levels, float(start.requests.memory_bytes or 0))
    req, lim, mem_s = cpu_req[step_block], cpu_lim[step_block], mem[step_block]
    changed = np.concatenate([[0.0], ((req[1:] != req[:-1]) | (lim[1:] != lim[:-1])
                                      | (mem_s[1:] != mem_s[:-1])).astype(np.float64)])
    return Plan(cpu_request=req, cpu_limit=lim, memory_request=mem_s, memory_limit=mem_s, changed=changed)
