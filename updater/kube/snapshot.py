"""One consistent-enough read of the cluster for a planning pass: ``ClusterReader.read()`` -> ``Snapshot``.

Owns listing everything the planner and the rollout need, once per kind (cluster-wide, or once per namespace
when namespaces are given), as raw JSON (or, for ``run``, reading it from watch-fed caches while they are
current: ``start_watching`` and ``informer.py``), and converting it into the core's values: pods (bound, not
Pending, not Succeeded) with their top-level workload and pool, pod observations, VPA targets with replicas,
HPAs, merged LimitRanges, ResourceQuotas (hard and used), nodes, parsed ResizePolicies, restart approvals, and
what the API server supports (``updater.answers.features_for``). Support is judged from ``/version`` alone:
the ``pods/resize`` subresource exists from 1.32; pod-level in-place resize (KEP-5419) is beta and on by
default from 1.36 (alpha and off in 1.35, so 1.35 counts as unsupported; a feature gate turned off on a 1.36+
cluster is not seen here and shows up as a rejected resize); the API server refuses a target above the node's
allocatable with a 403 from 1.36, where up to 1.35 the kubelet answered Infeasible; plain init containers are
resizable, and an init-container or pod-level resize needs the node to declare the feature, from 1.36 (each
node's ``declaredFeatures`` is on its ``NodeView``). An object with a malformed
field is skipped with a warning and counted in ``Snapshot.skipped``; an API failure raises a ``KubeError``
(``errors.py``).
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from kubernetes import client

from podtailor.kube.errors import classify
from podtailor.kube.fields import limit_range
from podtailor.kube.listing import REQUEST_TIMEOUT_S, Listing, builtin_listings, custom_listing, list_raw
from podtailor.resize.types import LimitRangeView
from podtailor.vpa import GROUP as VPA_GROUP
from podtailor.vpa import PLURAL as VPA_PLURAL
from podtailor.vpa import VERSION as VPA_VERSION
from podtailor.vpa import target_key
from updater.answers import ServerFeatures, features_for
from updater.kube.fields import MalformedObject, Obj
from updater.kube.informer import Informer
from updater.kube.objects import convert_hpa, convert_node, convert_vpa, merge_by_namespace
from updater.kube.pods import convert_pod
from updater.kube.policy_crd import GROUP as POLICY_GROUP
from updater.kube.policy_crd import PLURAL as POLICY_PLURAL
from updater.kube.policy_crd import VERSION as POLICY_VERSION
from updater.kube.policy_crd import PolicyError, parse_policy, select_policy
from updater.kube.quotas import convert_quota
from updater.kube.refusals import SnapshotError
from updater.kube.workloads import WorkloadIndex, WorkloadKey
from updater.observe import PodObservation
from updater.policy.analysis import WorkloadAnalyses
from updater.policy.types import HpaView, NodeView, PodView, QuotaView, RolloutPolicy, WorkloadTarget

log = logging.getLogger("podtailor.updater.kube")
T = TypeVar("T")
LISTING_THREADS = 4
"""Requests of one snapshot in flight at once (/version and the listings)."""
POD_FIELD_SELECTOR = "spec.nodeName!=,status.phase!=Pending,status.phase!=Succeeded"
"""Bound pods that have started and not completed: Running ones become PodViews; Failed/Unknown ones are
kept as observations only (a canary that failed must be seen)."""
WORKLOAD_KINDS = ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job", "CronJob")
FRESH_AT_BAKE_END = ("Pod", "Node")
"""Kinds ``run`` lists from the API server, not the watch caches, for a pass that ends a bake (``read(fresh=...)``):
the gates read the pods, and a pool whose nodes turned unhealthy is frozen."""
LIST_OPTIONS: Mapping[str, Mapping[str, str]] = {"Pod": {"field_selector": POD_FIELD_SELECTOR}}
"""Per kind, the options of its list (and of its watch, when the reader watches)."""
VERSION_TTL_S = 60.0
"""While watching, /version is asked again after this long (an upgrade is seen within a minute)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerVersion:
    major: int
    minor: int
    git_version: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Snapshot:
    pods: tuple[PodView, ...]
    """Running pods on a node, including ones being deleted (``deleting``)."""
    observations: Mapping[str, PodObservation]
    """Keyed "namespace/name"; also Failed and Unknown pods."""
    targets: tuple[WorkloadTarget, ...]
    hpas: tuple[HpaView, ...]
    limit_ranges: tuple[LimitRangeView, ...]
    """One per namespace that has Container limits (merged, tightest wins)."""
    nodes: tuple[NodeView, ...]
    policies: tuple[RolloutPolicy, ...]
    """Every ResizePolicy that parsed; see ``policy_errors`` and ``policy_for``."""
    policy_errors: tuple[str, ...] = ()
    """ResizePolicies that did not parse: while any exists, ``policy_for`` refuses to choose."""
    approvals: frozenset[WorkloadKey] = frozenset()
    """(namespace, kind, name) of workloads annotated podtailor.io/approve-restart: "true"."""
    analyses: Mapping[WorkloadKey, WorkloadAnalyses] = field(default_factory=dict)
    """Workloads' own canary analyses (annotation podtailor.io/analyses), parsed or with their error."""
    server_version: ServerVersion
    pod_level_resize_supported: bool
    resize_subresource_supported: bool
    quotas: tuple[QuotaView, ...] = ()
    """The ResourceQuotas with compute limits (cpu, memory, requests.*, limits.*)."""
    features: ServerFeatures | None = None
    """What the server's version answers to a resize (``updater.answers.features_for``)."""
    skipped: Mapping[str, int] = field(default_factory=dict)
    """Objects left out because a field could not be read, per kind (each one logged as a warning)."""

    def policy_for(self, namespace: str) -> RolloutPolicy:
        """The policy that applies to ``namespace`` (``select_policy``); raises PolicyError while any
        ResizePolicy is unreadable, since the bad one might have been the stricter one."""
        if self.policy_errors:
            raise PolicyError("; ".join(self.policy_errors))
        return select_policy(self.policies, namespace)


