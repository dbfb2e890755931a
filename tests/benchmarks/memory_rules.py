"""Memory-only replay of the ``podtailor`` memory rule and variants of it (run by hand, not by ``make bench``).

Why: every online memory rule tried so far trades memory slack for OOMs along nearly the same curve, far from
the half-gap target. This replays memory alone, fast (seconds per variant instead of minutes), so a family of
rules can be put on that curve side by side. RESULTS.md's hand analysis quotes its output.

What it simulates, per series and hourly step (as ``recommender.backtest.replay`` does for memory): the limit of
a step is set at its start from the censored hourly peaks before it (a peak above the limit is seen at the
limit, and the step counts one OOM-equivalent); an OOM sets a floor of max(limit + 100 MiB, limit x 1.2) for
``oom_window_h``; the statistic x (1 + margin) is the target, at least 64 MiB; under 1 day of readings the limit
is not lowered; a decrease needs the target 20% below the limit and 8 h since the last change; any increase is
applied. What it leaves out: CPU, so no coordinated resizes (the full replay also moves memory when CPU moves,
which lowers its memory slack by about 2%: default rule, odd half, 2.282 GiB and 0.110 OOM per series-day here
against 2.245 and 0.113 in the replay). Changes counted here are memory changes only.

``python -m tests.benchmarks.memory_rules [--trace NAME] [--subset odd|even|all] [--scale F] [--every K]
[--workers N]``; ``--trace`` is one of the training traces of ``scale_study`` (default: the August Bitbrains
month), ``--every K`` keeps every K-th series.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

import numpy as np

from recommender.backtest.replay import ReplayConfig, make_grid, start_resources
from recommender.backtest.runner import parity
from recommender.backtest.trace import read_trace
from recommender.model.common import DAY_S, GIB, MIB, oom_bump
from recommender.model.peaks import cost_level, jump_margin
from recommender.model.types import FloatArray
from tests.benchmarks.scale_study import TRACES, TRACES_DIR


@dataclass(frozen=True, slots=True, kw_only=True)
class Rule:
    """One memory rule: the statistic over the window, and the resize and OOM settings around it."""

    window_h: int = 192
    margin: float = 0.15
    price_gib_h: float = 100.0
    peak_hours: float = 0.0
    """> 0: the price of an OOM is this x the window's largest peak (per container, the default since #18), in
    place of ``price_gib_h``."""
    statistic: str = "cost"
    """"cost": ``peaks.cost_level`` over the window (the default); "decayed": the same with each hour weighted
    by 2^(-age / half_life_h); "min2": the lower of the cost level and a second one over ``short_h`` at
    ``short_price_gib_h``; "seasonal": the cost level over the same hours of day (the next ``ahead_h``) on the
    last ``days`` days plus the last 6 hours; "jump": the cost level with a per-container margin, the
    ``jump_quantile`` of how far an hour's peak rose above the max of the ``jump_lookback_h`` hours before it
    (within ``jump_margin_bounds``); "excursions": the level priced by the runs of hours above it, not the hours
    (a busy spell costs one OOM when the reaction covers it)."""
    jump_quantile: float = 0.95
    jump_lookback_h: int = 24
    jump_margin_bounds: tuple[float, float] = (0.02, 0.40)
    jump_hold: bool = False
    """With "jump": the margin is held between changes of the limit; a step's target takes the held margin, and
    only when that target would change the limit is the margin refreshed (and the target taken with it), so a
    moving margin never changes the limit by itself."""
    half_life_h: float = 48.0
    short_h: int = 48
    short_price_gib_h: float = 400.0
    ahead_h: int = 12
    days: int = 7
    oom_window_h: int = 24
    bump_to_window_max: bool = False
    """After an OOM, floor at the window's max x (1 + margin) instead of limit x 1.2 (a burst is taken as the
    start of a busy spell)."""
    down_fraction: float = 0.2
    dwell_h: int = 8


@dataclass(frozen=True, slots=True)
class Series:
    series_id: str
    subset: str
    provisioned: float
    peaks: FloatArray
    """True hourly peak per step (NaN without a reading)."""
    mem: FloatArray
    step: np.ndarray
    dt: FloatArray
    interval_s: float
    day: np.ndarray
    first_scored: int


def load(scale: float, trace: str = "bitbrains-08", every: int = 1) -> list[Series]:
    """The series of ``trace`` (a ``scale_study.TRACES`` name), every ``every``-th."""
    file, cols = TRACES[trace]
    cfg, out = ReplayConfig(), []
    for i, s in enumerate(read_trace(TRACES_DIR / file, cols), start=1):
        if s.memory_bytes is None or len(s) < 2 or (i - 1) % every:
            continue
        g = make_grid(s, cfg)
        start = start_resources(s, g, cfg).limits.memory_bytes
        if start is None:
            continue
        mem = s.memory_bytes * scale
        ok = ~np.isnan(mem)
        peaks = np.full(g.steps, np.nan)
        np.fmax.at(peaks, g.sample_step[ok], mem[ok])
        t0 = g.edges_s[min(g.first_scored_step, g.steps - 1)]
        out.append(Series(s.series_id, parity(s.series_id, i), float(start) * scale, peaks,
                          mem, g.sample_step, g.durations_s, g.interval_s,
                          np.floor((s.timestamps_s - t0) / DAY_S).astype(np.int64), g.first_scored_step))
    return out


def _decayed_level(values: FloatArray, ages: FloatArray, rule: Rule) -> float:
    order = np.argsort(values)
    p, w = values[order], 2.0 ** (-ages[order] / rule.half_life_h)
    tail = np.append(np.cumsum(w[::-1])[::-1], 0.0)
    above = tail[np.searchsorted(p, p, side="right")] / w.sum()
    cost = p * (1.0 + rule.margin) + rule.price_gib_h * GIB * above
    return float(p[np.flatnonzero(cost <= cost.min())[-1]])


def _jump_margin(seen: FloatArray, h: int, rule: Rule) -> float:
    """The "jump" rule's margin: ``peaks.jump_margin`` over the window and its lookback (the strategy's own
    rule), or the rule's fixed margin with too few hours."""
    lb = rule.jump_lookback_h
    margin = jump_margin(seen[max(0, h - rule.window_h - lb):h], lookback=lb, quantile=rule.jump_quantile,
                         bounds=rule.jump_margin_bounds)
    return rule.margin if margin is None else margin


