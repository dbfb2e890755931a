"""Command line of the updater (``podtailor-updater``): ``plan``, ``run`` and ``rollback``.

Owns wiring (client, cluster reader, planner, executor, metrics, HTTP endpoints, leader election) and exit
codes: 0 success, 1 the command ran and failed (API server trouble, rollback incomplete, lost leadership),
2 bad usage or input (nothing was contacted or changed).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, NoReturn

from prometheus_client import CollectorRegistry

from podtailor.runtime.cli import UsageError
from updater import __version__
from updater.metrics import UpdaterMetrics

if TYPE_CHECKING:
    from kubernetes.client import ApiClient
    from rich.console import Console

    from updater.kube.snapshot import ClusterReader
    from updater.kube.writes import RolloutStore
    from updater.policy.analysis import WorkloadAnalyses
    from updater.policy.types import Plan, PodDecision, RolloutPolicy
    from updater.rollout.act.executor import Executor, PassResult
    from updater.rollout.act.ports import WatchedStore

DESCRIPTION = """\
Apply recommended CPU and memory to running Kubernetes pods in place, without restarting them.

podtailor's updater reads the targets the recommender wrote into VerticalPodAutoscaler status and
resizes running pods through the pods/resize subresource, in canary batches per node pool (one pod,
then larger steps, each verified and baked under gates), honouring each container's resizePolicy.
A failed gate restores every pod of the batch and halts the pool. Every action is journaled in a
ResizeRollout object, so a restarted updater resumes without resizing anything twice.

commands:
  plan      dry run: what would be resized, how (online, restart, fallback), in which batch
  run       continuous: a pass every --interval (sooner when a bake ends or a verified batch's pods
            change), reading from watch-fed caches, with leader election, /metrics, /healthz, /readyz
  rollback  restore the recorded resources of every pod a rollout touched
  webhook   mutating admission webhook: new pods start at the VPA target
"""
log = logging.getLogger("podtailor.updater")


def build_parser() -> argparse.ArgumentParser:
    from podtailor.runtime.cli import add_kube_flags, add_logging_flags, command_parser, duration_s
    from podtailor.runtime.leader import add_leader_election_flags
    from podtailor.runtime.serve import add_listen_flag
    from updater.analyses_cli import add_prometheus_flags

    parser, sub = command_parser("podtailor-updater", DESCRIPTION, __version__)
    plan = sub.add_parser("plan", help="show what would be done, change nothing",
                          description="Dry run: decisions per pod and canary batches per node pool.")
    run = sub.add_parser("run", help="run continuously (in-cluster mode)",
                         description="Advance rollouts every --interval (sooner when a bake ends) until SIGTERM.")
    rollback = sub.add_parser("rollback", help="restore the pods a rollout touched",
                              description="Restore the recorded resources of every pod the rollout resized.")
    rollback.add_argument("rollout", help="ResizeRollout name (kubectl get resizerollouts)")
    rollback.add_argument("--timeout", type=duration_s, default=300.0, metavar="DURATION",
                          help="give up waiting for the kubelets after this (default: 5m)")
    from updater.webhook.cli import add_webhook_parser

    add_webhook_parser(sub)
    for p in (plan, run, rollback):
        add_kube_flags(p)
        p.add_argument("-n", "--namespace", action="append", default=[], help="only this namespace (repeatable)")
        p.add_argument("--pool-label", help="node label naming the pool (default: the policy's, or common keys)")
        add_logging_flags(p)
    plan.add_argument("-o", "--output", choices=["table", "json"], default="table")
    g = run.add_argument_group("Continuous mode")
    g.add_argument("--interval", type=duration_s, default=10.0, metavar="DURATION", help="pass interval (default: 10s)")
    g.add_argument("--verify-cgroups", action="store_true",
                   help="also verify each resize in the containers' cgroups (the kubelet's cAdvisor series through "
                        "the node proxy; needs get on nodes/proxy, which the default RBAC does not grant)")
    add_prometheus_flags(run.add_argument_group("Canary analyses"))
    add_listen_flag(g, "0.0.0.0:8943")
    add_leader_election_flags(g, "podtailor-updater")
    return parser


@dataclass(frozen=True, slots=True, kw_only=True)
class Wiring:
    """What the commands run on, built from the flags by ``build_executor``."""

    executor: Executor
    api: ApiClient
    reader: ClusterReader
    """The executor's cluster reader (``run`` starts its watch-fed caches)."""
    store: RolloutStore
    """The executor's journal store (``rollback`` reads a rollout by name; ``run`` starts its watch)."""


