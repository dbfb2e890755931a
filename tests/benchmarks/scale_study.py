"""Each training trace replayed at several container sizes, per trace, with the goal lines against VPA.

Owns the check of #18's scale-free rule: every container of a trace (usage and provisioned amounts) is
multiplied by F in memory, for F in ``--scales`` (0.1, 1 and 10 by default), and ``vpa``, ``podtailor``, the
oracle and the budgeted oracle (how much of each gap is reachable at VPA's change rate) are replayed on it.
podtailor's floors (10m, 64 MiB, the 100 MiB OOM bump) are set below the smallest scaled container (``--tiny-
floors``, on by default), so what is left is its rule itself: its relative slack, OOMs per series-day, CPU
minutes over the request and changes per day should stay within 5% of their 1x values. VPA runs as it is, floors
included, as the goal lines compare against it. The traces are read from ``../shared/traces/`` and the study
says so when they are absent.

``--strategy autopilot-ml`` (repeatable) studies other registered strategies (candidates such as
``autopilot-ml``) in place of ``podtailor``, each in the same run as VPA and the oracle, with the tiny floors
given to every studied strategy that has those parameters.

``python -m tests.benchmarks.scale_study [--trace bitbrains-08 ...] [--series N] [--strategy NAME ...]
[--set NAME.k=v ...] [--write]`` (a ``--set`` without ``NAME.`` applies to podtailor). ``--write`` (as
``make bench`` runs it) puts the tables, per trace and scale with the goal lines and the drift against 1x,
into the ``scale`` section of RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from recommender.backtest.replay import ReplayConfig
from recommender.backtest.report import goals
from recommender.backtest.runner import ORACLE, ORACLE_BUDGET, StrategySpec, run_series
from recommender.backtest.trace import Series, TraceColumns, read_trace
from recommender.model.common import GIB
from recommender.model.registry import get_strategy
from tests.benchmarks.results import machine_facts, write_section

TRACES_DIR = Path(__file__).resolve().parents[3] / "shared" / "traces"
TRACES: dict[str, tuple[str, TraceColumns | None]] = {
    "bitbrains-08": ("bitbrains_rnd_2013-08.csv.gz", None),
    "bitbrains-07": ("bitbrains_rnd_2013-07.csv.gz", None),
    # Normalized to the largest machine of the cell: read as a 32-core, 64 GiB machine (the 1x).
    "google-odd": ("google2011_gcd_jobs_odd.csv.gz", TraceColumns(cpu_scale=32.0, memory_scale=64.0 * GIB)),
}
TINY_FLOORS = (("pod_min_cpu_millicores", 0.01), ("pod_min_memory_mib", 0.01), ("oom_min_bump_bytes", 1.0),
               ("floors.pod_cpu_millicores", 0.01), ("floors.pod_memory_mib", 0.01), ("oom.min_bump_bytes", 1.0))
"""The floors below the smallest scaled container, by each strategy's names (podtailor's "part.field")."""
FIGURES = ("cpu_slack_rel", "memory_slack_rel", "ooms_per_series_day", "cpu_over_request_min_per_day",
           "changes_per_series_day")


def scaled(series: list[Series], factor: float) -> list[Series]:
    def times(a: Any) -> Any:
        return None if a is None else a * factor
    return [replace(s, cpu_cores=s.cpu_cores * factor, memory_bytes=times(s.memory_bytes),
                    cpu_provisioned_cores=times(s.cpu_provisioned_cores),
                    memory_provisioned_bytes=times(s.memory_provisioned_bytes)) for s in series]


def tiny_floors(name: str) -> list[tuple[str, Any]]:
    """``TINY_FLOORS`` for the named strategy: those of its parameters it has."""
    known = get_strategy(name).parameters()
    return [(k, v) for k, v in TINY_FLOORS if k in known]


def study(name: str, series: list[Series], scales: list[float],
          studied: dict[str, tuple[tuple[str, Any], ...]], workers: int) -> dict[str, Any]:
    """Per scale: each studied strategy's figures and goals, and VPA's figures, from one run per scale."""
    specs = [StrategySpec(name="vpa"), *(StrategySpec(name=n, overrides=o) for n, o in studied.items()),
             StrategySpec(name=ORACLE), StrategySpec(name=ORACLE_BUDGET)]
    out: dict[str, Any] = {}
    for factor in scales:
        t0 = time.perf_counter()
        result = run_series(scaled(series, factor), specs, ReplayConfig(), workers=workers)
        per = result.metrics()["all"]
        row: dict[str, Any] = {n: {k: getattr(per[n], k) for k in FIGURES} for n in [*studied, "vpa"]}
        row["goals"] = {n: goals(per, n) for n in studied}
        row["elapsed_s"] = time.perf_counter() - t0
        out[f"{factor:g}"] = row
    return out


def _fmt(v: Any) -> str:
    return "n/a" if v is None else f"{v:.3f}" if isinstance(v, float) else str(v)


def drifts(res: dict[str, Any], strategy: str, scale: str) -> dict[str, float | None]:
    """Each figure's change against the strategy's own 1x value (None where either is missing or 1x is 0)."""
    base, here = res.get("1", {}).get(strategy, {}), res[scale][strategy]
    return {k: None if not base.get(k) or here[k] is None else here[k] / base[k] - 1 for k in FIGURES}


def print_study(name: str, res: dict[str, Any], studied: list[str]) -> None:
    print(f"\n{name}")
    print("strategy | scale | " + " | ".join(FIGURES) + " | cpu gap | mem gap | goals met")
    for strategy in studied:
        for scale, r in res.items():
            p, v, g = r[strategy], r["vpa"], r["goals"][strategy] or {}
            d = drifts(res, strategy, scale)
            cells = []
            for k in FIGURES:
                drift = "" if d[k] is None else f" ({d[k]:+.1%})"
                cells.append(f"{_fmt(p[k])}{drift} vs {_fmt(v[k])}")
            print(f"{strategy} | {scale} | " + " | ".join(cells) + f" | {_fmt(g.get('cpu_gap_closed'))} | "
                  f"{_fmt(g.get('memory_gap_closed'))} | {g.get('all_met')}")


GOAL_OF = {"ooms_per_series_day": "ooms_not_above_baseline",
           "cpu_over_request_min_per_day": "cpu_over_request_not_above_baseline",
           "changes_per_series_day": "changes_not_above_baseline"}
SLACK_GAP = {"cpu_slack_rel": "cpu_gap_closed", "memory_slack_rel": "memory_gap_closed"}
SCALE_FREE_TOLERANCE = 0.05


def markdown(results: dict[str, dict[str, Any]], studied: list[str], series: int | None, workers: int) -> str:
    """The ``scale`` section of RESULTS.md: per studied strategy, one row per trace and scale, each cell
    "strategy vs VPA", bold where that goal line holds; the drift against 1x (the scale-free test) and the
    verdicts written out, so no average over traces stands in for a trace."""
    which = "every series" if series is None else f"the first {series} series"
    out = [machine_facts(), "",
           f"`python -m tests.benchmarks.scale_study` ({which} of each training trace in `../shared/traces/`, "
           f"{workers} workers): every container's usage and provisioned amounts multiplied by 0.1, 1 and 10; VPA, "
           "the studied strategy and the oracle in one replay per trace and scale. The studied strategy gets floors "
           "below the smallest scaled container (0.01m, 0.01 MiB, a 1-byte OOM bump); VPA runs as it is. Cells read "
           "\"strategy vs VPA\", **bold** where the goal line of #18 item 4 holds: less slack (absolute, as the gap "
           "closed counts it), no more OOMs, CPU minutes over the request and changes. Gap closed = (VPA slack "
           "- strategy slack) / (VPA slack - oracle slack); \"every goal\" also wants half the CPU gap closed. "
           "Beyond the goal (the issue's ambition, not in \"every goal\"): a quarter of the memory gap. The "
           "budgeted oracle (`oracle-budget`: knows the future, held series by series to VPA's changes and CPU "
           "time over the request) says how much of each gap is reachable at all at VPA's change rate. Drift = "
           "the largest change of the five figures against the strategy's own 1x value; the "
           f"scale-free test (#18 item 2) wants it within {SCALE_FREE_TOLERANCE:.0%}.", ""]
    for strategy in studied:
        out += [f"### {strategy}", "",
                "| trace | scale | CPU slack rel | mem slack rel | OOM / series-day | CPU min > request / day | "
                "changes / day | CPU gap closed | mem gap closed | oracle-budget gap closed (CPU / mem) | "
                "largest drift vs 1x | every goal |",
                "|---|---|---|---|---|---|---|---|---|---|---|---|"]
        met, free = [], []
        for trace, res in results.items():
            for scale, r in res.items():
                p, v, g = r[strategy], r["vpa"], r["goals"][strategy] or {}
                cells = []
                for k in FIGURES:
                    ok = (g.get(GOAL_OF[k]) if k in GOAL_OF
                          else (g.get(SLACK_GAP[k]) or 0.0) > 0.0)
                    text = f"{_fmt(p[k])} vs {_fmt(v[k])}"
                    cells.append(f"**{text}**" if ok else text)
                d = {k: x for k, x in drifts(res, strategy, scale).items() if x is not None}
                worst = max(d, key=lambda k: abs(d[k]), default=None)
                drift = "—" if scale == "1" or worst is None else f"{d[worst]:+.1%} ({worst})"
                if scale != "1":
                    free.append((trace, scale, worst is not None and abs(d[worst]) <= SCALE_FREE_TOLERANCE))
                all_met = bool(g.get("all_met"))
                met.append((trace, scale, all_met))
                reach = (f"{_fmt(g.get('budget_oracle_cpu_gap_closed'))} / "
                         f"{_fmt(g.get('budget_oracle_memory_gap_closed'))}")
                out.append(f"| {trace} | {scale}x | " + " | ".join(cells) + f" | {_fmt(g.get('cpu_gap_closed'))} | "
                           f"{_fmt(g.get('memory_gap_closed'))} | {reach} | {drift} | "
                           f"{'yes' if all_met else 'no'} |")
        held = [f"{t} {s}x" for t, s, ok in met if ok]
        free_ok = [f"{t} {s}x" for t, s, ok in free if ok]
        out += ["", f"- Every goal line holds on {len(held)} of {len(met)} trace-scale cells"
                    + (f" ({', '.join(held)})." if held else "."),
                f"- Within {SCALE_FREE_TOLERANCE:.0%} of its 1x figures on {len(free_ok)} of {len(free)} scaled cells"
                + (f" ({', '.join(free_ok)})." if free_ok else "."), ""]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trace", action="append", choices=sorted(TRACES), help="default: every trace")
    parser.add_argument("--series", type=int, help="only the first N series of each trace")
    parser.add_argument("--scales", default="0.1,1,10")
    parser.add_argument("--strategy", action="append", metavar="NAME",
                        help="a registered strategy to study against VPA (repeatable; default podtailor)")
    parser.add_argument("--set", action="append", default=[], metavar="[NAME.]KEY=VALUE",
                        help="override a studied strategy's parameter (JSON value; no NAME.: podtailor)")
    parser.add_argument("--no-tiny-floors", action="store_true")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--write", action="store_true",
                        help="write the tables into tests/benchmarks/RESULTS.md (section `scale`), as make bench does")
    args = parser.parse_args(argv)
    names = args.strategy or ["podtailor"]
    if "vpa" in names or len(set(names)) < len(names):
        parser.error("--strategy: vpa is always studied against; name each other strategy once")
    overrides: dict[str, list[tuple[str, Any]]] = {n: [] if args.no_tiny_floors else tiny_floors(n) for n in names}
    for item in args.set:
        key, _, value = item.partition("=")
        head, _, rest = key.partition(".")  # NAME.param, or podtailor's own "part.field" / param
        target, param = (head, rest) if rest and head in overrides else ("podtailor", key)
        if target not in overrides:
            parser.error(f"--set {item!r}: {target} is not a studied strategy")
        overrides[target].append((param, json.loads(value)))
    for n, o in overrides.items():
        get_strategy(n, **dict(o))  # unknown names and parameters fail here, before any replay
    scales = [float(x) for x in args.scales.split(",")]
    results = {}
    for name in args.trace or sorted(TRACES):
        file, cols = TRACES[name]
        path = TRACES_DIR / file
        if not path.is_file():
            print(f"scale_study: {path} is absent (the traces come with ../shared/traces/); {name} skipped",
                  file=sys.stderr)
            continue
        series = []
        for s in read_trace(path, cols):
            series.append(s)
            if args.series is not None and len(series) >= args.series:
                break
        results[name] = study(name, series, scales, {n: tuple(o) for n, o in overrides.items()}, args.workers)
        print_study(name, results[name], names)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    if args.write and not results:
        print("scale_study: no training trace found; RESULTS.md left as it was", file=sys.stderr)
    elif args.write:
        write_section("scale", "Backtest per training trace at three container sizes (#18 goal lines)",
                      markdown(results, names, args.series, args.workers))
    return 0


if __name__ == "__main__":
    sys.exit(main())
