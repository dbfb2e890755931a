"""The ``report`` command: flags, wiring (API client, Prometheus source, strategy, prices), output, exit codes.

Owns ``add_report_parser(subparsers)`` and ``run_report(args)``. The run is read-only: discovery lists
workloads (``discovery``), batched history reads cover the namespaces they are in (the recommender's
``PrometheusSource``, so the request count does not grow with the number of workloads: one read per group of
namespaces, ``--read-groups``, the next group read while the one before is folded into states; a workload
whose VPA has a recommender checkpoint starts from it instead, ``checkpoints``, unless ``--no-checkpoints``),
the builder recommends once every group is in (the fleet is that of all of them, as the engine's), its
pieces are assembled into one ``Report``, and one printer writes it to stdout or ``--output-file``. A
progress bar (rich) goes to stderr when stderr is a terminal; with a machine format nothing but the report
reaches stdout.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import closing, contextmanager
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry

from podtailor.nodepool import POOL_LABEL_KEYS
from podtailor.runtime.cli import UsageError, add_kube_flags, add_logging_flags, duration_s, kube_client
from recommender.cli import (
    add_prometheus_flags,
    add_risk_flag,
    build_strategy,
    check_found_store_flags,
    found_store,
    history_plan,
    prometheus_config,
    strategy_at_risk,
)
from recommender.model.podtailor_budget import budget_text
from recommender.model.registry import DEFAULT_STRATEGY, STRATEGIES
from recommender.report import clusters, patches, render
from recommender.report.types import KINDS, Report, Workload

if TYPE_CHECKING:  # imported where the report runs, not for --help
    from kubernetes.client import ApiClient

    from recommender.model.types import Strategy
    from recommender.report.checkpoints import Checkpoints
    from recommender.report.pricing import PriceSheet
    from recommender.report.types import Inventory
    from recommender.sources.config import PrometheusConfig

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_EMPTY = 0, 1, 2, 3
READ_LAG_S = 120.0
"""History ends this long before now, as in the recommender engine (the last scrape may be missing)."""
READ_GROUPS = 3
"""Namespace groups read one after another, each recommended for while the next is read (``--read-groups``)."""
EPILOG = """\
output formats (-o): table (default), json, yaml, csv, markdown, html. The JSON and YAML documents follow
docs/report-schema.json (JSON Schema draft 2020-12) and carry schemaVersion "podtailor.io/report/v1".
-o patches --output-dir DIR writes one kustomize strategic-merge patch per workload with a recommendation
(DIR/<namespace>_<kind>_<name>.yaml) and says on stderr how many workloads it skipped and why (docs/patches.md).

costs: requests x pod-hours x prices. Default prices are OpenCost's (CPU $0.031611 per vCPU-hour, memory
$0.004237 per GiB-hour, 730 hours a month); --prices FILE (YAML or JSON) overrides them, per node pool too:
  cpuPerVcpuHour: "0.031611"
  memoryPerGibHour: "0.004237"
  pools: {spot: {cpuPerVcpuHour: "0.006655", memoryPerGibHour: "0.000892"}}

