"""Workload discovery for the report: one paged list call per kind (per namespace or cluster-wide), read-only.

Owns every call the report makes to the API server. ``Discovery.read`` lists Deployments, StatefulSets,
DaemonSets, CronJobs, Jobs, ReplicaSets, running Pods, Argo Rollouts (when ``argoproj.io`` serves them),
Nodes, autoscaling/v2 HPAs, LimitRanges and VerticalPodAutoscalers, each as raw JSON in pages
(``podtailor.kube.listing``, without its request timeout: a one-off read waits as long as the API server
takes), never one call per workload. It then keeps the top-level workloads (Jobs owned by a CronJob,
ReplicaSets owned by a Deployment or Rollout and pods with a controller are part of their owner), applies the
kind and label-selector filters, and attaches each workload's running pods and the VPA that targets it (whose
container policy the recommender follows; a VPA that cannot be served, or a second one for the same workload,
is a warning). A DaemonSet whose running pods are on two or more named node pools becomes one row per pool
(``by_pool``), recommended from that pool's usage, as the recommender's per-pool values are.

Failures become ``KubeError``s (``podtailor.kube.errors``): a 403 names the verb, resource, API group and
scope that are missing. Three lists are optional: Rollouts and VPAs (404: the CRD is not installed, so there
are none; 403: a warning, and every workload gets the default container policy) and Nodes (403: a warning,
and node pools and allocatable are unknown; namespace-scoped read-only roles often lack them).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from kubernetes import client

from podtailor.kube import fields
from podtailor.kube.errors import KubeError, PermanentKubeError
from podtailor.kube.listing import Listing, Obj, builtin_listings, custom_listing, list_raw
from podtailor.resize.changes import limit_ranges_by_namespace
from podtailor.vpa import GROUP as VPA_GROUP
from podtailor.vpa import PLURAL as VPA_PLURAL
from podtailor.vpa import VERSION as VPA_VERSION
from recommender.kube.served import UnparsableVpa, VpaSpec, read_vpa
from recommender.report import objects as ob
from recommender.report.types import KINDS, Inventory, NodeInfo, PodInfo, Workload, WorkloadKey

TEMPLATE_KINDS = ("Deployment", "StatefulSet", "DaemonSet", "CronJob", "Job", "ReplicaSet", "Rollout")
ROLLOUT = ("argoproj.io", "v1alpha1", "rollouts")
LISTED = ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job", "CronJob", "Rollout", "Pod", "Node",
          "HorizontalPodAutoscaler", "LimitRange", "VerticalPodAutoscaler")
"""In this order (the progress bar names each)."""
OPTIONAL = frozenset({"Rollout", "Node", "VerticalPodAutoscaler"})
"""Kinds the report does without: a 403 is a warning, a 404 (Rollouts, VPAs: the CRD is not installed) means
none."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Filters:
    namespaces: tuple[str, ...] = ()
    selector: str = ""
    kinds: tuple[str, ...] = ()
    """Empty: every kind in ``KINDS``."""
    pool_label: str | None = None
    split_pools: bool = True
    """A DaemonSet on several node pools as one row per pool (``by_pool``); off over several clusters, whose
    reads are not split by pool."""


def _listings(api: client.ApiClient) -> dict[str, Listing]:
    custom = client.CustomObjectsApi(api)
    every = {**builtin_listings(api), "Rollout": custom_listing(custom, *ROLLOUT),
             "VerticalPodAutoscaler": custom_listing(custom, VPA_GROUP, VPA_VERSION, VPA_PLURAL)}
    return {kind: replace(every[kind], request_timeout=None) for kind in LISTED}


