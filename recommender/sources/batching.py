"""Packing namespaces into query scopes so that no query returns more than a set number of series.

Owns ``plan_scopes``: from the containers each namespace has (listed once per pass through the series
endpoint, an index lookup), it groups whole namespaces into batches of at most ``max_series`` containers
(one ``namespace=~"a|b"`` matcher each) and splits a namespace that alone exceeds the limit into pages of
whole pods (``pod=~"p1|p2"``). The number of scopes grows with the number of series divided by the limit,
not with the number of workloads. Pure.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from functools import partial

from recommender.sources.promql import Scope

ContainerCounts = Mapping[str, Mapping[str, int]]
"""namespace -> pod -> number of containers with usage series."""


def count_containers(label_sets: Iterable[Mapping[str, str]]) -> dict[str, dict[str, int]]:
    """Distinct (namespace, pod, container) from series label sets, counted per namespace and pod."""
    seen: set[tuple[str, str, str]] = set()
    for labels in label_sets:
        seen.add((labels.get("namespace", ""), labels.get("pod", ""), labels.get("container", "")))
    out: dict[str, dict[str, int]] = {}
    for namespace, pod, _ in seen:
        pods = out.setdefault(namespace, {})
        pods[pod] = pods.get(pod, 0) + 1
    return out


def _pod_pages(namespace: str, pods: Mapping[str, int], max_series: int, make: Callable[..., Scope]) -> list[Scope]:
    pages: list[Scope] = []
    page: list[str] = []
    size = 0
    for pod in sorted(pods):
        if page and size + pods[pod] > max_series:
            pages.append(make(namespaces=(namespace,), pods=tuple(page)))
            page, size = [], 0
        page.append(pod)
        size += pods[pod]
    if page:
        pages.append(make(namespaces=(namespace,), pods=tuple(page)))
    return pages


def plan_scopes(counts: ContainerCounts, max_series: int, cluster: tuple[str, str] | None = None,
                split_by: str | None = None) -> list[Scope]:
    """Scopes covering every listed container once, each with at most ``max_series`` containers (a
    single pod with more containers than that still gets its own scope); ``cluster`` and ``split_by`` as in
    ``Scope`` (split: ``counts`` are keyed by cluster-qualified namespaces, and a scope spans clusters)."""
    if max_series < 1:
        raise ValueError("max_series must be at least 1")
    make = partial(Scope, cluster=cluster, split_by=split_by)
    scopes: list[Scope] = []
    batch: list[str] = []
    size = 0
    for namespace in sorted(counts):
        n = sum(counts[namespace].values())
        if n == 0:
            continue
        if n > max_series:
            scopes += _pod_pages(namespace, counts[namespace], max_series, make)
            continue
        if batch and size + n > max_series:
            scopes.append(make(namespaces=tuple(batch)))
            batch, size = [], 0
        batch.append(namespace)
        size += n
    if batch:
        scopes.append(make(namespaces=tuple(batch)))
    return scopes
