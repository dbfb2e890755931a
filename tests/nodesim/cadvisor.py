"""Pure rendering of the metric families the simulated node serves, plus the CFS throttling model.

This module owns snapshot value types (containers, pods, replicasets, nodes), ``build_families`` which
turns a snapshot into prometheus_client metric families, ``SnapshotCollector`` (a custom Collector the live
loop registers on a CollectorRegistry), and ``throttle``/``throttle_many``. The families imitate cAdvisor
as served by kubelet's /metrics/cadvisor (labels namespace, pod, container, image, name, id, plus the
``node`` label a scrape config usually adds) and kube-state-metrics v2 (kube_pod_*, kube_replicaset_owner,
kube_node_labels). Differences: there is no ``cpu="total"`` label, no pod-level or pause-container series,
no ``_created`` samples, and kube_pod_info carries only the labels the snapshot knows.

Throttling model: CFS enforces the limit per 100 ms period. Demand sub-samples split the interval into
equal slices; a slice whose demand is above the limit uses exactly the limit and all of its periods are
throttled, a slice at or below the limit uses its demand and none is throttled, and a slice with zero
demand has no runnable periods (cAdvisor's nr_periods only counts periods with runnable tasks). So
throttled periods are proportional to the fraction of the interval in which demand exceeded the limit.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from tests.nodesim.resize import ContainerResources

__all__ = [
    "CFS_PERIOD_S",
    "ClusterSnapshot",
    "ContainerSnapshot",
    "NodeSnapshot",
    "PodSnapshot",
    "ReplicaSetSnapshot",
    "SnapshotCollector",
    "ThrottleResult",
    "build_families",
    "controller_of",
    "replicaset_snapshot",
    "sanitize_label_name",
    "throttle",
    "throttle_many",
]

CFS_PERIOD_S = 0.1
POD_PHASES = ("Pending", "Succeeded", "Failed", "Unknown", "Running")
CADVISOR_LABELS = ("namespace", "pod", "container", "image", "name", "id", "node")
KSM_RESOURCE_LABELS = ("namespace", "pod", "container", "node", "resource", "unit")


@dataclass(frozen=True, slots=True, kw_only=True)
class ContainerSnapshot:
    """One running container: identity, cumulative counters, current gauges, spec resources."""

    namespace: str
    pod: str
    container: str
    node: str
    pod_uid: str = ""
    image: str = "registry.k8s.io/pause:3.10"
    container_id: str = ""
    cpu_usage_seconds_total: float = 0.0
    memory_working_set_bytes: int = 0
    cfs_periods_total: int = 0
    cfs_throttled_periods_total: int = 0
    oom_events_total: int = 0
    cpu_request_millicores: int | None = None
    cpu_limit_millicores: int | None = None
    memory_request_bytes: int | None = None
    memory_limit_bytes: int | None = None
    last_terminated_reason: str | None = None
    cgroup: ContainerResources | None = None
    """What the container's cgroup holds (the ``container_spec_*`` series); None: no such series."""

    @property
    def runtime_name(self) -> str:
        """cAdvisor's ``name`` label for a CRI container (dockershim-style name kept by convention)."""
        return f"k8s_{self.container}_{self.pod}_{self.namespace}_{self.pod_uid}_0"

    @property
    def cgroup_id(self) -> str:
        uid = self.pod_uid.replace("-", "_")
        return f"/kubepods.slice/kubepods-pod{uid}.slice/cri-containerd-{self.container_id}.scope"


@dataclass(frozen=True, slots=True, kw_only=True)
class PodSnapshot:
    namespace: str
    pod: str
    uid: str
    node: str
    phase: str = "Running"
    owner_kind: str = "<none>"
    owner_name: str = "<none>"
    owner_is_controller: bool = True
    host_ip: str = ""
    pod_ip: str = ""
    priority_class: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplicaSetSnapshot:
    namespace: str
    replicaset: str
    owner_kind: str = "<none>"
    owner_name: str = "<none>"
    owner_is_controller: bool = True


def controller_of(meta: Mapping[str, Any]) -> Mapping[str, Any]:
    """The owner reference marked ``controller`` in an object's metadata, or an empty mapping."""
    return next((o for o in meta.get("ownerReferences") or [] if o.get("controller")), {})


def replicaset_snapshot(rs: Mapping[str, Any]) -> ReplicaSetSnapshot:
    """A ReplicaSet as the API server returns it (JSON) -> its ``kube_replicaset_owner`` row."""
    owner = controller_of(rs["metadata"])
    return ReplicaSetSnapshot(namespace=rs["metadata"]["namespace"], replicaset=rs["metadata"]["name"],
                              owner_kind=owner.get("kind", "<none>"), owner_name=owner.get("name", "<none>"))


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeSnapshot:
    node: str
    labels: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class ClusterSnapshot:
    containers: tuple[ContainerSnapshot, ...] = ()
    pods: tuple[PodSnapshot, ...] = ()
    replicasets: tuple[ReplicaSetSnapshot, ...] = ()
    nodes: tuple[NodeSnapshot, ...] = ()


