"""The Prometheus usage source: one history pass = a fixed handful of queries per namespace batch.

Owns ``PrometheusSource``, the ``UsageSource`` for Prometheus and compatible servers (Thanos, Mimir,
VictoriaMetrics): what a pass sends and in which order. The requests' forms and the decoding of their answers
are in ``forms``, the pass's time parts and where their samples go in ``parts``, the wire in ``wire``. A pass
over ``(start_s, end_s]`` (grid rule in ``grid``) sends:

1. one ``series`` request listing the containers of all the namespaces (plans the batches, ``batching``);
2. per scope (a namespace batch or a page of a big namespace): three instant owner queries
   (``kube_pod_owner``, ``kube_replicaset_owner``, ``kube_job_owner``, ``last_over_time`` over the pass,
   so pods that are gone still map to their workload), and one for the containers whose OOM counter is
   above zero somewhere in the pass (``sparse_signals``, the default);
3. per scope and time chunk: three range queries (CPU rate, memory peak per step, CFS throttling only where
   it is above zero) or, where the backend serves remote read (``read_api``, asked once with a one-millisecond
   probe read), four remote reads of the stored samples (the CPU counter, the working set and the two CFS
   counters), turned into the same per-step values by ``raw_grid``; then, only for a scope with containers
   whose OOM counter is above zero, their counter per chunk, plus two (memory limits and requests) only for
   chunks in which an OOM kill was seen.

A strategy's ``HistoryPlan`` (``plan``) splits the pass in time (``grid.split_grid``): the part older than
its full-resolution window is read as one summary per hour (the mean CPU rate over the hour, the peak working
set, the throttled share over the hour, the OOM counter at hourly steps), a twelfth of the points at a
5-minute step; its samples come back as each batch's ``summary``. Its chunks are counted in C below.

So requests = 1 + S x (4 + 3 C) + C x (scopes with an OOM counter above zero) + 2 x (chunks with an OOM
kill), with S = scopes and C = chunks (4 C with remote read, plus its probe once per source), and no term in
the number of workloads or pods. Without ``sparse_signals``: 1 + S x (3 + 4 C) + 2 x (chunks with an OOM kill).
They go out in order, at most ``requests_in_flight`` at once (default 1), each while the answer
before it is decoded (``wire.Wire``), with the garbage collector paused for the pass (``wire.gc_paused``).
A range answer is decoded one series at a time (``Transport.decode_result``), so time chunks (C > 1) are only
needed when a scope's series x steps exceed ``max_points_per_query``.
OOM kills come from increases of cAdvisor's ``container_oom_events_total`` between steps, joined
client-side with the kube-state-metrics memory limit and request at that step.
(``kube_pod_container_status_last_terminated_reason`` only says the last
termination was an OOM kill, so it cannot count repeated kills nor date them; its weakness is ours to
accept in the other direction: an event that cAdvisor never exported before the container was replaced
is missed.) Per-pod series are pooled per workload container by ``samples.build_batches``.
"""

from __future__ import annotations

import functools
import logging
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor

import requests
from prometheus_client import CollectorRegistry

from recommender.model.types import ContainerKey, HistoryPlan, OomKill, UsageBatch
from recommender.sources import promql, remote_read
from recommender.sources.batching import count_containers, plan_scopes
from recommender.sources.config import PrometheusConfig, sized_in_flight
from recommender.sources.errors import (
    PartialSourceError,
    PermanentSourceError,
    QueryTooLargeError,
    SourceError,
    TemporarySourceError,
)
from recommender.sources.forms import Forms, seconds_param
from recommender.sources.grid import GridRange, aligned_range, chunks, split_grid
from recommender.sources.owners import OwnerIndex
from recommender.sources.parts import MAX_SPLITS, Part, as_series, forget, halved, keep, raw_metrics, throttled_share
from recommender.sources.raw_grid import Rows, peaks, rates
from recommender.sources.samples import (
    PodKey,
    PodUsage,
    Series,
    build_batches,
    drop_invalid,
    from_pass_start,
    oom_increments,
    value_at,
    with_summaries,
)
from recommender.sources.transport import Fetched, SourceMetrics, Transport
from recommender.sources.wire import Job, Wire, gc_paused, interleaved

__all__ = ["PrometheusConfig", "PrometheusSource"]

log = logging.getLogger(__name__)


_OOM_SEEN_MARGIN_S = 3600.0
"""How far before the pass's first step (and its baseline step) the OOM-seen query also looks: more than any
lookback delta a server uses (Prometheus's default is 5 minutes), so every raw sample the dense counter
query could see at a step of the pass is inside it."""


