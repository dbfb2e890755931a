"""Listing a kind from the API server: one paged raw list, failures classified once.

Owns ``Listing`` (which kind to list: API group, resource, and the client function; ``builtin_listing`` and
``custom_listing`` build one from the client's functions, ``builtin_listings`` the built-in kinds the halves
read) and ``list_raw``, which pages through a list with
``_preload_content=False`` and returns plain JSON items (no model parsing: 10,000 pods cost a
``json.loads``). Failures become the ``KubeError`` tree
(``TemporaryKubeError``: retry later; ``PermanentKubeError``: fix something); a 403 names the RBAC verb,
resource and scope that are missing, a 410 on a continue token (the list expired while paging) is
temporary, and a 404 for an optional custom resource (its CRD is not installed) is an empty list.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kubernetes import client

from podtailor.kube.errors import PermanentKubeError, TemporaryKubeError, classify

log = logging.getLogger("podtailor.updater.kube")


Obj = dict[str, Any]


PAGE_SIZE = 1000
"""Items per list page: big enough for few round trips, small enough to keep the API server's memory flat."""


REQUEST_TIMEOUT_S = (5.0, 9.0)
"""Client-side (connect, read) timeout of every updater request. Without one, a dead TCP path (no FIN, no
RST) hangs a call forever (kubernetes-client/python#1402); the read part stays below the 10 s renew deadline
of leader election, so a pass cannot outlive the lease it started under by much."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Listing:
    """How to list one kind: ``call(namespace or None, **kwargs)`` returns the raw HTTP response."""

    group: str
    """API group ("" for core), for the RBAC hint of a 403."""
    resource: str
    call: Callable[..., Any]
    namespaced: bool = True
    optional: bool = False
    """A custom resource whose CRD may be absent: a 404 on the list means "none" (logged), not an error."""
    request_timeout: tuple[float, float] | None = REQUEST_TIMEOUT_S
    """(connect, read) timeout of each page; None: wait as long as the server takes."""


def builtin_listing(group: str, resource: str, namespaced: Callable[..., Any], every: Callable[..., Any],
                    **options: Any) -> Listing:
    """A built-in kind from its two client functions: ``list_namespaced_<kind>`` and
    ``list_<kind>_for_all_namespaces``."""
    return Listing(group=group, resource=resource, **options,
                   call=lambda *ns, **kw: namespaced(*ns, **kw) if ns else every(**kw))


def custom_listing(custom: Any, group: str, version: str, plural: str, **options: Any) -> Listing:
    """A custom resource through ``CustomObjectsApi`` (``custom``)."""
    def call(*ns: str, **kw: Any) -> Any:
        if ns:
            return custom.list_namespaced_custom_object(group, version, ns[0], plural, **kw)
        return custom.list_cluster_custom_object(group, version, plural, **kw)
    return Listing(group=group, resource=plural, call=call, **options)


def builtin_listings(api_client: client.ApiClient) -> dict[str, Listing]:
    """The built-in kinds the halves list, by kind; each half takes the ones it reads and adds its own."""
    core, apps, batch = client.CoreV1Api(api_client), client.AppsV1Api(api_client), client.BatchV1Api(api_client)
    hpa, discovery = client.AutoscalingV2Api(api_client), client.DiscoveryV1Api(api_client)
    return {
        "Pod": builtin_listing("", "pods", core.list_namespaced_pod, core.list_pod_for_all_namespaces),
        "Node": Listing(group="", resource="nodes", call=core.list_node, namespaced=False),
        "LimitRange": builtin_listing("", "limitranges", core.list_namespaced_limit_range,
                                      core.list_limit_range_for_all_namespaces),
        "Deployment": builtin_listing("apps", "deployments", apps.list_namespaced_deployment,
                                      apps.list_deployment_for_all_namespaces),
        "StatefulSet": builtin_listing("apps", "statefulsets", apps.list_namespaced_stateful_set,
                                       apps.list_stateful_set_for_all_namespaces),
        "DaemonSet": builtin_listing("apps", "daemonsets", apps.list_namespaced_daemon_set,
                                     apps.list_daemon_set_for_all_namespaces),
        "ReplicaSet": builtin_listing("apps", "replicasets", apps.list_namespaced_replica_set,
                                      apps.list_replica_set_for_all_namespaces),
        "Job": builtin_listing("batch", "jobs", batch.list_namespaced_job, batch.list_job_for_all_namespaces),
        "CronJob": builtin_listing("batch", "cronjobs", batch.list_namespaced_cron_job,
                                   batch.list_cron_job_for_all_namespaces),
        "ResourceQuota": builtin_listing("", "resourcequotas", core.list_namespaced_resource_quota,
                                         core.list_resource_quota_for_all_namespaces),
        "EndpointSlice": builtin_listing("discovery.k8s.io", "endpointslices", discovery.list_namespaced_endpoint_slice,
                                         discovery.list_endpoint_slice_for_all_namespaces),
        "HorizontalPodAutoscaler": builtin_listing(
            "autoscaling", "horizontalpodautoscalers", hpa.list_namespaced_horizontal_pod_autoscaler,
            hpa.list_horizontal_pod_autoscaler_for_all_namespaces),
    }


def _forbidden(listing: Listing, namespace: str | None, err: client.ApiException) -> PermanentKubeError:
    scope = f"in namespace {namespace}" if namespace else "cluster-wide"
    base = str(classify(err, f"list {listing.resource} {scope}"))
    return PermanentKubeError(f"{base}: the updater needs RBAC verb 'list' on resource '{listing.resource}' "
                              f"(apiGroup '{listing.group}') {scope}", status=403)


def _page(listing: Listing, namespace: str | None, cont: str | None, **kwargs: Any) -> Obj:
    args = (namespace,) if namespace else ()
    scope = f"in namespace {namespace}" if namespace else "cluster-wide"
    try:
        resp = listing.call(*args, limit=PAGE_SIZE, _continue=cont, _preload_content=False,
                            _request_timeout=listing.request_timeout, **kwargs)
        body: Obj = json.loads(resp.data)
        return body
    except client.ApiException as err:
        if err.status == 404 and listing.optional:
            log.warning("resource type not served; taking none", extra={"resource": listing.resource})
            return {"items": []}
        if err.status == 403:
            raise _forbidden(listing, namespace, err) from err
        if err.status == 410:
            raise TemporaryKubeError(f"list {listing.resource} {scope}: the list expired while paging; "
                                     "retry", status=410) from err
        raise classify(err, f"list {listing.resource} {scope}") from err
    except ValueError as err:
        raise TemporaryKubeError(f"list {listing.resource} {scope}: unreadable answer: {err}") from err
    except Exception as err:
        raise classify(err, f"list {listing.resource} {scope}") from err


def list_raw(listing: Listing, namespace: str | None = None, **kwargs: Any) -> list[Obj]:
    """Every item of the kind (in ``namespace``, or in all namespaces when None), following continue tokens."""
    return list_versioned(listing, namespace, **kwargs)[0]


def list_versioned(listing: Listing, namespace: str | None = None, **kwargs: Any) -> tuple[list[Obj], str]:
    """``list_raw`` and the list's resourceVersion (where a watch continues from; "" when the kind is not
    served). The pages of one list share the first page's snapshot, so the last page's version is the list's."""
    items: list[Obj] = []
    cont: str | None = None
    while True:
        body = _page(listing, namespace, cont, **kwargs)
        items.extend(body.get("items") or [])
        meta = body.get("metadata") or {}
        cont = meta.get("continue") or None
        if not cont:
            return items, str(meta.get("resourceVersion") or "")
