"""History-read variants for the report benchmark: the source's own reads and two floors, all measured alike.

Owns what a "variant" is (a named callable reading the bench's history window from Prometheus and
returning its request count and an answer to compare) and how one is measured (wall time, Prometheus's own
``process_cpu_seconds_total`` before and after, requests), plus the queries of the two floors:

* touch every sample once: ``count_over_time(<metric>{scope}[<history>])`` as instant queries over all
  series, one per metric the source reads, with the source's matchers (``recommender.sources.promql``);
  the least work Prometheus can do over the history;
* KRR's shape: the 7 per-workload instant queries KRR 1.29 sends for a one-container Deployment with the
  ``simple`` strategy (3 discovery: ReplicaSets, pods, running pods; 4 metric: CPU p95, CPU sample count,
  peak memory, memory sample count; /work/shared/reference/peers.md section 1.2), 14 d subqueries at a
  75 s step that is also the ``rate`` window, grouped ``by (container, pod, job)``, with 6 in flight. Only
  the 7 N per-workload queries are sent, not KRR's 6 fixed ones (probe, history check, cluster summary).

A new read (for example a planned one) is one more ``Variant`` whose ``read`` calls ``source_read`` with
its ``PrometheusConfig`` fields, or any other callable of the same type.
"""

from __future__ import annotations

import http.client
import json
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry

from recommender.sources.config import PrometheusConfig
from recommender.sources.promql import Scope, duration, quote, regex_literal, selector

SOURCE_METRICS = ("container_cpu_usage_seconds_total", "container_memory_working_set_bytes",
                  "container_cpu_cfs_throttled_periods_total", "container_cpu_cfs_periods_total",
                  "container_oom_events_total")
"""Every container metric the Prometheus source reads."""
KRR_STEP_S = 75.0
KRR_HISTORY_S = 14 * 86400.0
KRR_IN_FLIGHT = 6
KRR_BY = "container, pod, job"


@dataclass(frozen=True, slots=True, kw_only=True)
class Workload:
    """One bench workload as the backfill wrote it: a Deployment, its ReplicaSet and its pods."""

    namespace: str
    name: str
    replicaset: str
    pods: tuple[str, ...]
    container: str = "app"


