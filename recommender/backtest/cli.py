"""The ``backtest`` subcommand: flags, parsing them into the backtest's values, and running it.

Owns ``add_backtest_parser(subparsers)`` and ``run_backtest(args) -> int`` (exit codes as the rest of the
command line: 0 done, 2 bad usage or input, with a one-line error on stderr). Strategies are registry names with
optional overrides (``--set podtailor.resize_down_fraction=0.3``); ``oracle`` is always added as the floor, and
``oracle-budget`` (the oracle held to VPA's changes and CPU time over the request) whenever ``vpa`` runs. The
Prometheus input (``--prometheus``) is not wired yet: ``runner.run_history`` takes the
``dict[ContainerKey, UsageBatch]`` that ``recommender.sources`` builds, but the command line has no source
wiring for it, so the flag reports "not yet" and exits 2.
"""

from __future__ import annotations

import argparse
import ast
import os
import sys
from pathlib import Path
from typing import Any

from rich.console import Console

from recommender.backtest.replay import ReplayConfig
from recommender.backtest.report import print_report, write_json, write_png
from recommender.backtest.runner import ORACLE, ORACLE_BUDGET, REFERENCES, StrategySpec, run_trace
from recommender.backtest.trace import TraceColumns, TraceError
from recommender.model.registry import STRATEGIES, get_strategy

DESCRIPTION = """\
Replay usage history online: every hour each strategy recommends from the past only, and its recommendation
becomes the request and limit until the next one. Scores CPU and memory slack, OOM-equivalents, CPU minutes
over the limit and the request, and changes, beside an oracle that provisions each hour's own peak (and, with vpa,
an oracle held to VPA's changes and CPU time over the request, series by series).

Trace format: a CSV (or .csv.gz) with one row per series per sample, rows of a series contiguous:
series_id,timestamp_s,cpu_cores,memory_bytes[,cpu_provisioned_cores,memory_provisioned_bytes].
Normalized columns (cpu_frac, mem_frac) are multiplied by the provisioned column, or by --cpu-scale /
--memory-scale when the file has none. --memory-column none reads a CPU-only trace. Memory readings of 0 are
treated as missing.
"""