disruption (what podtailor-updater would do to the running pods): in-place (online resize), in-place-restart
(resizePolicy RestartContainer on a changed resource), replacement (QoS class would change, requests above the
node's allocatable, or restartPolicy Never with a restarting change), left-alone (BestEffort), none.

exit codes:
  0  the report was written
  1  failed: API server or Prometheus unreachable or refusing, or a missing RBAC permission (named)
  2  bad usage or input (flags, kubeconfig, price file, label selector); nothing was contacted. Or, without
     --prometheus-url: no metrics store Service found, or Services not listable (docs/commands.md)
  3  empty result: no workload matched the filters, or Prometheus had no usage for any of them
"""
log = logging.getLogger("podtailor.report")


def add_report_parser(subparsers: Any) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "report", help="dry-run recommendations, cost review and disruption preview (read-only)",
        description="Recommend requests and limits for every workload from its usage history, price them and "
                    "show what applying them would disrupt, as the recommender would: with the fleet of every "
                    "workload reported and each workload's VPA container policy (the default policy where none "
                    "targets it) and, where the VPA has a recommender checkpoint, from the state restored from "
                    "it (--no-checkpoints: fresh state). Read-only: needs list access to workloads, pods, nodes, "
                    "HPAs, LimitRanges, VPAs and RecommenderCheckpoints (both optional), and Prometheus; no CRD "
                    "or in-cluster component.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter, conflict_handler="resolve")
    add_kube_flags(p)
    add_prometheus_flags(p, required=False)
    clusters.add_cluster_flags(p)
    g = p.add_argument_group("Report")
    g.add_argument("-n", "--namespace", action="append", default=[], help="only this namespace (repeatable; "
                   "default: all)")
    g.add_argument("-l", "--selector", default="", help="label selector on workloads, as kubectl takes it "
                   "(e.g. team=a,tier!=batch)")
    g.add_argument("--kind", action="append", choices=KINDS, default=[], help="only this workload kind "
                   "(repeatable; default: all)")
    g.add_argument("--strategy", choices=STRATEGIES, default=DEFAULT_STRATEGY,
                   help="recommendation strategy (default: %(default)s)")
    add_risk_flag(g)
    g.add_argument("--history", type=duration_s, default=8 * 86400.0, metavar="DURATION",
                   help="usage history to read (default: 8d)")
    g.add_argument("--no-checkpoints", dest="checkpoints", action="store_false",
                   help="recommend every workload from fresh state over --history; by default a workload whose "
                        "VPA has a RecommenderCheckpoint is recommended from it as the recommender would (its "
                        "state restored, plus the history after it), so the report shows what `once` writes")
    g.add_argument("-o", "--output", choices=(*render.FORMATS, patches.FORMAT), default="table",
                   help="format (default: table); patches: one kustomize strategic-merge patch per workload, "
                        "in --output-dir")
    g.add_argument("--output-file", type=Path, metavar="PATH", help="write the report here instead of stdout")
    g.add_argument("--output-dir", type=Path, metavar="DIR", help="with -o patches: write the patch files here "
                   "(created if missing; only the files of the workloads written are replaced)")
    g.add_argument("--prices", type=Path, metavar="FILE", help="price sheet (YAML or JSON), see below")
    g.add_argument("--pool-label", metavar="KEY", help="node label naming the node pool (default: the first "
                   f"present of {', '.join(POOL_LABEL_KEYS)}, as the updater reads them)")
    g.add_argument("--change-threshold", type=float, default=0.10, metavar="FRACTION",
                   help="the updater skips smaller request changes (default: 0.10, its default)")
    g.add_argument("--read-groups", type=_groups, default=READ_GROUPS, metavar="N",
                   help="read the namespaces' history in N groups and recommend for one group while the next is "
                        "read (Prometheus and the model then work at the same time); each group costs one more "
                        "handful of Prometheus requests, still none per workload; 1 reads everything at once "
                        "(default: %(default)s)")
    g.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    add_logging_flags(g, level="warning")
    return p


def _groups(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if not 1 <= n <= 64:
        raise argparse.ArgumentTypeError(f"must be in [1, 64], got {n}")
    return n


def namespace_groups(workloads: Iterable[Workload], groups: int) -> list[tuple[str, ...]]:
    """The workloads' namespaces, sorted, cut into at most ``groups`` runs of about equal numbers of workloads
    (a namespace is never split: its history is read in one piece). Fewer runs when there are fewer
    namespaces; none for no workloads."""
    per_ns = Counter(w.namespace for w in workloads)
    names = sorted(per_ns)
    total, seen = sum(per_ns.values()), 0
    out: list[tuple[str, ...]] = []
    run: list[str] = []
    for ns in names:
        run.append(ns)
        seen += per_ns[ns]
        if seen * groups >= total * (len(out) + 1) and len(out) < groups - 1:
            out.append(tuple(run))
            run = []
    if run:
        out.append(tuple(run))
    return out


def _render(report: Report, fmt: str) -> str:
    from recommender.report import html

    writers: dict[str, Callable[[Report], str]] = {
        "table": render.table, "json": render.as_json, "yaml": render.as_yaml, "csv": render.as_csv,
        "markdown": render.as_markdown, "html": html.as_html}
    return writers[fmt](report)


class _Progress:
    """A rich progress bar on stderr, or nothing."""

    def __init__(self, enabled: bool) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        console = Console(stderr=True)
        self.bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                            console=console, transient=True) if enabled and console.is_terminal else None
        self.task: Any = None

    def stage(self, text: str, total: int | None = None) -> None:
        if self.bar is not None:
            if self.task is not None:
                self.bar.remove_task(self.task)
            self.task = self.bar.add_task(text, total=total)

    def advance(self, n: int = 1) -> None:
        if self.bar is not None and self.task is not None:
            self.bar.advance(self.task, n)

    @contextmanager
    def running(self) -> Iterator[_Progress]:
        if self.bar is None:
            yield self
            return
        with self.bar:
            yield self


def _settings(args: argparse.Namespace) -> dict[str, object]:
    return {"namespaces": list(args.namespace), "selector": args.selector, "kinds": list(args.kind or KINDS),
            "historySeconds": args.history, "stepSeconds": int(args.step), "changeThreshold": args.change_threshold,
            "poolLabel": args.pool_label, "risk": args.risk, "checkpoints": args.checkpoints,
            **({} if args.risk_budget is None else {"riskBudget": budget_text(args.risk_budget)})}


def _prepare(args: argparse.Namespace) -> tuple[PriceSheet, Strategy, PrometheusConfig | None, ApiClient]:
    """Everything that can fail on bad input, before anything is contacted: (prices, strategy, prom, api); prom
    is None without --prometheus-url: the store is then found through the API server (``found_store``; for
    several contexts, each cluster's own, ``clusters.collect``)."""
    from recommender.report.objects import SelectorError, parse_selector
    from recommender.report.pricing import PriceError, PriceSheet, load_sheet

    if not 0 <= args.change_threshold < 10:
        raise UsageError("--change-threshold must be in [0, 10)")
    _check_output(args)
    try:
        parse_selector(args.selector)
        prices = load_sheet(args.prices) if args.prices else PriceSheet()
    except (SelectorError, PriceError) as err:
        raise UsageError(str(err)) from None
    if not args.prometheus_url:
        check_found_store_flags(args)
    return prices, build_strategy(args), prometheus_config(args) if args.prometheus_url else None, kube_client(args)


def _check_output(args: argparse.Namespace) -> None:
    """-o patches writes files into --output-dir and nothing else; the other formats write one text."""
    if args.output == patches.FORMAT and args.output_dir is None:
        raise UsageError("-o patches needs --output-dir DIR (one patch file per workload goes there)")
    if args.output == patches.FORMAT and args.output_file is not None:
        raise UsageError("-o patches writes files into --output-dir, not --output-file")
    if args.output != patches.FORMAT and args.output_dir is not None:
        raise UsageError(f"--output-dir is for -o patches; -o {args.output} writes to --output-file or stdout")


def _write_patches(report: Report, directory: Path) -> int:
    """The patch files, and on stderr how many were written and how many workloads were skipped and why."""
    try:
        done = patches.write_patches(report, directory)
    except OSError as err:
        print(f"error: cannot write the patches to {directory}: {err}", file=sys.stderr)
        return EXIT_FAILED
    print(f"wrote {len(done.files)} patch files to {directory}", file=sys.stderr)
    if done.skipped:
        why = ", ".join(f"{n} {reason.value}" for reason, n in sorted(done.skipped.items()))
        n = sum(done.skipped.values())
        print(f"skipped {n} workload{'' if n == 1 else 's'} without a patch: {why}", file=sys.stderr)
    return EXIT_OK


def run_report(args: argparse.Namespace) -> int:
    """The ``report`` command; returns the exit code (see EPILOG)."""
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s %(message)s")
    try:
        fleet, args = clusters.read_flags(args)
        prices, strategy, found, api = _prepare(args)
    except UsageError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_USAGE
    progress = _Progress(not args.no_progress)
    with closing(api), progress.running():
        if fleet is not None:
            code, report = clusters.collect(args, fleet, api, prices, strategy, found, progress)
        else:
            prom = found if found is not None else found_store(args, api)
            if isinstance(prom, int):
                return prom
            code, report = _collect(args, prices, strategy, prom, api, progress)
    if report is None:
        return code
    failed = _write_patches(report, args.output_dir) if args.output == patches.FORMAT else _print(report, args)
    if failed:
        return failed
    for warning in report.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    return code


def _print(report: Report, args: argparse.Namespace) -> int:
    """The report in its text format, to --output-file or stdout; EXIT_OK or EXIT_FAILED."""
    text = _render(report, args.output)
    if not args.output_file:
        sys.stdout.write(text)
        sys.stdout.flush()
        return EXIT_OK
    try:
        args.output_file.write_text(text)
    except OSError as err:
        print(f"error: cannot write {args.output_file}: {err}", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK


def _collect(args: argparse.Namespace, prices: PriceSheet, strategy: Strategy, prom: PrometheusConfig, api: ApiClient,
             progress: _Progress) -> tuple[int, Report | None]:
    from podtailor.kube.errors import KubeError
    from recommender.model.types import ContainerKey, ContainerState, UsageBatch
    from recommender.recommend import fleet_of
    from recommender.report.build import BuildConfig, Recommending, assemble, fold, workload_reports
    from recommender.report.checkpoints import grow
    from recommender.report.discovery import Discovery, Filters
    from recommender.sources.errors import SourceError
    from recommender.sources.prometheus import PrometheusSource

    filters = Filters(namespaces=tuple(args.namespace), selector=args.selector, kinds=tuple(args.kind),
                      pool_label=args.pool_label)
    progress.stage("listing workloads", total=None)
    try:
        inventory = Discovery(api).read(filters, progress=lambda kind: progress.stage(f"listing {kind}s"))
    except KubeError as err:
        print(f"error: Kubernetes API: {err}", file=sys.stderr)
        return EXIT_FAILED, None
    if not inventory.workloads:
        print(f"error: empty result: no workload matched (namespaces: {', '.join(args.namespace) or 'all'}; "
              f"selector: {args.selector or 'none'}; kinds: {', '.join(args.kind) or 'all'})", file=sys.stderr)
        return EXIT_EMPTY, None
    restored = _restored(args, api, inventory, strategy)
    if restored is None:
        return EXIT_FAILED, None
    inventory = replace(inventory, warnings=(*inventory.warnings, *restored.warnings),
                        api_requests=inventory.api_requests + restored.requests)
    now = time.time()
    end = now - READ_LAG_S
    start = end - args.history
    source = PrometheusSource(prom, registry=CollectorRegistry(), plan=history_plan(args, strategy))
    cfg = BuildConfig(now_s=now, start_s=start, end_s=end, strategy_name=args.strategy, prices=prices,
                      change_threshold=args.change_threshold, settings=_settings(args))
    groups = namespace_groups(inventory.workloads, args.read_groups)
    progress.stage(f"reading usage history and recommending for {len(inventory.workloads)} workloads",
                   total=len(inventory.workloads))
    batches: dict[ContainerKey, UsageBatch] = {}
    states: dict[ContainerKey, ContainerState] = {}
    pools = {(w.namespace, p.name): w.pool for w in inventory.workloads if w.pool for p in w.pods}
    # One thread reads group i + 1 while this one folds group i into its states: Prometheus and the model work
    # at the same time. Reads stay one after another (one source, one pass at a time), and a failed read of
    # any group fails the report, as a failed single read does: nothing half-read is printed. Recommending
    # waits for the last group: the fleet is that of every container, as the engine's (``recommend.py``).
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="report-read") as reader:
        def read(names: tuple[str, ...]) -> Future[Mapping[ContainerKey, UsageBatch]]:
            return reader.submit(source.history, names, start, end, pools)

        pending = read(groups[0])
        try:
            for i, names in enumerate(groups):
                group = pending.result()
                if i + 1 < len(groups):
                    pending = read(groups[i + 1])
                inside = set(names)
                states.update(fold((w for w in inventory.workloads if w.namespace in inside
                                    and (w.pool or w.key not in restored.restored)), group, strategy))
                batches.update(group)
            states.update(grow(inventory.workloads, restored.restored, source.history, end_s=end,
                               history_s=args.history, strategy=strategy))
        except SourceError as err:
            print(f"error: Prometheus at {prom.base_url}: {err}", file=sys.stderr)
            return EXIT_FAILED, None
        finally:
            pending.cancel()
            reader.shutdown(wait=True)
            source.close()
    inputs = Recommending(strategy=strategy, states=states, fleet=fleet_of(strategy, states.values(), now),
                          at_risk=strategy_at_risk(args))
    items = workload_reports(inventory, inventory.workloads, batches, inputs, cfg, progress=progress.advance)
    report = replace(assemble(inventory, items, cfg), prometheus_requests=source.request_count)
    if not any(c.usage is not None for w in report.workloads for c in w.containers):
        print(f"error: empty result: Prometheus at {prom.base_url} has no usage history for any of the "
              f"{len(report.workloads)} workloads in the window (wrong --cluster-label/--cluster-value, or "
              "metrics not scraped?)", file=sys.stderr)
        return EXIT_EMPTY, report
    return EXIT_OK, report


def _restored(args: argparse.Namespace, api: ApiClient, inventory: Inventory, strategy: Strategy,
              ) -> Checkpoints | None:
    """The VPAs' usable checkpoints (none with --no-checkpoints); None when reading them failed (said on stderr)."""
    from podtailor.kube.errors import KubeError
    from recommender.report.checkpoints import restoring

    try:
        return restoring(api, tuple(args.namespace), inventory.vpas, strategy, enabled=args.checkpoints)
    except KubeError as err:
        print(f"error: Kubernetes API: {err}", file=sys.stderr)
        return None
