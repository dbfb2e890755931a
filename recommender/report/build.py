"""The report's pure core: inventory + usage batches + strategy + price sheet in, one ``Report`` out.

Owns the report's side of the recommendation, which is the recommender's own: ``fold`` gives each container
with history (regular, sidecar or plain init) a new state holding the window (what the engine builds on its
first pass, before any checkpoint), the fleet is that of all of them (``recommend.fleet_of``, once every read
group is folded, so the report does not depend on ``--read-groups``), and each workload is recommended by
``recommend.recommend_workload`` with its VPA's container policy (minAllowed/maxAllowed, controlled
resources and values, mode) and risk annotation, or the default policy where no VPA targets it (the
workload's ``vpa`` is then None and a warning counts such workloads). A workload whose VPA has a recommender
checkpoint is recommended from the restored state instead (``report.checkpoints``, the engine's restore; the
state then also holds what the recommender has seen applied), unless ``--no-checkpoints``. The report is a
read-only sink: it keeps the recommendations and writes nothing. Plain init containers are recommended as the
recommender does them. It also owns what the updater would write (``disruption.planned``), the
usage distribution behind each chart, the monthly cost, the risk flags, the disruption column and the
summaries by namespace, node pool and in total; the usage, its charts and the pod-hours of Jobs and CronJobs
are those of the report's window whatever the state was restored from.

Cost rules: a container costs its requests (an unset request costs nothing, as in OpenCost's request-based
allocation) times the workload's pod-hours per month at its node pool's prices. Pod-hours per month are
replicas x hours per month for long-running kinds; for Jobs and CronJobs, which run now and then, they are
the pod-hours seen in the history window scaled to a month. Plain init containers run to completion and
cost nothing. Costs are integers (micro-units) per container; every other level is a sum, so container
costs add up to workload, namespace, pool and total costs exactly.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from fractions import Fraction

import numpy as np

from podtailor.resize import changes as ch
from podtailor.resize.types import DEFAULT_CHANGE_THRESHOLD, ContainerTarget, QoS
from podtailor.resources import CurrentResources, Resources
from podtailor.vpa import ControlledValues
from recommender.kube.served import VpaSpec
from recommender.model.quantiles import linear_quantiles
from recommender.model.registry import AtRisk
from recommender.model.types import (
    ContainerKey,
    ContainerState,
    FleetScale,
    FloatArray,
    Recommendation,
    Samples,
    Strategy,
    UsageBatch,
)
from recommender.recommend import fleet_of, recommend_workload, strategy_for
from recommender.report import disruption as dis
from recommender.report.budget import budget_check, budget_of
from recommender.report.pricing import PriceSheet, monthly_cost
from recommender.report.types import (
    ContainerReport,
    ContainerSpec,
    Cost,
    Distribution,
    GroupSummary,
    Inventory,
    Report,
    Risk,
    RiskFlag,
    Role,
    UsageSummary,
    Workload,
    WorkloadReport,
)

HISTOGRAM_BINS = 24
THROTTLING_FRACTION = 0.05
"""Flag CPU throttling when a container was throttled in at least this mean fraction of CFS periods."""
LOW_CONFIDENCE = 0.5
"""Flag low confidence below this (the strategies' confidence: 1 = enough history by their own standard)."""
OCCASIONAL_KINDS = frozenset({"Job", "CronJob"})
_QUANTILES = np.array([0.50, 0.90, 0.95, 0.99])
"""The percentiles every usage distribution shows."""


@dataclass(frozen=True, slots=True, kw_only=True)
class BuildConfig:
    now_s: float
    start_s: float
    end_s: float
    strategy_name: str
    prices: PriceSheet = field(default_factory=PriceSheet)
    change_threshold: float = DEFAULT_CHANGE_THRESHOLD
    """The updater's default: smaller changes are skipped (disruption "none")."""
    settings: Mapping[str, object] = field(default_factory=dict)


def distribution(values: FloatArray, references: Iterable[int | None]) -> Distribution | None:
    """Percentiles of ``values`` and a histogram over [0, top], top = 5% above the largest of the values and
    the reference amounts (request, limit, recommendation), so the chart can draw them all."""
    if values.size == 0:
        return None
    # One sort answers both: the percentiles as np.percentile's default (linear) method computes them (to the
    # last bits of a float, ``linear_quantiles``), and the counts as np.histogram over [0, top] does (bins
    # closed on the left, the last one on both sides, edges from linspace); tests/unit/test_report_build.py
    # compares both with numpy's.
    ordered = np.sort(values)
    n = ordered.size
    p50, p90, p95, p99 = (float(x) for x in linear_quantiles(ordered, _QUANTILES))
    high = float(ordered[-1])
    top = max([high, *(float(r) for r in references if r is not None)]) * 1.05 or 1.0
    edges = np.linspace(0.0, top, HISTOGRAM_BINS + 1)
    cuts = np.searchsorted(ordered, edges, side="left")
    cuts[-1] = np.searchsorted(ordered, top, side="right")
    counts = np.diff(cuts)
    return Distribution(samples=int(n), p50=p50, p90=p90, p95=p95, p99=p99, max=high, top=top,
                        counts=tuple(int(c) for c in counts))


def _refs(spec: ContainerSpec, rec: Recommendation | None, name: str) -> list[int | None]:
    out = [ch.get(spec.current.requests, name), ch.get(spec.current.limits, name)]
    if rec is not None:
        out += [ch.get(rec.target, name), ch.get(rec.limits, name)]
    return out


def _throttled_fraction(throttle: Samples, cpu_samples: int, spec: ContainerSpec) -> float | None:
    """Mean throttled fraction over the steps the container ran. The source leaves out steps without
    throttling (``sparse_signals``), so the mean is taken over the CPU samples, not the throttling samples;
    a container with a CPU limit and no throttling sample was never throttled (0), one without a limit and
    without samples has nothing to say (None)."""
    if len(throttle):
        return min(1.0, float(throttle.values.sum()) / max(cpu_samples, len(throttle)))
    if spec.current.limits.cpu_millicores is not None and cpu_samples:
        return 0.0
    return None


def _repeat(samples: Samples, times: int) -> Samples:
    return Samples(timestamps_s=np.repeat(samples.timestamps_s, times), values=np.repeat(samples.values, times))


def _join(a: Samples, b: Samples) -> Samples:
    return Samples(timestamps_s=np.concatenate([a.timestamps_s, b.timestamps_s]),
                   values=np.concatenate([a.values, b.values]))


def at_step(batch: UsageBatch) -> UsageBatch:
    """The batch with its summary (``HistoryPlan``) folded in at the batch's step: each summary sample counted
    as the steps it stands for, so distributions, throttled shares and observed hours cover the whole window."""
    summary = batch.summary
    if summary is None:
        return batch
    cpu_times = max(1, round(summary.cpu_interval_s / batch.cpu_interval_s))
    memory_times = max(1, round(summary.memory_interval_s / batch.memory_interval_s))
    throttle = batch.cpu_throttled_fraction
    if len(summary.cpu_throttled_fraction) or len(throttle):
        throttle = _join(_repeat(summary.cpu_throttled_fraction, cpu_times), throttle)
    return replace(batch, summary=None, cpu_cores=_join(_repeat(summary.cpu_cores, cpu_times), batch.cpu_cores),
                   memory_peak_bytes=_join(_repeat(summary.memory_peak_bytes, memory_times), batch.memory_peak_bytes),
                   cpu_throttled_fraction=throttle, oom_kills=(*summary.oom_kills, *batch.oom_kills),
                   memory_pods=(), memory_pod_index=None)  # the repeated summary samples have no pod of their own


def usage_summary(batch: UsageBatch | None, spec: ContainerSpec, rec: Recommendation | None) -> UsageSummary | None:
    if batch is None:
        return None
    batch = at_step(batch)
    throttle: Samples = batch.cpu_throttled_fraction
    return UsageSummary(
        cpu_millicores=distribution(batch.cpu_cores.values * 1000.0, _refs(spec, rec, "cpu")),
        memory_bytes=distribution(batch.memory_peak_bytes.values, _refs(spec, rec, "memory")),
        oom_kills=len(batch.oom_kills),
        throttled_fraction=_throttled_fraction(throttle, len(batch.cpu_cores), spec),
        observed_pod_hours=len(batch.cpu_cores) * batch.cpu_interval_s / 3600.0)


def pod_hours_per_month(workload: Workload, batches: Iterable[UsageBatch | None], cfg: BuildConfig) -> Fraction:
    hours = cfg.prices.hours_per_month
    if workload.kind not in OCCASIONAL_KINDS:
        return Fraction(workload.replicas * hours)
    window_s = Fraction(cfg.end_s - cfg.start_s)
    seen = max((Fraction(len(b.cpu_cores)) * Fraction(b.cpu_interval_s) for b in map(at_step, filter(None, batches))),
               default=Fraction(0))
    return seen * hours / window_s if window_s > 0 else Fraction(0)


def _cost(current: int, recommended: int) -> Cost:
    return Cost(current=current, recommended=recommended, savings=max(0, current - recommended),
                increases=max(0, recommended - current))


def _target(rec: Recommendation | None, name: str, vpa: VpaSpec | None) -> ContainerTarget | None:
    """The updater's target for the container; with its VPA's controlledValues, which the updater follows
    (RequestsOnly: limits kept, requests capped at them)."""
    if rec is None or (rec.target.cpu_millicores is None and rec.target.memory_bytes is None):
        return None
    values = ControlledValues.REQUESTS_AND_LIMITS if vpa is None else vpa.vpa.policy_for(name).controlled_values
    return dis.target_of(name, rec.target, rec.lower_bound, rec.upper_bound, controlled_values=values)


@dataclass(frozen=True, slots=True, kw_only=True)
class _Parts:
    specs: tuple[ContainerSpec, ...]
    recs: tuple[Recommendation | None, ...]
    batches: tuple[UsageBatch | None, ...]
    budget: tuple[float, float] = (0.0, 0.0)
    """The budget of the strategy the workload is recommended by (``report.budget.budget_of``)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Recommending:
    """What the report recommends from, as the engine does: the strategy (at a VPA's risk annotation where
    ``at_risk`` can build it), every served container's state and the fleet of all of them."""

    strategy: Strategy
    states: Mapping[ContainerKey, ContainerState]
    fleet: FleetScale | None
    at_risk: AtRisk | None = None


def _key(workload: Workload, container: str) -> ContainerKey:
    return ContainerKey(namespace=workload.namespace, workload_kind=workload.kind, workload_name=workload.name,
                        container=container, pool=workload.pool)


def container_keys(workload: Workload) -> dict[str, ContainerKey]:
    """The key of each container the recommender writes a recommendation for (every one), by name."""
    return {c.name: _key(workload, c.name) for c in workload.containers}


def fold(workloads: Iterable[Workload], batches: Mapping[ContainerKey, UsageBatch],
         strategy: Strategy) -> dict[ContainerKey, ContainerState]:
    """A new state per container with history, the batch folded in (the engine's first pass)."""
    out: dict[ContainerKey, ContainerState] = {}
    for w in workloads:
        for c in w.containers:
            batch = batches.get(_key(w, c.name))
            if batch is not None:
                state = out[_key(w, c.name)] = strategy.new_state()
                state.add(batch)
    return out


def recommending(workloads: Iterable[Workload], batches: Mapping[ContainerKey, UsageBatch], strategy: Strategy,
                 now_s: float, at_risk: AtRisk | None = None) -> Recommending:
    """The states of ``workloads`` and their fleet (``recommend.fleet_of`` over all of them)."""
    states = fold(workloads, batches, strategy)
    return Recommending(strategy=strategy, states=states, fleet=fleet_of(strategy, states.values(), now_s),
                        at_risk=at_risk)


def _recommend(workload: Workload, vpa: VpaSpec | None, batches: Mapping[ContainerKey, UsageBatch],
               inputs: Recommending, now_s: float) -> _Parts:
    served = workload.containers
    states = {c.name: inputs.states[_key(workload, c.name)] for c in served if _key(workload, c.name) in inputs.states}
    strategy = strategy_for(vpa, inputs.strategy, inputs.at_risk)
    done = recommend_workload(strategy, served, states, vpa=vpa, fleet=inputs.fleet, now_s=now_s)
    return _Parts(specs=workload.containers,
                  recs=tuple(done.recommendations.get(c.name) for c in workload.containers),
                  batches=tuple(batches.get(_key(workload, c.name)) for c in workload.containers),
                  budget=budget_of(strategy))


def _pool(workload: Workload, inv: Inventory) -> str:
    pools = Counter(inv.nodes[p.node].pool for p in workload.pods if p.node in inv.nodes)
    if not pools:
        return ""
    best = max(pools.values())
    return min(name for name, n in pools.items() if n == best)


def _qos(pairs: Iterable[CurrentResources]) -> QoS:
    return ch.qos_class((c.requests, c.limits) for c in pairs)


def _risks(workload: Workload, containers: tuple[ContainerReport, ...], qos: QoS,
           hpa: frozenset[str]) -> tuple[RiskFlag, ...]:
    out = []
    ooms = {c.name: c.usage.oom_kills for c in containers if c.usage and c.usage.oom_kills}
    if ooms:
        out.append(RiskFlag(risk=Risk.OOM_KILLS, message="OOM kills in the window: " + ", ".join(
            f"{name} x{n}" for name, n in sorted(ooms.items()))))
    throttled = {c.name: c.usage.throttled_fraction for c in containers if c.usage
                 and c.usage.throttled_fraction is not None and c.usage.throttled_fraction >= THROTTLING_FRACTION}
    if throttled:
        out.append(RiskFlag(risk=Risk.CPU_THROTTLING, message="CPU throttled: " + ", ".join(
            f"{name} {f:.0%} of periods" for name, f in sorted(throttled.items()))))
    unlimited = [c.name for c in containers if c.role != Role.INIT and c.current.limits == Resources()]
    if unlimited and qos != QoS.BEST_EFFORT:
        out.append(RiskFlag(risk=Risk.NO_LIMITS, message="no CPU or memory limit: " + ", ".join(unlimited)))
    if qos == QoS.BEST_EFFORT:
        out.append(RiskFlag(risk=Risk.BEST_EFFORT, message="BestEffort: no requests or limits; first to be evicted"))
    low = [f"{c.name} {c.recommendation.confidence:.2f}" if c.recommendation else f"{c.name} no history"
           for c in containers if c.recommendation is None or c.recommendation.confidence < LOW_CONFIDENCE]
    if low:
        out.append(RiskFlag(risk=Risk.LOW_CONFIDENCE, message="low confidence: " + ", ".join(low)))
    if hpa:
        names = ", ".join(sorted(hpa))
        out.append(RiskFlag(risk=Risk.HPA_SAME_RESOURCE,
                            message=f"an HPA scales on {names} utilization: that request is kept as it is"))
    return tuple(out)


def workload_report(workload: Workload, inv: Inventory, batches: Mapping[ContainerKey, UsageBatch],
                    inputs: Recommending, cfg: BuildConfig) -> WorkloadReport:
    vpa = inv.vpas.get(workload.key)
    parts = _recommend(workload, vpa, batches, inputs, cfg.now_s)
    hpa = inv.hpa_resources.get(workload.key, frozenset())
    cons = ch.Constraints(limit_range=inv.limit_ranges.get(workload.namespace), hpa_resources=hpa)
    pool = _pool(workload, inv)
    prices = cfg.prices.for_pool(pool)
    hours = pod_hours_per_month(workload, parts.batches, cfg)
    containers, targets = [], {}
    for spec, rec, batch in zip(parts.specs, parts.recs, parts.batches, strict=True):
        target = _target(rec, spec.name, vpa)
        if target is not None and spec.role != Role.INIT:
            targets[spec.name] = target
        plan = dis.planned(spec, target, cons)
        billed = Fraction(0) if spec.role == Role.INIT else hours
        stepped = None if batch is None else at_step(batch)  # once: the usage and the budget read the same
        containers.append(ContainerReport(
            name=spec.name, role=spec.role, current=spec.current, recommendation=rec, planned=plan,
            usage=usage_summary(stepped, spec, rec), budget=budget_check(parts.budget, stepped, spec.current),
            cost=_cost(monthly_cost(spec.current.requests, billed, prices), monthly_cost(plan.requests, billed,
                                                                                         prices))))
    outcome = dis.plan_workload(workload.pods, targets, cons, inv.nodes, cfg.change_threshold)
    qos_now = _qos(c.current for c in containers)
    reports = tuple(containers)
    return WorkloadReport(
        namespace=workload.namespace, kind=workload.kind, name=workload.name, pool=pool, replicas=workload.replicas,
        running_pods=len(workload.pods), pod_hours_per_month=float(hours), containers=reports,
        qos_current=qos_now.value, qos_planned=_qos(c.planned for c in containers).value,
        disruption=outcome.disruption, disruption_reason=outcome.reason, disruption_message=outcome.message,
        risks=_risks(workload, reports, qos_now, hpa), cost=sum((c.cost for c in reports), Cost()),
        vpa=None if vpa is None else vpa.name, pool_row=bool(workload.pool),
        pod_level=dis.pod_level_plan(parts.specs, [c.planned for c in reports], workload.pod_level))


def _group(items: Iterable[WorkloadReport], key: Callable[[WorkloadReport], str]) -> tuple[GroupSummary, ...]:
    groups: dict[str, list[WorkloadReport]] = defaultdict(list)
    for w in items:
        groups[key(w)].append(w)
    return tuple(_summary(name, members) for name, members in sorted(groups.items()))


def _summary(name: str, members: Iterable[WorkloadReport]) -> GroupSummary:
    items = list(members)
    return GroupSummary(name=name, workloads=len(items), containers=sum(len(w.containers) for w in items),
                        cost=sum((w.cost for w in items), Cost()))


def workload_reports(inv: Inventory, workloads: Iterable[Workload], batches: Mapping[ContainerKey, UsageBatch],
                     inputs: Recommending, cfg: BuildConfig, *,
                     progress: Callable[[int], None] | None = None) -> list[WorkloadReport]:
    """The reports of ``workloads`` (of ``inv``), in key order; ``progress(n)`` is called after each one.
    ``inputs`` holds the states of every workload of the report and their fleet, whichever part of them
    ``workloads`` is, so a report does not depend on how its reads were grouped (``--read-groups``)."""
    out = []
    for w in sorted(workloads, key=lambda w: w.key):
        out.append(workload_report(w, inv, batches, inputs, cfg))
        if progress is not None:
            progress(1)
    return out


def assemble(inv: Inventory, items: Iterable[WorkloadReport], cfg: BuildConfig) -> Report:
    """The ``Report`` over ``items`` (one per workload, in any order): sorted by key, summed per namespace,
    node pool and in total."""
    ordered = tuple(sorted(items, key=lambda w: (w.namespace, w.kind, w.name)))
    without = sum(1 for w in ordered if w.vpa is None)
    warnings = inv.warnings + ((f"{without} of {len(ordered)} workloads have no VPA: recommended with the default "
                                "container policy (no minAllowed/maxAllowed, cpu and memory, RequestsAndLimits)",)
                               if without else ())
    return Report(generated_s=cfg.now_s, start_s=cfg.start_s, end_s=cfg.end_s, strategy=cfg.strategy_name,
                  settings=dict(cfg.settings), prices=cfg.prices.describe(), workloads=ordered,
                  namespaces=_group(ordered, lambda w: w.namespace), pools=_group(ordered, lambda w: w.pool),
                  total=_summary("total", ordered), warnings=warnings, api_requests=inv.api_requests)


def build_report(inv: Inventory, batches: Mapping[ContainerKey, UsageBatch], strategy: Strategy, cfg: BuildConfig,
                 *, progress: Callable[[int], None] | None = None) -> Report:
    """The report over every workload of the inventory; ``progress(n)`` is called after each workload."""
    inputs = recommending(inv.workloads, batches, strategy, cfg.now_s)
    return assemble(inv, workload_reports(inv, inv.workloads, batches, inputs, cfg, progress=progress), cfg)
