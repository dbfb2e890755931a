"""Value types of the updater's pure core: what the planner is given and what it decides.

Owns the contract between the Kubernetes adapters (which turn Pods, Nodes, VPAs, HPAs, LimitRanges and our
ResizePolicy objects into these values), the planner (pure: values in, ``Plan`` out) and the executor
(which acts on a ``Plan``). CPU is in millicores and memory in bytes, as integers. ``now_s`` is always an
argument; nothing here imports a client, a logger or the clock.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from podtailor.resize.types import (
    DEFAULT_CHANGE_THRESHOLD,
    ContainerChange,
    ContainerTarget,
    ContainerView,
    PodRestartPolicy,
    QoS,
    Reason,
)
from podtailor.resources import Resources
from podtailor.vpa import UpdateMode
from updater.answers import PendingReason
from updater.policy.analysis import Analysis


class FallbackMode(enum.StrEnum):
    EVICT = "evict"
    TEMPLATE = "template"
    NONE = "none"


# ----------------------------------------------------------------------------------------------- inputs


@dataclass(frozen=True, slots=True, kw_only=True)
class PodView:
    namespace: str
    name: str
    uid: str
    resource_version: str
    generation: int
    observed_generation: int
    node: str
    pool: str
    """Node-pool name from the policy's pool label key on the pod's node ("" when the node has none)."""
    workload_kind: str
    workload_name: str
    """Top-level owner (Deployment, StatefulSet, DaemonSet, Job, CronJob, or Pod for bare pods)."""
    priority: int
    qos: QoS
    created_s: float
    restart_policy: PodRestartPolicy
    ready: bool
    containers: tuple[ContainerView, ...]
    resize_pending: PendingReason | None = None
    """Reason of the PodResizePending condition, None when absent."""
    resize_in_progress: bool = False
    resize_error: str | None = None
    annotations: Mapping[str, str] = field(default_factory=dict)
    pod_level: Resources | None = None
    """Pod-level ``spec.resources.requests`` (KEP-2837), None when not used."""
    pod_level_limits: Resources | None = None
    """Pod-level ``spec.resources.limits``, None when not set (never changed by the updater)."""
    deleting: bool = False
    resize_pending_since_s: float | None = None
    """When the PodResizePending condition appeared (its lastTransitionTime), None when unknown or absent."""
    resize_in_progress_since_s: float | None = None
    """When the PodResizeInProgress condition appeared (its lastTransitionTime), None when unknown or absent."""
    labels: Mapping[str, str] = field(default_factory=dict)
    """Pod labels (the pod template's); the policy's workload_selector is matched against them."""
    gated: bool = False
    """Has the updater's serving readiness gate: a restarting resize drains its traffic first."""
    static: bool = False
    """A mirror pod (annotation ``kubernetes.io/config.mirror``): the API server refuses its resize."""
    priority_class: str = ""
    """``spec.priorityClassName`` (ResourceQuota's PriorityClass scope matches on it)."""
    terminating: bool = False
    """``spec.activeDeadlineSeconds`` >= 0 (ResourceQuota's Terminating scope)."""
    cross_namespace_affinity: bool = False
    """Some pod (anti-)affinity term names other namespaces (ResourceQuota's CrossNamespacePodAffinity scope)."""
    ready_since_s: float | None = None
    """When the Ready condition last turned True (its lastTransitionTime); None when not Ready or unknown."""


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkloadTarget:
    """The VPA recommendation for one workload."""

    namespace: str
    workload_kind: str
    workload_name: str
    vpa_name: str
    update_mode: UpdateMode
    """Only ``podtailor.vpa.ACTED_MODES`` are acted on."""
    containers: Mapping[str, ContainerTarget]
    stale: bool = False
    """The recommender marked it stale (no fresh data): never act on a decrease."""
    replicas: int = 1
    pools: Mapping[str, Mapping[str, ContainerTarget]] = field(default_factory=dict)
    """A DaemonSet's per-pool values (``podtailor.poolrecs``): pool -> container -> target."""
    pool_problem: str = ""
    """Why the VPA's per-pool annotation was refused ("" when absent or usable): every pod gets ``containers``."""

    def for_pool(self, pool: str) -> WorkloadTarget:
        """The target of a pod on ``pool``: that pool's value per container where it has one, else the status
        value (``podtailor.poolrecs.target_for``)."""
        own = self.pools.get(pool)
        return self if not own else replace(self, containers={**self.containers, **own})


@dataclass(frozen=True, slots=True, kw_only=True)
class HpaView:
    namespace: str
    workload_kind: str
    workload_name: str
    utilization_resources: frozenset[str]
    """Resources the HPA scales on by utilization (percentage of request): their requests stay put."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ScopeRequirement:
    """One of a ResourceQuota's scopes: ``spec.scopes`` entries have operator Exists and no values;
    ``spec.scopeSelector.matchExpressions`` have In, NotIn, Exists or DoesNotExist."""

    scope: str
    """Terminating | NotTerminating | BestEffort | NotBestEffort | PriorityClass | CrossNamespacePodAffinity."""
    operator: str = "Exists"
    values: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True, kw_only=True)
class QuotaView:
    """One ResourceQuota's compute limits: hard and ``status.used``, CPU in millicores, memory in bytes, keyed
    by the quota's own names (cpu, requests.cpu, limits.cpu, memory, requests.memory, limits.memory)."""

    namespace: str
    name: str
    hard: Mapping[str, int]
    used: Mapping[str, int]
    scopes: tuple[ScopeRequirement, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeView:
    name: str
    pool: str
    ready: bool
    memory_pressure: bool = False
    allocatable: Resources = field(default_factory=Resources)
    unschedulable: bool = False
    declared_features: frozenset[str] = frozenset()
    """``status.declaredFeatures`` (KEP-5328): what the node's kubelet says it supports (empty: none declared)."""


# ------------------------------------------------------------------------------------------------ policy
@dataclass(frozen=True, slots=True, kw_only=True)
class CanaryStep:
    """One rung of the canary ladder: ``fraction`` of the pool's eligible pods (cumulative), at least one pod,
    then ``bake_s`` seconds of watching the gates before the next rung."""

    fraction: float
    bake_s: float
    gates: tuple[str, ...] = ("oom", "restarts", "ready", "throttling")


@dataclass(frozen=True, slots=True, kw_only=True)
class MaintenanceWindow:
    """Weekly window in UTC: days 0 = Monday .. 6 = Sunday, minutes from midnight [start, end)."""

    days: frozenset[int]
    start_minute: int
    end_minute: int


@dataclass(frozen=True, slots=True, kw_only=True)
class RolloutPolicy:
    """The ResizePolicy CRD as values, with the defaults that apply when no object exists."""

    name: str = "default"
    namespaces: frozenset[str] = frozenset()
    """Namespaces covered (empty: all but the excluded ones)."""
    excluded_namespaces: frozenset[str] = frozenset({"kube-system", "kube-public", "kube-node-lease"})
    workload_selector: Mapping[str, str] = field(default_factory=dict)
    pool_label_key: str = ""
    """Node label naming the pool; empty: the first present of the common keys (see planner)."""
    steps: tuple[CanaryStep, ...] = (CanaryStep(fraction=0.0, bake_s=300.0), CanaryStep(fraction=0.05, bake_s=300.0),
                                     CanaryStep(fraction=0.25, bake_s=600.0), CanaryStep(fraction=1.0, bake_s=0.0))
    """Default ladder: one pod (fraction 0 means exactly one pod), 5%, 25%, 100%."""
    max_concurrent: int = 50
    """Resizes in flight across the cluster."""
    max_concurrent_per_pool: int = 20
    disruption_budget: float = 0.25
    """Restarting changes: at most this fraction of a workload's replicas (at least 1) at once."""
    maintenance_windows: tuple[MaintenanceWindow, ...] = ()
    """Restarting changes only inside one of these (empty: any time, unless approval is required)."""
    require_approval_for_restart: bool = False
    """Restarting changes wait for the annotation podtailor.io/approve-restart=true on the workload."""
    change_threshold: float = DEFAULT_CHANGE_THRESHOLD
    """Skip unless some controlled request changes by at least this fraction (and the request is outside the
    bounds or the change is above the threshold)."""
    min_pod_age_s: float = 300.0
    deferred_timeout_s: float = 300.0
    in_progress_timeout_s: float = 3600.0
    fallback: FallbackMode = FallbackMode.EVICT
    allow_single_replica_eviction: bool = False
    keep_limit_ratio: bool = True
    unhealthy_pool_fraction: float = 0.0
    """A pool with more than this fraction of nodes NotReady or under MemoryPressure is frozen (0: any)."""
    analyses: tuple[Analysis, ...] = ()
    """Canary analyses on the application's own metrics, run during every batch's bake (``policy.analysis``)."""


# ----------------------------------------------------------------------------------------------- outputs
class Action(enum.StrEnum):
    SKIP = "skip"
    RESIZE_ONLINE = "resize-online"
    RESIZE_RESTART = "resize-restart"
    FALLBACK = "fallback"


@dataclass(frozen=True, slots=True, kw_only=True)
class PodDecision:
    namespace: str
    pod: str
    uid: str
    resource_version: str
    pool: str
    workload_kind: str
    workload_name: str
    action: Action
    reason: Reason
    message: str = ""
    changes: tuple[ContainerChange, ...] = ()
    old_pod_level: Resources | None = None
    """Pod-level requests before the change (None when the pod does not use pod-level resources)."""
    new_pod_level: Resources | None = None
    """Pod-level requests to write with the resize (None: leave ``spec.resources`` alone)."""
    held: Action | None = None
    """With reason QUOTA: the action a ResourceQuota held back (RESIZE_* or FALLBACK); with DISRUPTION_BUDGET,
    FALLBACK."""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.pod}"


@dataclass(frozen=True, slots=True, kw_only=True)
class Batch:
    pool: str
    step: int
    """Index into the policy's steps."""
    pods: tuple[str, ...]
    """Pod keys (namespace/name) in the order they are applied."""
    bake_s: float
    gates: tuple[str, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class Plan:
    decisions: tuple[PodDecision, ...]
    batches: tuple[Batch, ...]
    """Per pool, in step order; pools are independent of each other."""
    frozen_pools: Mapping[str, str] = field(default_factory=dict)
    """pool -> why it is frozen."""
