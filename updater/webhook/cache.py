"""The webhook's in-memory view of the cluster: VPA targets and workload owners, refreshed in the background.

Owns listing, every ``--resync`` seconds and at once when the VPA watch sees a change, the
VerticalPodAutoscalers (cluster-wide, from the watch's cache while it is current), and only in the
namespaces that have a VPA: ReplicaSets when some VPA there targets a Deployment (ReplicaSet -> Deployment),
Jobs when one targets a CronJob (Job -> CronJob), LimitRanges and HPAs (the same constraints the in-place
planner applies) and ResourceQuotas (so a target that would exceed one is not applied). Each refresh builds a
new immutable ``TargetSnapshot`` and swaps it in, so admission reads memory only and never waits for the API
server. A pod's workload comes from its controller owner reference through the updater's ``WorkloadIndex`` (a
ReplicaSet created after the last list is mapped by its ``pod-template-hash``; a Job created after it, by the
CronJob naming rule ``<cronjob>-<minutes>``). A VPA that cannot be read is remembered with its error, so its
pods get a warning instead of a guess; two VPAs for one workload: the first by name wins (and it is logged).
When a VPA carries a DaemonSet's per-pool values (``podtailor.poolrecs``), the Nodes are listed too, so a new
pod gets the value of its node's pool.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from podtailor.kube.fields import limit_range
from podtailor.kube.listing import Listing, list_raw
from podtailor.nodepool import node_pool
from podtailor.poolrecs import ANNOTATION as POOL_ANNOTATION
from podtailor.resize.changes import Constraints
from podtailor.resize.types import LimitRangeView
from podtailor.vpa import target_key
from updater.kube.fields import MalformedObject, Obj
from updater.kube.informer import Informer
from updater.kube.objects import convert_hpa, convert_vpa, merge_by_namespace
from updater.kube.quotas import convert_quota
from updater.kube.workloads import WorkloadIndex, WorkloadKey
from updater.policy.types import QuotaView, WorkloadTarget
from updater.webhook.mutation import Resolution

log = logging.getLogger("podtailor.updater.webhook")
KINDS = ("VerticalPodAutoscaler", "ReplicaSet", "Job", "LimitRange", "HorizontalPodAutoscaler", "ResourceQuota")
CLUSTER_WIDE_ABOVE = 50
"""List a kind cluster-wide instead of once per namespace when more namespaces than this need it."""
_CRONJOB_JOB = re.compile(r"^(?P<cronjob>.+)-\d+$")
_READ_ERRORS = (MalformedObject, KeyError, TypeError, AttributeError, ValueError)


@dataclass(frozen=True, slots=True, kw_only=True)
class TargetSnapshot:
    """One refresh's worth of lookups; never mutated after ``build_snapshot``."""

    targets: Mapping[WorkloadKey, WorkloadTarget] = field(default_factory=dict)
    broken: Mapping[WorkloadKey, str] = field(default_factory=dict)
    """Workloads whose VPA could not be read -> the error."""
    index: WorkloadIndex = field(default_factory=WorkloadIndex)
    limit_ranges: Mapping[str, LimitRangeView] = field(default_factory=dict)
    hpa_resources: Mapping[WorkloadKey, frozenset[str]] = field(default_factory=dict)
    quotas: Mapping[str, tuple[QuotaView, ...]] = field(default_factory=dict)
    """Namespace -> its ResourceQuotas with compute limits."""
    counts: Mapping[str, int] = field(default_factory=dict)
    """Objects listed per kind (for the metrics)."""
    node_pools: Mapping[str, str] = field(default_factory=dict)
    """Node -> pool, listed only when some target has per-pool values (a DaemonSet's)."""

    def workload(self, namespace: str, meta: Mapping[str, Any]) -> tuple[str, str]:
        refs = meta.get("ownerReferences") or []
        labels = meta.get("labels") or {}
        name = str(meta.get("name") or meta.get("generateName") or "")
        kind, workload = self.index.top_owner(namespace, name, list(refs), labels)
        if kind == "Job" and (namespace, "Job", workload) not in self.index.replicas:
            m = _CRONJOB_JOB.match(workload)
            if m and (namespace, "CronJob", m["cronjob"]) in self.targets:
                return "CronJob", m["cronjob"]
        return kind, workload

    def resolve(self, namespace: str, meta: Mapping[str, Any]) -> Resolution:
        kind, name = self.workload(namespace, meta)
        key = (namespace, kind, name)
        cons = Constraints(limit_range=self.limit_ranges.get(namespace),
                           hpa_resources=self.hpa_resources.get(key, frozenset()))
        target = self.targets.get(key)
        return Resolution(workload_kind=kind, workload_name=name, target=target,
                          error=self.broken.get(key, ""), constraints=cons, quotas=self.quotas.get(namespace, ()),
                          node_pools=self.node_pools if target is not None and target.pools else {})


