"""What the executor is given: the snapshot it reads, the planner, and the ports it writes through, as types.

Owns the shape of everything that crosses between the executor and its collaborators, so that none of it is
``Any``: ``PassSnapshot`` (what a pass reads from ``updater.kube.snapshot.Snapshot``), ``Planner`` (the
signature of ``updater.policy.planner.plan``), ``PolicyOf`` (``grouping.group_by_policy``), and one Protocol
per write port (the real ones are in ``updater.kube.writes``). The ports are grouped by what they are for: ``Reads``
(where a pass reads from), ``Writers`` (what it writes through) and ``Tuning`` (how fast it goes).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from podtailor.resize.types import LimitRangeView
from podtailor.resources import Resources
from updater.answers import ServerFeatures
from updater.observe import PodObservation
from updater.policy.analysis import WorkloadAnalyses
from updater.policy.types import HpaView, NodeView, Plan, PodView, QuotaView, RolloutPolicy, WorkloadTarget
from updater.rollout.machine.effects import Timeouts
from updater.rollout.machine.journal import ContainerValues, Rollout

if TYPE_CHECKING:
    from kubernetes.client import ApiClient


class PassSnapshot(Protocol):
    """What a pass reads from a snapshot of the cluster (``updater.kube.snapshot.Snapshot`` is one): every field
    the executor, the planner's arguments and the grouping by policy read is declared here."""

    @property
    def pods(self) -> Sequence[PodView]: ...

    @property
    def observations(self) -> Mapping[str, PodObservation]: ...

    @property
    def targets(self) -> Sequence[WorkloadTarget]: ...

    @property
    def hpas(self) -> Sequence[HpaView]: ...

    @property
    def limit_ranges(self) -> Sequence[LimitRangeView]: ...

    @property
    def nodes(self) -> Sequence[NodeView]: ...

    @property
    def approvals(self) -> frozenset[tuple[str, str, str]]: ...

    @property
    def pod_level_resize_supported(self) -> bool: ...

    @property
    def policies(self) -> Sequence[RolloutPolicy]: ...

    @property
    def policy_errors(self) -> Sequence[str]:
        """ResizePolicies that did not parse: while any exists nothing is acted on (``grouping``)."""
        ...

    @property
    def quotas(self) -> Sequence[QuotaView]:
        """The namespaces' ResourceQuotas with compute limits (empty: none, and the planner holds nothing back)."""
        ...

    @property
    def analyses(self) -> Mapping[tuple[str, str, str], WorkloadAnalyses]:
        """Workloads' own canary analyses (annotation ``podtailor.io/analyses``), read only when analyses run."""
        ...

    @property
    def features(self) -> ServerFeatures | None:
        """What the server's version answers to a resize (None: not known, the planner assumes the oldest)."""
        ...


class Planner(Protocol):
    """``updater.policy.planner.plan``: one policy's plan over its pods."""

    def __call__(self, *, pods: Iterable[PodView], targets: Iterable[WorkloadTarget], hpas: Iterable[HpaView],
                 limit_ranges: Iterable[LimitRangeView], nodes: Iterable[NodeView], policy: RolloutPolicy,
                 now_s: float, approvals: frozenset[tuple[str, str, str]], pod_level_resize_supported: bool,
                 quotas: Iterable[QuotaView], features: ServerFeatures | None) -> Plan: ...


Read = Callable[[], PassSnapshot]
"""A read of the cluster (``updater.kube.snapshot.ClusterReader.read``, its arguments bound)."""
PolicyOf = Callable[[PassSnapshot], Sequence[tuple[RolloutPolicy, Sequence[PodView]]]]
"""The snapshot's pods grouped by the policy that governs them (``grouping.group_by_policy``)."""


class Store(Protocol):
    def list(self) -> list[Rollout]: ...

    def create(self, r: Rollout) -> Rollout: ...

    def save(self, r: Rollout) -> Rollout: ...

    def retry_requested(self, name: str) -> bool: ...


class Synced(Protocol):
    """A watch-fed cache, as ``run`` waits for its first list (``updater.kube.informer.Informer``)."""

    @property
    def name(self) -> str: ...

    def wait_synced(self, timeout_s: float) -> bool: ...


class WatchedStore(Store, Protocol):
    """A store whose journals can come from a watch-fed cache (``updater.kube.writes.RolloutStore``): ``run``
    starts and stops the watch on a client of its own, and waits for the cache's first list."""

    @property
    def informer(self) -> Synced | None: ...

    def start_watching(self, watch_client: ApiClient | None = None) -> None: ...

    def stop_watching(self) -> None: ...


class Resizer(Protocol):
    def resize(self, namespace: str, pod: str, uid: str, resource_version: str,
               values: Sequence[ContainerValues], pod_level: Resources | None = None) -> int: ...


class Evictions(Protocol):
    def evict(self, namespace: str, pod: str, uid: str) -> None: ...


class Templates(Protocol):
    def read(self, namespace: str, kind: str, name: str,
             containers: Sequence[str]) -> tuple[ContainerValues, ...] | None: ...

    def patch(self, namespace: str, kind: str, name: str, values: Sequence[ContainerValues]) -> None: ...


class ServingGates(Protocol):
    def set_serving(self, namespace: str, pod: str, uid: str, serving: bool) -> None: ...


class Recorder(Protocol):
    def record(self, *, namespace: str, kind: str, name: str, uid: str, reason: str, message: str,
               warning: bool = False) -> None: ...


class CgroupCheck(Protocol):
    """``updater.kube.cadvisor.CgroupCheck``: the snapshot with the cgroup disagreements of the pods being
    verified on their observations."""

    def checked(self, snap: PassSnapshot, rollouts: Sequence[Rollout], now_s: float) -> PassSnapshot: ...


@dataclass(slots=True, kw_only=True)
class Reads:
    """Where a pass reads from, and what it plans with."""

    read: Read
    planner: Planner
    policy_of: PolicyOf
    read_fresh: Read | None = None
    """A read that lists pods from the API server even where ``read`` serves them from a watch-fed cache: used
    when a bake has ended, so the step that starts the next batch never rests on a view that may be up to a
    silent watch's bound old (an OOM kill in the last seconds of the bake must halt the pool, not be missed)."""
    cgroups: CgroupCheck | None = None
    """Verification down to the cgroup (the kubelet's cAdvisor series); None: from status alone."""


@dataclass(slots=True, kw_only=True)
class Writers:
    """What a pass writes through: the journals, and the pods and workloads (a fallback port may be absent:
    the effects that need it are refused)."""

    store: Store
    resizer: Resizer
    evictor: Evictions | None = None
    templates: Templates | None = None
    gates: ServingGates | None = None


@dataclass(slots=True, kw_only=True)
class Tuning:
    timeouts: Timeouts | None = None
    """The same for every policy (tests); None: each policy's own."""
    parallelism: int = 8
    """Resize requests in flight at once within a pass, over all rollouts (each carries its own preconditions)."""
    verify_poll_s: float = 1.0
    """While a pass is still sending, how often an idle rollout's batch is re-read for verification (at
    least twice the last read's duration apart, so a slow read on a big cluster is not repeated back to back)."""
