"""One workload's recommendation: the one computation ``once``, ``run``, ``report`` and ``backtest`` share.

Owns ``recommend_workload``: from a workload's containers (regular containers, native sidecars and plain init
containers, each with its current requests and limits), their states, the VPA that targets the workload (None: the
default container policy) and the fleet, it returns each container's recommendation and its new state, and changes
nothing it is given. Every caller passes the same inputs: ``containers_in_pod`` is the number of containers passed
that run together (regular ones and sidecars: a plain init container runs before them, so it neither takes a share of
the pod's floors from them nor gets a larger one), the container policy is the VPA's (minAllowed, maxAllowed,
controlled resources and values, mode) with the fleet set, and the fleet is ``fleet_of`` over every container the
caller recommends for, once all its history is folded in (a sharded engine combines its ``fleet_parts`` with the other
shards'; the backtest, which has no "all history", gives the fleet of its series' first day). The states are the
engine's: restored from the VPA's checkpoint where one is usable (``recommender.kube.checkpoint``, by the engine and,
read-only, by the report) and grown by ``fold_new`` with the history after it, else built from the window. Only the
sink differs: the engine writes the recommendations into the VPA's status, the report puts them in its document and
writes nothing, the backtest applies them to its simulated container.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from podtailor.resources import CurrentResources
from recommender.kube.served import VpaSpec
from recommender.model.fleet import FleetSums
from recommender.model.registry import AtRisk
from recommender.model.types import (
    ContainerKey,
    ContainerPolicy,
    ContainerState,
    FleetScale,
    Recommendation,
    Strategy,
    UsageBatch,
)


class Container(Protocol):
    """What the recommendation reads of a container: its name and its current requests and limits."""

    @property
    def name(self) -> str: ...

    @property
    def current(self) -> CurrentResources: ...

    @property
    def init(self) -> bool:
        """A plain (non-sidecar) init container: it runs to completion before the others start."""
        ...


@dataclass(frozen=True, slots=True, kw_only=True)
class PlainContainer:
    """A ``Container`` for callers without a pod template of their own (the backtest)."""

    name: str
    current: CurrentResources
    init: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkloadRecommendation:
    recommendations: Mapping[str, Recommendation]
    """Per container with a state and not switched off (``mode: Off``); a recommendation may have no target
    (no history yet), which the sink then leaves out."""
    states: Mapping[str, ContainerState]
    """Every given container state after recommending: the strategy's new state where it recommended, the
    given one elsewhere. The caller goes on with these (``Strategy.recommend``)."""


def container_policy(vpa: VpaSpec | None, container: str, containers_in_pod: int,
                     fleet: FleetScale | None) -> ContainerPolicy:
    """The VPA's policy for ``container`` (its own entry, else ``*``, else the default), or the default policy
    when no VPA targets the workload; with ``containers_in_pod`` and the fleet set."""
    if vpa is None:
        return ContainerPolicy(containers_in_pod=containers_in_pod, fleet=fleet)
    return replace(vpa.policy_for(container, containers_in_pod), fleet=fleet)


def fleet_of(strategy: Strategy, states: Iterable[ContainerState], now_s: float) -> FleetScale | None:
    """The fleet of every container recommended for (``Strategy.fleet_scale``): pass all states, after all
    history is folded in, so the fleet depends neither on the order nor on the grouping of the reads."""
    return strategy.fleet_scale(states, now_s)


def fleet_parts(strategy: Strategy, states: Mapping[str, Iterable[ContainerState]],
                now_s: float) -> dict[str, FleetSums] | None:
    """The fleet's parts by namespace (``Strategy.fleet_sums`` of each namespace's states), which combine
    (``model.fleet.combine``) into exactly the sums behind ``fleet_of`` over all of them; None when the
    strategy prices nothing relative to the fleet. How a sharded engine shares its part of the fleet."""
    if strategy.fleet_sums((), now_s) is None:
        return None
    parts = {namespace: strategy.fleet_sums(group, now_s) for namespace, group in states.items()}
    return {namespace: part for namespace, part in parts.items() if part is not None}


def strategy_for(vpa: VpaSpec | None, default: Strategy, at_risk: AtRisk | None) -> Strategy:
    """The strategy a workload is recommended by: at its VPA's ``podtailor.io/risk`` and ``podtailor.io/risk-budget``
    annotations when the VPA has a usable one and the strategy has a risk setting (``at_risk`` builds it; an
    annotation left out keeps the recommender's own setting: ``default``'s risk, ``at_risk``'s budget), else
    ``default`` (the engine's rule,
    which keeps the strategies it built in a small cache)."""
    if vpa is None or at_risk is None or (vpa.risk is None and vpa.budget is None):
        return default
    risk = vpa.risk if vpa.risk is not None else float(default.parameters().get("risk", 1.0))
    return at_risk(risk, vpa.budget)


def fold_new(strategy: Strategy, states: dict[str, ContainerState], keys: Mapping[str, ContainerKey],
             batches: Mapping[ContainerKey, UsageBatch]) -> None:
    """New samples into ``states``, in place: for each container name in ``keys``, its batch (if any) added to
    its state, a new state made for a container seen the first time. How the engine grows a VPA's states each
    pass, from a checkpoint or from nothing; ``report`` grows restored states the same way."""
    for name, key in keys.items():
        state = states.get(name)
        if state is None:
            state = states[name] = strategy.new_state()
        batch = batches.get(key)
        if batch is not None:
            state.add(batch)


def recommend_workload(strategy: Strategy, containers: Sequence[Container], states: Mapping[str, ContainerState],
                       *, vpa: VpaSpec | None, fleet: FleetScale | None, now_s: float) -> WorkloadRecommendation:
    """Each of ``containers`` that has a state and is not switched off, recommended (module docstring)."""
    recs: dict[str, Recommendation] = {}
    after = dict(states)
    running = max(1, sum(1 for c in containers if not c.init))
    for c in containers:
        policy = container_policy(vpa, c.name, running, fleet)
        state = states.get(c.name)
        if policy.mode_off or state is None:
            continue
        recs[c.name], after[c.name] = strategy.recommend(state, now_s=now_s, policy=policy, current=c.current)
    return WorkloadRecommendation(recommendations=recs, states=after)


def has_target(rec: Recommendation) -> bool:
    """Whether ``rec`` recommends anything (a strategy without history returns bounds-free, target-free ones)."""
    return rec.target.cpu_millicores is not None or rec.target.memory_bytes is not None
