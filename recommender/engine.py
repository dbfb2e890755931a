"""One recommender pass: VPAs in, usage history folded into strategy state, VPA status out.

Owns the pass and its failure rules, over narrow ports (a ``UsageSource``, a ``VpaStore``). Per pass it lists
the VPAs this recommender serves, resolves each target workload, restores state from a checkpoint the first
time (or loads the whole history window from the source), reads only new samples afterwards, grouped so the
number of source requests does not grow with the number of VPAs, recommends per workload
(``recommend.recommend_workload``, the path ``report`` and ``backtest`` take too, with the fleet of every
served container; a sharded replica combines its part of the fleet with the other shards', ``FleetShare``)
and writes ``status`` when something changed. If the source fails, nothing is recomputed:
the last good recommendation stays and a ``Stale`` condition says why. A container without history gets no
target (never a zero or a floor), plain init containers included (recommended from the samples of their runs,
``docs/recommender.md``). Checkpoints are written every ``checkpoint_every_s``. A VPA with a usable
``podtailor.io/risk`` annotation is served by the strategy at that risk setting (``strategy_at_risk``, one
strategy per distinct value, in a small cache); the state is the same whatever the risk (it prices only the
recommendation), so a changed annotation takes effect at the next pass without reloading history. An unusable
value, or any value when the strategy has no risk setting, leaves the VPA on the default strategy, with one
warning Event and log line each time the reason changes. A DaemonSet is also recommended per node pool
(``recommender.pools``): its status carries the pool most of its pods run on, an annotation every pool's.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from podtailor.vpa import TargetRef
from recommender.kube import checkpoint
from recommender.kube.cluster import Workload
from recommender.kube.served import BUDGET_ANNOTATION, RISK_ANNOTATION, UnparsableVpa, VpaIdentity, VpaSpec
from recommender.kube.vpa_status import StatusBuilder, build_status, stale_status, unsupported_status
from recommender.metrics import RecommenderMetrics
from recommender.model.fleet import FleetSums
from recommender.model.podtailor_budget import RiskBudget
from recommender.model.registry import AtRisk
from recommender.model.types import ContainerKey, ContainerState, FleetScale, Recommendation, Strategy, UsageBatch
from recommender.pools import PoolStates, fold_pools, pod_pool_keys, pool_outcome, recommend_pools
from recommender.recommend import fleet_of, fleet_parts, fold_new, has_target, recommend_workload, strategy_for
from recommender.sources.errors import PartialSourceError

log = logging.getLogger("podtailor.recommender")
RISK_CACHE_SIZE = 16
"""Strategies kept for distinct risk annotations; beyond that the oldest is dropped (rebuilding one is cheap)."""


class UsageSource(Protocol):
    def history(self, namespaces: Sequence[str], start_s: float, end_s: float,
                pools: Mapping[tuple[str, str], str] | None = None) -> Mapping[ContainerKey, UsageBatch]:
        """Usage by workload container; a DaemonSet pod in ``pools`` ((namespace, pod) -> node pool) also under
        its pool's key (``ContainerKey.pool``)."""
        ...


class FleetShare(Protocol):
    """Where a replica that serves part of the cluster (``--shards``) gets the whole fleet from."""

    def fleet(self, parts: Mapping[str, FleetSums], now_s: float) -> FleetSums:
        """The whole fleet's sums, given this replica's parts by namespace (which it may publish)."""
        ...


class Events(Protocol):
    def record(self, vpa: VpaIdentity, reason: str, message: str, *, warning: bool = False) -> None: ...


