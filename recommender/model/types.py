"""Value types of the recommender's pure core: usage in, recommendations out.

Owns the contract between the Prometheus source (which turns query results into ``UsageBatch`` values
keyed by ``ContainerKey``), the strategies (which fold batches into a ``ContainerState`` and produce a
``Recommendation``) and the VPA sink (which writes recommendations as quantities). Units are in the names:
CPU in cores (float) for usage and in millicores (int) for resources, memory in bytes (int). Nothing here
imports a Kubernetes or HTTP client, a logger or the clock.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
from numpy.typing import NDArray

from podtailor.resources import CurrentResources, Resources
from podtailor.vpa import ControlledValues

if TYPE_CHECKING:  # fleet.py builds FleetScale values from its parts
    from recommender.model.fleet import FleetSums

FloatArray = NDArray[np.float64]
PodIndex = NDArray[np.int32]


@dataclass(frozen=True, slots=True, kw_only=True, order=True)
class ContainerKey:
    """History is keyed by workload and container, never by pod, so rollouts keep their history."""

    namespace: str
    workload_kind: str
    """Top-level owner kind: Deployment, StatefulSet, DaemonSet, ReplicaSet, Job, CronJob, Rollout or Pod."""
    workload_name: str
    container: str
    pool: str = ""
    """A DaemonSet's usage on one node pool (``podtailor.poolrecs``): "" for the workload's whole usage, which
    every kind has; a DaemonSet's pods on a named pool also count under their pool's key."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Samples:
    """Time-ordered samples of one quantity for one container key (all pods of the workload pooled)."""

    timestamps_s: FloatArray
    values: FloatArray

    def __post_init__(self) -> None:
        if self.timestamps_s.shape != self.values.shape or self.timestamps_s.ndim != 1:
            raise ValueError("timestamps and values must be 1-D arrays of the same length")

    @staticmethod
    def empty() -> Samples:
        return Samples(timestamps_s=np.empty(0), values=np.empty(0))

    def __len__(self) -> int:
        return int(self.values.shape[0])


@dataclass(frozen=True, slots=True, kw_only=True)
class OomKill:
    """A container OOM-kill seen in history, with the container's memory resources at that time."""

    timestamp_s: float
    memory_limit_bytes: int | None = None
    memory_request_bytes: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class UsageBatch:
    """New usage of one container key since the previous batch. NaN and negative values never appear here:
    the source drops them (and says so) before building a batch."""

    cpu_cores: Samples
    """Average CPU used over each sample interval (a rate of ``container_cpu_usage_seconds_total``)."""
    cpu_interval_s: float
    """Length of time each CPU sample averages over (the query step)."""
    memory_peak_bytes: Samples
    """Peak working set within each memory interval (``max_over_time``), one value per interval."""
    memory_interval_s: float
    oom_kills: tuple[OomKill, ...] = ()
    cpu_throttled_fraction: Samples = field(default_factory=Samples.empty)
    """Fraction of CFS periods throttled per CPU interval (0..1), when the container has a CPU limit."""
    memory_pods: tuple[str, ...] = ()
    """With ``HistoryPlan.per_pod_memory``: the pods whose series were pooled into ``memory_peak_bytes``."""
    memory_pod_index: PodIndex | None = None
    """With ``HistoryPlan.per_pod_memory``: for each memory sample, its pod's index in ``memory_pods`` (None:
    the pods are not told apart)."""
    summary: UsageBatch | None = None
    """Older history of the same container at a coarser resolution (a ``HistoryPlan``'s summaries), all of it
    before this batch's samples: each CPU sample the mean over its interval, each memory sample the peak. A
    strategy folds it in first, each CPU sample weighing the steps it stands for (its interval over this
    batch's), then this batch. It holds no summary of its own."""


@dataclass(frozen=True, slots=True, kw_only=True)
class HistoryPlan:
    """What a strategy weighs, by age, so that the source reads only that (issue #22).

    Samples younger than ``full_resolution_s`` (counted back from the end of a pass) are read at the pass's
    step; older ones as one summary per ``summary_step_s``: the mean CPU rate and the peak working set over it
    (``UsageBatch.summary``). A strategy that weighs a sample by 2^(-age / half-life) declares a few
    half-lives: beyond six, all older samples together weigh under 1/64 of the total, so the summaries move no
    percentile by more than that share of the weight. The default reads everything at full resolution."""

    full_resolution_s: float = math.inf
    summary_step_s: float = 3600.0
    per_pod_memory: bool = False
    """Tell each memory sample's pod (``UsageBatch.memory_pod_index``): VPA keeps one memory peak per pod and
    aggregation interval, not one per workload."""

    def __post_init__(self) -> None:
        if not (self.full_resolution_s > 0 and not math.isnan(self.full_resolution_s)):
            raise ValueError("full_resolution_s must be positive")
        if not (math.isfinite(self.summary_step_s) and self.summary_step_s > 0):
            raise ValueError("summary_step_s must be positive and finite")

    @property
    def full(self) -> bool:
        return math.isinf(self.full_resolution_s)


