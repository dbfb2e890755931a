"""Listing a kind from the API server: one paged raw list, failures classified once.

Owns ``Listing`` (which kind to list: API group, resource, and the client function; ``builtin_listing`` builds
one from the kind's API path, ``custom_listing`` from ``CustomObjectsApi``, ``builtin_listings`` the built-in kinds
the halves read) and ``list_raw``, which pages through a list with
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


def _query_name(kwarg: str) -> str:
    """A list call's keyword as its query parameter: ``label_selector`` is ``labelSelector``, ``_continue`` is
    ``continue`` (the generated client's own mapping)."""
    head, *rest = kwarg.lstrip("_").split("_")
    return head + "".join(word.title() for word in rest)


def path_call(api_client: client.ApiClient, path: str, namespaced_path: str | None) -> Callable[..., Any]:
    """A list function called like the generated client's ``list_namespaced_<kind>(namespace, **kw)`` /
    ``list_<kind>_for_all_namespaces(**kw)`` with ``_preload_content=False``, built on the ``ApiClient`` alone: a
    GET of ``path`` (or of ``namespaced_path`` with a namespace), its keywords sent as query parameters,
    ``_request_timeout`` honoured, the raw urllib3 response returned (``list_raw`` reads its JSON, ``watch.Watch``
    streams it), and a non-2xx answer raised as ``ApiException``. The generated API classes are not imported: importing
    ``CoreV1Api`` alone builds some 300 pydantic model classes, about a second of every command's start, for
    answers that are read as JSON anyway (``list_raw``). This follows the generated functions (e.g.
    ``CoreV1Api._list_namespaced_pod_serialize``: Accept application/json, auth setting BearerToken)."""
    def call(*namespace: str, _preload_content: bool = False, _request_timeout: Any = None, **kw: Any) -> Any:
        if _preload_content:
            raise ValueError("a path call returns the raw response only (_preload_content=False)")
        if namespace and namespaced_path is None:
            raise ValueError(f"{path} is not namespaced")
        query = [(_query_name(k), v) for k, v in kw.items() if v is not None]
        request = api_client.param_serialize(
            "GET", namespaced_path if namespace else path, path_params={"namespace": namespace[0]} if namespace else {},
            query_params=query, header_params={"Accept": "application/json"}, auth_settings=["BearerToken"])
        response = api_client.call_api(*request, _request_timeout=_request_timeout)
        if not 200 <= response.status <= 299:
            response.read()  # type: ignore[no-untyped-call]
            raise client.ApiException.from_response(http_resp=response, body=None, data=None)
        return response.response
    return call


def builtin_listing(api_client: client.ApiClient, group: str, version: str, resource: str, *,
                    namespaced: bool = True, **options: Any) -> Listing:
    """A built-in kind by its API path (``path_call``): ``/api/v1/pods`` for the core group,
    ``/apis/<group>/<version>/<resource>`` otherwise, and under ``namespaces/{namespace}/`` for one namespace."""
    base = "/api/v1" if not group else f"/apis/{group}/{version}"
    namespaced_path = f"{base}/namespaces/{{namespace}}/{resource}" if namespaced else None
    return Listing(group=group, resource=resource, namespaced=namespaced, **options,
                   call=path_call(api_client, f"{base}/{resource}", namespaced_path))


def custom_listing(custom: Any, group: str, version: str, plural: str, **options: Any) -> Listing:
    """A custom resource through ``CustomObjectsApi`` (``custom``)."""
    def call(*ns: str, **kw: Any) -> Any:
        if ns:
            return custom.list_namespaced_custom_object(group, version, ns[0], plural, **kw)
        return custom.list_cluster_custom_object(group, version, plural, **kw)
    return Listing(group=group, resource=plural, call=call, **options)


def builtin_listings(api_client: client.ApiClient) -> dict[str, Listing]:
    """The built-in kinds the halves list, by kind; each half takes the ones it reads and adds its own."""
    kinds = {"Pod": ("", "v1", "pods"), "Node": ("", "v1", "nodes"), "LimitRange": ("", "v1", "limitranges"),
             "ResourceQuota": ("", "v1", "resourcequotas"), "Deployment": ("apps", "v1", "deployments"),
             "StatefulSet": ("apps", "v1", "statefulsets"), "DaemonSet": ("apps", "v1", "daemonsets"),
             "ReplicaSet": ("apps", "v1", "replicasets"), "Job": ("batch", "v1", "jobs"),
             "CronJob": ("batch", "v1", "cronjobs"), "EndpointSlice": ("discovery.k8s.io", "v1", "endpointslices"),
             "HorizontalPodAutoscaler": ("autoscaling", "v2", "horizontalpodautoscalers")}
    return {kind: builtin_listing(api_client, group, version, resource, namespaced=kind != "Node")
            for kind, (group, version, resource) in kinds.items()}


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