@dataclass(frozen=True, slots=True, kw_only=True)
class Window:
    """What every variant reads: the Prometheus, the namespaces and workloads, and the history range."""

    url: str
    namespaces: tuple[str, ...]
    workloads: tuple[Workload, ...]
    start_s: float
    end_s: float
    step_s: int
    scrape_s: int = 0
    """The scrape interval the history was written at (0: the step)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Measured:
    wall_s: float
    prometheus_cpu_s: float
    requests: int
    answer: Any
    """What was read, for comparisons between variants (source batches, or a floor's summary)."""


Read = Callable[[Window], tuple[int, Any]]
"""Reads the window; returns (requests sent, answer)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Variant:
    key: str
    label: str
    short: str
    """A few words naming it in another row's ratio."""
    read: Read
    relative_to: str | None = None
    """The key of the variant this one's wall time and CPU are given as a ratio of."""
    same_as: str | None = None
    """The key of a variant whose answer this one's must equal (compared by the bench)."""
    same_requests: bool = False
    """With ``same_as``: it must also have sent as many requests."""
    describe: Callable[[Any], str] | None = None
    """A note on the answer for the table."""


def prometheus_cpu_s(url: str) -> float:
    """The CPU seconds the Prometheus process has used so far (its own ``process_cpu_seconds_total``)."""
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as resp:  # 127.0.0.1: the harness's Prometheus
        for line in resp.read().decode().splitlines():
            if line.startswith("process_cpu_seconds_total "):
                return float(line.split()[1])
    raise RuntimeError("Prometheus does not report process_cpu_seconds_total")


def measure(variant: Variant, window: Window) -> Measured:
    cpu0, t0 = prometheus_cpu_s(window.url), time.monotonic()
    requests, answer = variant.read(window)
    wall = time.monotonic() - t0
    return Measured(wall_s=wall, prometheus_cpu_s=prometheus_cpu_s(window.url) - cpu0, requests=requests,
                    answer=answer)


def source_read(strategy: str | None = None, **config: Any) -> Read:
    """``PrometheusSource.history`` over the window with these ``PrometheusConfig`` fields (step and scrape
    interval are the window's step) and, with ``strategy``, that strategy's ``HistoryPlan`` (hourly summaries
    of what it weighs little); the answer is the batches."""
    def read(w: Window) -> tuple[int, Any]:
        from recommender.model.registry import get_strategy
        from recommender.sources.prometheus import PrometheusSource

        plan = None if strategy is None else get_strategy(strategy).history_plan()
        src = PrometheusSource(PrometheusConfig(url=w.url, step_s=w.step_s, scrape_interval_s=w.scrape_s or w.step_s,
                                                **config),
                               registry=CollectorRegistry(), plan=plan)
        got = src.history(list(w.namespaces), w.start_s, w.end_s)
        return src.request_count, got
    return read


def touch_queries(namespaces: Sequence[str], range_s: float) -> list[str]:
    """One ``count_over_time`` over the whole range per source metric, with the source's matchers."""
    scope = Scope(namespaces=tuple(sorted(namespaces)))
    return [f"count_over_time({selector(m, scope)}[{duration(range_s)}])" for m in SOURCE_METRICS]


def krr_queries(w: Workload, *, history_s: float = KRR_HISTORY_S, step_s: float = KRR_STEP_S) -> list[str]:
    """The 7 instant queries KRR 1.29 sends for one single-container Deployment (``simple`` strategy),
    adapted to the labels our backfill writes (no ``job`` label: ``by (..., job)`` still groups by the rest).
    Pod and ReplicaSet names are escaped as regex alternatives (KRR joins them raw)."""
    h, s, ns = duration(history_s), duration(step_s), quote(w.namespace)
    pods = regex_literal(w.pods)
    sel = f"namespace={ns},pod=~{pods},container={quote(w.container)}"
    return [
        f"kube_replicaset_owner{{owner_name={quote(w.name)},owner_kind=\"Deployment\",namespace={ns}}}[{h}]",
        f"last_over_time(kube_pod_owner{{owner_name=~{regex_literal([w.replicaset])},"
        f"owner_kind=\"ReplicaSet\",namespace={ns}}}[{h}])",
        f"kube_pod_status_phase{{phase=\"Running\",pod=~{pods},namespace={ns}}} == 1",
        f"quantile_over_time(0.95, max(rate(container_cpu_usage_seconds_total{{{sel}}}[{s}])) by ({KRR_BY})[{h}:{s}])",
        f"count_over_time(max(container_cpu_usage_seconds_total{{{sel}}}) by ({KRR_BY})[{h}:{s}])",
        f"max_over_time(max(container_memory_working_set_bytes{{{sel}}}) by ({KRR_BY})[{h}:{s}])",
        f"count_over_time(max(container_memory_working_set_bytes{{{sel}}}) by ({KRR_BY})[{h}:{s}])",
    ]


@dataclass
class InstantClient:
    """Form-encoded POSTs to ``/api/v1/query`` over one kept-alive connection per thread (as a
    ``requests.Session`` pool would), counting requests."""

    url: str
    requests: int = 0
    _local: threading.local = field(default_factory=threading.local)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def query(self, promql: str, time_s: float) -> list[dict[str, Any]]:
        conn: http.client.HTTPConnection | None = getattr(self._local, "conn", None)
        if conn is None:
            parsed = urllib.parse.urlsplit(self.url)  # 127.0.0.1: the harness's Prometheus
            conn = self._local.conn = http.client.HTTPConnection(parsed.hostname or "", parsed.port, timeout=600)
        body = urllib.parse.urlencode({"query": promql, "time": f"{time_s:.3f}"})
        conn.request("POST", "/api/v1/query", body, {"Content-Type": "application/x-www-form-urlencoded"})
        resp = conn.getresponse()
        data = resp.read()
        with self._lock:
            self.requests += 1
        if resp.status != 200:
            raise RuntimeError(f"{promql[:200]} answered {resp.status}: {data[:500]!r}")
        result: list[dict[str, Any]] = json.loads(data)["data"]["result"]
        return result

    def run(self, queries: Sequence[str], time_s: float, in_flight: int) -> list[list[dict[str, Any]]]:
        if in_flight == 1:
            return [self.query(q, time_s) for q in queries]
        with ThreadPoolExecutor(in_flight) as pool:
            return list(pool.map(lambda q: self.query(q, time_s), queries))


def touch_every_sample(in_flight: int) -> Read:
    """The touch-every-sample floor; the answer is the number of samples counted per metric."""
    def read(w: Window) -> tuple[int, Any]:
        client = InstantClient(w.url)
        results = client.run(touch_queries(w.namespaces, w.end_s - w.start_s), w.end_s, in_flight)
        return client.requests, tuple(sum(int(float(r["value"][1])) for r in res) for res in results)
    return read


def krr_shape(in_flight: int = KRR_IN_FLIGHT) -> Read:
    """The KRR-shaped floor; the answer is how many of the 7 N queries returned something, per query kind."""
    def read(w: Window) -> tuple[int, Any]:
        client = InstantClient(w.url)
        queries = [q for wl in w.workloads for q in krr_queries(wl)]
        results = client.run(queries, w.end_s, in_flight)
        return client.requests, tuple(sum(1 for r in results[k::7] if r) for k in range(7))
    return read