def _vpas(objs: Iterable[Obj]) -> tuple[dict[WorkloadKey, WorkloadTarget], dict[WorkloadKey, str]]:
    targets: dict[WorkloadKey, WorkloadTarget] = {}
    broken: dict[WorkloadKey, str] = {}
    ordered = sorted(objs, key=lambda o: str((o.get("metadata") or {}).get("name", "")))
    for obj in ordered:
        key = target_key(obj)
        if key in targets or key in broken:
            log.warning("two VPAs target one workload; the first by name wins",
                        extra={"namespace": key[0], "workload": f"{key[1]}/{key[2]}"})
            continue
        try:
            targets[key] = convert_vpa(obj, replicas=0)
            if targets[key].pool_problem:
                log.warning("per-pool values refused", extra={"namespace": key[0], "workload": f"{key[1]}/{key[2]}",
                                                              "reason": targets[key].pool_problem})
        except _READ_ERRORS as err:
            log.warning("unreadable VPA; its pods are admitted unchanged",
                        extra={"namespace": key[0], "workload": f"{key[1]}/{key[2]}", "error": str(err)})
            broken[key] = str(err)[:200]
    return targets, broken


def _convert(kind: str, objs: Iterable[Obj], convert: Callable[[Obj], Any]) -> list[Any]:
    out = []
    for obj in objs:
        try:
            out.append(convert(obj))
        except _READ_ERRORS as err:
            log.warning("skipping malformed object", extra={"kind": kind, "error": str(err)})
    return out


def build_snapshot(raw: Mapping[str, Sequence[Obj]], pool_label: str = "") -> TargetSnapshot:
    """Raw items per kind (see KINDS, and Nodes when a target has per-pool values) -> lookups (pure apart from
    warnings); ``pool_label``: the node label naming pools ("": the common keys, as the updater reads them)."""
    index = WorkloadIndex()
    index.add("ReplicaSet", raw.get("ReplicaSet", ()))
    index.add("Job", raw.get("Job", ()))
    targets, broken = _vpas(raw.get("VerticalPodAutoscaler", ()))
    limit_ranges = merge_by_namespace(_convert("LimitRange", raw.get("LimitRange", ()), limit_range))
    hpas = _convert("HorizontalPodAutoscaler", raw.get("HorizontalPodAutoscaler", ()), convert_hpa)
    quotas: dict[str, list[QuotaView]] = {}
    for q in _convert("ResourceQuota", raw.get("ResourceQuota", ()), convert_quota):
        if q.hard:
            quotas.setdefault(q.namespace, []).append(q)
    return TargetSnapshot(targets=targets, broken=broken, index=index,
                          limit_ranges={lr.namespace: lr for lr in limit_ranges},
                          hpa_resources={(h.namespace, h.workload_kind, h.workload_name): h.utilization_resources
                                         for h in hpas},
                          quotas={ns: tuple(qs) for ns, qs in quotas.items()},
                          node_pools={str((n.get("metadata") or {}).get("name", "")): node_pool(
                              (n.get("metadata") or {}).get("labels") or {}, pool_label or None)
                              for n in raw.get("Node", ())},
                          counts={kind: len(raw.get(kind, ())) for kind in KINDS})


