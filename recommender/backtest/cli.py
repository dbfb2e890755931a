"""The ``backtest`` subcommand: flags, parsing them into the backtest's values, and running it.

Owns ``add_backtest_parser(subparsers)`` and ``run_backtest(args) -> int`` (exit codes as the rest of the
command line: 0 done, 2 bad usage or input, with a one-line error on stderr). Strategies are registry names with
optional overrides (``--set podtailor.resize.down_fraction=0.3``: podtailor's by part and field); ``oracle`` is
always added as the floor, and ``oracle-budget`` (the oracle held to VPA's changes and CPU time over the
request) whenever ``vpa`` runs. With
``--prometheus`` the history is the cluster's own: ``PrometheusSource.history`` over the namespaces given
(``-n``) and ``--history``, one series per workload container (pods of a rollout share their workload's
history), replayed by ``runner.run_history``; with several kube contexts (``--context`` repeated, ``--all-contexts``)
every cluster's history in the one store, read in one many-cluster pass (``recommender.report.clusters``), its
series named ``context/namespace``. A Prometheus that cannot be read exits 1, with nothing written. With
``--sweep`` the run replays podtailor at each risk setting of ``--sweep-values`` beside vpa and krr-simple
(``sweep.sweep_specs``) and prints the frontier table, the point of the sweep at VPA's risk on every line
(``equal_risk``), and with ``--oom-budget`` the risk it would pick (``sweep_report``); a budget that no swept risk
meets is an answer (exit 0), not an error.
"""

from __future__ import annotations

import argparse
import ast
import json
import math
import os
import sys
import time
from contextlib import ExitStack, closing
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from podtailor.runtime.cli import console, duration_s
from recommender.backtest import sweep_report
from recommender.backtest.replay import ReplayConfig
from recommender.backtest.report import print_report, to_json, write_json, write_png
from recommender.backtest.runner import (
    ORACLE,
    ORACLE_BUDGET,
    REFERENCES,
    BacktestResult,
    StrategySpec,
    run_history,
    run_trace,
)
from recommender.backtest.sweep import BASELINES, DEFAULT_RISKS, SWEPT, parse_risks, sweep_specs
from recommender.backtest.trace import TraceColumns, TraceError
from recommender.cli import add_budget_flag, add_prometheus_flags
from recommender.model.registry import STRATEGIES, get_strategy
from recommender.report import clusters

if TYPE_CHECKING:
    from recommender.report.fleet_stores import Source

DESCRIPTION = """\
Replay usage history online: every hour each strategy recommends from the past only, and its recommendation
becomes the request and limit until the next one. Scores CPU and memory slack, OOM-equivalents, CPU minutes
over the limit and the request, and changes, beside an oracle that provisions each hour's own peak (and, with vpa,
an oracle held to VPA's changes and CPU time over the request, series by series).

Trace format: a CSV (or .csv.gz) with one row per series per sample, rows of a series contiguous:
series_id,timestamp_s,cpu_cores,memory_bytes[,cpu_provisioned_cores,memory_provisioned_bytes].
Normalized columns (cpu_frac, mem_frac) are multiplied by the provisioned column or, when the file has none,
by --cpu-scale / --memory-scale, which are then required (the machine size the fractions are of).
--memory-column none reads a CPU-only trace. Memory readings of 0 are treated as missing.

With --prometheus (and -n, --history, and --prometheus-url or the store found by its Service through the API
server, as report finds it) the cluster's own usage history is replayed instead:
one series per workload container, as the recommender reads it. A workload's replicas share each timestamp,
so it is replayed as its busiest replica there (the max over pods): the one that decides OOM kills and CPU
time over the request.
"""


