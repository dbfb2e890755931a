"""The requests of a Prometheus pass as the HTTP API takes them, and their answers as the pass reads them.

Owns ``Forms``: the form of every request a pass sends (``partial_response=false`` and the server-side
timeout on each, range queries over a chunk's grid, remote reads of the stored samples a range selector
would see, the OOM counter with its baseline step) and the decoding of their answers into series, label
sets and per-step rows, with a malformed answer raised as ``PermanentSourceError``. The queries themselves
are built by ``promql``; ``recommender.sources.prometheus`` decides what to send and when.
"""

from __future__ import annotations

from collections.abc import Callable

from recommender.sources import promql, remote_read
from recommender.sources.config import PrometheusConfig
from recommender.sources.errors import PermanentSourceError
from recommender.sources.grid import GridRange
from recommender.sources.raw_grid import Rows, combine, grid_ms
from recommender.sources.samples import PodKey, Series, parse_matrix, parse_vector_labels
from recommender.sources.transport import Fetched, Form, Transport

__all__ = ["Forms", "seconds_param"]


def seconds_param(seconds: float) -> str:
    """A time or a duration as a request parameter: seconds as Python writes a float ("1700000000.0")."""
    return repr(float(seconds))


class Forms:
    """Request forms and answer decoding for one source's configuration and transport."""

    def __init__(self, config: PrometheusConfig, transport: Transport) -> None:
        self.config = config
        self._transport = transport

    def form(self, endpoint: str, form: list[tuple[str, str]]) -> tuple[str, Form]:
        """``form`` plus ``partial_response=false``: Thanos Query (``--query.partial-response``, its default)
        answers a query one of whose stores failed with the rest of the data and a warning; this makes it
        fail instead (pkg/api/query/v1.go, ``parsePartialResponseParam``), so a store outage is a source
        error (targets kept, VPAs stale), never targets from part of the history. Others ignore it."""
        form = [*form, ("partial_response", "false")]
        return endpoint, [*form, ("timeout", f"{self.config.timeout_s:g}s")] if endpoint != "series" else form

    def range_form(self, query: str, chunk: GridRange, first_s: float | None = None) -> tuple[str, Form]:
        return self.form("query_range", [
            ("query", query), ("start", seconds_param(chunk.first_s if first_s is None else first_s)),
            ("end", seconds_param(chunk.last_s)), ("step", seconds_param(chunk.step_s))])

    def matrix(self, fetched: Fetched, grid: GridRange) -> list[Series]:
        try:
            return parse_matrix(self._transport.decode_result(fetched, "matrix"), grid)
        except ValueError as err:
            raise PermanentSourceError(f"malformed matrix: {err}", endpoint="query_range") from err

    def labels(self, fetched: Fetched) -> list[dict[str, str]]:
        try:
            return parse_vector_labels(list(self._transport.decode_result(fetched, "vector")))
        except ValueError as err:
            raise PermanentSourceError(f"malformed vector: {err}", endpoint="query") from err

    def read_form(self, scope: promql.Scope, metric: str, chunk: GridRange, window_s: float) -> tuple[str, bytes]:
        """A remote read of ``metric``'s stored samples that the range query's selectors would see at the
        chunk's grid times: from the first time's window start to the last time."""
        first_ms = round(chunk.first_s * 1000) - round(window_s * 1000)
        body = remote_read.request_body([(promql.remote_matchers(metric, scope), first_ms, round(chunk.last_s * 1000))])
        return "read", body

    def from_raw(self, fetched: Fetched, chunk: GridRange, per_step: Callable[..., Rows],
                 window_s: float) -> dict[PodKey, Rows]:
        """What a range query of ``per_step`` (``rates`` or ``peaks``) over ``window_s`` would have answered at
        the chunk's grid times, from a remote read's stored samples (``raw_grid``), taken ``max by (namespace,
        pod, container)``: one row per container over the whole grid."""
        answers = self._transport.decode_read(fetched)
        if len(answers) != 1:
            raise PermanentSourceError("remote-read answer without exactly one query result", endpoint="read")
        rows = per_step(answers[0], grid_ms(chunk), round(window_s * 1000))
        keys: list[PodKey] = [(s.labels.get("namespace", ""), s.labels.get("pod", ""), s.labels.get("container", ""))
                               for s in answers[0]]
        return combine(rows, keys)

    def oom_form(self, scope: promql.Scope, chunk: GridRange) -> tuple[str, Form]:
        return self.range_form(promql.oom_events_query(scope), chunk, first_s=chunk.first_s - chunk.step_s)

    def oom_seen(self, fetched: Fetched) -> set[PodKey]:
        """The containers of an ``oom_seen_query`` answer."""
        return {(d.get("namespace", ""), d.get("pod", ""), d.get("container", "")) for d in self.labels(fetched)}
