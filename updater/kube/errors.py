"""The updater adapter's API calls and their errors: one paged raw list per kind, failures classified once.

Owns ``Listing`` (which kind to list: API group, resource, and the client function) and ``list_raw``,
which pages through a list with ``_preload_content=False`` and returns plain JSON items (no model
parsing: 10,000 pods cost a ``json.loads``). Failures become the recommender's ``KubeError`` tree
(``TemporaryKubeError``: retry later; ``PermanentKubeError``: fix something); a 403 names the RBAC verb,
resource and scope that are missing, a 410 on a continue token (the list expired while paging) is
temporary, and a 404 for an optional custom resource (its CRD is not installed) is an empty list.
``SnapshotError`` is for an answer the snapshot cannot be built from (an unreadable /version).
``Refused`` is a 403 on a write, with its kind (``updater.answers.Refusal``: above the node's allocatable,
exceeded quota, other) read once here from the Status body; ``refusal_of`` gives the kind of any error.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kubernetes import client

from recommender.kube.errors import KubeError, PermanentKubeError, TemporaryKubeError, classify
from updater.answers import Refusal, forbidden_refusal

log = logging.getLogger("podtailor.updater.kube")
Obj = dict[str, Any]
PAGE_SIZE = 1000
"""Items per list page: big enough for few round trips, small enough to keep the API server's memory flat."""
REQUEST_TIMEOUT_S = (5.0, 9.0)
"""Client-side (connect, read) timeout of every updater request. Without one, a dead TCP path (no FIN, no
RST) hangs a call forever (kubernetes-client/python#1402); the read part stays below the 10 s renew deadline
of leader election, so a pass cannot outlive the lease it started under by much."""


class SnapshotError(PermanentKubeError):
    """The API server answered, but with something the snapshot cannot be built from."""


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


class Refused(PermanentKubeError):
    """The API server refused a write with a 403; ``kind`` says why (quota, above allocatable, other)."""

    def __init__(self, message: str, *, kind: Refusal) -> None:
        super().__init__(message, status=403)
        self.kind = kind


def write_error(err: BaseException, action: str) -> KubeError:
    """``classify`` for a write, with a 403 turned into ``Refused`` of its kind (read from the Status body's
    message and ``details.causes[].type``: see ``updater.answers.forbidden_refusal``)."""
    base = classify(err, action)
    if not isinstance(err, client.ApiException) or err.status != 403:
        return base
    try:
        status = json.loads(err.body or "{}")
    except (ValueError, TypeError):
        status = {}
    status = status if isinstance(status, dict) else {}
    causes = [str(c.get("type", "")) for c in (status.get("details") or {}).get("causes") or ()
              if isinstance(c, dict)]
    kind = forbidden_refusal(str(status.get("message") or ""), causes)
    return Refused(str(base).removesuffix(" (missing RBAC permission?)") if kind != Refusal.OTHER else str(base),
                   kind=kind)


def refusal_of(err: BaseException) -> Refusal:
    """The kind of a failed write: a ``Refused`` says; 429 is "not now"; anything else is OTHER."""
    if isinstance(err, Refused):
        return err.kind
    if isinstance(err, KubeError) and err.status == 429:
        return Refusal.NOT_NOW
    return Refusal.OTHER


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
                            _request_timeout=REQUEST_TIMEOUT_S, **kwargs)
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


__all__ = ["REQUEST_TIMEOUT_S", "KubeError", "Listing", "PermanentKubeError", "Refused", "SnapshotError",
           "TemporaryKubeError", "list_raw", "list_versioned", "refusal_of", "write_error"]