def _excursion_level(window: FloatArray, margin: float, price: float) -> float | None:
    """The level b minimising b (1 + margin) + price x (runs of hours above b) / (hours with a reading): a
    run starts at an hour above b whose predecessor is not (a missing hour counts as below)."""
    x = np.where(np.isfinite(window), window, -np.inf)
    levels = np.unique(x[np.isfinite(x)])
    if levels.size == 0:
        return None
    above = x.size - np.searchsorted(np.sort(x), levels, side="right")
    pairs = np.sort(np.minimum(x[1:], x[:-1]))
    both = pairs.size - np.searchsorted(pairs, levels, side="right")
    cost = levels * (1.0 + margin) + price * (above - both) / np.isfinite(window).sum()
    return float(levels[np.flatnonzero(cost <= cost.min())[-1]])


def _statistic(seen: FloatArray, h: int, rule: Rule, margin: float | None = None) -> float | None:
    """The level at step ``h``, to be taken x (1 + rule.margin); ``margin``: the "jump" rule's margin, when the
    caller holds one."""
    lo = max(0, h - rule.window_h)
    window = seen[lo:h]
    ok = ~np.isnan(window)
    if not ok.any():
        return None
    price = rule.price_gib_h * GIB
    if rule.peak_hours > 0:
        price = rule.peak_hours * float(window[ok].max())
    if rule.statistic == "jump":  # returned as a level to take x (1 + rule.margin), like the others
        margin = _jump_margin(seen, h, rule) if margin is None else margin
        level = cost_level(window[ok], margin_fraction=margin, overrun_cost=price)
        return None if level is None else level * (1.0 + margin) / (1.0 + rule.margin)
    if rule.statistic == "excursions":
        return _excursion_level(window, rule.margin, price)
    if rule.statistic == "decayed":
        return _decayed_level(window[ok], np.arange(h - lo, 0, -1, dtype=np.float64)[ok] - 1.0, rule)
    if rule.statistic == "seasonal":
        hours = [i for d in range(1, rule.days + 1) for i in range(h - 24 * d, h - 24 * d + rule.ahead_h)
                 if 0 <= i < h] + list(range(max(0, h - 6), h))
        picked = seen[hours]
        picked = picked[~np.isnan(picked)]
        return cost_level(picked, margin_fraction=rule.margin, overrun_cost=price) if picked.size else None
    level = cost_level(window[ok], margin_fraction=rule.margin, overrun_cost=price)
    if rule.statistic == "min2" and level is not None:
        short = seen[max(0, h - rule.short_h):h]
        short = short[~np.isnan(short)]
        if short.size:
            level = min(level, cost_level(short, margin_fraction=rule.margin,
                                          overrun_cost=rule.short_price_gib_h * GIB) or level)
    return level


