"""Workload discovery for the report: one paged list call per kind (per namespace or cluster-wide), read-only.

Owns every call the report makes to the API server. ``Discovery.read`` lists Deployments, StatefulSets,
DaemonSets, CronJobs, Jobs, ReplicaSets, running Pods, Argo Rollouts (when ``argoproj.io`` serves them),
Nodes, autoscaling/v2 HPAs and LimitRanges, each as raw JSON (``_preload_content=False``) in pages of
``PAGE_SIZE``, never one call per workload. It then keeps the top-level workloads (Jobs owned by a
CronJob, ReplicaSets owned by a Deployment or Rollout and pods with a controller are part of their owner),
applies the kind and label-selector filters, and attaches each workload's running pods.

Failures become ``KubeError``s (``podtailor.kube.errors``): a 403 names the verb, resource, API group and
scope that are missing. Two lists are optional: Rollouts (404: the CRD is not installed, so there are none;
403: a warning) and Nodes (403: a warning, and node pools and allocatable are unknown; namespace-scoped
read-only roles often lack them).
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from kubernetes import client

from podtailor.kube.errors import KubeError, PermanentKubeError, TemporaryKubeError, classify
from podtailor.resize.changes import merge_limit_ranges
from podtailor.resize.types import LimitRangeView
from recommender.report import objects as ob
from recommender.report.types import KINDS, Inventory, PodInfo, Workload, WorkloadKey

Obj = dict[str, Any]
PAGE_SIZE = 1000
TEMPLATE_KINDS = ("Deployment", "StatefulSet", "DaemonSet", "CronJob", "Job", "ReplicaSet", "Rollout")
ROLLOUT = ("argoproj.io", "v1alpha1", "rollouts")


@dataclass(frozen=True, slots=True, kw_only=True)
class Listing:
    group: str
    resource: str
    call: Callable[..., Any]
    """call(namespace or None, **kwargs) -> raw HTTP response."""
    namespaced: bool = True
    optional: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class Filters:
    namespaces: tuple[str, ...] = ()
    selector: str = ""
    kinds: tuple[str, ...] = ()
    """Empty: every kind in ``KINDS``."""
    pool_label: str | None = None


def _listings(api: client.ApiClient) -> dict[str, Listing]:
    core, apps, batch = client.CoreV1Api(api), client.AppsV1Api(api), client.BatchV1Api(api)
    hpa, custom = client.AutoscalingV2Api(api), client.CustomObjectsApi(api)

    def pick(namespaced: Callable[..., Any], every: Callable[..., Any]) -> Callable[..., Any]:
        return lambda ns, **kw: namespaced(ns, **kw) if ns else every(**kw)

    def rollouts(ns: str | None, **kw: Any) -> Any:
        if ns:
            return custom.list_namespaced_custom_object(*ROLLOUT[:2], ns, ROLLOUT[2], **kw)
        return custom.list_cluster_custom_object(*ROLLOUT, **kw)

    return {
        "Deployment": Listing(group="apps", resource="deployments", call=pick(
            apps.list_namespaced_deployment, apps.list_deployment_for_all_namespaces)),
        "StatefulSet": Listing(group="apps", resource="statefulsets", call=pick(
            apps.list_namespaced_stateful_set, apps.list_stateful_set_for_all_namespaces)),
        "DaemonSet": Listing(group="apps", resource="daemonsets", call=pick(
            apps.list_namespaced_daemon_set, apps.list_daemon_set_for_all_namespaces)),
        "ReplicaSet": Listing(group="apps", resource="replicasets", call=pick(
            apps.list_namespaced_replica_set, apps.list_replica_set_for_all_namespaces)),
        "Job": Listing(group="batch", resource="jobs", call=pick(batch.list_namespaced_job,
                                                                 batch.list_job_for_all_namespaces)),
        "CronJob": Listing(group="batch", resource="cronjobs", call=pick(
            batch.list_namespaced_cron_job, batch.list_cron_job_for_all_namespaces)),
        "Rollout": Listing(group=ROLLOUT[0], resource=ROLLOUT[2], call=rollouts, optional=True),
        "Pod": Listing(group="", resource="pods", call=pick(core.list_namespaced_pod,
                                                            core.list_pod_for_all_namespaces)),
        "Node": Listing(group="", resource="nodes", call=lambda _ns, **kw: core.list_node(**kw), namespaced=False,
                        optional=True),
        "HorizontalPodAutoscaler": Listing(group="autoscaling", resource="horizontalpodautoscalers", call=pick(
            hpa.list_namespaced_horizontal_pod_autoscaler, hpa.list_horizontal_pod_autoscaler_for_all_namespaces)),
        "LimitRange": Listing(group="", resource="limitranges", call=pick(
            core.list_namespaced_limit_range, core.list_limit_range_for_all_namespaces)),
    }


class Discovery:
    """Reads an ``Inventory``; holds nothing between reads but the API clients and counters."""

    def __init__(self, api: client.ApiClient, listings: dict[str, Listing] | None = None) -> None:
        self.listings = listings if listings is not None else _listings(api)
        self.requests = 0
        self.warnings: list[str] = []

    # ----------------------------------------------------------------------------------------- calls
    def _page(self, listing: Listing, ns: str | None, cont: str | None, **kwargs: Any) -> Obj | None:
        scope = f"in namespace {ns}" if ns else "cluster-wide"
        self.requests += 1
        try:
            resp = listing.call(ns, limit=PAGE_SIZE, _continue=cont, _preload_content=False, **kwargs)
            body: Obj = json.loads(resp.data)
            return body
        except client.ApiException as err:
            if err.status == 404 and listing.optional:
                return None  # the CRD is not installed: no objects of that kind
            if err.status == 403:
                group = f"apiGroup '{listing.group}'" if listing.group else "the core API group"
                text = (f"missing permission: cannot list {listing.resource} {scope} (RBAC verb 'list' on "
                        f"resource '{listing.resource}', {group})")
                if listing.optional:
                    self.warnings.append(text)
                    return None
                raise PermanentKubeError(text, status=403) from err
            raise classify(err, f"list {listing.resource} {scope}") from err
        except ValueError as err:
            raise TemporaryKubeError(f"list {listing.resource} {scope}: unreadable answer: {err}") from err
        except KubeError:
            raise
        except Exception as err:
            raise classify(err, f"list {listing.resource} {scope}") from err

    def _list_one(self, listing: Listing, ns: str | None, **kwargs: Any) -> list[Obj]:
        items: list[Obj] = []
        cont: str | None = None
        while True:
            body = self._page(listing, ns, cont, **kwargs)
            if body is None:
                return items
            items.extend(body.get("items") or ())
            cont = (body.get("metadata") or {}).get("continue") or None
            if not cont:
                return items

    def list(self, kind: str, namespaces: Sequence[str], **kwargs: Any) -> list[Obj]:
        listing = self.listings[kind]
        if not listing.namespaced or not namespaces:
            return self._list_one(listing, None, **kwargs)
        return [obj for ns in namespaces for obj in self._list_one(listing, ns, **kwargs)]

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
        inventory = assemble(raw, requirements, kinds, filters.pool_label)
        return Inventory(workloads=inventory.workloads, nodes=inventory.nodes, hpa_resources=inventory.hpa_resources,
                         limit_ranges=inventory.limit_ranges, warnings=tuple(self.warnings),
                         api_requests=self.requests)


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
                    labels=dict(meta.get("labels") or {}))


def _pods_by_workload(raw: dict[str, list[Obj]]) -> dict[WorkloadKey, list[PodInfo]]:
    owners = ob.OwnerMap(raw.get("ReplicaSet", []), raw.get("Job", []))
    out: dict[WorkloadKey, list[PodInfo]] = defaultdict(list)
    for pod in raw.get("Pod", []):
        kind, name = owners.top(pod)
        out[(str((pod.get("metadata") or {}).get("namespace", "")), kind, name)].append(ob.pod_info(pod))
    return out


def assemble(raw: dict[str, list[Obj]], requirements: list[tuple[str, str, frozenset[str]]],
             kinds: frozenset[str], pool_label: str | None) -> Inventory:
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
    hpas: dict[WorkloadKey, frozenset[str]] = defaultdict(frozenset)
    for obj in raw.get("HorizontalPodAutoscaler", []):
        found = ob.hpa_target(obj)
        if found is not None:
            hpas[found[0]] = hpas[found[0]] | found[1]
    ranges: dict[str, LimitRangeView] = {}
    for obj in raw.get("LimitRange", []):
        view = ob.limit_range(obj)
        ranges[view.namespace] = merge_limit_ranges(ranges[view.namespace], view) if view.namespace in ranges \
            else view
    return Inventory(workloads=tuple(workloads), nodes=nodes, hpa_resources=dict(hpas), limit_ranges=ranges)