def parse_version(major: str, minor: str, git_version: str) -> ServerVersion:
    """"1", "37+" (providers append "+") -> 1.37."""
    m_major, m_minor = re.match(r"^(\d+)", major or ""), re.match(r"^(\d+)", minor or "")
    if m_major is None or m_minor is None:
        m = re.match(r"^v(\d+)\.(\d+)", git_version or "")
        if m is None:
            raise SnapshotError(f"unreadable server version {major!r}.{minor!r} ({git_version!r})")
        return ServerVersion(major=int(m[1]), minor=int(m[2]), git_version=git_version)
    return ServerVersion(major=int(m_major[1]), minor=int(m_minor[1]), git_version=git_version)


class ClusterReader:
    """Reads a Snapshot. Lists every kind per read, unless ``start_watching`` was called: then each kind is
    read from its watch-fed cache (``informer.py``) while that cache is current, and listed otherwise."""

    def __init__(self, api_client: client.ApiClient) -> None:
        self.informers: dict[tuple[str, str | None], Informer] = {}
        self.fallbacks = 0
        """Reads of one kind in one scope that listed because its cache was not current (while watching)."""
        self._version: tuple[ServerVersion, float] | None = None
        self._lock = threading.Lock()
        custom = client.CustomObjectsApi(api_client)
        self.version_api: Any = client.VersionApi(api_client)  # raw JSON calls: typed as Any
        self.listings: dict[str, Listing] = {
            **builtin_listings(api_client),
            # Without the VPA CRD there are no targets; without ours, no policies (the defaults apply).
            "VerticalPodAutoscaler": custom_listing(custom, VPA_GROUP, VPA_VERSION, VPA_PLURAL, optional=True),
            "ResizePolicy": custom_listing(custom, POLICY_GROUP, POLICY_VERSION, POLICY_PLURAL, namespaced=False,
                                           optional=True),
        }

    def start_watching(self, namespaces: Sequence[str] = (), watch_client: client.ApiClient | None = None,
                       on_pod_change: Callable[[], None] | None = None) -> None:
        """Keep a watch-fed cache of every kind ``read`` lists, in ``namespaces`` (as ``read`` will be called)
        or cluster-wide; ``watch_client`` carries the long-running watches (default: this reader's client);
        ``on_pod_change`` is called from a watch thread whenever a cached pod changes."""
        listings = self.listings if watch_client is None else ClusterReader(watch_client).listings
        for kind, listing in listings.items():
            for ns in (namespaces if listing.namespaced and namespaces else (None,)):
                self.informers[(kind, ns)] = Informer(listing, ns, on_change=on_pod_change if kind == "Pod" else None,
                                                      list_options=LIST_OPTIONS.get(kind)).start()

    def stop_watching(self) -> None:
        for informer in self.informers.values():
            informer.stop()
        self.informers.clear()

    def _list(self, kind: str, namespaces: Sequence[str], from_cache: bool = True, **kwargs: Any) -> list[Obj]:
        """Every item of ``kind`` in ``namespaces`` (empty: all), from the cache where it is current (unless
        ``from_cache`` is False: then from the API server)."""
        listing = self.listings[kind]
        out: list[Obj] = []
        for ns in (namespaces if listing.namespaced and namespaces else (None,)):
            informer = self.informers.get((kind, ns)) if from_cache and kwargs == LIST_OPTIONS.get(kind, {}) else None
            cached = informer.items() if informer is not None else None
            if cached is None:
                if informer is not None:  # watched, but not known to be current
                    with self._lock:
                        self.fallbacks += 1
                cached = self._fetch(kind, ns, **kwargs)
            out.extend(cached)
        return out

    def _fetch(self, kind: str, namespace: str | None, **kwargs: Any) -> list[Obj]:
        """One listing from the API server."""
        return list_raw(self.listings[kind], namespace, **kwargs)

    def server_version(self) -> ServerVersion:
        try:
            body = json.loads(self.version_api.get_code(_preload_content=False,
                                                          _request_timeout=REQUEST_TIMEOUT_S).data)
        except Exception as err:
            raise classify(err, "read /version") from err
        return parse_version(str(body.get("major", "")), str(body.get("minor", "")), str(body.get("gitVersion", "")))

    def read(self, policy_pool_label: str | None = None, namespaces: Sequence[str] = (),
             fresh: Sequence[str] = ()) -> Snapshot:
        """List every kind once and convert; ``policy_pool_label``: the node label naming pools (None or ""
        for the first present of the common keys); ``namespaces``: only these (empty: all); ``fresh``: kinds
        listed from the API server even while their watch-fed cache is current."""
        def listed(kind: str) -> list[Obj]:
            return self._list(kind, namespaces, from_cache=kind not in fresh, **LIST_OPTIONS.get(kind, {}))

        # The listings are independent reads: a few at a time, so a read costs about its largest listing.
        with ThreadPoolExecutor(max_workers=LISTING_THREADS, thread_name_prefix="snapshot") as pool:
            version = pool.submit(self._server_version)
            raw = dict(zip(self.listings, pool.map(listed, self.listings), strict=True))
            return build_snapshot(raw, version.result(), policy_pool_label)

    def _server_version(self) -> ServerVersion:
        """``server_version``, asked again after ``VERSION_TTL_S`` while watching (every read otherwise)."""
        now = time.monotonic()
        if self.informers and self._version is not None and now - self._version[1] < VERSION_TTL_S:
            return self._version[0]
        version = self.server_version()
        self._version = (version, now)
        return version


