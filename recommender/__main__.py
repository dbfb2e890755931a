"""Command line of the recommender (``podtailor-recommender``): ``once`` and ``run``.

Owns wiring (client, source, strategy, engine, metrics, HTTP endpoints, leader election, scheduler) and
exit codes: 0 success, 1 the command ran and failed (API server or Prometheus trouble, lost leadership),
2 bad usage or input (nothing was contacted or changed).
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from typing import TYPE_CHECKING, NoReturn

from prometheus_client import CollectorRegistry

from podtailor.runtime.cli import (
    UsageError,
    add_kube_flags,
    add_logging_flags,
    command_parser,
    duration_s,
    kube_client,
    setup_logging,
)
from podtailor.runtime.leader import add_leader_election_flags
from podtailor.runtime.serve import add_listen_flag
from podtailor.runtime.shards import LeaseTimings, add_shard_flags, lease_timings
from recommender import __version__
from recommender.cli import (
    add_engine_flags,
    add_prometheus_flags,
    build_strategy,
    engine_config,
    history_plan,
    prometheus_config,
    strategy_at_risk,
)

if TYPE_CHECKING:  # imported by the commands that run the engine, not at start-up
    from kubernetes.client import ApiClient

    from recommender.engine import RecommenderEngine

DESCRIPTION = """\
Recommend CPU and memory for Kubernetes containers from their Prometheus usage history.

podtailor's recommender reads usage history from Prometheus (or Thanos, Mimir, VictoriaMetrics) with
a few batched queries per pass, whatever the number of workloads, folds it into per-container state
and writes targets with lower and upper bounds into the status of the VerticalPodAutoscaler objects
that name it in spec.recommenders (or all of them, with --serve-all-vpas). podtailor-updater applies
them in place. State is checkpointed in the API server, so a restart does not re-read history.

commands:
  once      one pass: read new history, write VPA status, print the recommendations
  run       continuous: a pass every --interval, leader election (or --shards N over N Leases),
            /metrics, /healthz, /readyz
  report    dry-run report and cost review for any cluster (read-only; no CRDs or VPAs needed)
  backtest  replay usage history and score strategies (slack, OOMs, throttling, changes)