class Discovery:
    """Reads an ``Inventory``; holds nothing between reads but the API clients and counters."""

    def __init__(self, api: client.ApiClient, listings: dict[str, Listing] | None = None) -> None:
        self.listings = {kind: replace(listing, call=self._counted(listing.call)) for kind, listing in
                         (listings if listings is not None else _listings(api)).items()}
        self.requests = 0
        self.warnings: list[str] = []

    # ----------------------------------------------------------------------------------------- calls
    def _counted(self, call: Callable[..., Any]) -> Callable[..., Any]:
        def counted(*args: Any, **kwargs: Any) -> Any:
            self.requests += 1
            return call(*args, **kwargs)
        return counted

    def _list_one(self, kind: str, ns: str | None, **kwargs: Any) -> list[Obj]:
        listing = self.listings[kind]
        try:
            return list_raw(listing, ns, **kwargs)
        except KubeError as err:
            if err.status == 404 and kind in OPTIONAL:
                return []  # the CRD is not installed: no objects of that kind
            if err.status != 403:
                raise
            group = f"apiGroup '{listing.group}'" if listing.group else "the core API group"
            text = (f"missing permission: cannot list {listing.resource} "
                    f"{f'in namespace {ns}' if ns else 'cluster-wide'} (RBAC verb 'list' on "
                    f"resource '{listing.resource}', {group})")
            if kind in OPTIONAL:
                self.warnings.append(text)
                return []
            raise PermanentKubeError(text, status=403) from err

    def list(self, kind: str, namespaces: Sequence[str], **kwargs: Any) -> list[Obj]:
        if not self.listings[kind].namespaced or not namespaces:
            return self._list_one(kind, None, **kwargs)
        return [obj for ns in namespaces for obj in self._list_one(kind, ns, **kwargs)]

    # ------------------------------------------------------------------------------------------ read
    def read(self, filters: Filters, progress: Callable[[str], None] | None = None) -> Inventory:
        requirements = ob.parse_selector(filters.selector)
        raw: dict[str, list[Obj]] = {}
        kinds = frozenset(filters.kinds or KINDS)
        for kind in self.listings:
            if not _needed(kind, kinds):
                continue
            if progress is not None:
                progress(kind)
            extra = {"field_selector": "status.phase=Running"} if kind == "Pod" else {}
            raw[kind] = self.list(kind, filters.namespaces, **extra)
        inventory = assemble(raw, requirements, kinds, filters.pool_label, split_pools=filters.split_pools)
        return replace(inventory, warnings=(*self.warnings, *inventory.warnings), api_requests=self.requests)


# --------------------------------------------------------------------------------------------- assembly
def _needed(kind: str, kinds: frozenset[str]) -> bool:
    """ReplicaSets, Jobs and Pods map pods to owners, so they are always listed; a Rollout may take its
    template from a Deployment."""
    if kind == "Deployment":
        return bool(kinds & {"Deployment", "Rollout"})
    return kind not in TEMPLATE_KINDS or kind in ("ReplicaSet", "Job") or kind in kinds


def _top_level(kind: str, obj: Obj) -> bool:
    owner = ob.controller_of(obj)
    if kind == "Job":
        return owner is None or owner[0] != "CronJob"
    if kind == "ReplicaSet":
        return owner is None
    return True


def _rollout_template(obj: Obj, deployments: dict[tuple[str, str], Obj]) -> Obj:
    spec = obj.get("spec") or {}
    ref = spec.get("workloadRef") or {}
    if not spec.get("template") and ref.get("kind") == "Deployment":
        ns = str((obj.get("metadata") or {}).get("namespace", ""))
        return ob.template_spec("Deployment", deployments.get((ns, str(ref.get("name"))), {}))
    return ob.template_spec("Rollout", obj)


def _workload(kind: str, obj: Obj, pod_spec: Obj, pods: list[PodInfo]) -> Workload:
    meta = obj.get("metadata") or {}
    return Workload(namespace=str(meta.get("namespace", "")), kind=kind, name=str(meta.get("name", "")),
                    replicas=ob.replicas(kind, obj), restart_policy=str(pod_spec.get("restartPolicy") or "Always"),
                    containers=ob.containers(pod_spec), pods=tuple(sorted(pods, key=lambda p: p.name)),
                    labels=dict(meta.get("labels") or {}), pod_level=ob.pod_level(pod_spec))


def _pods_by_workload(raw: dict[str, list[Obj]]) -> dict[WorkloadKey, list[PodInfo]]:
    owners = ob.OwnerMap(raw.get("ReplicaSet", []), raw.get("Job", []))
    out: dict[WorkloadKey, list[PodInfo]] = defaultdict(list)
    for pod in raw.get("Pod", []):
        kind, name = owners.top(pod)
        out[(str((pod.get("metadata") or {}).get("namespace", "")), kind, name)].append(ob.pod_info(pod))
    return out


