"""Benchmark: the backtest on the shared Bitbrains trace, written into RESULTS.md with a PNG beside it.

Owns the ``backtest`` section of ``tests/benchmarks/RESULTS.md``: the tables (all series, the odd half the
default strategy was tuned on, the held-out even half), the goal check of ``podtailor`` against VPA and the
oracle with the budgeted oracle's verdict (is half the gap reachable at all at VPA's change rate?), every
strategy's parameters, the machine facts and the backtest's own speed (series-days replayed per second).
``--series N`` replays only the first N series. Skips (exit 0 with a message) when the trace is absent.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from tests.benchmarks.results import RESULTS, machine_facts, write_section

TRACE = Path(__file__).resolve().parents[3] / "shared" / "traces" / "bitbrains_rnd_2013-08.csv.gz"
PNG = RESULTS.with_name("backtest.png")


REACH = ("budget_oracle_cpu_gap_closed", "budget_oracle_memory_gap_closed", "half_cpu_gap_reachable",
         "half_memory_gap_reachable")


def _verdict(g: dict[str, object], resource: str) -> str:
    """Whether half the gap is reachable at VPA's change rate, from the budgeted oracle's computed gap."""
    gap = g.get(f"budget_oracle_{resource}_gap_closed")
    if not isinstance(gap, float):
        return f"{resource}: no budgeted-oracle figure"
    word = "reachable" if g[f"half_{resource}_gap_reachable"] else "**not reachable**"
    return f"{resource}: oracle-budget closes {gap:.0%} of the gap, so half is {word} by it at VPA's change rate"


def _goal_lines(doc: dict[str, object]) -> list[str]:
    lines = []
    goals = doc["goals"]
    assert isinstance(goals, dict)
    for sub, g in goals.items():
        if g is None:
            continue
        parts = [f"{k} = {v:.2f}" if isinstance(v, float) else f"{k} = {v}" for k, v in g.items()
                 if k not in ("strategy", "baseline", *REACH)]
        lines.append(f"- **{sub}**: " + ", ".join(parts))
        if "half_cpu_gap_reachable" in g:
            lines.append(f"  - reachable at all? {_verdict(g, 'cpu')}; {_verdict(g, 'memory')}")
    return lines


def body(result: object, doc: dict[str, object], facts: str) -> str:
    from recommender.backtest.report import markdown
    from recommender.backtest.runner import BacktestResult

    assert isinstance(result, BacktestResult)
    speed = doc["speed"]
    assert isinstance(speed, dict)
    out = [facts, "",
           f"Trace `{TRACE.name}`; one recommendation per hour, applied as request and limit for the hour; "
           "first 24 h per series replayed but not scored; start: limit = VM size, CPU request = limit / 2, "
           "memory request = limit. Definitions: `recommender/backtest/scoring.py`. "
           f"Speed: {speed['series_days_per_s']:.1f} series-days replayed per second "
           f"({speed['elapsed_s']:.0f} s, {len(result.strategies)} rows incl. the two reference rows). "
           "Rows marked (reference) know the future and are not selectable strategies: `oracle` provisions each "
           "hour's own peak; `oracle-budget` holds one level per block, with at most as many changes as VPA "
           "and at most as much CPU time over the request as VPA on each series (blocks of "
           "ceil(scored hours / (VPA's changes on the series + 1)); memory = the block's peak, so no OOM; CPU "
           "request = per block one of its own samples, the seconds above the requests summed over the series "
           "within VPA's and spent where they save the most slack; `recommender/backtest/budget.py`). "
           "Since it may spend VPA's time over the request, its CPU slack can fall below the oracle's, which "
           "spends none.", ""]
    for sub, title in (("all", "All series"), ("odd", "Odd series (podtailor tuned here)"),
                       ("even", "Even series (held out)")):
        out += [f"### {title}", "", markdown(result, sub), ""]
    out += ["### Goals of podtailor against VPA and the oracle", "", *_goal_lines(doc), "",
            f"![slack against OOM rate]({PNG.name})", "", "### Parameters", ""]
    strategies = doc["strategies"]
    assert isinstance(strategies, dict)
    for name, spec in strategies.items():
        out.append(f"- `{name}`: `{json.dumps(spec['parameters'], sort_keys=True, default=str)}`")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--series", type=int, help="only the first N series")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--trace", type=Path, default=TRACE)
    args = parser.parse_args(argv)
    if not args.trace.is_file():
        print(f"bench_backtest: skipped, trace not found at {args.trace}", file=sys.stderr)
        return 0
    from recommender.backtest.replay import ReplayConfig
    from recommender.backtest.report import to_json, write_png
    from recommender.backtest.runner import ORACLE, ORACLE_BUDGET, StrategySpec, run_trace
    from recommender.model.registry import STRATEGIES

    facts = machine_facts()
    specs = [*(StrategySpec(name=n) for n in STRATEGIES), StrategySpec(name=ORACLE),
             StrategySpec(name=ORACLE_BUDGET)]
    result = run_trace(args.trace, specs, ReplayConfig(), workers=args.workers, limit=args.series)
    doc = to_json(result)
    write_png(result, PNG)
    write_section("backtest", "Backtest: online replay of the Bitbrains trace", body(result, doc, facts))
    print(f"bench_backtest: {result.totals['all'][ORACLE].series} series, "
          f"{result.series_days_per_s():.1f} series-days/s; wrote {RESULTS} and {PNG}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