def add_backtest_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``backtest`` on an argparse subparsers object; returns the new parser."""
    p: argparse.ArgumentParser = subparsers.add_parser(
        "backtest", help="replay usage history and score strategies", description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter, conflict_handler="resolve")
    p.add_argument("trace", nargs="?", type=Path, help="trace CSV or CSV.gz")
    p.add_argument("--prometheus", action="store_true",
                   help="replay the cluster's own usage history from Prometheus instead of a trace file "
                        "(needs -n; without --prometheus-url the store is found through the API server)")
    p.add_argument("--strategies", default=None,
                   help=f"comma-separated strategy names (default {','.join(STRATEGIES)}; "
                        "oracle always added, oracle-budget with vpa)")
    p.add_argument("--set", action="append", default=[], metavar="STRATEGY.PARAM=VALUE",
                   help="override a strategy parameter (Python literal), repeatable")
    add_budget_flag(p)
    cols = p.add_argument_group("trace columns")
    cols.add_argument("--series-column", default="series_id")
    cols.add_argument("--time-column", default="timestamp_s")
    cols.add_argument("--cpu-column", help="default: cpu_cores, cpu_frac or cpu")
    cols.add_argument("--memory-column", help="default: memory_bytes, mem_frac, ...; 'none' for CPU only")
    cols.add_argument("--cpu-provisioned-column", help="default: cpu_provisioned_cores if present; 'none'")
    cols.add_argument("--memory-provisioned-column", help="default: memory_provisioned_bytes if present; 'none'")
    cols.add_argument("--time-scale", type=float, default=1.0, help="seconds per time unit (0.001 for ms)")
    cols.add_argument("--cpu-scale", type=float, default=None,
                      help="cores per CPU unit (default 1; 0.001 for millicores; the machine's cores for a "
                           "normalized trace without a provisioned column, where it is required)")
    cols.add_argument("--memory-scale", type=float, default=None,
                      help="bytes per memory unit (default 1; 1024 for KiB; the machine's bytes for a normalized "
                           "trace without a provisioned column, where it is required)")
    cols.add_argument("--normalized", choices=("auto", "yes", "no"), default="auto",
                      help="values are fractions of the provisioned amount (auto: column name ends in _frac)")
    sim = p.add_argument_group("simulation")
    sim.add_argument("--warmup-hours", type=float, default=24.0, help="unscored start, same for all (24)")
    sim.add_argument("--start-cpu-limit-ratio", type=float, default=2.0,
                     help="start CPU request = provisioned / this (2)")
    sim.add_argument("--start-memory-limit-ratio", type=float, default=1.0,
                     help="start memory request = provisioned / this (1)")
    add_prometheus_flags(p, required=False, plan=False)  # several strategies: history at full resolution
    clusters.add_cluster_flags(p, listed=False)
    p.add_argument("--kubeconfig", type=Path, help="kubeconfig whose contexts --context and --all-contexts name "
                   "(default: $KUBECONFIG or ~/.kube/config; only read for those flags)")
    prom = p.add_argument_group("history from Prometheus (--prometheus)")
    prom.add_argument("-n", "--namespace", action="append", default=[],
                      help="namespace whose workloads are replayed (repeatable; required with --prometheus)")
    prom.add_argument("--history", type=duration_s, default=8 * 86400.0, metavar="DURATION",
                      help="how far back to read, ending now (default: 8d; the first --warmup-hours are not scored)")
    sweep = p.add_argument_group("risk sweep (choose podtailor's risk setting on this history)")
    sweep.add_argument("--sweep", action="store_true",
                       help="replay podtailor at each --sweep-values risk setting, and vpa and krr-simple once, "
                            "and print the frontier (slack against OOMs and against CPU minutes over the request) "
                            "and its slack at VPA's risk on every line; "
                            "replaces --strategies; --set still applies to those three")
    sweep.add_argument("--sweep-values", metavar="R1,R2,...",
                       help=f"risk settings to replay (default {','.join(f'{r:g}' for r in DEFAULT_RISKS)}; "
                            "each in [0.05, 20]; 1 = the default prices, 2 = overruns half as dear)")
    sweep.add_argument("--oom-budget", type=float, metavar="OOMS_PER_SERIES_DAY",
                       help="print the risk setting with the least memory slack whose OOM-equivalents per "
                            "series-day are within this (with --sweep)")
    out = p.add_argument_group("run and output")
    out.add_argument("--series", type=int, help="only the first N series")
    out.add_argument("--workers", type=int, default=min(os.cpu_count() or 1, 4), help="worker processes")
    out.add_argument("--json", type=Path, help="write the JSON report here ('-' for stdout)")
    out.add_argument("--png", type=Path, help="write the slack-vs-OOM plot here (needs matplotlib)")
    out.add_argument("--quiet", action="store_true", help="no table")
    return p


def _overrides(args: argparse.Namespace, names: list[str]) -> dict[str, dict[str, Any]]:
    """The ``--set`` items per strategy of ``names`` (values as Python literals, else strings)."""
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
    if args.risk_budget is not None:  # the whole part: a --set podtailor.budget.FIELD still applies on top of it
        if "podtailor" not in overrides:
            raise ValueError("--risk-budget is a setting of podtailor, which this run does not replay")
        overrides["podtailor"]["budget"] = args.risk_budget
    return overrides


def _check(specs: list[StrategySpec]) -> None:
    for spec in specs:
        if spec.name not in REFERENCES:
            get_strategy(spec.name, **dict(spec.overrides))  # unknown names and parameters raise ValueError here


def _specs(args: argparse.Namespace) -> list[StrategySpec]:
    if args.sweep:
        risks = DEFAULT_RISKS if args.sweep_values is None else parse_risks(args.sweep_values)
        specs = sweep_specs(risks, _overrides(args, [SWEPT, *BASELINES]))
        _check(specs)
        return specs
    chosen = ",".join(STRATEGIES) if args.strategies is None else str(args.strategies)
    names = [n.strip() for n in chosen.split(",") if n.strip() and n.strip() not in REFERENCES]
    overrides = _overrides(args, names)
    specs = [StrategySpec(name=n, overrides=tuple(sorted(overrides[n].items()))) for n in names]
    _check(specs)
    budget = [StrategySpec(name=ORACLE_BUDGET)] if "vpa" in names else []
    return [*specs, StrategySpec(name=ORACLE), *budget]


def _columns(args: argparse.Namespace) -> TraceColumns:
    norm = {"auto": None, "yes": True, "no": False}[args.normalized]
    return TraceColumns(series=args.series_column, time=args.time_column, cpu=args.cpu_column,
                        memory=args.memory_column, cpu_provisioned=args.cpu_provisioned_column,
                        memory_provisioned=args.memory_provisioned_column, time_scale=args.time_scale,
                        cpu_scale=args.cpu_scale, memory_scale=args.memory_scale, cpu_normalized=norm,
                        memory_normalized=norm)


def _sweep_error(args: argparse.Namespace) -> str | None:
    if not args.sweep:
        given = [flag for flag, value in (("--sweep-values", args.sweep_values), ("--oom-budget", args.oom_budget))
                 if value is not None]
        return f"{' and '.join(given)} {'need' if len(given) > 1 else 'needs'} --sweep" if given else None
    if args.strategies is not None:
        return "--sweep replays podtailor, vpa and krr-simple: leave out --strategies"
    if args.oom_budget is not None and not (math.isfinite(args.oom_budget) and args.oom_budget >= 0):
        return "--oom-budget must be a finite number >= 0 (OOM-equivalents per series-day)"
    return None


def _usage_error(args: argparse.Namespace) -> str | None:
    sweep = _sweep_error(args)
    if sweep:
        return sweep
    if args.prometheus:
        if args.trace is not None:
            return "give either a trace file or --prometheus, not both"
        if not args.namespace:
            return "--prometheus needs at least one -n NAMESPACE"
        if not args.history > 0:
            return "--history must be positive"
        return None
    return None if args.trace is not None else "a trace file (or --prometheus) is required"


def _source(args: argparse.Namespace, fleet: clusters.Fleet | None) -> Source | int:
    """Where the history is read: ``--prometheus-url``'s store (over several contexts, split by the cluster
    label); without it the store found by its Service through the API server (``recommender.cli.found_store``),
    over several contexts each context's own (``clusters.stores``, ``fleet_stores.OwnStores``). Or the exit
    code when a store was not found or an API server failed (the reason on stderr)."""
    from podtailor.kube.errors import KubeError
    from podtailor.runtime.cli import kube_client
    from recommender.cli import check_found_store_flags, found_store, prometheus_config
    from recommender.model.types import HistoryPlan
    from recommender.report.fleet_stores import OwnStores, SharedStore, source_of

    if args.prometheus_url:
        config = prometheus_config(args)
        return source_of(config, HistoryPlan()) if fleet is None else SharedStore(config, fleet, HistoryPlan())
    check_found_store_flags(args)
    if fleet is None:
        with closing(kube_client(args)) as api:
            found = found_store(args, api)
        return found if isinstance(found, int) else source_of(found, HistoryPlan())
    with ExitStack() as apis:
        try:
            each = {t.context: apis.enter_context(closing(kube_client(argparse.Namespace(
                **{**vars(args), "context": t.context})))) for t in fleet.targets}
            return OwnStores.found(clusters.stores(args, fleet, each), fleet, HistoryPlan())
        except KubeError as err:
            print(f"error: Kubernetes API: {err}", file=sys.stderr)
            return 1


def _from_prometheus(args: argparse.Namespace, specs: list[StrategySpec], cfg: ReplayConfig) -> BacktestResult | int:
    """The cluster's own history: one read of every namespace, then the same replay as a trace's series.
    Raises SourceError when Prometheus cannot be read (exit 1) and UsageError for bad flags (exit 2); an exit
    code when the store was to be found and was not (said on stderr)."""
    from recommender.sources.clusters import qualify

    fleet, args = clusters.read_flags(args)
    source, names = _source(args, fleet), sorted(set(args.namespace))
    if isinstance(source, int):
        return source
    if fleet is not None:
        names = [qualify(t.value, ns) for t in fleet.targets for ns in names]
    try:
        end = time.time()
        history = dict(source.history(names, end - args.history, end))
    finally:
        source.close()
    if fleet is not None:  # each cluster's series under context/namespace
        history = {replace(k, namespace=f"{context}/{k.namespace}"): batch
                   for context, found in clusters.per_cluster(history, fleet).items() for k, batch in found.items()}
    if args.series is not None:
        history = dict(sorted(history.items())[:max(args.series, 0)])
    return run_history(history, specs, cfg, workers=args.workers)


def run_backtest(args: argparse.Namespace) -> int:
    """Run the subcommand; 0 on success, 1 when Prometheus cannot be read, 2 on bad usage or input."""
    from podtailor.runtime.cli import UsageError
    from recommender.sources.errors import SourceError

    problem = _usage_error(args)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    try:
        specs = _specs(args)
        cfg = ReplayConfig(warmup_s=args.warmup_hours * 3600.0, start_cpu_limit_ratio=args.start_cpu_limit_ratio,
                           start_memory_limit_ratio=args.start_memory_limit_ratio)
        if args.prometheus:
            result = _from_prometheus(args, specs, cfg)
            if isinstance(result, int):
                return result
        else:
            result = run_trace(args.trace, specs, cfg, columns=_columns(args), workers=args.workers,
                               limit=args.series)
    except (TraceError, ValueError, OSError, EOFError, UsageError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except SourceError as exc:
        print(f"error: reading history from Prometheus failed: {exc}", file=sys.stderr)
        return 1
    if result.totals["all"][ORACLE].series == 0:
        where = f"Prometheus history of {', '.join(args.namespace)}" if args.prometheus else str(args.trace)
        print(f"error: no usable series in {where} (a series needs at least two CPU samples)", file=sys.stderr)
        return 2
    _output(args, result)
    return 0


def _output(args: argparse.Namespace, result: BacktestResult) -> None:
    """The table (on stderr when the JSON goes to stdout), the JSON document and the PNG, as asked."""
    out = console(stderr=args.json is not None and str(args.json) == "-")
    if not args.quiet:
        if args.sweep:
            sweep_report.print_sweep(result, out, args.oom_budget)
        else:
            print_report(result, out)
    if args.json is not None:
        path = Path("/dev/stdout") if str(args.json) == "-" else args.json
        if args.sweep:
            doc = {**to_json(result), "sweep": sweep_report.to_json(result, args.oom_budget)}
            path.write_text(json.dumps(doc, indent=2, default=str) + "\n")
        else:
            write_json(result, path)
    if args.png is not None:
        if args.sweep:
            sweep_report.write_png(result, args.png, args.oom_budget)
        else:
            write_png(result, args.png)
