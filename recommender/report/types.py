"""Value types of the report: what discovery hands to the builder, and the ``Report`` the builder returns.

Owns the contract between the Kubernetes adapter (``discovery``: raw objects in, ``Inventory`` out), the
pure builder (``build``: inventory + usage batches + strategy + prices in, ``Report`` out) and the printers.
CPU is in millicores and memory in bytes (integers); money is in integer micro-units of the price sheet's
currency (1 USD = 1,000,000), so every sum in a report is exact. Nothing here does I/O.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field

from podtailor.resize.types import LimitRangeView, ResizeRestart
from podtailor.resources import CurrentResources, Resources
from recommender.kube.served import VpaSpec
from recommender.model.types import Recommendation
from recommender.report.budget import BudgetCheck

WorkloadKey = tuple[str, str, str]
"""(namespace, kind, name)."""
KINDS = ("Deployment", "StatefulSet", "DaemonSet", "CronJob", "Job", "ReplicaSet", "Pod", "Rollout")
"""Workload kinds the report discovers (Job: only Jobs not owned by a CronJob; ReplicaSet and Pod: only
those without an owner; Rollout: Argo Rollouts, when that CRD is served)."""


class Role(enum.StrEnum):
    CONTAINER = "container"
    SIDECAR = "sidecar"
    """A native sidecar: an init container with restartPolicy Always (resized like a container)."""
    INIT = "init"
    """A plain init container: runs to completion before the others; resized in place only from 1.36."""


class Disruption(enum.StrEnum):
    """What the updater would do to a workload's running pods to apply the plan, least to most disruptive."""

    NONE = "none"
    IN_PLACE = "in-place"
    IN_PLACE_RESTART = "in-place-restart"
    REPLACEMENT = "replacement"
    LEFT_ALONE = "left-alone"
    """BestEffort pods: the updater never gives them requests in place."""


class Risk(enum.StrEnum):
    OOM_KILLS = "oom-kills"
    CPU_THROTTLING = "cpu-throttling"
    NO_LIMITS = "no-limits"
    BEST_EFFORT = "best-effort"
    LOW_CONFIDENCE = "low-confidence"
    HPA_SAME_RESOURCE = "hpa-same-resource"


# ------------------------------------------------------------------------------------------------- inputs
@dataclass(frozen=True, slots=True, kw_only=True)
class ContainerSpec:
    name: str
    role: Role
    current: CurrentResources
    resize_policy: Mapping[str, ResizeRestart] = field(default_factory=dict)
    """resource -> NotRequired | RestartContainer (missing: NotRequired)."""

    @property
    def init(self) -> bool:
        """A plain init container (``recommend.Container``)."""
        return self.role == Role.INIT