class PrometheusSource:
    """Reads usage history from a Prometheus HTTP API; see the module docstring for the request budget."""

    def __init__(self, config: PrometheusConfig, *, registry: CollectorRegistry,
                 session: requests.Session | None = None, sleep: Callable[[float], None] = time.sleep,
                 plan: HistoryPlan | None = None) -> None:
        self.config = config
        self.plan = plan or HistoryPlan()
        """What the strategy weighs by age (``Strategy.history_plan``); the default reads all at the step."""
        self.metrics = SourceMetrics(registry)
        self._transport = Transport(config, self.metrics, session=session, sleep=sleep)
        self._forms = Forms(config, self._transport)
        self._sized: int | None = None
        self._remote: bool | None = {"remote-read": True, "promql": False}.get(config.read_api)

    @property
    def request_count(self) -> int:
        """HTTP requests sent so far, retries included."""
        return self._transport.request_count

    def close(self) -> None:
        self._transport.close()

    def _in_flight(self) -> int:
        """``requests_in_flight``, or when it is None the server's size, asked once (``sized_in_flight``). A
        backend without the page (404 and the like) gets 1 for good; one that cannot be reached gets 1 for
        this pass and is asked again on the next."""
        if self._sized is None:
            configured = self.config.requests_in_flight
            if configured is not None:
                self._sized = configured
            else:
                try:
                    self._sized = sized_in_flight(self._transport.post("status/runtimeinfo", []))
                except PermanentSourceError:
                    self._sized = 1
                except TemporarySourceError:
                    return 1
                log.info("queries in flight sized to the server", extra={"requests_in_flight": self._sized})
        return self._sized

    def _remote_read(self, namespace: str, at_s: float) -> bool:
        """Whether the full-resolution samples go through remote read: ``read_api``, or for ``auto`` the
        backend's answer to one tiny read (one millisecond of one namespace's CPU), asked once. An answer that
        is not a remote-read success (404 from Thanos Query, 400 from VictoriaMetrics, a page from a proxy)
        means PromQL for good; an unreachable backend means PromQL for this pass, asked again on the next."""
        if self._remote is None:
            at_ms = round(at_s * 1000)
            matchers = promql.remote_matchers("container_cpu_usage_seconds_total", self.config.scope((namespace,)))
            try:
                self._transport.decode_read(self._transport.fetch("read", remote_read.request_body(
                    [(matchers, at_ms - 1, at_ms)])))
                self._remote = True
            except TemporarySourceError:
                return False
            except PermanentSourceError as err:
                self._remote = False
                log.info("the backend has no remote-read API; reading full-resolution history through PromQL",
                         extra={"status": err.status, "error": str(err)[:200]})
                return False
            log.info("reading full-resolution history through remote read")
        return self._remote

    def history(self, namespaces: Sequence[str], start_s: float, end_s: float,
                pools: Mapping[tuple[str, str], str] | None = None) -> dict[ContainerKey, UsageBatch]:
        """Usage with step timestamps in ``(start_s, end_s]``, keyed by workload container (and DaemonSet
        pods by ``pools`` too, ``samples.build_batches``).

        For incremental passes call with ``start_s`` = the previous ``end_s``: the grid rule (``grid``) makes
        consecutive passes disjoint and gap-free. A step close to the wall clock may still miss its last
        scrape and is not read again, so pass ``end_s`` = now minus a scrape interval or two.
        Raises ``TemporarySourceError`` / ``PermanentSourceError``; never returns empty for a failed read.
        When only some namespaces fail, raises ``PartialSourceError`` carrying the batches of the others."""
        grid = aligned_range(start_s, end_s, self.config.step_s)
        names = tuple(sorted(set(namespaces)))
        if grid is None or not names:
            return {}
        sent_before = self.request_count
        fine, coarse = split_grid(grid, full_resolution_s=self.plan.full_resolution_s,
                                  summary_step_s=self.plan.summary_step_s)
        usage: dict[PodKey, PodUsage] = {}
        summarized: dict[PodKey, PodUsage] = {}
        dropped: Counter[str] = Counter()
        in_flight = self._in_flight()
        with gc_paused(), ThreadPoolExecutor(max_workers=in_flight, thread_name_prefix="prometheus-fetch") as pool:
            wire = Wire(self._transport, pool, in_flight)
            scopes, listed = self._plan(wire, names, grid)
            points = self._chunk_points(scopes, listed)
            parts = [] if coarse is None else [Part(c, coarse.step_s, summarized) for c in chunks(coarse, points)]
            if fine is not None:
                raw = bool(scopes) and self._remote_read(names[0], fine.last_s)
                parts += [Part(c, self.config.cpu_rate_window_s, usage, raw)
                          for c in chunks(fine, self._chunk_points(scopes, listed, raw=raw))]
            owners, failed, error = self._read_scopes(wire, scopes, grid, parts, dropped)
        if error is not None and failed >= set(names):
            raise error
        usage = {k: u for k, u in usage.items() if k[0] not in failed}  # nothing from a half-read namespace
        summarized = {k: u for k, u in summarized.items() if k[0] not in failed}
        self._report(dropped, {**summarized, **usage}, owners, {k for k in listed if k[0] not in failed})
        step = float(self.config.step_s)
        per_pod = self.plan.per_pod_memory
        batches = build_batches(usage, owners, cpu_interval_s=step, memory_interval_s=step, per_pod_memory=per_pod,
                                pools=pools)
        if coarse is not None:
            summaries = build_batches(summarized, owners, cpu_interval_s=coarse.step_s,
                                      memory_interval_s=coarse.step_s, per_pod_memory=per_pod, pools=pools)
            batches = with_summaries(batches, from_pass_start(summaries, coarse, first_s=grid.first_s), step_s=step)
        log.info("usage history read", extra={
            "namespaces": len(names), "scopes": len(scopes), "chunks": len(parts), "keys": len(batches),
            "summary_steps": 0 if coarse is None else coarse.points,
            "requests": self.request_count - sent_before, "start_s": grid.first_s, "end_s": grid.last_s,
            "failed_namespaces": len(failed), **{f"dropped_{reason}": n for reason, n in dropped.items()}})
        if error is not None:
            raise PartialSourceError(f"{len(failed)} of {len(names)} namespaces unread: {error}", batches=batches,
                                     failed_namespaces=frozenset(failed), endpoint=error.endpoint,
                                     status=error.status)
        return batches

    def _read_scopes(self, wire: Wire, scopes: list[promql.Scope], grid: GridRange, parts: list[Part],
                     dropped: Counter[str]) -> tuple[OwnerIndex, set[str], SourceError | None]:
        """Reads every scope; a scope still failing after retries (or too big for the backend in the smallest
        pieces) marks its namespaces failed and the pass goes on with the others (their data stays usable).
        Any other permanent error stops the pass."""
        owners, failed = OwnerIndex(), set[str]()
        first_error: SourceError | None = None
        for scope in scopes:
            if failed.issuperset(scope.namespaces):
                continue  # another page of a namespace already lost: spare a struggling backend
            try:
                scope_owners = self._read_scope_fitting(wire, scope, grid, parts, dropped)
            except (TemporarySourceError, QueryTooLargeError) as err:
                failed.update(scope.namespaces)
                first_error = first_error or err
                log.warning("namespaces unread in this pass; their recommendations stay as they are",
                            extra={"namespaces": len(scope.namespaces), "endpoint": err.endpoint,
                                   "error": str(err)})
                continue
            owners = owners.merged(scope_owners)
        return owners, failed, first_error

    # ------------------------------------------------------------------------------------------- a pass
    def _chunk_points(self, scopes: list[promql.Scope], listed: set[PodKey], *, raw: bool = False) -> int:
        """Grid points per query: small enough that the biggest scope's series x points stays under
        ``max_points_per_query``; for a range query also under the per-series cap (minus the OOM query's extra
        point). A remote read returns every sample, one per scrape (fewer steps per chunk when scrapes are denser
        than the step), and is capped by ``max_remote_read_s``, not by Prometheus's per-series cap."""
        biggest = max((sum(1 for ns, pod, _ in listed if ns in s.namespaces and (not s.pods or pod in s.pods))
                       for s in scopes), default=1)
        budget = self.config.max_points_per_query // max(1, biggest)
        if raw:
            span = int(self.config.max_remote_read_s // self.config.step_s) + 1
            return max(1, min(span, int(budget / max(1.0, self.config.step_s / self.config.scrape_interval_s))))
        return max(1, min(self.config.max_points_per_series - 1, budget))

    def _plan(self, wire: Wire, names: tuple[str, ...], grid: GridRange,
              ) -> tuple[list[promql.Scope], set[PodKey]]:
        everything = self.config.scope(names)
        form = [("match[]", m) for m in promql.series_matchers(everything)]
        form += [("start", seconds_param(grid.first_s - self.config.cpu_rate_window_s)),
                 ("end", seconds_param(grid.last_s))]
        data = self._transport.decode(wire.now(*self._forms.form("series", form)))
        if not isinstance(data, list) or not all(isinstance(d, dict) for d in data):
            raise PermanentSourceError("malformed series list", endpoint="series")
        label_sets = self._forms.series_labels(data, names)
        listed = {(d.get("namespace", ""), d.get("pod", ""), d.get("container", "")) for d in label_sets}
        return plan_scopes(count_containers(label_sets), self.config.max_series_per_query,
                           self.config.cluster, self.config.split_by), listed

    def _read_scope(self, wire: Wire, scope: promql.Scope, grid: GridRange, parts: list[Part],
                    dropped: Counter[str]) -> OwnerIndex:
        """The scope's three owner queries (and, with sparse signals, the query for containers whose OOM
        counter is above zero), then three range queries or four remote reads per chunk, each sent while the
        answer before it is decoded; then the OOM counters of the containers that can show an OOM kill, and the
        follow-ups (``_record_ooms``) for chunks in which one was seen.

        The usage requests alternate between the two kinds where there are both (``interleaved``): a remote
        read costs Prometheus little and its decoding costs us more, a summary range query the other way round,
        so while one side works on an answer the other works on the next."""
        sparse = self.config.sparse_signals
        range_s = grid.last_s - grid.first_s + grid.step_s + self.config.cpu_rate_window_s
        at = [("time", seconds_param(grid.last_s))]
        instant = [promql.pod_owner_query(scope, range_s), promql.replicaset_owner_query(scope, range_s),
                   promql.job_owner_query(scope, range_s)]
        if sparse:
            instant.append(promql.oom_seen_query(scope, grid.last_s - grid.first_s + grid.step_s + _OOM_SEEN_MARGIN_S))
        raw_rows: dict[int, list[dict[PodKey, Rows]]] = {}
        jobs: list[list[Job]] = []
        for index, part in enumerate(parts):
            if part.raw:
                rows = raw_rows.setdefault(index, [])
                part_jobs = [Job(self._forms.read_form(scope, metric, part.chunk, window),
                                  functools.partial(self._raw_answer, part=part, rows=rows, per_step=per_step,
                                                    window_s=window, scope=scope))
                             for (metric, window), per_step in zip(raw_metrics(part),
                                                                   (rates, peaks, rates, rates), strict=True)]
            else:
                part_jobs = [Job(self._forms.range_form(query, part.chunk),
                                  functools.partial(self._range_answer, part=part, name=name, dropped=dropped,
                                                    scope=scope))
                             for name, query in (("cpu", promql.cpu_query(scope, part.window_s)),
                                                 ("memory", promql.memory_peak_query(scope, part.chunk.step_s)),
                                                 ("throttle", promql.throttle_query(scope, part.window_s,
                                                                                    sparse=sparse)))]
            if not sparse:
                part_jobs.append(Job(self._forms.oom_form(scope, part.chunk),
                                      functools.partial(self._read_ooms, wire, scope, part, only=None,
                                                        dropped=dropped)))
            jobs.append(part_jobs)
        usage_jobs = interleaved([j for p, j in zip(parts, jobs, strict=True) if p.raw],
                                  [j for p, j in zip(parts, jobs, strict=True) if not p.raw])
        answers = wire.ahead([self._forms.form("query", [("query", q), *at]) for q in instant]
                             + [job.request for job in usage_jobs])
        owners = OwnerIndex.from_rows(self._forms.labels(next(answers)), self._forms.labels(next(answers)),
                                      self._forms.labels(next(answers)))
        seen = self._forms.oom_seen(next(answers), scope) if sparse else None
        for job in usage_jobs:
            job.handle(next(answers))
        for index, rows in raw_rows.items():
            cpu, memory, throttled, periods = rows
            part = parts[index]
            share = throttled_share(throttled, periods, sparse)
            for name, per_key in (("cpu", cpu), ("memory", memory), ("throttle", share)):
                keep(as_series(per_key, part.chunk), part, name, dropped)
        if seen:
            narrow = self.config.scope(tuple(sorted({k[0] for k in seen})), tuple(sorted({k[1] for k in seen})))
            answers = wire.ahead([self._forms.oom_form(narrow, p.chunk) for p in parts])
            for part, fetched in zip(parts, answers, strict=True):
                self._read_ooms(wire, narrow, part, fetched, seen, dropped)
        return owners

    def _read_scope_fitting(self, wire: Wire, scope: promql.Scope, grid: GridRange, parts: list[Part],
                            dropped: Counter[str]) -> OwnerIndex:
        """``_read_scope``, again in time chunks of half the length each time the backend answers that a range
        query is too big (``QueryTooLargeError``: ``--query.max-samples`` or ``--query.timeout``), at most
        ``MAX_SPLITS`` times; what the refused attempt had read of the scope is dropped first, so nothing is
        counted twice."""
        for splits in range(MAX_SPLITS + 1):
            try:
                return self._read_scope(wire, scope, grid, parts, dropped)
            except QueryTooLargeError as err:
                smaller = halved(parts)
                if err.endpoint not in ("query_range", "read") or splits == MAX_SPLITS or len(smaller) == len(parts):
                    raise
                forget(scope, parts)
                log.warning("query too big for the backend; reading the scope again in shorter time chunks",
                            extra={"namespaces": len(scope.namespaces), "chunks": len(smaller), "error": str(err)})
                parts = smaller
        raise AssertionError("unreachable")

    def _raw_answer(self, fetched: Fetched, *, part: Part, rows: list[dict[PodKey, Rows]],
                    per_step: Callable[..., Rows], window_s: float, scope: promql.Scope) -> None:
        rows.append(self._forms.from_raw(fetched, part.chunk, per_step, window_s, scope))

    def _range_answer(self, fetched: Fetched, *, part: Part, name: str, dropped: Counter[str],
                      scope: promql.Scope) -> None:
        keep(self._forms.matrix(fetched, part.chunk, scope), part, name, dropped)

    def _read_ooms(self, wire: Wire, scope: promql.Scope, part: Part, fetched: Fetched,
                   only: set[PodKey] | None, dropped: Counter[str]) -> None:
        """The OOM kills of one chunk's counter answer (of ``only`` those containers, when given: the narrowed
        query's pod and namespace matchers can also match a pod of another scope)."""
        chunk = part.chunk
        baseline_s = chunk.first_s - chunk.step_s
        events: dict[PodKey, list[tuple[float, int]]] = {}
        with_baseline = GridRange(first_s=baseline_s, last_s=chunk.last_s, step_s=chunk.step_s)
        for series in self._forms.matrix(fetched, with_baseline, scope):
            if only is not None and series.pod_key not in only:
                continue
            found = oom_increments(drop_invalid(series, dropped), baseline_s)
            if found:
                events[series.pod_key] = found
        if events:
            self._record_ooms(wire, scope, chunk, events, part.usage, dropped)

    def _record_ooms(self, wire: Wire, scope: promql.Scope, chunk: GridRange,
                     events: dict[PodKey, list[tuple[float, int]]], usage: dict[PodKey, PodUsage],
                     dropped: Counter[str]) -> None:
        resources: dict[str, dict[PodKey, Series]] = {}
        for kind in ("limits", "requests"):
            query = promql.memory_resource_query(scope, kind)
            series = self._forms.matrix(wire.now(*self._forms.range_form(query, chunk)), chunk)
            resources[kind] = {s.pod_key: drop_invalid(s, dropped) for s in series}
        for key, found in events.items():
            for t, count in found:
                limit = value_at(resources["limits"].get(key), t)
                request = value_at(resources["requests"].get(key), t)
                kill = OomKill(timestamp_s=t, memory_limit_bytes=None if limit is None else round(limit),
                               memory_request_bytes=None if request is None else round(request))
                usage.setdefault(key, PodUsage()).ooms.extend([kill] * count)

    def _report(self, dropped: Counter[str], usage: dict[PodKey, PodUsage], owners: OwnerIndex,
                listed: set[PodKey]) -> None:
        for reason, n in dropped.items():
            self.metrics.dropped.labels(reason).inc(n)
        if dropped:
            log.warning("invalid samples dropped", extra={f"dropped_{r}": n for r, n in dropped.items()})
        missing = listed - usage.keys()
        if missing:  # a data gap: those containers get no batch this pass (never a zero)
            self.metrics.missing.inc(len(missing))
            log.warning("containers listed by the series index returned no usage samples", extra={
                "containers": len(missing), "namespaces": len({k[0] for k in missing}),
                "reason": "empty, NaN-only or partial query results; their state is left as it is"})
        orphans = {(ns, pod) for ns, pod, _ in usage if (ns, pod) not in owners.pods}
        if orphans:
            log.info("pods without owner series keyed as kind Pod",
                     extra={"pods": len(orphans), "reason": "no kube_pod_owner series in the window"})


