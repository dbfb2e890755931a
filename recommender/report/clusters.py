"""The report over several clusters: which kube contexts, their cluster label values, and the one history read.

Owns the flags ``--context`` (repeatable), ``--all-contexts`` and ``--cluster-value CONTEXT=VALUE``
(repeatable), their checking (``read_flags``: an unknown context, a context or a value given twice, a value for
a context not reported, several contexts over ``--prometheus-url`` without ``--cluster-label``; a usage error
before anything is contacted), and ``collect``: each cluster's workloads listed from its own API server, then
every cluster's history read from the one store in the same batched requests as one cluster's
(``PrometheusConfig.many_clusters``: each query matches all the cluster values at once and is split by the
cluster label), or without ``--prometheus-url`` from each cluster's own store, found through its own API server
(``stores``, ``fleet_stores.OwnStores``), split back per cluster, and each cluster recommended for as its own
recommender would (its fleet is its own containers). Each cluster's RecommenderCheckpoints are read from its own
API server, as the one-cluster report reads them (``checkpoints.restoring``; a cluster without the CRD or the
permission warns once, named by its context, and starts from fresh state), and a workload restored from one is
grown by its cluster's history after the checkpoint (``checkpoints.starting_states`` over that cluster's reads),
so each cluster is reported as its own recommender would write it. The report's workloads carry their context
(``WorkloadReport.cluster``), its namespace and node pool tables name ``context/namespace`` and
``context/pool``, and ``Report.clusters`` sums each cluster. With one context, or none, the report is the
one-cluster report, its output unchanged.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import ExitStack, closing
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Protocol

from podtailor.runtime.cli import UsageError, kube_client
from recommender.model.types import ContainerKey, UsageBatch
from recommender.report.types import Inventory, Report, Workload, WorkloadReport
from recommender.sources.clusters import qualify, split

if TYPE_CHECKING:  # the builder is imported by the run that uses it, not by --help
    from kubernetes.client import ApiClient

    from recommender.kube.checkpoint import Restored
    from recommender.model.types import Strategy
    from recommender.report.build import BuildConfig, Recommending
    from recommender.report.checkpoints import Read
    from recommender.report.pricing import PriceSheet
    from recommender.report.types import WorkloadKey
    from recommender.sources.config import PrometheusConfig


@dataclass(frozen=True, slots=True, kw_only=True)
class Target:
    """One cluster of the report."""

    context: str
    """Its kubeconfig context, the name the report shows."""
    value: str
    """Its value of ``--cluster-label`` in the shared store (default: the context's name)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Fleet:
    """Several clusters in one report: read from one store, or each from its own."""

    label: str | None
    """The label telling their series apart (``--cluster-label``); None only when each cluster's own store is
    found through its API server (no ``--prometheus-url``, ``fleet_stores.OwnStores``)."""
    targets: tuple[Target, ...]


class Progress(Protocol):
    def stage(self, text: str, total: int | None = None) -> None: ...
    def advance(self, n: int = 1) -> None: ...


def add_cluster_flags(p: argparse.ArgumentParser, *, listed: bool = True) -> None:
    """``--context`` and ``--cluster-value``, replacing the one-cluster flags of the same names (the parser
    needs ``conflict_handler="resolve"``), and ``--all-contexts``; ``listed``: each cluster's workloads are
    listed from its API server (the report; ``backtest --prometheus`` reads the store only)."""
    g = p.add_argument_group("Clusters (several kube contexts over one metrics store)")
    g.add_argument("--context", action="append", default=[], metavar="CONTEXT",
                   help="kubeconfig context (repeatable; default: the current context). With several, "
                        + ("each cluster's workloads are listed from its own API server and " if listed else "")
                        + "all their history is read from the one --prometheus-url in the same batched queries, "
                          "split by --cluster-label")
    g.add_argument("--all-contexts", action="store_true", help="report every context of the kubeconfig")
    g.add_argument("--cluster-value", action="append", default=[], metavar="[CONTEXT=]VALUE",
                   help="a context's value of --cluster-label (repeatable). Several contexts: CONTEXT=VALUE, and a "
                        "context without one has its own name as its value. One context: VALUE, this cluster's value")


def kubeconfig_contexts(args: argparse.Namespace) -> list[str]:
    """The context names of the kubeconfig (``--kubeconfig``, else $KUBECONFIG or ~/.kube/config)."""
    from kubernetes import config

    try:
        contexts, _ = config.list_kube_config_contexts(  # type: ignore[no-untyped-call]
            config_file=str(args.kubeconfig) if args.kubeconfig else None)
    except (config.ConfigException, OSError) as err:
        raise UsageError(f"cannot read the kubeconfig's contexts: {err}") from None
    return [str(c["name"]) for c in contexts or []]


def read_flags(args: argparse.Namespace, available: Callable[[], Sequence[str]] | None = None,
               ) -> tuple[Fleet | None, argparse.Namespace]:
    """The fleet of the flags (None for one cluster) and ``args`` with the one-cluster flags as the
    one-cluster code reads them (``context`` and ``cluster_value`` strings or None; for a fleet, its first
    context and no cluster). ``available`` lists the kubeconfig's contexts (default: ``kubeconfig_contexts``).
    Raises UsageError."""
    listed = available or (lambda: kubeconfig_contexts(args))
    if args.all_contexts and args.context:
        raise UsageError("give --context or --all-contexts, not both")
    names = list(listed()) if args.all_contexts else list(args.context)
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise UsageError(f"context given twice: {', '.join(twice)}")
    if args.context:
        known = set(listed())
        unknown = [n for n in names if n not in known]
        if unknown:
            raise UsageError(f"no context {', '.join(map(repr, unknown))} in the kubeconfig (it has: "
                             f"{', '.join(sorted(known)) or 'none'})")
    if len(names) <= 1:
        return None, _one(args, names[0] if names else None)
    if not args.cluster_label and args.prometheus_url:
        raise UsageError("several contexts need --cluster-label: the label telling their series apart in the store")
    fleet = Fleet(label=args.cluster_label, targets=_targets(names, args.cluster_value))
    return fleet, argparse.Namespace(**{**vars(args), "context": names[0], "cluster_label": None,
                                        "cluster_value": None})


def _one(args: argparse.Namespace, context: str | None) -> argparse.Namespace:
    """The one-cluster flags: ``--cluster-value VALUE`` as given (``CONTEXT=VALUE`` for that context too)."""
    if len(args.cluster_value) > 1:
        raise UsageError("--cluster-value is given once for one cluster (CONTEXT=VALUE is for several contexts)")
    value = args.cluster_value[0] if args.cluster_value else None
    if value is not None and context is not None and value.startswith(f"{context}="):
        value = value.removeprefix(f"{context}=")
    return argparse.Namespace(**{**vars(args), "context": context, "cluster_value": value})


def _targets(names: Sequence[str], items: Sequence[str]) -> tuple[Target, ...]:
    values: dict[str, str] = {}
    for item in items:
        context, sep, value = item.partition("=")
        if not sep or not value:
            raise UsageError(f"with several contexts --cluster-value is CONTEXT=VALUE, not {item[:64]!r}")
        if context not in names:
            raise UsageError(f"--cluster-value for {context!r}, which is not reported (contexts: {', '.join(names)})")
        if context in values:
            raise UsageError(f"--cluster-value given twice for context {context!r}")
        values[context] = value
    targets = tuple(Target(context=n, value=values.get(n, n)) for n in names)
    seen: dict[str, str] = {}
    for t in targets:
        if t.value in seen:
            raise UsageError(f"contexts {seen[t.value]!r} and {t.context!r} have the same cluster value "
                             f"{t.value!r}: their series could not be told apart")
        seen[t.value] = t.context
    return targets


def per_cluster(batches: Mapping[ContainerKey, UsageBatch], fleet: Fleet,
                ) -> dict[str, dict[ContainerKey, UsageBatch]]:
    """A many-cluster read's batches (qualified namespaces) per context, keyed by the plain namespace."""
    context_of = {t.value: t.context for t in fleet.targets}
    out: dict[str, dict[ContainerKey, UsageBatch]] = {t.context: {} for t in fleet.targets}
    for key, batch in batches.items():
        value, namespace = split(key.namespace)
        if value in context_of:
            out[context_of[value]][replace(key, namespace=namespace)] = batch
    return out


def one_cluster(read: Read, fleet: Fleet, context: str) -> Read:
    """A many-cluster ``read`` (qualified namespaces) as one cluster's: plain namespaces in and out."""
    value = next(t.value for t in fleet.targets if t.context == context)

    def history(namespaces: Sequence[str], start_s: float, end_s: float,
                pools: Mapping[tuple[str, str], str] | None = None) -> Mapping[ContainerKey, UsageBatch]:
        return per_cluster(read([qualify(value, ns) for ns in namespaces], start_s, end_s), fleet)[context]
    return history


def read_groups(inventories: Mapping[str, Inventory], fleet: Fleet, groups: int) -> list[tuple[str, ...]]:
    """The qualified namespaces each many-cluster read asks for: ``cli.namespace_groups`` of the plain
    namespaces over every cluster's workloads, each group then holding that namespace of every cluster that
    has it. So the number of reads depends on ``--read-groups`` and the namespaces, not on the clusters."""
    from recommender.report.cli import namespace_groups

    everything = [w for t in fleet.targets for w in inventories[t.context].workloads]
    present = {(t.value, w.namespace) for t in fleet.targets for w in inventories[t.context].workloads}
    out = []
    for names in namespace_groups(everything, groups):
        inside = set(names)
        out.append(tuple(sorted(qualify(value, ns) for value, ns in present if ns in inside)))
    return out


def _discover(args: argparse.Namespace, fleet: Fleet, apis: Mapping[str, ApiClient],
              progress: Progress) -> dict[str, Inventory]:
    """Each cluster's inventory, from its own API server (KubeError names the context)."""
    from podtailor.kube.errors import KubeError
    from recommender.report.discovery import Discovery, Filters

    filters = Filters(namespaces=tuple(args.namespace), selector=args.selector, kinds=tuple(args.kind),
                      pool_label=args.pool_label, split_pools=False)
    out = {}
    for t in fleet.targets:
        progress.stage(f"listing workloads of {t.context}", total=None)
        try:
            out[t.context] = Discovery(apis[t.context]).read(filters, progress=_listing(progress, t.context))
        except KubeError as err:
            raise type(err)(f"context {t.context}: {err}", status=err.status) from err
    return out


def _listing(progress: Progress, context: str) -> Callable[[str], None]:
    return lambda kind: progress.stage(f"listing {kind}s of {context}")


def _checkpoints(args: argparse.Namespace, fleet: Fleet, apis: Mapping[str, ApiClient],
                 inventories: Mapping[str, Inventory],
                 strategy: Strategy) -> tuple[dict[str, Inventory], dict[str, Mapping[WorkloadKey, Restored]]]:
    """Each cluster's usable checkpoints, from its own API server as ``cli._collect`` reads one cluster's
    (``checkpoints.restoring``): their warnings (no CRD, no permission: fresh state for that cluster) and list
    requests added to that cluster's inventory; KubeError names the context."""
    from podtailor.kube.errors import KubeError
    from recommender.report.checkpoints import restoring

    out, restored = dict(inventories), {}
    for t in fleet.targets:
        inv = inventories[t.context]
        try:
            found = restoring(apis[t.context], tuple(args.namespace), inv.vpas, strategy, enabled=args.checkpoints)
        except KubeError as err:
            raise type(err)(f"context {t.context}: {err}", status=err.status) from err
        out[t.context] = replace(inv, warnings=(*inv.warnings, *found.warnings),
                                 api_requests=inv.api_requests + found.requests)
        restored[t.context] = found.restored
    return out, restored


def _tagged(items: Sequence[WorkloadReport], context: str) -> list[WorkloadReport]:
    """The reports as ``assemble`` sums them per cluster: namespace and pool named ``context/...``."""
    return [replace(w, cluster=context, namespace=f"{context}/{w.namespace}",
                    pool=f"{context}/{w.pool}" if w.pool else "") for w in items]


def build(inventories: Mapping[str, Inventory], batches: Mapping[ContainerKey, UsageBatch], fleet: Fleet,
          recommending: Callable[[str, Sequence[Workload], Mapping[ContainerKey, UsageBatch]], Recommending],
          cfg: BuildConfig, progress: Callable[[int], None] | None = None) -> Report:
    """The report over every cluster from the many-cluster read's ``batches``: each cluster recommended with
    its own states and fleet (``recommending(context, workloads, batches)``), then assembled once over all."""
    from recommender.report.build import assemble, workload_reports

    batches_of = per_cluster(batches, fleet)
    items: dict[str, list[WorkloadReport]] = {}
    for t in fleet.targets:
        inv, found = inventories[t.context], batches_of[t.context]
        inputs = recommending(t.context, inv.workloads, found)
        items[t.context] = workload_reports(inv, inv.workloads, found, inputs, cfg, progress=progress)
    merged = Inventory(workloads=(), api_requests=sum(inv.api_requests for inv in inventories.values()),
                       warnings=tuple(f"{c}: {w}" for c, inv in inventories.items() for w in inv.warnings))
    report = assemble(merged, [w for c, ws in items.items() for w in _tagged(ws, c)], cfg)
    totals = tuple(replace(assemble(inventories[c], _tagged(ws, c), cfg).total, name=c) for c, ws in items.items())
    plain = sorted((replace(w, cluster=c) for c, ws in items.items() for w in ws),
                   key=lambda w: (w.cluster, w.namespace, w.kind, w.name))
    return replace(report, workloads=tuple(plain), clusters=totals)


def collect(args: argparse.Namespace, fleet: Fleet, first_api: ApiClient, prices: PriceSheet, strategy: Strategy,
            prom: PrometheusConfig | None, progress: Progress) -> tuple[int, Report | None]:
    """The ``report`` command's work over a fleet (``cli._collect`` for one cluster); the clients it makes for
    the contexts after the first are closed here, ``first_api`` by the caller. ``prom`` None: each cluster's
    store is found through its own API server (``stores``)."""
    from podtailor.kube.errors import KubeError
    from recommender.report import cli, patches

    if args.output == patches.FORMAT:  # one file per namespace/kind/name: two clusters' workloads would collide
        print("error: -o patches writes the patches of one cluster: run it once per --context", file=sys.stderr)
        return cli.EXIT_USAGE, None
    apis: dict[str, ApiClient] = {fleet.targets[0].context: first_api}
    try:
        for t in fleet.targets[1:]:
            apis[t.context] = kube_client(argparse.Namespace(**{**vars(args), "context": t.context}))
        found = stores(args, fleet, apis) if prom is None else prom
        inventories, restored = _checkpoints(args, fleet, apis, _discover(args, fleet, apis, progress), strategy)
    except UsageError as err:
        print(f"error: {err}", file=sys.stderr)
        return cli.EXIT_USAGE, None
    except KubeError as err:
        print(f"error: Kubernetes API: {err}", file=sys.stderr)
        return cli.EXIT_FAILED, None
    finally:
        with ExitStack() as clients:
            for api in list(apis.values())[1:]:
                clients.enter_context(closing(api))
    if not any(inv.workloads for inv in inventories.values()):
        print(f"error: empty result: no workload matched in any of the contexts {', '.join(inventories)}",
              file=sys.stderr)
        return cli.EXIT_EMPTY, None
    return _read_and_build(args, fleet, inventories, restored, prices, strategy, found, progress)


def stores(args: argparse.Namespace, fleet: Fleet, apis: Mapping[str, ApiClient]) -> dict[str, PrometheusConfig]:
    """Each cluster's own store, found by its Service through its own API server (``store_service``), with
    ``--cluster-label`` (when given) matched to the cluster's value; errors name the context."""
    from podtailor.kube.errors import KubeError
    from recommender.cli import prometheus_config
    from recommender.kube.store_service import store_config

    out = {}
    for t in fleet.targets:
        try:
            config = store_config(apis[t.context], tuple(args.namespace), lambda url: prometheus_config(args, url=url))
        except UsageError as err:
            raise UsageError(f"context {t.context}: {err}") from None
        except KubeError as err:
            raise type(err)(f"context {t.context}: finding the metrics store: {err}", status=err.status) from err
        out[t.context] = config if fleet.label is None else replace(config, cluster_label=fleet.label,
                                                                    cluster_value=t.value)
    return out


def _read_and_build(args: argparse.Namespace, fleet: Fleet, inventories: Mapping[str, Inventory],
                    restored: Mapping[str, Mapping[WorkloadKey, Restored]], prices: PriceSheet, strategy: Strategy,
                    prom: PrometheusConfig | Mapping[str, PrometheusConfig],
                    progress: Progress) -> tuple[int, Report | None]:
    """Every cluster's history in the read groups of their qualified namespaces, one group after another
    (each group one pass: the same handful of queries for all the clusters, or with a store per cluster,
    ``prom`` by context, a pass per cluster's store), then the report: each cluster's workloads with a restored
    checkpoint grown by that cluster's history after it (``starting_states``)."""
    from recommender.cli import history_plan, strategy_at_risk
    from recommender.recommend import fleet_of
    from recommender.report import cli
    from recommender.report.build import BuildConfig, Recommending
    from recommender.report.checkpoints import starting_states
    from recommender.report.fleet_stores import OwnStores, SharedStore
    from recommender.sources.errors import SourceError

    now = time.time()
    end = now - cli.READ_LAG_S
    start = end - args.history
    plan = history_plan(args, strategy)
    source = OwnStores.found(prom, fleet, plan) if isinstance(prom, Mapping) else SharedStore(prom, fleet, plan)
    settings = {**cli._settings(args), **({} if fleet.label is None else {"clusterLabel": fleet.label}),
                "clusters": [{"context": t.context, "clusterValue": t.value} for t in fleet.targets]}
    cfg = BuildConfig(now_s=now, start_s=start, end_s=end, strategy_name=args.strategy, prices=prices,
                      change_threshold=args.change_threshold, settings=settings)
    total = sum(len(inv.workloads) for inv in inventories.values())
    progress.stage(f"reading usage history of {len(fleet.targets)} clusters and recommending for "
                   f"{total} workloads", total=total)
    batches: dict[ContainerKey, UsageBatch] = {}

    def inputs(context: str, own: Sequence[Workload], found: Mapping[ContainerKey, UsageBatch]) -> Recommending:
        states = starting_states(own, found, restored[context], source.one(context),
                                 end_s=end, history_s=args.history, strategy=strategy)
        return Recommending(strategy=strategy, states=states, fleet=fleet_of(strategy, states.values(), now),
                            at_risk=strategy_at_risk(args))

    try:
        for names in read_groups(inventories, fleet, args.read_groups):
            batches.update(source.history(names, start, end))
        report = replace(build(inventories, batches, fleet, inputs, cfg, progress=progress.advance),
                         prometheus_requests=source.request_count)
    except SourceError as err:
        print(f"error: Prometheus at {source.where}: {err}", file=sys.stderr)
        return cli.EXIT_FAILED, None
    finally:
        source.close()
    if not any(c.usage is not None for w in report.workloads for c in w.containers):
        print(f"error: empty result: Prometheus at {source.where} has no usage history for any of the "
              f"{len(report.workloads)} workloads in the window (wrong --cluster-label or --cluster-value, or "
              "metrics not scraped?)", file=sys.stderr)
        return cli.EXIT_EMPTY, report
    return cli.EXIT_OK, report