def assemble(raw: dict[str, list[Obj]], requirements: list[tuple[str, str, frozenset[str]]],
             kinds: frozenset[str], pool_label: str | None, *, split_pools: bool = True) -> Inventory:
    """The pure half of ``read``: raw items per kind -> Inventory (workloads filtered by kind and labels)."""
    pods = _pods_by_workload(raw)
    deployments = {(str(d["metadata"].get("namespace", "")), str(d["metadata"].get("name", ""))): d
                   for d in raw.get("Deployment", [])}
    workloads = []
    for kind in (k for k in TEMPLATE_KINDS if k in kinds):
        for obj in raw.get(kind, []):
            meta = obj.get("metadata") or {}
            if not _top_level(kind, obj) or not ob.matches(requirements, meta.get("labels") or {}):
                continue
            spec = _rollout_template(obj, deployments) if kind == "Rollout" else ob.template_spec(kind, obj)
            key = (str(meta.get("namespace", "")), kind, str(meta.get("name", "")))
            workloads.append(_workload(kind, obj, spec, pods.get(key, [])))
    if "Pod" in kinds:
        owners = ob.OwnerMap([], [])
        for pod in raw.get("Pod", []):
            meta = pod.get("metadata") or {}
            if owners.top(pod)[0] == "Pod" and ob.matches(requirements, meta.get("labels") or {}):
                workloads.append(_workload("Pod", pod, ob.template_spec("Pod", pod), [ob.pod_info(pod)]))
    nodes = {n.name: n for n in (ob.node_info(obj, pool_label) for obj in raw.get("Node", []))}
    workloads = [row for w in workloads for row in (by_pool(w, nodes) if split_pools else [w])]
    hpas: dict[WorkloadKey, frozenset[str]] = defaultdict(frozenset)
    for obj in raw.get("HorizontalPodAutoscaler", []):
        found = ob.hpa_target(obj)
        if found is not None:
            hpas[found[0]] = hpas[found[0]] | found[1]
    ranges = limit_ranges_by_namespace(fields.limit_range(obj, lenient=True) for obj in raw.get("LimitRange", []))
    vpas, warnings = vpas_by_workload(raw.get("VerticalPodAutoscaler", []))
    keys = {w.key for w in workloads}
    return Inventory(workloads=tuple(workloads), nodes=nodes, hpa_resources=dict(hpas), limit_ranges=ranges,
                     vpas={k: v for k, v in vpas.items() if k in keys}, warnings=warnings)


def by_pool(workload: Workload, nodes: Mapping[str, NodeInfo]) -> list[Workload]:
    """A DaemonSet whose running pods are on two or more named node pools as one row per pool (its pods there,
    ``Workload.pool`` set: the recommender's per-pool values, ``recommender.pools``); anything else as it is."""
    pools: dict[str, list[PodInfo]] = {}
    for p in workload.pods:
        pools.setdefault(nodes[p.node].pool if p.node in nodes else "", []).append(p)
    if workload.kind != "DaemonSet" or len([p for p in pools if p]) < 2:
        return [workload]
    return [replace(workload, pods=tuple(members), replicas=len(members), pool=pool)
            for pool, members in sorted(pools.items())]


def vpas_by_workload(items: list[Obj]) -> tuple[dict[WorkloadKey, VpaSpec], tuple[str, ...]]:
    """The VPA targeting each workload (by namespace, target kind and name; of two, the first by name), and a
    warning for each VPA that is left out: one the recommender cannot serve (its reason), or a second one."""
    out: dict[WorkloadKey, VpaSpec] = {}
    warnings: list[str] = []
    for obj in sorted(items, key=lambda o: (str((o.get("metadata") or {}).get("namespace", "")),
                                            str((o.get("metadata") or {}).get("name", "")))):
        meta = obj.get("metadata") or {}
        where = f"VPA {meta.get('namespace', '')}/{meta.get('name', '')}"
        vpa = read_vpa(obj)
        if isinstance(vpa, UnparsableVpa):
            warnings.append(f"{where} is not served ({vpa.error}): its workload is reported with the default policy")
            continue
        key = (vpa.namespace, vpa.target.kind, vpa.target.name)
        if key in out:
            warnings.append(f"{where} is left out: VPA {out[key].name} already targets {key[1]} {key[2]}")
            continue
        out[key] = vpa
    return out, tuple(warnings)
