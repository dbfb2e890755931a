"""A small Prometheus instant-query client: one query, its values now, or a classified error.

Owns what both halves need to ask Prometheus for one instant value: the form-encoded POST to
``<url>/api/v1/query`` (a POST, so a long query never meets a URL limit: Prometheus' web/api/v1/api.go reads
the form of either method), reading the answer's envelope (``status``, ``data.resultType``, ``data.result``;
``errorType``/``error`` of a failure) and classifying a failure once as temporary (no answer, 408, 429, 5xx) or
permanent (a 400 ``bad_data`` query, anything else), with the server's own message. The updater's canary
analyses use it; the recommender's source (``recommender.sources.transport``) reads the same envelope with
``error_text`` and ``TEMPORARY_STATUS`` from here. No retries: a caller measuring at an interval measures
again at the next one.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import requests

TEMPORARY_STATUS = frozenset({408, 429, 500, 502, 503, 504})
"""HTTP answers that say "try again later" (Prometheus' 503 is also a query timeout: still worth another try)."""


class QueryFailed(Exception):
    """A query without a usable answer; ``temporary`` when asking again later may work."""

    def __init__(self, message: str, *, temporary: bool) -> None:
        super().__init__(message)
        self.temporary = temporary


@dataclass(frozen=True, slots=True, kw_only=True)
class Sample:
    labels: Mapping[str, str]
    value: float


def error_text(response: requests.Response) -> str:
    """``errorType: error`` of a Prometheus API failure, else the start of the body."""
    try:
        body = response.json()
        if isinstance(body, dict) and "error" in body:
            return f"{body.get('errorType', '')}: {body['error']}"[:500]
    except ValueError:
        pass
    return response.text[:200]


def _float(text: object) -> float:
    try:
        return float(str(text))  # "NaN", "+Inf" and "-Inf" as Prometheus writes them
    except ValueError:
        raise QueryFailed(f"not a sample value: {str(text)[:40]!r}", temporary=False) from None


def samples(data: Any) -> tuple[Sample, ...]:
    """The samples of an instant query's ``data``: one per series of a vector, one for a scalar."""
    kind = data.get("resultType") if isinstance(data, dict) else None
    result = data.get("result") if isinstance(data, dict) else None
    if kind == "scalar" and isinstance(result, list) and len(result) == 2:
        return (Sample(labels={}, value=_float(result[1])),)
    if kind != "vector" or not isinstance(result, list):
        raise QueryFailed(f"expected a vector or scalar result, got {kind!r}", temporary=False)
    out = []
    for item in result:
        if not isinstance(item, dict) or not isinstance(item.get("value"), list) or len(item["value"]) != 2:
            raise QueryFailed("a vector item without a [time, value] pair", temporary=False)
        metric = item.get("metric") or {}
        out.append(Sample(labels={str(k): str(v) for k, v in metric.items()}, value=_float(item["value"][1])))
    return tuple(out)


class InstantQueries:
    """Instant queries against one Prometheus (``url``: its base, with any path prefix)."""

    def __init__(self, url: str, *, timeout_s: float = 10.0, session: requests.Session | None = None) -> None:
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"prometheus URL {url!r} must start with http:// or https://")
        if not math.isfinite(timeout_s) or timeout_s <= 0:
            raise ValueError("timeout must be positive")
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s
        self._session = session if session is not None else requests.Session()

    def query(self, text: str, at_s: float | None = None) -> tuple[Sample, ...]:
        """The samples of ``text`` now (or at ``at_s``); ``QueryFailed`` when there is no usable answer."""
        form = [("query", text)] + ([("time", f"{at_s:.3f}")] if at_s is not None else [])
        try:
            response = self._session.post(f"{self.url}/api/v1/query", data=form, timeout=self.timeout_s)
        except requests.RequestException as err:
            raise QueryFailed(f"cannot reach prometheus: {type(err).__name__}", temporary=True) from err
        if response.status_code >= 300:
            raise QueryFailed(f"prometheus answered {response.status_code}: {error_text(response)}",
                              temporary=response.status_code in TEMPORARY_STATUS)
        try:
            body = response.json()
        except ValueError:
            raise QueryFailed("the answer is not JSON: is the URL (and path prefix) right?", temporary=False) from None
        if not isinstance(body, dict) or body.get("status") != "success":
            raise QueryFailed("the answer is not a Prometheus API success", temporary=False)
        return samples(body.get("data"))

    def close(self) -> None:
        self._session.close()
