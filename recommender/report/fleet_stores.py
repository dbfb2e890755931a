"""Where a report over several clusters reads their history: one shared store, or each cluster's own.

Owns ``SharedStore`` (``--prometheus-url``: one source over the one store, every query matching all the
clusters' values of the cluster label and split by it, ``PrometheusConfig.many_clusters``) and ``OwnStores``
(no ``--prometheus-url``: each cluster's store found by its Service through its own API server, one source
per cluster, ``store_service``). Both read the fleet report's cluster-qualified namespaces
(``recommender.sources.clusters.qualify``) and answer with qualified keys, so the rest of the report does
not know which it has; ``one(context)`` reads one cluster's plain namespaces (growing restored checkpoints).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Protocol

from recommender.model.types import ContainerKey, UsageBatch
from recommender.sources.clusters import qualify, split

if TYPE_CHECKING:
    from recommender.model.types import HistoryPlan
    from recommender.report.clusters import Fleet
    from recommender.sources.config import PrometheusConfig

Read = Callable[[Sequence[str], float, float], Mapping[ContainerKey, UsageBatch]]


class Source(Protocol):
    """The part of ``PrometheusSource`` a fleet report reads through."""

    @property
    def request_count(self) -> int: ...
    def history(self, namespaces: Sequence[str], start_s: float,
                end_s: float) -> Mapping[ContainerKey, UsageBatch]: ...
    def close(self) -> None: ...


def source_of(config: PrometheusConfig, plan: HistoryPlan) -> Source:
    """A ``PrometheusSource`` over ``config`` with its own metrics registry."""
    from prometheus_client import CollectorRegistry

    from recommender.sources.prometheus import PrometheusSource

    return PrometheusSource(config, registry=CollectorRegistry(), plan=plan)


class SharedStore:
    """Every cluster's history from one store, in the same batched requests as one cluster's."""

    def __init__(self, config: PrometheusConfig, fleet: Fleet, plan: HistoryPlan) -> None:
        self.fleet = fleet
        self.where = config.base_url
        self.source = source_of(replace(config, cluster_label=fleet.label, many_clusters=True), plan)

    @property
    def request_count(self) -> int:
        return self.source.request_count

    def history(self, namespaces: Sequence[str], start_s: float, end_s: float) -> Mapping[ContainerKey, UsageBatch]:
        return self.source.history(namespaces, start_s, end_s)

    def one(self, context: str) -> Read:
        from recommender.report.clusters import one_cluster

        return one_cluster(self.source.history, self.fleet, context)

    def close(self) -> None:
        self.source.close()


class OwnStores:
    """Each cluster's history from its own store (``sources`` by context): a qualified namespace is read from
    the store of the cluster it names, and its keys come back qualified."""

    def __init__(self, sources: Mapping[str, Source], fleet: Fleet, where: str = "") -> None:
        self.sources = dict(sources)
        self.context_of = {t.value: t.context for t in fleet.targets}
        self.where = where or "each cluster's store"

    @classmethod
    def found(cls, configs: Mapping[str, PrometheusConfig], fleet: Fleet, plan: HistoryPlan) -> OwnStores:
        """A source per cluster over the configs found through each API server (``store_service``)."""
        where = "; ".join(f"{context}: {config.base_url}" for context, config in configs.items())
        return cls({context: source_of(config, plan) for context, config in configs.items()}, fleet, where)

    @property
    def request_count(self) -> int:
        return sum(s.request_count for s in self.sources.values())

    def history(self, namespaces: Sequence[str], start_s: float, end_s: float) -> Mapping[ContainerKey, UsageBatch]:
        plain: dict[str, list[str]] = {}
        for name in namespaces:
            value, namespace = split(name)
            plain.setdefault(value, []).append(namespace)
        out: dict[ContainerKey, UsageBatch] = {}
        for value, names in plain.items():
            found = self.sources[self.context_of[value]].history(names, start_s, end_s)
            out.update({replace(k, namespace=qualify(value, k.namespace)): batch for k, batch in found.items()})
        return out

    def one(self, context: str) -> Read:
        return self.sources[context].history

    def close(self) -> None:
        for source in self.sources.values():
            source.close()
