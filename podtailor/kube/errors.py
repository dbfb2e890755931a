"""The Kubernetes adapter's error tree, classified once as temporary (retry later) or permanent.

Owns the mapping from the client's ``ApiException`` (and connection errors) to ``KubeError`` subclasses,
so the loop has one broad catch and decides by class: ``TemporaryKubeError`` (API server down, timeouts,
429, 5xx, conflicts left after retries) and ``PermanentKubeError`` (bad object, missing permission). A
404 on an object that is gone is an outcome for the caller, not an error, so ``is_not_found`` exists.
"""

from __future__ import annotations

import json

from kubernetes import client
from urllib3.exceptions import HTTPError

TEMPORARY_STATUSES = frozenset({409, 429, 500, 502, 503, 504})


class KubeError(RuntimeError):
    """A Kubernetes API call failed; ``status`` is the HTTP status (0 when there was no answer)."""

    def __init__(self, message: str, *, status: int = 0, retry_after_s: float = 0.0) -> None:
        super().__init__(message)
        self.status = status
        self.retry_after_s = retry_after_s
        """The server's Retry-After (API Priority and Fairness sends it with 429), 0 when absent."""


class TemporaryKubeError(KubeError):
    """Try again later: nothing was decided by the server."""


class PermanentKubeError(KubeError):
    """Retrying will not help: fix the object, the configuration or the permissions."""


def _message(err: client.ApiException) -> str:
    try:
        return str(json.loads(err.body or "{}").get("message") or err.reason)
    except (ValueError, AttributeError):
        return str(err.reason)


def classify(err: BaseException, action: str) -> KubeError:
    """Turn a client exception raised while doing ``action`` into a KubeError (raise it ``from err``)."""
    if isinstance(err, client.ApiException):
        status = int(err.status or 0)
        text = f"{action}: {status} {_message(err)}"
        if status == 403:
            text += " (missing RBAC permission?)"
        cls = TemporaryKubeError if status in TEMPORARY_STATUSES or status == 0 else PermanentKubeError
        return cls(text, status=status, retry_after_s=_retry_after(err))
    if isinstance(err, HTTPError | OSError | TimeoutError):
        return TemporaryKubeError(f"{action}: API server unreachable: {err}")
    return PermanentKubeError(f"{action}: {err}")


def _retry_after(err: client.ApiException) -> float:
    try:
        value = (err.headers or {}).get("Retry-After")
        return min(max(float(value), 0.0), 600.0) if value is not None else 0.0
    except (TypeError, ValueError, AttributeError):
        return 0.0


def is_not_found(err: BaseException) -> bool:
    return isinstance(err, client.ApiException) and err.status == 404