# ------------------------------------------------------------------------------------------- throttling
@dataclass(frozen=True, slots=True, kw_only=True)
class ThrottleResult:
    used_cpu_seconds: float
    periods: int
    throttled_periods: int


def throttle_many(
    demand_cores: ArrayLike,
    limit_millicores: int | None,
    interval_s: float,
) -> tuple[NDArray[np.float64], NDArray[np.int64], NDArray[np.int64]]:
    """Vectorised model: ``demand_cores`` has shape (intervals, slices); returns per-interval
    (used CPU seconds, periods, throttled periods) as described in the module docstring."""
    demand = np.clip(np.nan_to_num(np.asarray(demand_cores, dtype=np.float64)), 0.0, None)
    if demand.ndim == 1:
        demand = demand[:, None]
    slices = demand.shape[1]
    total_periods = round(interval_s / CFS_PERIOD_S)
    limit = np.inf if limit_millicores is None else limit_millicores / 1000.0
    used = np.minimum(demand, limit).mean(axis=1) * interval_s
    active = (demand > 0).sum(axis=1)
    over = (demand > limit).sum(axis=1)
    periods = np.rint(total_periods * active / slices).astype(np.int64)
    throttled = np.rint(total_periods * over / slices).astype(np.int64)
    return used, periods, throttled


def throttle(
    demand_cores: float | Sequence[float],
    limit_millicores: int | None,
    interval_s: float,
) -> ThrottleResult:
    """CFS model for one interval; ``demand_cores`` is one value or equally spaced sub-samples."""
    row = np.atleast_1d(np.asarray(demand_cores, dtype=np.float64))[None, :]
    used, periods, throttled = throttle_many(row, limit_millicores, interval_s)
    return ThrottleResult(
        used_cpu_seconds=float(used[0]), periods=int(periods[0]), throttled_periods=int(throttled[0])
    )


# ------------------------------------------------------------------------------------------- families
_LABEL_NAME_BAD = re.compile(r"[^a-zA-Z0-9_]")


def sanitize_label_name(key: str) -> str:
    """kube-state-metrics style: every character outside [a-zA-Z0-9_] becomes ``_``."""
    return _LABEL_NAME_BAD.sub("_", key)


def _cadvisor_values(c: ContainerSnapshot) -> list[str]:
    return [c.namespace, c.pod, c.container, c.image, c.runtime_name, c.cgroup_id, c.node]


def has_cfs_quota(c: ContainerSnapshot) -> bool:
    """cAdvisor exports the CFS families only for a container with a CPU quota, i.e. a CPU limit
    (cadvisor v0.60.5 metrics/prometheus.go: ``condition: s.Cpu.Quota != 0``)."""
    return c.cpu_limit_millicores is not None


def _cadvisor_families(containers: Sequence[ContainerSnapshot]) -> list[Metric]:
    specs: list[tuple[str, str, bool, Callable[[ContainerSnapshot], float], Callable[[ContainerSnapshot], bool]]] = [
        ("container_cpu_usage_seconds_total", "Cumulative cpu time consumed in seconds.", True,
         lambda c: c.cpu_usage_seconds_total, lambda c: True),
        ("container_memory_working_set_bytes", "Current working set in bytes.", False,
         lambda c: c.memory_working_set_bytes, lambda c: True),
        ("container_cpu_cfs_periods_total", "Number of elapsed enforcement period intervals.", True,
         lambda c: c.cfs_periods_total, has_cfs_quota),
        ("container_cpu_cfs_throttled_periods_total", "Number of throttled period intervals.", True,
         lambda c: c.cfs_throttled_periods_total, has_cfs_quota),
        ("container_oom_events_total", "Count of out of memory events observed for the container.", True,
         lambda c: c.oom_events_total, lambda c: True),
    ]
    families: list[Metric] = []
    for name, doc, is_counter, value, exported in specs:
        cls = CounterMetricFamily if is_counter else GaugeMetricFamily
        family = cls(name, doc, labels=CADVISOR_LABELS)
        for c in containers:
            if exported(c):
                family.add_metric(_cadvisor_values(c), float(value(c)))
        families.append(family)
    return families


