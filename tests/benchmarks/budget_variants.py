"""Variants of the budgeted oracle on the shared trace, beside VPA and the oracle (run by hand, not by ``make bench``).

Prints a Markdown table per set (all, odd, even) of slack, gap closed, OOMs, CPU minutes over the request and
changes for ``oracle-budget`` with other block lengths, the "equal" CPU split of the earlier hand bound, and
VPA's OOMs spent on memory. Each series is replayed once under VPA; every variant takes its budget from that
replay. ``python -m tests.benchmarks.budget_variants [--series N]``; RESULTS.md's hand analysis quotes it.
"""

from __future__ import annotations

import argparse
import os
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from recommender.backtest.budget import BudgetParams, oracle_budget
from recommender.backtest.replay import ReplayConfig, make_grid, oracle, replay
from recommender.backtest.report import gap_closed
from recommender.backtest.runner import SUBSETS, parity
from recommender.backtest.scoring import Totals, metrics, score
from recommender.backtest.trace import Series, read_trace
from recommender.model.registry import get_strategy
from tests.benchmarks.bench_backtest import TRACE

VARIANTS = {
    "blocks from VPA's changes per series, price split (the row)": BudgetParams(),
    "blocks from VPA's changes per series, equal split": BudgetParams(cpu_split="equal"),
    "18 h blocks, price split": BudgetParams(block_hours=18),
    "18 h blocks, equal split (the hand bound's rule)": BudgetParams(block_hours=18, cpu_split="equal"),
    "24 h blocks, price split": BudgetParams(block_hours=24),
    "blocks from VPA's changes, price split, VPA's OOMs spent on memory": BudgetParams(memory_ooms=True),
}
CFG = ReplayConfig()


def _work(series: Series) -> tuple[str, dict[str, Totals]]:
    if len(series) < 2:
        return series.series_id, {}
    grid = make_grid(series, CFG)
    out = {"vpa": score(series, replay(series, get_strategy("vpa"), CFG, grid), grid),
           "oracle": score(series, oracle(series, CFG, grid), grid)}
    for name, params in VARIANTS.items():
        out[name] = score(series, oracle_budget(series, CFG, grid, out["vpa"], params), grid)
    return series.series_id, out


def _table(per: dict[str, Totals]) -> list[str]:
    m = {name: metrics(t) for name, t in per.items()}
    vpa, best = m["vpa"], m["oracle"]
    lines = ["| row | CPU slack cores | CPU gap closed | mem slack GiB | mem gap closed | OOM / series-day "
             "| CPU min > request /day | changes / series-day |", "|---" * 8 + "|"]
    for name, x in m.items():
        cpu = gap_closed(vpa.cpu_slack_cores, best.cpu_slack_cores, x.cpu_slack_cores)
        mem = gap_closed(vpa.memory_slack_gib, best.memory_slack_gib, x.memory_slack_gib)
        lines.append(f"| {name} | {x.cpu_slack_cores:.3f} | {cpu or 0.0:.0%} | {x.memory_slack_gib or 0.0:.3f} "
                     f"| {mem or 0.0:.0%} | {x.ooms_per_series_day or 0.0:.3f} "
                     f"| {x.cpu_over_request_min_per_day:.1f} | {x.changes_per_series_day:.2f} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--series", type=int, help="only the first N series")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--trace", type=Path, default=TRACE)
    args = parser.parse_args(argv)
    totals: dict[str, dict[str, Totals]] = {sub: {} for sub in SUBSETS}
    series = (s for i, s in enumerate(read_trace(args.trace)) if args.series is None or i < args.series)
    with ProcessPoolExecutor(max_workers=args.workers) as pool:
        for position, (sid, per) in enumerate(pool.map(_work, series, chunksize=4), start=1):
            for sub in ("all", parity(sid, position)):
                for name, t in per.items():
                    totals[sub][name] = totals[sub].get(name, Totals()) + t
    for sub in SUBSETS:
        print(f"\n{sub} series\n")
        print("\n".join(_table(totals[sub])))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