"""
log = logging.getLogger("podtailor.recommender")


def build_parser() -> argparse.ArgumentParser:
    parser, sub = command_parser("podtailor-recommender", DESCRIPTION, __version__)
    once = sub.add_parser("once", help="run a single pass and print the recommendations",
                          description="Run one recommender pass: read new usage history, write VPA status, "
                                      "print what was recommended.")
    run = sub.add_parser("run", help="run continuously (in-cluster mode)",
                         description="Run a pass every --interval with leader election, /metrics, /healthz and "
                                     "/readyz, until SIGTERM.")
    for p in (once, run):
        add_kube_flags(p)
        add_prometheus_flags(p)
        add_engine_flags(p)
        add_logging_flags(p)
    once.add_argument("-o", "--output", choices=["table", "json"], default="table", help="what to print")
    from recommender.backtest.cli import add_backtest_parser
    from recommender.report.cli import add_report_parser

    add_report_parser(sub)
    add_backtest_parser(sub)
    g = run.add_argument_group("Continuous mode")
    g.add_argument("--interval", type=duration_s, default=60.0, metavar="DURATION", help="pass interval (default: 1m)")
    add_listen_flag(g, "0.0.0.0:8942")
    add_leader_election_flags(g, "podtailor-recommender")
    add_shard_flags(g)
    return parser


def build_engine(args: argparse.Namespace, registry: CollectorRegistry) -> tuple[RecommenderEngine, ApiClient]:
    """The engine over the real ports for the flags, and the API client it uses (``run`` elects its leader on it)."""
    from recommender.engine import RecommenderEngine
    from recommender.kube.cluster import KubeAdapter
    from recommender.kube.events import EventRecorder
    from recommender.metrics import RecommenderMetrics
    from recommender.sources.prometheus import PrometheusSource

    prom = prometheus_config(args)
    engine_cfg = engine_config(args)
    default = build_strategy(args)
    api = kube_client(args)
    source = PrometheusSource(prom, registry=registry, plan=history_plan(args, default))
    return RecommenderEngine(store=KubeAdapter(api), source=source, strategy=default, config=engine_cfg,
                             metrics=RecommenderMetrics(registry), events=EventRecorder(api),
                             strategy_at_risk=strategy_at_risk(args)), api


def cmd_once(args: argparse.Namespace) -> int:
    from podtailor.kube.errors import KubeError
    from recommender.pass_summary import print_pass

    registry = CollectorRegistry()
    engine, _ = build_engine(args, registry)
    try:
        report = engine.run_pass(time.time())
        engine.checkpoint_all(time.time())
    except KubeError as err:
        log.error("pass failed", extra={"error": str(err)})
        print(f"error: {err}", file=sys.stderr)
        return 1
    print_pass(report, args.output)
    return 1 if report.stale else 0


def _timings(args: argparse.Namespace) -> LeaseTimings:
    try:
        timings = lease_timings(args)
    except ValueError as err:
        raise UsageError(str(err)) from None
    if args.shards > 1 and not args.leader_elect:
        raise UsageError("--shards needs leader election: each shard has its own Lease (drop --no-leader-elect)")
    return timings


def cmd_run(args: argparse.Namespace) -> NoReturn:
    from podtailor.runtime.loop import RunLoop, leave, until_signalled, until_stopped
    from podtailor.runtime.serve import Detailed, PassFreshness, Readiness, make_server

    timings = _timings(args)
    registry = CollectorRegistry()
    engine, api = build_engine(args, registry)
    health = PassFreshness(stale_after_s=3 * args.interval + 60)
    readiness: Readiness = health
    election = None
    if args.shards > 1:
        from podtailor.runtime.leader import identity
        from podtailor.runtime.shard_leases import ShardedElection
        from podtailor.runtime.shards import LeaseNotes
        from recommender.kube.fleet_share import FLEET_ANNOTATION, ShardedFleet
        from recommender.kube.sharded import ShardedStore

        notes = LeaseNotes(FLEET_ANNOTATION)
        election = ShardedElection(api, base=args.leader_election_id, namespace=args.leader_election_namespace,
                                   identity=identity(), shards=args.shards, timings=timings, notes=notes)
        # Sums older than 3 passes (and the up to 2 retry periods a note waits to be written, then read) are
        # not used: the replica then prices against its own shards' fleet.
        engine.fleet_share = ShardedFleet(notes, election.table.serving, shards=args.shards,
                                          strategy=engine.strategy.name,
                                          max_age_s=3 * args.interval + 2 * timings.retry_s)
        engine.store = ShardedStore(engine.store, election.table.owns, args.shards,  # before the first pass
                                    refused=engine.metrics.writes_refused.inc)
        table = election.table
        engine.metrics.shards_served.set_function(lambda: len(table.serving()))
        readiness = Detailed(health, election.describe)
    server = make_server(args.listen, registry, readiness)

    def one_pass() -> None:
        report = engine.run_pass(time.time())
        engine.metrics.passes.labels("stale" if report.stale else "ok").inc()
        health.passed()
        engine.metrics.last_success.set_to_current_time()

    # A pass that overruns the interval skips the slots it covered, as APScheduler's interval trigger would.
    loop = RunLoop(one_pass, interval_s=args.interval, log=log, skip_missed=True,
                   failed=lambda _: engine.metrics.passes.labels("failed").inc())

    def start_work() -> None:
        health.leading()
        loop.start()

    log.info("recommender running", extra={"listen": args.listen, "interval_s": args.interval,
                                           "shards": args.shards})
    if election is None:
        until_stopped(api, args, start_work=start_work, log=log, timings=timings)
    else:  # every replica works, on the shards it holds; a Lease lost is campaigned for again
        election.start()
        start_work()
        until_signalled()
    loop.stop()
    if loop.started:  # after the pass in progress, if any
        loop.join()
        engine.checkpoint_all(time.time())  # sharded: only the shards still held (ShardedStore)
    if election is not None:
        election.stop()
    server.shutdown()
    leave(0)  # not through interpreter finalization, which can abort at a daemon thread (see leave)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help(sys.stderr)
        return 2
    if args.command == "report":
        from recommender.report.cli import run_report

        return run_report(args)
    if args.command == "backtest":
        from recommender.backtest.cli import run_backtest

        return run_backtest(args)
    setup_logging(args.log_format, args.log_level)
    try:
        return cmd_once(args) if args.command == "once" else cmd_run(args)
    except UsageError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
