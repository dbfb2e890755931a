"""The updater's write answers: a 403 read once into its kind, and the snapshot's own error.

``Refused`` is a 403 on a write, with its kind (``updater.answers.Refusal``: above the node's allocatable,
exceeded quota, other) read once here from the Status body; ``refusal_of`` gives the kind of any error.
``SnapshotError`` is for an answer the snapshot cannot be built from (an unreadable /version). Listing
lives in ``podtailor.kube.listing``.
"""

from __future__ import annotations

import json

from kubernetes import client

from podtailor.kube.errors import KubeError, PermanentKubeError, classify
from updater.answers import Refusal, forbidden_refusal


class SnapshotError(PermanentKubeError):
    """The API server answered, but with something the snapshot cannot be built from."""


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