def _spec_families(containers: Sequence[ContainerSnapshot]) -> list[Metric]:
    """cAdvisor's ``container_spec_*`` gauges from the cgroup as the kubelet writes it (pkg/kubelet/cm/
    helpers_linux.go: quota = limit x period / 1000, at least 1000 us; shares = request x 1024 / 1000, within
    [2, 262144]; cadvisor v0.60.5 metrics/prometheus.go exports the quota and period only with a quota)."""
    quota = GaugeMetricFamily("container_spec_cpu_quota", "CPU quota of the container.", labels=CADVISOR_LABELS)
    period = GaugeMetricFamily("container_spec_cpu_period", "CPU period of the container.", labels=CADVISOR_LABELS)
    shares = GaugeMetricFamily("container_spec_cpu_shares", "CPU share of the container.", labels=CADVISOR_LABELS)
    memory = GaugeMetricFamily("container_spec_memory_limit_bytes", "Memory limit for the container.",
                               labels=CADVISOR_LABELS)
    for c in containers:
        g, labels = c.cgroup, _cadvisor_values(c)
        if g is None:
            continue
        if g.cpu_limit_millicores is not None:
            quota.add_metric(labels, float(max(1000, g.cpu_limit_millicores * 100)))
            period.add_metric(labels, 100_000.0)
        request = g.cpu_request_millicores or 0
        shares.add_metric(labels, float(min(262_144, max(2, request * 1024 // 1000))))
        if g.memory_limit_bytes is not None:
            memory.add_metric(labels, float(g.memory_limit_bytes))
    return [quota, period, shares, memory]


def _resource_family(name: str, containers: Sequence[ContainerSnapshot], limits: bool) -> Metric:
    kind = "limit" if limits else "request"
    family = GaugeMetricFamily(name, f"The number of requested {kind} resource by a container.",
                               labels=KSM_RESOURCE_LABELS)
    for c in containers:
        cpu = c.cpu_limit_millicores if limits else c.cpu_request_millicores
        memory = c.memory_limit_bytes if limits else c.memory_request_bytes
        base = [c.namespace, c.pod, c.container, c.node]
        if cpu is not None:
            family.add_metric([*base, "cpu", "core"], cpu / 1000.0)
        if memory is not None:
            family.add_metric([*base, "memory", "byte"], float(memory))
    return family


def _terminated_family(containers: Sequence[ContainerSnapshot]) -> Metric:
    family = GaugeMetricFamily("kube_pod_container_status_last_terminated_reason",
                               "Describes the last reason the container was in terminated state.",
                               labels=("namespace", "pod", "container", "reason"))
    for c in containers:
        if c.last_terminated_reason:
            family.add_metric([c.namespace, c.pod, c.container, c.last_terminated_reason], 1.0)
    return family


def _bool_label(value: bool) -> str:
    return "true" if value else "false"


def _pod_families(pods: Sequence[PodSnapshot]) -> list[Metric]:
    owner = GaugeMetricFamily("kube_pod_owner", "Information about the Pod's owner.",
                              labels=("namespace", "pod", "uid", "owner_kind", "owner_name",
                                      "owner_is_controller"))
    info = GaugeMetricFamily("kube_pod_info", "Information about pod.",
                             labels=("namespace", "pod", "uid", "host_ip", "pod_ip", "node",
                                     "created_by_kind", "created_by_name", "priority_class"))
    phase = GaugeMetricFamily("kube_pod_status_phase", "The pods current phase.",
                              labels=("namespace", "pod", "uid", "phase"))
    for p in pods:
        owner.add_metric([p.namespace, p.pod, p.uid, p.owner_kind, p.owner_name,
                          _bool_label(p.owner_is_controller)], 1.0)
        info.add_metric([p.namespace, p.pod, p.uid, p.host_ip, p.pod_ip, p.node, p.owner_kind,
                         p.owner_name, p.priority_class], 1.0)
        for candidate in POD_PHASES:
            phase.add_metric([p.namespace, p.pod, p.uid, candidate], 1.0 if candidate == p.phase else 0.0)
    return [owner, info, phase]


def _replicaset_family(replicasets: Sequence[ReplicaSetSnapshot]) -> Metric:
    family = GaugeMetricFamily("kube_replicaset_owner", "Information about the ReplicaSet's owner.",
                               labels=("namespace", "replicaset", "owner_kind", "owner_name",
                                       "owner_is_controller"))
    for rs in replicasets:
        family.add_metric([rs.namespace, rs.replicaset, rs.owner_kind, rs.owner_name,
                           _bool_label(rs.owner_is_controller)], 1.0)
    return family


def _node_labels_family(nodes: Sequence[NodeSnapshot]) -> Metric:
    family = GaugeMetricFamily("kube_node_labels", "Kubernetes labels converted to Prometheus labels.")
    for n in nodes:
        labels = {"node": n.node}
        for key in sorted(n.labels):
            labels.setdefault("label_" + sanitize_label_name(key), n.labels[key])
        family.add_sample("kube_node_labels", labels, 1.0)
    return family


def build_families(snapshot: ClusterSnapshot) -> list[Metric]:
    """All metric families for one snapshot, cAdvisor ones first, in a stable order."""
    containers = snapshot.containers
    return [
        *_cadvisor_families(containers),
        *_spec_families(containers),
        _resource_family("kube_pod_container_resource_requests", containers, limits=False),
        _resource_family("kube_pod_container_resource_limits", containers, limits=True),
        _terminated_family(containers),
        *_pod_families(snapshot.pods),
        _replicaset_family(snapshot.replicasets),
        _node_labels_family(snapshot.nodes),
    ]


class SnapshotCollector(Collector):
    """A prometheus_client Collector that renders whatever snapshot ``source`` returns at scrape time."""

    def __init__(self, source: Callable[[], ClusterSnapshot]) -> None:
        self._source = source

    def collect(self) -> Iterator[Metric]:
        yield from build_families(self._source())