def _convert_all(kind: str, objs: Sequence[Obj], convert: Callable[[Obj], T], skipped: dict[str, int]) -> list[T]:
    out = []
    for obj in objs:
        try:
            out.append(convert(obj))
        except (MalformedObject, KeyError, TypeError, AttributeError, ValueError) as err:
            meta = (obj.get("metadata") or {}) if isinstance(obj, dict) else {}
            log.warning("skipping malformed object", extra={"kind": kind, "namespace": meta.get("namespace"),
                                                            "object": meta.get("name"), "error": str(err)})
            skipped[kind] = skipped.get(kind, 0) + 1
    return out


def _policies(objs: Sequence[Obj]) -> tuple[tuple[RolloutPolicy, ...], tuple[str, ...]]:
    policies, errors = [], []
    for obj in objs:
        try:
            policies.append(parse_policy(obj))
        except PolicyError as err:
            log.warning("unreadable ResizePolicy", extra={"error": str(err)})
            errors.append(str(err))
    return tuple(sorted(policies, key=lambda p: p.name)), tuple(errors)


def endpoint_readiness(slices: Sequence[Obj]) -> dict[str, bool]:
    """Pod uid -> whether some EndpointSlice lists it as a ready endpoint (the EndpointSlice controller keeps a
    pod that is not Ready in its slices with ``conditions.ready`` false)."""
    out: dict[str, bool] = {}
    for s in slices:
        for e in s.get("endpoints") or ():
            uid = str((e.get("targetRef") or {}).get("uid") or "")
            if uid:
                out[uid] = out.get(uid, False) or (e.get("conditions") or {}).get("ready") is not False
    return out