class VpaStore(Protocol):
    def list_vpas(self, namespaces: Sequence[str] = ()) -> list[VpaSpec | UnparsableVpa]: ...

    def workload(self, namespace: str, ref: TargetRef) -> Workload | None: ...

    def update_vpa_status(self, vpa: VpaIdentity, build: StatusBuilder, attempts: int = 4) -> bool: ...

    def load_checkpoint(self, vpa: VpaIdentity) -> Mapping[str, object] | None:
        """The VPA's checkpoint object (``checkpoint.restore`` reads it), None when it has none."""
        ...

    def save_checkpoint(self, vpa: VpaIdentity, spec: Mapping[str, object]) -> None: ...

    def pod_pools(self, namespace: str, daemonset: str, pool_label: str) -> Mapping[str, str]:
        """A DaemonSet's pods, each with its node's pool (``podtailor.nodepool.node_pool``)."""
        ...

    def write_pool_annotation(self, vpa: VpaIdentity, value: str | None) -> bool:
        """Set (None: remove) the VPA's ``podtailor.poolrecs.ANNOTATION``; whether anything was written."""
        ...


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineConfig:
    recommender_name: str = "podtailor"
    """VPAs whose ``spec.recommenders`` names this are served."""
    serve_all: bool = False
    """Also serve VPAs that name no recommender (those the VPA default recommender would serve)."""
    history_s: float = 8 * 86400.0
    """History read on first sight of a VPA without a checkpoint (VPA's default: 8 days)."""
    checkpoint_every_s: float = 600.0
    """How often each VPA's state is checkpointed (VPA: every loop; we write less, the state changes slowly)."""
    namespaces: tuple[str, ...] = ()
    """Only these namespaces (empty: all)."""
    read_lag_s: float = 120.0
    pool_label: str = ""
    """The node label naming pools for DaemonSets' per-pool values ("": the first of the common keys, as the
    updater's canary batches read it, ``podtailor.nodepool``)."""
    """Read history only up to now minus this: the newest step may still lack its last scrapes, and a step
    once read is not read again (two 60 s scrape intervals by default)."""