@dataclass(frozen=True, slots=True, kw_only=True)
class FleetScale:
    """The reference sizes of the fleet a container is recommended in: the mean over its containers of their
    CPU p95 (cores) and of their largest memory peak (bytes). A strategy that prices overruns relative to the
    fleet (podtailor) reads them; who runs it over many containers says what they are (the engine from the
    containers it serves, and under ``--shards`` from every shard's published sums; the backtest from the first
    day of every series). Built from summable parts (``fleet.FleetSums``)."""

    cpu_cores: float
    memory_bytes: float
    cpu_log_margin: float | None = None
    """The mean log of the risk budget's CPU margin over the containers that have one (podtailor's
    ``RiskBudget``): where a container has none yet it starts from this. None: no container has one."""
    memory_log_margin: float | None = None
    """The same for the memory margin."""
    memory_excess: float | None = None
    """The mean over the containers with a memory margin of their OOM kills beyond their budget since counting
    began (kills - budget x months: ``BudgetState.memory_excess``): the fleet's integral error, which
    ``RiskBudget.memory_fleet_eta`` turns into a margin every container shares. None: no container has one."""

    def __post_init__(self) -> None:
        for name in ("cpu_cores", "memory_bytes"):
            value = getattr(self, name)
            if not 0 <= value < math.inf:  # also rejects NaN
                raise ValueError(f"FleetScale.{name} must be finite and >= 0, got {value!r}")
        for name in ("cpu_log_margin", "memory_log_margin", "memory_excess"):
            value = getattr(self, name)
            if value is not None and not math.isfinite(value):
                raise ValueError(f"FleetScale.{name} must be finite or None, got {value!r}")


@dataclass(frozen=True, slots=True, kw_only=True)
class ContainerPolicy:
    """The VPA containerPolicy for one container, with our defaults."""

    min_allowed: Resources = field(default_factory=Resources)
    max_allowed: Resources = field(default_factory=Resources)
    controlled_resources: frozenset[str] = frozenset({"cpu", "memory"})
    controlled_values: ControlledValues = ControlledValues.REQUESTS_AND_LIMITS
    mode_off: bool = False
    containers_in_pod: int = 1
    """Number of containers sharing the per-pod floors (VPA splits its pod minimum evenly)."""
    fleet: FleetScale | None = None
    """The fleet's reference sizes (``FleetScale``); None: unknown (a strategy then prices per container)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Recommendation:
    """Target, bounds and limits for one container. Fields for resources not controlled are None."""

    target: Resources
    lower_bound: Resources
    upper_bound: Resources
    uncapped_target: Resources
    limits: Resources = field(default_factory=Resources)
    """Recommended limits (proportional to the current limit:request ratio unless the strategy says
    otherwise); unset where the container has no limit or controlledValues is RequestsOnly."""
    confidence: float = 0.0
    """0..1: how much history backs the numbers (1 = enough by the strategy's own standard)."""
    reasons: tuple[str, ...] = ()
    """Short human-readable notes (e.g. "OOM bump", "capped by maxAllowed", "low confidence: no decrease")."""


class ContainerState(Protocol):
    """A strategy's accumulated history for one container key. Mutable; owned by one recommender."""

    @property
    def last_sample_s(self) -> float | None: ...

    @property
    def first_sample_s(self) -> float | None: ...

    def add(self, batch: UsageBatch) -> None: ...

    def to_checkpoint(self) -> dict[str, Any]: ...


class Strategy(Protocol):
    """A recommendation strategy, selected by name."""

    name: str

    def new_state(self) -> ContainerState: ...

    def restore(self, checkpoint: dict[str, Any]) -> ContainerState: ...

    def recommend(self, state: ContainerState, *, now_s: float, policy: ContainerPolicy,
                  current: CurrentResources) -> tuple[Recommendation, ContainerState]:
        """The recommendation for the container whose history ``state`` holds, and its state after it (what a
        strategy remembers from recommending: podtailor notes the applied values, calibrates its CPU level and
        holds its memory margin). ``state`` itself is not changed; the returned one may share the parts it did
        not change with it, so callers go on with the returned state (fold new batches into that one only)."""
        ...

    def parameters(self) -> dict[str, Any]: ...

    def fleet_sums(self, states: Iterable[ContainerState], now_s: float) -> FleetSums | None:
        """These containers' part of the fleet (``fleet.FleetSums``), for strategies that price relative to the
        fleet (None: this strategy does not). Parts of disjoint sets of states combine (``fleet.combine``)
        into the part of their union, so a fleet can be summed over shards held by different replicas."""
        ...

    def fleet_scale(self, states: Iterable[ContainerState], now_s: float) -> FleetScale | None:
        """The ``FleetScale`` of these containers' states: ``fleet_sums(states).scale()`` (None: this strategy
        does not price relative to the fleet, or no state has history)."""
        ...

    def history_plan(self) -> HistoryPlan: ...