def _target(stat: float, limit: float, seen_s: float, bumps: list[tuple[int, float]], h: int, rule: Rule) -> float:
    """The step's target from its level: x (1 + margin), at least 64 MiB and the live OOM bumps, and not below
    the limit under a day of readings."""
    target = max([stat * (1.0 + rule.margin), 64 * MIB] + [b for t, b in bumps if h - rule.oom_window_h <= t + 1 <= h])
    return limit if seen_s < DAY_S and target < limit else target


def _moves(target: float, limit: float, since_h: int, rule: Rule) -> bool:
    """Whether the target changes the limit: any rise, or a fall past the band once the dwell is over."""
    return target > limit or (since_h >= rule.dwell_h and target < limit * (1.0 - rule.down_fraction))


def simulate(s: Series, rule: Rule) -> tuple[float, float, int, int, int]:
    """(slack byte-seconds, memory seconds, OOM steps, series-days, memory changes) over the scored steps."""
    n = s.peaks.size
    seen = np.full(n, np.nan)
    limits = np.empty(n)
    limit, since, seen_s = s.provisioned, -(1 << 30), 0.0
    bumps: list[tuple[int, float]] = []
    changes = 0
    held: float | None = None
    counts = np.bincount(s.step[~np.isnan(s.mem)], minlength=n)
    for h in range(n):
        k = h - 1
        if k >= 0 and counts[k]:
            seen[k] = min(s.peaks[k], limit)
            seen_s += counts[k] * s.interval_s
            if s.peaks[k] > limit:
                bump = oom_bump(limit)
                if rule.bump_to_window_max:
                    bump = max(bump, float(np.nanmax(seen[max(0, h - rule.window_h):h])) * (1.0 + rule.margin))
                bumps.append((k, bump))
        hold = rule.jump_hold and rule.statistic == "jump"
        stat = _statistic(seen, h, rule, held if hold else None) if seen_s > 0 else None
        if stat is not None:
            target = _target(stat, limit, seen_s, bumps, h, rule)
            if hold and (_moves(target, limit, h - since, rule) or held is None):
                fresh = _jump_margin(seen, h, rule)
                if fresh != held:
                    held = fresh
                    target = _target(_statistic(seen, h, rule, held) or stat, limit, seen_s, bumps, h, rule)
            if _moves(target, limit, h - since, rule):
                new = float(math.ceil(target))
                if new != limit:
                    changes += h >= s.first_scored
                    limit, since = new, h
        limits[h] = limit
    scored = s.step >= s.first_scored
    use = scored & ~np.isnan(s.mem)
    lim = limits[s.step[use]]
    over = np.unique(s.step[use][s.mem[use] > lim])
    return (float((s.dt[use] * np.maximum(lim - s.mem[use], 0.0)).sum()), float(s.dt[use].sum()), int(over.size),
            int(np.unique(s.day[scored]).size), changes)