@dataclass
class Served:
    """What the engine remembers about one VPA between passes."""

    spec: VpaSpec
    workload: Workload
    states: dict[str, ContainerState] = field(default_factory=dict)
    history_until_s: float | None = None
    last_checkpoint_s: float = 0.0
    risk_warning: str | None = None
    pod_pools: dict[str, str] = field(default_factory=dict)
    """A DaemonSet's pods -> node pool, read each pass (empty for other kinds)."""
    pool_states: PoolStates = field(default_factory=dict)
    """A DaemonSet's states per pool (``recommender.pools``); not checkpointed: rebuilt from new history."""
    """The last risk-annotation problem reported for this VPA (reported again only when it changes)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PassReport:
    served: int
    written: int
    stale: int
    unsupported: int
    source_requests: int = 0
    recommendations: Mapping[tuple[str, str, str], Recommendation] = field(default_factory=dict)
    """(namespace, vpa, container) -> recommendation computed this pass."""


class RecommenderEngine:
    def __init__(self, *, store: VpaStore, source: UsageSource, strategy: Strategy, config: EngineConfig,
                 metrics: RecommenderMetrics, events: Events | None = None,
                 strategy_at_risk: AtRisk | None = None,
                 fleet_share: FleetShare | None = None) -> None:
        self.store, self.source, self.strategy, self.config, self.metrics = store, source, strategy, config, metrics
        self.events = events
        self.served: dict[str, Served] = {}
        self.strategy_at_risk = strategy_at_risk
        """Builds the strategy at a VPA's ``podtailor.io/risk`` and ``podtailor.io/risk-budget`` (None: the
        strategy has no risk setting)."""
        self._by_risk: dict[tuple[float, RiskBudget | None], Strategy] = {}
        self.fleet_share = fleet_share
        """None: the fleet is every container this engine serves (one recommender for the cluster)."""

    # -- discovery ---------------------------------------------------------------------------------------
    def _serves(self, recommenders: tuple[str, ...]) -> bool:
        """Whether a VPA naming these recommenders is ours: it names us, or (``serve_all``) none or "default".
        Applied to every listed VPA, unparsable ones included, so that only ours are marked unsupported."""
        return self.config.recommender_name in recommenders or (self.config.serve_all
                                                                and recommenders in ((), ("default",)))

    def _discover(self, now_s: float) -> tuple[list[Served], int]:
        current: dict[str, Served] = {}
        unsupported = 0
        for spec in self.store.list_vpas(self.config.namespaces):
            if not self._serves(spec.recommenders):
                continue
            if isinstance(spec, UnparsableVpa):
                unsupported += self._mark_unsupported(spec, spec.error)
                continue
            entry = self._track(spec, now_s)
            if entry is None:
                unsupported += self._mark_unsupported(spec, f"{spec.target.kind} {spec.target.name} not found")
                continue
            current[spec.uid] = entry
        self.served = current
        return list(current.values()), unsupported

    def _track(self, spec: VpaSpec, now_s: float) -> Served | None:
        workload = self.store.workload(spec.namespace, spec.target)
        if workload is None:
            return None
        known = self.served.get(spec.uid)
        if known is not None:
            known.spec, known.workload = spec, workload
            return known
        entry = Served(spec=spec, workload=workload, last_checkpoint_s=now_s)
        self._restore(entry)
        return entry

    def _restore(self, entry: Served) -> None:
        obj = self.store.load_checkpoint(entry.spec)
        if obj is None:
            return
        try:
            restored = checkpoint.restore(obj, self.strategy)
        except checkpoint.UnusableCheckpoint as err:
            if err.stale:
                log.info("checkpoint ignored", extra={"vpa": entry.spec.name, "reason": str(err)})
            else:
                log.warning("checkpoint unreadable; reloading history", extra={"vpa": entry.spec.name,
                                                                               "error": str(err)})
            return
        entry.states, entry.history_until_s = dict(restored.states), restored.history_until_s
        self.metrics.checkpoints_restored.inc()

    def _mark_unsupported(self, spec: VpaIdentity, message: str) -> int:
        log.warning("VPA not served", extra={"namespace": spec.namespace, "vpa": spec.name, "reason": message})
        if self.store.update_vpa_status(spec, lambda status: unsupported_status(status, spec.generation, message)):
            self._event(spec, "ConfigUnsupported", message, warning=True)
        return 1

    # -- the pass ----------------------------------------------------------------------------------------
    def run_pass(self, now_s: float) -> PassReport:
        with self.metrics.pass_seconds.time():
            entries, unsupported = self._discover(now_s)
            self._read_pools(entries)
            end_s = now_s - self.config.read_lag_s
            groups: dict[float, list[Served]] = {}
            for e in entries:
                start = checkpoint.read_start(e.history_until_s, end_s, self.config.history_s)
                groups.setdefault(start, []).append(e)
            reads = []  # every group's new samples are folded in first: the fleet's sizes need them all
            for start, members in sorted(groups.items()):
                batches, failed, message = self._read(start, end_s, members)
                for m in members:
                    if m.spec.namespace not in failed:
                        self._fold(m, batches)
                reads.append((members, failed, message))  # the batches themselves are not kept
            fleet = self._fleet(entries, now_s)
            written = stale = 0
            recs: dict[tuple[str, str, str], Recommendation] = {}
            for members, failed, message in reads:
                for m in members:
                    if m.spec.namespace in failed:
                        stale += self._stale(m, message)
                    else:
                        written += self._serve(m, end_s, now_s, recs, fleet)
        self.metrics.vpas_served.set(len(entries))
        return PassReport(served=len(entries), written=written, stale=stale, unsupported=unsupported,
                          recommendations=recs)

    def _fleet(self, entries: list[Served], now_s: float) -> FleetScale | None:
        """The fleet of every served container (``recommend.fleet_of``); with a ``fleet_share`` (sharded), the
        fleet it combines from this replica's parts by namespace and the other shards' (``FleetShare``)."""
        if self.fleet_share is None:
            return fleet_of(self.strategy, [st for e in entries for st in e.states.values()], now_s)
        by_namespace: dict[str, list[ContainerState]] = {}
        for e in entries:
            by_namespace.setdefault(e.spec.namespace, []).extend(e.states.values())
        parts = fleet_parts(self.strategy, by_namespace, now_s)
        return None if parts is None else self.fleet_share.fleet(parts, now_s).scale()

    def _read_pools(self, entries: list[Served]) -> None:
        """Each served DaemonSet's pods and their pools; on a failure the last ones read are kept."""
        for e in entries:
            if e.workload.kind != "DaemonSet":
                continue
            try:
                e.pod_pools = dict(self.store.pod_pools(e.spec.namespace, e.workload.name, self.config.pool_label))
            except Exception as err:  # the store's error tree; the per-pool values wait for the next pass
                log.warning("DaemonSet pods unread; keeping the last pools", extra={
                    "namespace": e.spec.namespace, "workload": e.workload.name, "error": str(err)[:300]})

    def _read(self, start_s: float, end_s: float,
              members: list[Served]) -> tuple[Mapping[ContainerKey, UsageBatch], frozenset[str], str]:
        """The group's new samples, the namespaces that could not be read, and why."""
        namespaces = sorted({m.spec.namespace for m in members})
        failed: frozenset[str] = frozenset(namespaces)
        message = ""
        pools = {k: p for m in members for k, p in pod_pool_keys(m.spec.namespace, m.pod_pools).items()}
        try:
            batches, failed = self.source.history(namespaces, start_s, end_s, pools), frozenset()
        except PartialSourceError as err:  # some namespaces read in full: serve those, the rest stays stale
            batches, failed, message = err.batches, err.failed_namespaces, f"usage history unavailable: {err}"
        except Exception as err:  # the source's own error tree; any failure means "no new data"
            batches, message = {}, f"usage history unavailable: {err}"
        if failed:
            self.metrics.source_failures.inc()
            log.warning("usage source failed; keeping the last recommendations",
                        extra={"namespaces": len(failed), "error": message})
        return batches, failed, message

    def _stale(self, m: Served, message: str) -> int:
        if self.store.update_vpa_status(m.spec, lambda status: stale_status(status, m.spec.generation, message)):
            self._event(m.spec, "UsageHistoryUnavailable", f"{message}; the last recommendation is kept",
                        warning=True)
        return 1

    def _fold(self, entry: Served, batches: Mapping[ContainerKey, UsageBatch]) -> None:
        """The new samples into each container's state (``recommend.fold_new``)."""
        spec, workload = entry.spec, entry.workload
        keys = {c.name: ContainerKey(namespace=spec.namespace, workload_kind=workload.kind,
                                     workload_name=workload.name, container=c.name) for c in workload.containers}
        fold_new(self.strategy, entry.states, keys, batches)
        if keys and (pools := {p for p in entry.pod_pools.values() if p}):
            fold_pools(self.strategy, entry.pool_states, next(iter(keys.values())), list(keys), pools, batches)

    def _serve(self, entry: Served, end_s: float, now_s: float, recs: dict[tuple[str, str, str], Recommendation],
               fleet: FleetScale | None) -> int:
        spec, workload = entry.spec, entry.workload
        done = recommend_workload(self._strategy_for(entry), workload.containers, entry.states, vpa=spec,
                                  fleet=fleet, now_s=now_s)
        entry.states = dict(done.states)
        out = {name: rec for name, rec in done.recommendations.items() if has_target(rec)}
        if workload.kind == "DaemonSet":
            out = self._serve_pools(entry, out, fleet, now_s)
        recs.update(((spec.namespace, spec.name, name), rec) for name, rec in out.items())
        entry.history_until_s = end_s
        wrote = self.store.update_vpa_status(spec, lambda status: build_status(
            status, spec.generation, out, [c.name for c in workload.containers],
            init=frozenset(c.name for c in workload.containers if c.init)))
        if wrote:
            self.metrics.status_writes.inc()
            self._event(spec, "RecommendationUpdated", "; ".join(
                f"{name}: {_short(rec)}" for name, rec in sorted(out.items())) or "no usage history yet")
        self._maybe_checkpoint(entry, now_s)
        return int(wrote)

    def _serve_pools(self, entry: Served, overall: dict[str, Recommendation], fleet: FleetScale | None,
                     now_s: float) -> dict[str, Recommendation]:
        """A DaemonSet's per-pool values into its annotation; returns what its status carries
        (``recommender.pools.pool_outcome``)."""
        running = set(entry.pod_pools.values())  # a pool the DaemonSet left is dropped with its states
        states = {pool: s for pool, s in entry.pool_states.items() if pool in running}
        per_pool, entry.pool_states = recommend_pools(self._strategy_for(entry), entry.workload.containers, states,
                                                      vpa=entry.spec, fleet=fleet, now_s=now_s)
        outcome = pool_outcome(overall, per_pool, entry.pod_pools)
        if outcome.problem:
            log.warning("per-pool values not written; the status value serves every pool", extra={
                "namespace": entry.spec.namespace, "vpa": entry.spec.name, "reason": outcome.problem})
        self.store.write_pool_annotation(entry.spec, outcome.annotation)
        return dict(outcome.status)

    def _strategy_for(self, entry: Served) -> Strategy:
        """The strategy at this VPA's risk annotations, or the default one (saying why, once per reason)."""
        spec = entry.spec
        problem = self._annotation_problem(spec)
        if problem != entry.risk_warning:
            entry.risk_warning = problem
            if problem is not None:
                log.warning("risk annotation not used", extra={"namespace": spec.namespace, "vpa": spec.name,
                                                               "reason": problem})
                self._event(spec, "RiskAnnotationIgnored", problem, warning=True)
        return strategy_for(spec, self.strategy, None if self.strategy_at_risk is None else self._at_risk)

    def _annotation_problem(self, spec: VpaSpec) -> str | None:
        """Why this VPA's ``podtailor.io/risk`` or ``podtailor.io/risk-budget`` is not used, and which of the
        recommender's own settings serve it instead (None: nothing to say)."""
        pairs = [(why, flag) for why, flag in ((spec.risk_problem, "--risk"), (spec.budget_problem, "--risk-budget"))
                 if why]
        names = [n for n, v in ((RISK_ANNOTATION, spec.risk), (BUDGET_ANNOTATION, spec.budget)) if v is not None]
        if self.strategy_at_risk is None and names:
            pairs = [(f"annotation {' and '.join(names)} is ignored: the {self.strategy.name} strategy has no risk "
                      "setting", "--risk")]
        if not pairs:
            return None
        return (f"{'; '.join(why for why, _ in pairs)}; served at the recommender's own risk setting "
                f"({', '.join(flag for _, flag in pairs)})")

    def _at_risk(self, risk: float, budget: RiskBudget | None = None) -> Strategy:
        """``strategy_at_risk`` through a small cache (the oldest strategy is dropped beyond RISK_CACHE_SIZE)."""
        key = (risk, budget)
        if key not in self._by_risk:
            assert self.strategy_at_risk is not None  # _strategy_for passes this only when there is one
            if len(self._by_risk) >= RISK_CACHE_SIZE:
                del self._by_risk[next(iter(self._by_risk))]
            self._by_risk[key] = self.strategy_at_risk(risk, budget)
        return self._by_risk[key]

    def _event(self, spec: VpaIdentity, reason: str, message: str, *, warning: bool = False) -> None:
        if self.events is not None:
            self.events.record(spec, reason, message, warning=warning)

    def _maybe_checkpoint(self, entry: Served, now_s: float, force: bool = False) -> None:
        if not force and now_s - entry.last_checkpoint_s < self.config.checkpoint_every_s:
            return
        self.store.save_checkpoint(entry.spec, checkpoint.checkpoint_spec(self.strategy, entry.states,
                                                                          entry.history_until_s or now_s))
        entry.last_checkpoint_s = now_s
        self.metrics.checkpoints_written.inc()

    def checkpoint_all(self, now_s: float) -> None:
        """Write every VPA's checkpoint now (on shutdown)."""
        for entry in self.served.values():
            self._maybe_checkpoint(entry, now_s, force=True)


def _short(rec: Recommendation) -> str:
    """The target as the Event shows it to a person: "cpu 574m memory 1.2Gi" (the status has the exact one)."""
    from podtailor.resources import human_quantities

    target = human_quantities(rec.target)
    return " ".join(f"{k} {v}" for k, v in sorted(target.items()))
