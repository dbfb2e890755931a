"""The updater's write answers: a 403 or a 429 read once into its kind, and the snapshot's own error.

``Refused`` is a 403 on a write, with its kind (``updater.answers.Refusal``: above the node's allocatable,
exceeded quota, a disruption budget, other) read once here from the Status body; ``NotNow`` is a 429, with its
kind (a PodDisruptionBudget's refusal of an eviction, or "not now"); ``refusal_of`` gives the kind of any error.
``SnapshotError`` is for an answer the snapshot cannot be built from (an unreadable /version). Listing
lives in ``podtailor.kube.listing``.
"""

from __future__ import annotations

import json

from kubernetes import client

from podtailor.kube.errors import KubeError, PermanentKubeError, TemporaryKubeError, classify
from updater.answers import BUDGET_CAUSE, Refusal, forbidden_refusal, too_many_requests_refusal


class SnapshotError(PermanentKubeError):
    """The API server answered, but with something the snapshot cannot be built from."""


class Refused(PermanentKubeError):
    """The API server refused a write with a 403; ``kind`` says why (quota, above allocatable, other)."""

    def __init__(self, message: str, *, kind: Refusal) -> None:
        super().__init__(message, status=403)
        self.kind = kind


class NotNow(TemporaryKubeError):
    """The API server answered a write with a 429; ``kind`` says whose "not now" it is (a PodDisruptionBudget's,
    for an eviction, or API Priority and Fairness')."""

    def __init__(self, message: str, *, kind: Refusal, retry_after_s: float = 0.0) -> None:
        super().__init__(message, status=429, retry_after_s=retry_after_s)
        self.kind = kind


def write_error(err: BaseException, action: str) -> KubeError:
    """``classify`` for a write, with a 403 turned into ``Refused`` and a 429 into ``NotNow``, each of its kind
    (read from the Status body's message and its causes' types, which the wire calls ``details.causes[].reason``:
    see ``updater.answers``). The message of a disruption budget's cause, which names the budget, is added to the
    error's text."""
    base = classify(err, action)
    if not isinstance(err, client.ApiException) or err.status not in (403, 429):
        return base
    try:
        status = json.loads(err.body or "{}")
    except (ValueError, TypeError):
        status = {}
    status = status if isinstance(status, dict) else {}
    causes = [c for c in (status.get("details") or {}).get("causes") or () if isinstance(c, dict)]
    types = [str(c.get("reason", "")) for c in causes]  # a StatusCause's type is "reason" on the wire
    message = str(status.get("message") or "")
    kind = too_many_requests_refusal(message, types) if err.status == 429 else forbidden_refusal(message, types)
    text = str(base).removesuffix(" (missing RBAC permission?)") if kind != Refusal.OTHER else str(base)
    if kind == Refusal.DISRUPTION_BUDGET:
        said = "; ".join(str(c.get("message")) for c in causes if c.get("reason") == BUDGET_CAUSE and
                         c.get("message"))
        text += f" ({said})" if said else ""
    if err.status == 429:
        return NotNow(text, kind=kind, retry_after_s=base.retry_after_s)
    return Refused(text, kind=kind)


def refusal_of(err: BaseException) -> Refusal:
    """The kind of a failed write: a ``Refused`` or a ``NotNow`` says; any other 429 is "not now"; anything else
    is OTHER."""
    if isinstance(err, Refused | NotNow):
        return err.kind
    if isinstance(err, KubeError) and err.status == 429:
        return Refusal.NOT_NOW
    return Refusal.OTHER