def build_snapshot(raw: Mapping[str, Sequence[Obj]], version: ServerVersion,
                   policy_pool_label: str | None = None) -> Snapshot:
    """The conversion half of ``read`` (pure apart from warnings): raw items per kind -> Snapshot."""
    skipped: dict[str, int] = {}
    index = WorkloadIndex()
    for kind in WORKLOAD_KINDS:
        index.add(kind, raw.get(kind, ()))
    nodes = _convert_all("Node", raw.get("Node", ()), lambda o: convert_node(o, policy_pool_label), skipped)
    pools = {n.name: n.pool for n in nodes}
    converted = _convert_all("Pod", raw.get("Pod", ()), lambda o: convert_pod(o, pools, index.top_owner), skipped)
    pods = tuple(view for view, _ in converted if view is not None)
    counts: dict[WorkloadKey, int] = {}
    for pod in pods:
        key = (pod.namespace, pod.workload_kind, pod.workload_name)
        counts[key] = counts.get(key, 0) + 1

    def target(obj: Obj) -> WorkloadTarget:
        key = target_key(obj)
        replicas = index.replicas_of(key)
        converted = convert_vpa(obj, counts.get(key, 0) if replicas is None else replicas)
        if converted.pool_problem:
            log.warning("per-pool values refused", extra={"namespace": key[0], "workload": f"{key[1]}/{key[2]}",
                                                          "vpa": converted.vpa_name, "reason": converted.pool_problem})
        return converted

    ready_endpoints = endpoint_readiness(raw.get("EndpointSlice", ()))
    observations = {obs.key: replace(obs, endpoint_ready=ready_endpoints[obs.uid]) if obs.uid in ready_endpoints
                    else obs for _, obs in converted}
    policies, policy_errors = _policies(raw.get("ResizePolicy", ()))
    features = features_for(version.major, version.minor)
    quotas = tuple(q for q in _convert_all("ResourceQuota", raw.get("ResourceQuota", ()), convert_quota, skipped)
                   if q.hard)
    return Snapshot(
        pods=pods, observations=observations,
        targets=tuple(_convert_all("VerticalPodAutoscaler", raw.get("VerticalPodAutoscaler", ()), target, skipped)),
        hpas=tuple(_convert_all("HorizontalPodAutoscaler", raw.get("HorizontalPodAutoscaler", ()), convert_hpa,
                                skipped)),
        limit_ranges=merge_by_namespace(_convert_all("LimitRange", raw.get("LimitRange", ()), limit_range,
                                                     skipped)),
        nodes=tuple(nodes), policies=policies, policy_errors=policy_errors, approvals=frozenset(index.approvals),
        analyses=dict(index.analyses),
        server_version=version, resize_subresource_supported=features.resize_subresource,
        pod_level_resize_supported=features.pod_level_resize, skipped=skipped, quotas=quotas, features=features,
    )