RULES: dict[str, Rule] = {
    "fixed margin (cost level, 8 d, 24 peak-hours, margin 15%; the default from #18 to 2026-12-05 evening)": Rule(
        peak_hours=24.0),
    "per container, 12 peak-hours": Rule(peak_hours=12.0),
    "per container, 48 peak-hours": Rule(peak_hours=48.0),
    "per container, 24 peak-hours, jump margin p95": Rule(peak_hours=24.0, statistic="jump"),
    "per container, 48 peak-hours, jump margin p95": Rule(peak_hours=48.0, statistic="jump"),
    "per container, 48 peak-hours, jump margin p99": Rule(peak_hours=48.0, statistic="jump", jump_quantile=0.99),
    "per container, 24 peak-hours, jump margin p95 in 2%..15%": Rule(peak_hours=24.0, statistic="jump",
                                                                     jump_margin_bounds=(0.02, 0.15)),
    "per container, 24 peak-hours, jump margin p95 in 5%..15%": Rule(peak_hours=24.0, statistic="jump",
                                                                     jump_margin_bounds=(0.05, 0.15)),
    "per container, 24 peak-hours, jump margin p99 in 2%..15%": Rule(peak_hours=24.0, statistic="jump",
                                                                     jump_quantile=0.99,
                                                                     jump_margin_bounds=(0.02, 0.15)),
    "default since 2026-12-05 evening: 24 peak-hours, jump margin max in 5%..15%, held": Rule(
        peak_hours=24.0, statistic="jump", jump_quantile=1.0, jump_hold=True, jump_margin_bounds=(0.05, 0.15)),
    "per container, 24 peak-hours, jump margin p99 in 2%..15%, held": Rule(peak_hours=24.0, statistic="jump",
                                                                           jump_quantile=0.99, jump_hold=True,
                                                                           jump_margin_bounds=(0.02, 0.15)),
    "per container, 24 peak-hours, jump margin p99 in 5%..15%, held": Rule(peak_hours=24.0, statistic="jump",
                                                                           jump_quantile=0.99, jump_hold=True,
                                                                           jump_margin_bounds=(0.05, 0.15)),
    "per container, 24 peak-hours, jump margin p95 in 5%..15%, held": Rule(peak_hours=24.0, statistic="jump",
                                                                           jump_hold=True,
                                                                           jump_margin_bounds=(0.05, 0.15)),
    "per container, excursions, 96 peak-hours": Rule(peak_hours=96.0, statistic="excursions"),
    "per container, excursions, 192 peak-hours": Rule(peak_hours=192.0, statistic="excursions"),
    "fleet-wide price 100 GiB-hours (the default before #18)": Rule(),
    "margin 5%": Rule(margin=0.05),
    "margin 0": Rule(margin=0.0),
    "margin 5%, price 200": Rule(margin=0.05, price_gib_h=200.0),
    "window 4 d": Rule(window_h=96),
    "window 14 d, price 50": Rule(window_h=336, price_gib_h=50.0),
    "decayed weights, half-life 48 h": Rule(statistic="decayed"),
    "decayed weights, half-life 24 h, price 300": Rule(statistic="decayed", half_life_h=24.0, price_gib_h=300.0),
    "min with a 2-day level at price 400": Rule(statistic="min2"),
    "min with a 1-day level at price 800": Rule(statistic="min2", short_h=24, short_price_gib_h=800.0),
    "OOM floor at the window max, price 25": Rule(bump_to_window_max=True, price_gib_h=25.0),
    "same 12 h of day on 7 days + last 6 h": Rule(statistic="seasonal"),
}


def _one(args: tuple[Series, Rule]) -> tuple[float, float, int, int, int]:
    return simulate(*args)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--trace", choices=sorted(TRACES), default="bitbrains-08",
                    help="default: bitbrains-08, the August Bitbrains month")
    ap.add_argument("--every", type=int, default=1, help="every K-th series only")
    ap.add_argument("--subset", choices=("odd", "even", "all"), default="odd")
    ap.add_argument("--scale", type=float, default=1.0, help="multiply memory usage and size by this")
    ap.add_argument("--rules", default="", help="only the rules whose name contains this text")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    args = ap.parse_args(argv)
    if args.every < 1:
        ap.error("--every must be >= 1")
    series = [s for s in load(args.scale, args.trace, args.every) if args.subset == "all" or s.subset == args.subset]
    print(f"{len(series)} series ({args.trace}, {args.subset}), memory x {args.scale:g}; "
          "podtailor's memory rule alone\n")
    print("| rule | mem slack GiB | OOM / series-day | memory changes / series-day |\n|---|---|---|---|")
    with ProcessPoolExecutor(args.workers) as pool:
        for name, rule in RULES.items():
            if args.rules not in name:
                continue
            rows = list(pool.map(_one, [(s, rule) for s in series], chunksize=8))
            slack, secs, ooms, days, changes = (sum(r[i] for r in rows) for i in range(5))
            print(f"| {name} | {slack / secs / GIB:.3f} | {ooms / days:.3f} | {changes / days:.3f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