@dataclass(frozen=True, slots=True, kw_only=True)
class PodInfo:
    """A running pod of a workload, with its own spec values (they can differ from the template after an
    in-place resize). ``containers`` holds regular containers and native sidecars only."""

    name: str
    node: str
    restart_policy: str
    containers: tuple[ContainerSpec, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class Workload:
    namespace: str
    kind: str
    name: str
    replicas: int
    """Desired pods: spec.replicas (Deployment, StatefulSet, ReplicaSet, Rollout), desiredNumberScheduled
    (DaemonSet), parallelism (Job, CronJob), 1 (Pod)."""
    restart_policy: str
    containers: tuple[ContainerSpec, ...]
    """From the pod template: native sidecars, regular containers, then plain init containers."""
    pods: tuple[PodInfo, ...] = ()
    labels: Mapping[str, str] = field(default_factory=dict)
    pool: str = ""
    """A DaemonSet's row for one node pool (its pods there, their usage, no checkpoint); "": the workload."""
    pod_level: CurrentResources | None = None
    """The pod template's pod-level ``spec.resources`` (None: it declares none)."""

    @property
    def key(self) -> WorkloadKey:
        return (self.namespace, self.kind, self.name)


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeInfo:
    name: str
    pool: str
    allocatable: Resources


@dataclass(frozen=True, slots=True, kw_only=True)
class Inventory:
    """Everything discovery read, converted once."""

    workloads: tuple[Workload, ...]
    nodes: Mapping[str, NodeInfo] = field(default_factory=dict)
    hpa_resources: Mapping[WorkloadKey, frozenset[str]] = field(default_factory=dict)
    """Resources an HPA scales the workload on by utilization."""
    limit_ranges: Mapping[str, LimitRangeView] = field(default_factory=dict)
    """Namespace -> its Container LimitRanges merged (tightest wins)."""
    vpas: Mapping[WorkloadKey, VpaSpec] = field(default_factory=dict)
    """The VPA targeting each workload that has one (the recommender follows its container policy)."""
    warnings: tuple[str, ...] = ()
    api_requests: int = 0


# ------------------------------------------------------------------------------------------------ outputs
@dataclass(frozen=True, slots=True, kw_only=True)
class Cost:
    """Monthly cost in integer micro-units; savings and increases are kept apart (both >= 0)."""

    current: int = 0
    recommended: int = 0
    savings: int = 0
    increases: int = 0

    def __add__(self, other: Cost) -> Cost:
        return Cost(current=self.current + other.current, recommended=self.recommended + other.recommended,
                    savings=self.savings + other.savings, increases=self.increases + other.increases)

    @property
    def net(self) -> int:
        """recommended - current (negative: the plan saves money)."""
        return self.recommended - self.current


@dataclass(frozen=True, slots=True, kw_only=True)
class Distribution:
    """Usage percentiles and a histogram over ``[0, top]`` in ``len(counts)`` equal bins."""

    samples: int
    p50: float
    p90: float
    p95: float
    p99: float
    max: float
    top: float
    counts: tuple[int, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class UsageSummary:
    cpu_millicores: Distribution | None
    memory_bytes: Distribution | None
    """Distribution of the per-step memory peaks."""
    oom_kills: int = 0
    throttled_fraction: float | None = None
    """Mean fraction of CFS periods throttled (None: no CPU limit or no data)."""
    observed_pod_hours: float = 0.0
    """Pod-hours with a CPU sample in the history window."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ContainerReport:
    name: str
    role: Role
    current: CurrentResources
    recommendation: Recommendation | None
    """The strategy's output (None: no usage history)."""
    planned: CurrentResources
    """What the updater would write: the target through its limit, LimitRange and HPA rules."""
    usage: UsageSummary | None
    cost: Cost
    budget: BudgetCheck | None = None
    """The realized risk against the container's risk budget (None: no budget stated)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PodLevelPlan:
    """A pod template's pod-level resources and what the updater would make of them with the plan."""

    current: CurrentResources
    planned_requests: Resources
    """The pod-level requests derived from the planned containers (``podtailor.resize.pod_level``; the current
    ones where nothing changes); the pod-level limits are left alone."""
    refused: str | None = None
    """Why the API server would refuse the planned containers under the pod-level limits (None: it would not)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RiskFlag:
    risk: Risk
    message: str


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkloadReport:
    namespace: str
    kind: str
    name: str
    pool: str
    replicas: int
    running_pods: int
    pod_hours_per_month: float
    containers: tuple[ContainerReport, ...]
    qos_current: str
    qos_planned: str
    disruption: Disruption
    disruption_reason: str
    disruption_message: str
    risks: tuple[RiskFlag, ...]
    cost: Cost
    vpa: str | None = None
    """The VPA whose container policy the recommendation follows (None: no VPA targets the workload, so the
    default policy: no minAllowed/maxAllowed, cpu and memory, RequestsAndLimits)."""
    cluster: str = ""
    """The kube context the workload was read from, in a report over several clusters ("" in a report of one)."""
    pool_row: bool = False
    """A DaemonSet's row for one node pool (``discovery.by_pool``): its values are that pool's alone."""
    pod_level: PodLevelPlan | None = None
    """Its pod template's pod-level resources (None: it declares none)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupSummary:
    name: str
    workloads: int
    containers: int
    cost: Cost


@dataclass(frozen=True, slots=True, kw_only=True)
class Report:
    generated_s: float
    start_s: float
    end_s: float
    strategy: str
    settings: Mapping[str, object]
    prices: Mapping[str, object]
    workloads: tuple[WorkloadReport, ...]
    namespaces: tuple[GroupSummary, ...]
    pools: tuple[GroupSummary, ...]
    total: GroupSummary
    warnings: tuple[str, ...] = ()
    prometheus_requests: int = 0
    api_requests: int = 0
    clusters: tuple[GroupSummary, ...] = ()
    """Summed per cluster (kube context), in a report over several clusters; empty in a report of one."""