def add_backtest_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``backtest`` on an argparse subparsers object; returns the new parser."""
    p: argparse.ArgumentParser = subparsers.add_parser(
        "backtest", help="replay usage history and score strategies", description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("trace", nargs="?", type=Path, help="trace CSV or CSV.gz")
    p.add_argument("--prometheus", action="store_true", help="read history from Prometheus (not yet wired)")
    p.add_argument("--strategies", default=",".join(STRATEGIES),
                   help=f"comma-separated strategy names (default {','.join(STRATEGIES)}; "
                        "oracle always added, oracle-budget with vpa)")
    p.add_argument("--set", action="append", default=[], metavar="STRATEGY.PARAM=VALUE",
                   help="override a strategy parameter (Python literal), repeatable")
    cols = p.add_argument_group("trace columns")
    cols.add_argument("--series-column", default="series_id")
    cols.add_argument("--time-column", default="timestamp_s")
    cols.add_argument("--cpu-column", help="default: cpu_cores, cpu_frac or cpu")
    cols.add_argument("--memory-column", help="default: memory_bytes, mem_frac, ...; 'none' for CPU only")
    cols.add_argument("--cpu-provisioned-column", help="default: cpu_provisioned_cores if present; 'none'")
    cols.add_argument("--memory-provisioned-column", help="default: memory_provisioned_bytes if present; 'none'")
    cols.add_argument("--time-scale", type=float, default=1.0, help="seconds per time unit (0.001 for ms)")
    cols.add_argument("--cpu-scale", type=float, default=1.0, help="cores per CPU unit (0.001 for millicores)")
    cols.add_argument("--memory-scale", type=float, default=1.0, help="bytes per memory unit (1024 for KiB)")
    cols.add_argument("--normalized", choices=("auto", "yes", "no"), default="auto",
                      help="values are fractions of the provisioned amount (auto: column name ends in _frac)")
    sim = p.add_argument_group("simulation")
    sim.add_argument("--warmup-hours", type=float, default=24.0, help="unscored start, same for all (24)")
    sim.add_argument("--start-cpu-limit-ratio", type=float, default=2.0,
                     help="start CPU request = provisioned / this (2)")
    sim.add_argument("--start-memory-limit-ratio", type=float, default=1.0,
                     help="start memory request = provisioned / this (1)")
    out = p.add_argument_group("run and output")
    out.add_argument("--series", type=int, help="only the first N series")
    out.add_argument("--workers", type=int, default=min(os.cpu_count() or 1, 4), help="worker processes")
    out.add_argument("--json", type=Path, help="write the JSON report here ('-' for stdout)")
    out.add_argument("--png", type=Path, help="write the slack-vs-OOM plot here (needs matplotlib)")
    out.add_argument("--quiet", action="store_true", help="no table")
    return p


def _specs(args: argparse.Namespace) -> list[StrategySpec]:
    names = [n.strip() for n in str(args.strategies).split(",") if n.strip() and n.strip() not in REFERENCES]
    overrides: dict[str, dict[str, Any]] = {n: {} for n in names}
    for item in args.set:
        target, _, value = str(item).partition("=")
        name, _, param = target.partition(".")
        if not value or not param or name not in overrides:
            raise ValueError(f"bad --set {item!r}: want STRATEGY.PARAM=VALUE for a selected strategy")
        try:
            overrides[name][param] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            overrides[name][param] = value
    specs = [StrategySpec(name=n, overrides=tuple(sorted(overrides[n].items()))) for n in names]
    for spec in specs:
        get_strategy(spec.name, **dict(spec.overrides))  # unknown names and parameters raise ValueError here
    budget = [StrategySpec(name=ORACLE_BUDGET)] if "vpa" in names else []
    return [*specs, StrategySpec(name=ORACLE), *budget]


def _columns(args: argparse.Namespace) -> TraceColumns:
    norm = {"auto": None, "yes": True, "no": False}[args.normalized]
    return TraceColumns(series=args.series_column, time=args.time_column, cpu=args.cpu_column,
                        memory=args.memory_column, cpu_provisioned=args.cpu_provisioned_column,
                        memory_provisioned=args.memory_provisioned_column, time_scale=args.time_scale,
                        cpu_scale=args.cpu_scale, memory_scale=args.memory_scale, cpu_normalized=norm,
                        memory_normalized=norm)


def run_backtest(args: argparse.Namespace) -> int:
    """Run the subcommand; 0 on success, 2 on bad usage or input."""
    if args.prometheus:
        print("error: --prometheus is not wired yet; pass a trace file "
              "(recommender.backtest.runner.run_history takes Prometheus-style history)", file=sys.stderr)
        return 2
    if args.trace is None:
        print("error: a trace file is required", file=sys.stderr)
        return 2
    try:
        specs = _specs(args)
        cfg = ReplayConfig(warmup_s=args.warmup_hours * 3600.0, start_cpu_limit_ratio=args.start_cpu_limit_ratio,
                           start_memory_limit_ratio=args.start_memory_limit_ratio)
        result = run_trace(args.trace, specs, cfg, columns=_columns(args), workers=args.workers, limit=args.series)
    except (TraceError, ValueError, OSError, EOFError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if result.totals["all"][ORACLE].series == 0:
        print(f"error: no usable series in {args.trace}", file=sys.stderr)
        return 2
    if not args.quiet:
        print_report(result, Console(stderr=args.json is not None and str(args.json) == "-"))
    if args.json is not None:
        if str(args.json) == "-":
            write_json(result, Path("/dev/stdout"))
        else:
            write_json(result, args.json)
    if args.png is not None:
        write_png(result, args.png)
    return 0