def build_executor(args: argparse.Namespace, metrics: UpdaterMetrics | None = None) -> Wiring:
    """The executor over the real ports for the flags; every read lists (``run`` adds the watch-fed caches:
    ``watch``)."""
    from podtailor.runtime.cli import kube_client
    from updater.analyses_cli import runner_for
    from updater.kube.cadvisor import check_nodes
    from updater.kube.snapshot import FRESH_AT_BAKE_END, ClusterReader
    from updater.kube.writes import (
        EventRecorder,
        Evictor,
        PodResizer,
        RolloutStore,
        ServingGateWriter,
        TemplatePatcher,
    )
    from updater.policy.planner import plan
    from updater.rollout.act.executor import Executor
    from updater.rollout.act.grouping import group_by_policy

    analyses = runner_for(args, metrics)  # a bad URL is refused before anything is contacted
    api = kube_client(args)
    reader = ClusterReader(api)
    namespaces = tuple(args.namespace)
    store = RolloutStore(api)
    executor = Executor(read=lambda: reader.read(policy_pool_label=args.pool_label, namespaces=namespaces),
                        planner=plan, store=store, resizer=PodResizer(api), recorder=EventRecorder(api),
                        policy=group_by_policy, evictor=Evictor(api), templates=TemplatePatcher(api),
                        metrics=metrics, gates=ServingGateWriter(api), read_fresh=lambda: reader.read(
                            policy_pool_label=args.pool_label, namespaces=namespaces, fresh=FRESH_AT_BAKE_END),
                        cgroups=check_nodes(api) if getattr(args, "verify_cgroups", False) else None,
                        analyses=analyses)
    return Wiring(executor=executor, api=api, reader=reader, store=store)


def _changes(d: PodDecision, *, exact: bool) -> str:
    """The pod's request changes, "app: cpu 250m→574m, memory 1Gi→1.2Gi": rounded for a person in the table,
    the exact quantities (``exact``) in the JSON."""
    from podtailor.resources import human_quantities, quantities

    fmt = quantities if exact else human_quantities
    parts = []
    for c in d.changes:
        old, new = fmt(c.old_requests), fmt(c.new_requests)
        parts.append(f"{c.name}: " + ", ".join(f"{k} {old.get(k, '-')}→{new.get(k, '-')}" for k in sorted(new))
                     + (" (restart)" if c.restarts else ""))
    return "; ".join(parts)