def needed_namespaces(vpas: Iterable[Obj]) -> dict[str, set[str]]:
    """Kind -> namespaces where it must be listed, from the VPAs' target kinds."""
    out: dict[str, set[str]] = {kind: set() for kind in KINDS[1:]}
    for obj in vpas:
        ns, kind, _ = target_key(obj)
        out["LimitRange"].add(ns)
        out["ResourceQuota"].add(ns)
        out["HorizontalPodAutoscaler"].add(ns)
        if kind == "Deployment":
            out["ReplicaSet"].add(ns)
        elif kind == "CronJob":
            out["Job"].add(ns)
    return out


class TargetCache:
    """Lists with ``listings`` (from ``ClusterReader``); ``snapshot`` is the last good refresh.

    With ``watch_vpas`` the VPAs are also watched, and every change (a VPA created, a target written) sets
    ``changed``, on which the maintenance loop refreshes at once instead of at the next ``--resync``. Without
    it, a VPA or target written moments before a pod was created (the updater evicting right after the
    recommender's first target for a new workload) was up to one resync (15 s by default) away from the cache,
    and that pod was admitted without a mutation, counted as ``no-vpa`` or ``no-recommendation``."""

    def __init__(self, listings: Mapping[str, Listing], pool_label: str = "") -> None:
        self.listings, self.pool_label = listings, pool_label
        self.snapshot = TargetSnapshot()
        self.synced_monotonic: float | None = None
        self.changed = threading.Event()
        """Set by the VPA watch on every change; cleared by ``refresh``."""
        self.informer: Informer | None = None
        self._lock = threading.Lock()

    def watch_vpas(self, listing: Listing | None = None) -> None:
        """Watch the VPAs cluster-wide (``listing``: the one to use, default ours) and set ``changed`` on every
        change; ``refresh`` then reads them from the watch's cache while it is current."""
        self.informer = Informer(listing or self.listings["VerticalPodAutoscaler"],
                                 on_change=self.changed.set).start()

    def stop_watching(self) -> None:
        if self.informer is not None:
            self.informer.stop()
            self.informer = None

    def _vpas(self) -> list[Obj]:
        cached = self.informer.items() if self.informer is not None else None
        return list(cached) if cached is not None else list_raw(self.listings["VerticalPodAutoscaler"])

    def _list(self, kind: str, namespaces: set[str]) -> list[Obj]:
        if not namespaces:
            return []
        if len(namespaces) > CLUSTER_WIDE_ABOVE:
            return [o for o in list_raw(self.listings[kind])
                    if (o.get("metadata") or {}).get("namespace") in namespaces]
        return [o for ns in sorted(namespaces) for o in list_raw(self.listings[kind], ns)]

    def refresh(self) -> TargetSnapshot:
        """List and swap in a new snapshot; a KubeError propagates and the old snapshot stays."""
        with self._lock:
            self.changed.clear()  # a change from here on is seen by the next refresh
            raw: dict[str, list[Obj]] = {"VerticalPodAutoscaler": self._vpas()}
            for kind, namespaces in needed_namespaces(raw["VerticalPodAutoscaler"]).items():
                raw[kind] = self._list(kind, namespaces)
            if any(POOL_ANNOTATION in ((o.get("metadata") or {}).get("annotations") or {})
                   for o in raw["VerticalPodAutoscaler"]):
                raw["Node"] = list_raw(self.listings["Node"])
            snapshot = build_snapshot(raw, self.pool_label)
            self.snapshot, self.synced_monotonic = snapshot, time.monotonic()
            return snapshot

    def resolve(self, namespace: str, meta: Mapping[str, Any]) -> Resolution:
        return self.snapshot.resolve(namespace, meta)
