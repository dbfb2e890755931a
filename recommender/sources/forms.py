"""The requests of a Prometheus pass as the HTTP API takes them, and their answers as the pass reads them.

Owns ``Forms``: the form of every request a pass sends (``partial_response=false`` and the server-side
timeout on each, range queries over a chunk's grid, remote reads of the stored samples a range selector
would see, the OOM counter with its baseline step) and the decoding of their answers into series, label
sets and per-step rows, with a malformed answer raised as ``PermanentSourceError``. In a pass over many
clusters (``PrometheusConfig.many_clusters``) every decoded namespace is cluster-qualified here, and the
usage answers keep only the containers of the scope asked (one selector over several clusters and namespaces
also matches a namespace of one cluster that only another cluster's part of the scope named). The queries
themselves are built by ``promql``; ``recommender.sources.prometheus`` decides what to send and when.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import replace

from recommender.sources import promql, remote_read
from recommender.sources.clusters import qualified_labels
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

    def matrix(self, fetched: Fetched, grid: GridRange, scope: promql.Scope | None = None) -> list[Series]:
        """The series of a range answer; in a multi-cluster pass qualified, and only those of ``scope``."""
        try:
            found = parse_matrix(self._transport.decode_result(fetched, "matrix"), grid)
        except ValueError as err:
            raise PermanentSourceError(f"malformed matrix: {err}", endpoint="query_range") from err
        label = self.config.split_by
        if label is None:
            return found
        found = [replace(s, labels=qualified_labels(s.labels, label)) for s in found]
        keep = self.inside(scope, (s.pod_key for s in found))
        return [s for s, inside in zip(found, keep, strict=True) if inside]

    def labels(self, fetched: Fetched) -> list[dict[str, str]]:
        """The label sets of an instant answer (namespaces qualified in a multi-cluster pass)."""
        try:
            found = parse_vector_labels(list(self._transport.decode_result(fetched, "vector")))
        except ValueError as err:
            raise PermanentSourceError(f"malformed vector: {err}", endpoint="query") from err
        label = self.config.split_by
        return found if label is None else [qualified_labels(d, label) for d in found]

    def qualified(self, label_sets: list[dict[str, str]]) -> list[dict[str, str]]:
        """``label_sets`` with their namespaces qualified in a multi-cluster pass."""
        label = self.config.split_by
        return label_sets if label is None else [qualified_labels(d, label) for d in label_sets]

    def series_labels(self, data: list[dict[object, object]], namespaces: Iterable[str]) -> list[dict[str, str]]:
        """The series endpoint's label sets of ``namespaces`` (a many-cluster selector also matches a namespace
        of one cluster named only for another; in one cluster the selector matches exactly these)."""
        wanted = frozenset(namespaces)
        label_sets = self.qualified([{str(k): str(v) for k, v in d.items()} for d in data])
        return [d for d in label_sets if d.get("namespace", "") in wanted]

    def inside(self, scope: promql.Scope | None, keys: Iterable[PodKey]) -> list[bool]:
        """For each key whether it is one of ``scope``'s containers (all True without a scope or a split)."""
        if scope is None or self.config.split_by is None:
            return [True for _ in keys]
        namespaces, pods = frozenset(scope.namespaces), frozenset(scope.pods)
        return [k[0] in namespaces and (not pods or k[1] in pods) for k in keys]

    def read_form(self, scope: promql.Scope, metric: str, chunk: GridRange, window_s: float) -> tuple[str, bytes]:
        """A remote read of ``metric``'s stored samples that the range query's selectors would see at the
        chunk's grid times: from the first time's window start to the last time."""
        first_ms = round(chunk.first_s * 1000) - round(window_s * 1000)
        body = remote_read.request_body([(promql.remote_matchers(metric, scope), first_ms, round(chunk.last_s * 1000))])
        return "read", body

    def from_raw(self, fetched: Fetched, chunk: GridRange, per_step: Callable[..., Rows], window_s: float,
                 scope: promql.Scope | None = None) -> dict[PodKey, Rows]:
        """What a range query of ``per_step`` (``rates`` or ``peaks``) over ``window_s`` would have answered at
        the chunk's grid times, from a remote read's stored samples (``raw_grid``), taken ``max by (namespace,
        pod, container)``: one row per container over the whole grid."""
        answers = self._transport.decode_read(fetched)
        if len(answers) != 1:
            raise PermanentSourceError("remote-read answer without exactly one query result", endpoint="read")
        rows = per_step(answers[0], grid_ms(chunk), round(window_s * 1000))
        label_sets = self.qualified([s.labels for s in answers[0]])
        keys: list[PodKey] = [(d.get("namespace", ""), d.get("pod", ""), d.get("container", "")) for d in label_sets]
        combined = combine(rows, keys)
        if self.config.split_by is None:
            return combined
        return {k: r for (k, r), inside in zip(combined.items(), self.inside(scope, combined), strict=True) if inside}

    def oom_form(self, scope: promql.Scope, chunk: GridRange) -> tuple[str, Form]:
        return self.range_form(promql.oom_events_query(scope), chunk, first_s=chunk.first_s - chunk.step_s)

    def oom_seen(self, fetched: Fetched, scope: promql.Scope | None = None) -> set[PodKey]:
        """The containers of an ``oom_seen_query`` answer (of ``scope``, in a multi-cluster pass)."""
        keys = [(d.get("namespace", ""), d.get("pod", ""), d.get("container", "")) for d in self.labels(fetched)]
        return {k for k, inside in zip(keys, self.inside(scope, keys), strict=True) if inside}