def cmd_plan(args: argparse.Namespace) -> int:
    from rich.table import Table

    from podtailor.runtime.cli import console as plain_console
    from updater.analyses_cli import batch_analyses
    from updater.policy.planner import summary

    executor = build_executor(args).executor
    snap, plans = executor.plan(time.time())
    if args.output == "json":
        out = {"schemaVersion": "podtailor.io/plan/v1", "plans": [{
            "policy": policy.name, "summary": summary(p), "frozenPools": dict(p.frozen_pools),
            "batches": [{"pool": b.pool, "step": b.step, "bakeSeconds": b.bake_s, "pods": list(b.pods),
                         "analyses": batch_analyses(policy, p, b, snap.analyses)} for b in p.batches],
            "decisions": [{"pod": d.key, "pool": d.pool, "workload": f"{d.workload_kind}/{d.workload_name}",
                           "action": d.action.value, "reason": d.reason.value, "message": d.message,
                           "changes": _changes(d, exact=True)} for d in p.decisions]} for policy, p in plans]}
        json.dump(out, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    console = plain_console()
    for policy, p in plans:
        batch_of = {pod: (b.pool, i) for i, b in enumerate(p.batches) for pod in b.pods}
        table = Table(title=f"policy {policy.name}: {len(p.batches)} batches, frozen pools: "
                            f"{', '.join(f'{k} ({v})' for k, v in p.frozen_pools.items()) or 'none'}")
        for col in ("pool", "batch", "pod", "action", "reason", "changes"):
            table.add_column(col)
        for d in sorted(p.decisions, key=lambda d: (d.pool, batch_of.get(d.key, ("", 1 << 30))[1], d.key)):
            batch = batch_of.get(d.key)
            table.add_row(d.pool or "-", str(batch[1] + 1) if batch else "-", d.key, d.action.value,
                          d.message or d.reason.value, _changes(d, exact=False))
        console.print(table)
        _print_analyses(console, policy, p, snap.analyses)
    return 0


def _print_analyses(console: Console, policy: RolloutPolicy, p: Plan,
                    own: Mapping[tuple[str, str, str], WorkloadAnalyses]) -> None:
    """The canary analyses each batch would run during its bake (nothing when no batch has any)."""
    from rich.table import Table

    from updater.analyses_cli import batch_analyses

    rows = [(b, i, a) for i, b in enumerate(p.batches) for a in batch_analyses(policy, p, b, own)]
    if not rows:
        return
    table = Table(title=f"policy {policy.name}: canary analyses per batch (during each bake)")
    for col in ("pool", "batch", "analysis", "workload", "condition", "query"):
        table.add_column(col)
    for b, i, a in rows:
        table.add_row(b.pool, str(i + 1), a.get("name", "-"), a.get("workload", "-"), a.get("condition", "-"),
                      a.get("query", a.get("error", "")))
    console.print(table)


MIN_PASS_GAP_S = 0.5
"""Passes start at least this far apart, even when a bake end or a pod change calls for the next one sooner."""
CACHE_SYNC_S = 10.0
"""At start, how long ``watch`` waits for the caches' first lists before the first pass."""


def next_pass(result: PassResult, started: float, interval_s: float) -> tuple[float, float | None]:
    """When the pass that started at ``started`` (``time.monotonic``) and returned ``result`` (a PassResult) is
    followed, in seconds after its start: ``interval_s``, or just after the next bake's end if that is sooner
    (at least ``MIN_PASS_GAP_S``); and, while a batch waits for the kubelets, how soon a change of a watched
    pod may bring the next pass forward (``MIN_PASS_GAP_S``; None when no pod change should)."""
    wait_s = interval_s
    if result.next_bake_end_s is not None:  # a bake ends before the interval: pass right after it
        due_s = time.monotonic() - started + result.next_bake_end_s + 0.05 - time.time()
        wait_s = max(MIN_PASS_GAP_S, min(wait_s, due_s))
    return wait_s, (MIN_PASS_GAP_S if result.awaiting_pods else None)


def pause_after_pass(result: PassResult, started: float, interval_s: float, stop: threading.Event,
                     pod_changed: threading.Event | None) -> None:
    """Wait as ``run`` does after a pass (``next_pass``), in this thread: while a batch waits for the kubelets
    and pod changes are watched (``pod_changed``, cleared when the pass started), until a pod changes, at the
    earliest ``MIN_PASS_GAP_S`` after the start. ``stop`` (and ``pod_changed``) end the wait."""
    wait_s, woken_after_s = next_pass(result, started, interval_s)
    if woken_after_s is not None and pod_changed is not None:  # pass again as soon as a watched pod changes
        stop.wait(max(0.0, woken_after_s - (time.monotonic() - started)))
        pod_changed.wait(max(0.0, wait_s - (time.monotonic() - started)))
    else:
        stop.wait(max(0.0, wait_s - (time.monotonic() - started)))


def watch(store: WatchedStore, api: ApiClient, reader: ClusterReader, namespaces: tuple[str, ...],
          on_pod_change: Callable[[], None]) -> Callable[[], None]:
    """Start the watch-fed caches of the executor's reader and journal ``store`` (``informer.py``): a pass then reads
    from memory while they are current and lists otherwise. The watches get a client of their own (same
    credentials, a connection pool as big as the streams held open, one per kind and namespace, and not paced
    by ``--kube-api-qps``: each watch sends a request per 15 s, or per back-off after an error); returns the
    function that stops them."""
    import copy

    from kubernetes import client

    config = copy.copy(api.configuration)
    config.connection_pool_maxsize = (len(reader.listings) + 1) * max(1, len(namespaces)) + 2
    watch_api = client.ApiClient(config)
    reader.start_watching(namespaces, watch_api, on_pod_change=on_pod_change)
    store.start_watching(watch_api)
    # The first pass reads from the caches once they hold their first list, instead of listing every kind
    # while the caches list them too. A kind not served here never syncs: after the bound, reads list it.
    deadline = time.monotonic() + CACHE_SYNC_S
    journal = store.informer
    informers = [*reader.informers.values(), *([journal] if journal is not None else [])]
    waiting = [i for i in informers if not i.wait_synced(max(0.0, deadline - time.monotonic()))]
    if waiting:
        log.info("some caches not filled at start; those kinds are listed until they are",
                 extra={"kinds": sorted({i.name for i in waiting})})

    def stop() -> None:
        reader.stop_watching()
        store.stop_watching()

    return stop


def cmd_run(args: argparse.Namespace) -> NoReturn:
    from podtailor.runtime.loop import Due, RunLoop, leave, until_stopped
    from podtailor.runtime.serve import PassFreshness, make_server

    registry = CollectorRegistry()
    metrics = UpdaterMetrics(registry)
    wiring = build_executor(args, metrics)
    executor = wiring.executor
    from podtailor.kube.errors import KubeError
    from updater.analyses_cli import check_at_startup

    try:  # before serving or leading: exit 2
        check_at_startup(executor.read(), executor.analyses is not None)
    except KubeError as err:  # the passes retry; a batch with analyses and no Prometheus fails unsent meanwhile
        log.warning("analyses not checked at startup: the cluster could not be read", extra={"error": str(err)})
    health = PassFreshness(stale_after_s=3 * args.interval + 60)
    server = make_server(args.listen, registry, health)

    def one_pass() -> Due:
        started = time.monotonic()
        with metrics.pass_seconds.time():
            result = executor.run_pass(time.time())
        metrics.passes.labels("ok").inc()
        metrics.writes.inc(result.writes)
        metrics.rollouts_started.inc(len(result.started))
        metrics.last_success.set_to_current_time()
        health.passed()
        wait_s, woken_after_s = next_pass(result, started, args.interval)  # woken: by a change of a watched pod
        return Due(wait_s if woken_after_s is None else max(wait_s, woken_after_s), woken_after_s)

    loop = RunLoop(one_pass, interval_s=args.interval, log=log, name="updater-pass",
                   failed=lambda _: metrics.passes.labels("failed").inc())

    def start_work() -> None:
        health.leading()
        stop_watching = watch(wiring.store, wiring.api, wiring.reader, tuple(args.namespace), loop.wake)
        loop.start()
        loop.join()  # stopped, and the pass in progress (if any) ended with the caches it started with
        stop_watching()

    until_stopped(wiring.api, args, start_work=start_work, log=log)
    loop.stop()  # a pass in progress is not waited for: the journal makes it safe to resume
    server.shutdown()
    leave(0)  # not through interpreter finalization, which can abort at a daemon thread (see leave)


def cmd_rollback(args: argparse.Namespace) -> int:
    from updater.rollout.machine import lifecycle as machine
    from updater.rollout.machine.journal import EntryState, Phase

    wiring = build_executor(args)
    executor, store = wiring.executor, wiring.store
    r = store.get(args.rollout)
    if r is None:
        print(f"error: no ResizeRollout named {args.rollout!r}", file=sys.stderr)
        return 2
    r = store.save(replace(r, rollback_all=True, phase=Phase.ROLLING_BACK,
                                    message=f"rollback requested by {os.environ.get('USER', 'a user')}"))
    deadline = time.monotonic() + args.timeout
    while r.phase == Phase.ROLLING_BACK and time.monotonic() < deadline:
        snap = executor.read()
        new, effects = machine.advance(r, snap.observations, time.time())
        r, _ = executor.perform(r, new, effects, snap.observations, time.time())
        if r.phase == Phase.ROLLING_BACK:
            time.sleep(1.0)
    reverted = sum(1 for e in r.entries if e.state == EntryState.REVERTED)
    if r.phase == Phase.ROLLED_BACK:
        print(f"{r.name}: {r.phase.value}; {reverted} pods restored")
        return 0
    left = [e for e in r.entries if e.state in (EntryState.NOT_RESTORED, EntryState.REVERTING)]
    waited = (f" (still {r.phase.value} when --timeout {args.timeout:g}s ran out: the journal keeps the"
              " request, so `podtailor-updater run` or another `rollback` carries it on)"
              if r.phase == Phase.ROLLING_BACK else "")
    print(f"{r.name}: {r.phase.value}; rollback incomplete: {reverted} pods restored, {len(left)} not{waited}"
          + "".join(f"\n  {e.key} {e.state.value}: {e.message}" for e in left))
    return 1


def main(argv: list[str] | None = None) -> int:
    from podtailor.kube.errors import KubeError
    from podtailor.runtime.cli import setup_logging
    from updater.kube.policy_crd import PolicyError

    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help(sys.stderr)
        return 2
    setup_logging(args.log_format, args.log_level)
    if args.command == "webhook":
        from updater.webhook.cli import run_webhook

        return run_webhook(args)
    commands = {"plan": cmd_plan, "run": cmd_run, "rollback": cmd_rollback}
    try:
        return commands[args.command](args)
    except UsageError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except KubeError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    except PolicyError as err:  # a ResizePolicy the API server accepted but we cannot read: nothing is done
        print(f"error: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
