"""A DaemonSet's recommendation per node pool, on the one recommendation path.

Owns the per-pool part of serving a DaemonSet: which pods run on which pool (``pod_pool_keys``: the
(namespace, pod) -> pool map the usage source splits a DaemonSet's usage by, ``ContainerKey.pool``),
folding each pool's new samples into that pool's container states (``fold_pools``), recommending each pool
with ``recommend.recommend_workload`` (the same computation as the workload's own, only over the pool's
states: ``recommend_pools``), and what the VPA then carries (``pool_outcome``): the status holds the
recommendation of the pool most of the DaemonSet's pods run on (``podtailor.poolrecs.majority_pool``; the
workload-wide one for a container that pool has none for), and the ``podtailor.io/pool-recommendations``
annotation holds every pool's. Pools are named by ``podtailor.nodepool.node_pool``, as the updater's canary
batches name them; pods on nodes without a pool label (pool "") count only workload-wide. Pure: no client.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from podtailor.poolrecs import PoolRecommendations, PoolRecsError, encode, majority_pool
from podtailor.vpa import RecommendedContainerResources
from recommender.kube.served import VpaSpec
from recommender.model.types import ContainerKey, ContainerState, FleetScale, Recommendation, Strategy, UsageBatch
from recommender.recommend import Container, fold_new, has_target, recommend_workload

PoolStates = dict[str, dict[str, ContainerState]]
"""Per pool name, per container name: the state of that pool's usage."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PoolOutcome:
    status: Mapping[str, Recommendation]
    """Per container: what the VPA status carries."""
    annotation: str | None
    """The annotation's value; None: no pool has a value (the annotation is removed)."""
    problem: str = ""
    """Why the per-pool values could not be encoded ("" when they were); the status value then serves all."""


def pod_pool_keys(namespace: str, pod_pools: Mapping[str, str]) -> dict[tuple[str, str], str]:
    """(namespace, pod) -> pool for the pods on a named pool (the source's ``pools`` argument)."""
    return {(namespace, pod): pool for pod, pool in pod_pools.items() if pool}


def fold_pools(strategy: Strategy, states: PoolStates, key: ContainerKey, containers: Sequence[str],
               pools: set[str], batches: Mapping[ContainerKey, UsageBatch]) -> None:
    """Each of ``pools``' new samples into its states, in place (``recommend.fold_new``); ``key`` names the
    workload (its container and pool parts are ignored)."""
    for pool in sorted(pools):
        fold_new(strategy, states.setdefault(pool, {}), {
            c: ContainerKey(namespace=key.namespace, workload_kind=key.workload_kind,
                            workload_name=key.workload_name, container=c, pool=pool) for c in containers}, batches)


def recommend_pools(strategy: Strategy, containers: Sequence[Container], states: PoolStates, *, vpa: VpaSpec,
                    fleet: FleetScale | None, now_s: float) -> tuple[dict[str, dict[str, Recommendation]], PoolStates]:
    """Each pool's recommendations with a target, and every pool's states after recommending."""
    recs: dict[str, dict[str, Recommendation]] = {}
    after: PoolStates = {}
    for pool, pool_states in sorted(states.items()):
        done = recommend_workload(strategy, containers, pool_states, vpa=vpa, fleet=fleet, now_s=now_s)
        after[pool] = dict(done.states)
        if out := {name: rec for name, rec in done.recommendations.items() if has_target(rec)}:
            recs[pool] = out
    return recs, after


def _entry(container: str, rec: Recommendation) -> RecommendedContainerResources:
    return RecommendedContainerResources(container_name=container, target=rec.target, lower_bound=rec.lower_bound,
                                         upper_bound=rec.upper_bound, uncapped_target=rec.uncapped_target)


def pool_outcome(overall: Mapping[str, Recommendation], per_pool: Mapping[str, Mapping[str, Recommendation]],
                 pod_pools: Mapping[str, str]) -> PoolOutcome:
    """The status (the majority pool's values over the workload-wide ones) and the annotation (every pool's);
    a value that breaks the annotation's bounds leaves the status workload-wide and says why."""
    if not per_pool:
        return PoolOutcome(status=overall, annotation=None)
    try:
        text = encode(PoolRecommendations(pools={pool: {c: _entry(c, r) for c, r in recs.items()}
                                                 for pool, recs in per_pool.items()}))
    except PoolRecsError as err:
        return PoolOutcome(status=overall, annotation=None, problem=str(err))
    majority = majority_pool(pod_pools.values())
    return PoolOutcome(status={**overall, **per_pool.get(majority or "", {})}, annotation=text)
