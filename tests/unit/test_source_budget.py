"""The points budget: one range response never holds more than max_points_per_query series x points."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from recommender.sources import promql
from recommender.sources.config import PrometheusConfig
from recommender.sources.prometheus import PrometheusSource


def source(**kw: int) -> PrometheusSource:
    return PrometheusSource(PrometheusConfig(url="http://127.0.0.1:1", **kw), registry=CollectorRegistry())


def listed(namespace: str, n: int) -> set[tuple[str, str, str]]:
    return {(namespace, f"p{i}", "app") for i in range(n)}


def test_big_scopes_are_read_in_shorter_time_chunks() -> None:
    scopes = [promql.Scope(namespaces=("a",)), promql.Scope(namespaces=("b", "c"))]
    containers = listed("a", 1000) | listed("b", 3000) | listed("c", 2000)
    # The biggest scope holds b and c: 5,000 series; 4,000,000 points / 5,000 = 800 points per query.
    assert source()._chunk_points(scopes, containers) == 800
    # Small scopes are capped by Prometheus's 11,000 points per series (minus the OOM query's extra point).
    assert source()._chunk_points([promql.Scope(namespaces=("a",))], listed("a", 10)) == 10_999
    # A paged scope counts only its own pods: 2 of them -> 250,000, capped at 10,999.
    paged = promql.Scope(namespaces=("a",), pods=("p0", "p1"))
    assert source(max_points_per_query=20_000)._chunk_points([paged], listed("a", 1000)) == 10_000


def test_a_remote_read_spans_at_most_max_remote_read_s() -> None:
    scope = [promql.Scope(namespaces=("a",))]
    # 333 containers at a 300 s step: the points budget alone allows 4,000,000 // 333 = 12,012 grid times, 41
    # days; the span caps it at 3.5 days: 302,400 s / 300 s + 1 = 1,009 grid times (an 8-day read: 3 chunks).
    assert source(step_s=300, scrape_interval_s=300)._chunk_points(scope, listed("a", 333), raw=True) == 1_009
    # The default plan's 3 days at full resolution (866 grid times with the hour it aligns to) stay one read.
    assert source(step_s=300, scrape_interval_s=300)._chunk_points(scope, listed("a", 333), raw=True) >= 866
    # Where the points budget is the tighter one, it still decides: 5,000 containers -> 800 grid times.
    assert source(step_s=300, scrape_interval_s=300)._chunk_points(scope, listed("a", 5000), raw=True) == 800
