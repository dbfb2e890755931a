"""The usage sources' error tree: every failure to read history is a ``SourceError``.

Owns the classification, made once where the library error is caught: ``TemporarySourceError`` means the
backend was unreachable, timed out, was overloaded (429) or failed on its side (5xx) and the source's own
retries are already spent, so the caller should keep its state and try the whole pass again later.
``PermanentSourceError`` means retrying the same request cannot help (a bad query, a wrong URL or path
prefix, rejected credentials, a TLS verification failure, a response that is not Prometheus JSON).
A source never turns a failure into an empty result.
"""

from __future__ import annotations

from typing import Any


class SourceError(Exception):
    """Reading usage history failed. ``endpoint`` is the API endpoint (``query_range``, ``series``...)."""

    def __init__(self, message: str, *, endpoint: str = "", status: int | None = None) -> None:
        super().__init__(message)
        self.endpoint = endpoint
        self.status = status


class TemporarySourceError(SourceError):
    """Still failing after the configured retries: down, timeout, 5xx, 429. Try the pass again later."""


class PermanentSourceError(SourceError):
    """The request itself is wrong (4xx, auth, TLS, not Prometheus): fix the configuration or the query."""


class QueryTooLargeError(PermanentSourceError):
    """The backend refused one query as too big for it: Prometheus's ``--query.max-samples`` (422, "query
    processing would load too many samples into memory") or its ``--query.timeout`` (503, errorType
    ``timeout``). The same query again cannot succeed, but the same range in shorter time chunks can: the
    source splits and reads again (``PrometheusSource``), and raises this only when the pieces are as small
    as it will make them."""


class PartialSourceError(TemporarySourceError):
    """Some namespaces could not be read (their queries still failed after retries); the others were read in
    full. ``batches`` holds only keys of namespaces read completely, so no target is computed from a
    namespace's incomplete data; ``failed_namespaces`` are the ones to keep stale until a later pass."""

    def __init__(self, message: str, *, batches: dict[Any, Any], failed_namespaces: frozenset[str],
                 endpoint: str = "", status: int | None = None) -> None:
        super().__init__(message, endpoint=endpoint, status=status)
        self.batches = batches
        self.failed_namespaces = failed_namespaces
