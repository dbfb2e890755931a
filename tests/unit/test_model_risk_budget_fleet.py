"""Unit tests of the risk budget's margin pooled over the fleet (``RiskBudget.memory_fleet_eta``): the kills a
container's budget allowed, the fleet's mean excess, the margin it adds (held between memory moves), and the
replay of a fleet together (``replay.replay_fleet``) that carries one container's kills to those that start
later."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from recommender.backtest.replay import ReplayConfig, fleet_of, replay, replay_fleet
from recommender.backtest.trace import Series
from recommender.model.podtailor import PodtailorStrategy
from recommender.model.podtailor_budget import MONTH_S, RiskBudget
from recommender.model.podtailor_params import PodtailorParams
from recommender.model.podtailor_state import PodtailorState
from recommender.model.types import ContainerPolicy, FleetScale, Resources
from tests.unit.test_model_risk_budget import GIB, HOUR, NOW, STEP, batch, current, state_with

POOLED = RiskBudget(oom_per_month=1.0, memory_fleet_eta=0.2)


def test_the_kills_allowed_accumulate_and_the_excess_is_the_kills_beyond_them() -> None:
    strategy, state = state_with(POOLED)
    state.add(batch(np.full(12, 0.3), start=NOW - HOUR))  # history before the budget is armed: not counted
    _, state = strategy.recommend(state, now_s=NOW, policy=ContainerPolicy(), current=current(400))
    state.add(batch(np.full(12, 0.3), start=NOW, kills=1))
    _, state = strategy.recommend(state, now_s=NOW + HOUR, policy=ContainerPolicy(), current=current(400))
    assert isinstance(state, PodtailorState)
    # one hour seen at 1 kill a month: 3600 / 2,592,000 = 1/720 of a kill allowed, and one kill taken
    assert state.budget.total_memory_allowed == pytest.approx(1 / 720)
    assert state.budget.memory_excess == pytest.approx(1 - 1 / 720)
    state.add(batch(np.full(24, 0.3), start=NOW + HOUR))
    _, state = strategy.recommend(state, now_s=NOW + 3 * HOUR, policy=ContainerPolicy(), current=current(400))
    assert isinstance(state, PodtailorState)
    assert state.budget.total_memory_allowed == pytest.approx(3 * HOUR / MONTH_S)
    assert state.budget.memory_excess == pytest.approx(1 - 3 / 720)


def test_the_fleets_excess_multiplies_every_containers_memory_margin_held_between_moves() -> None:
    _, state = state_with(POOLED)
    fleet = FleetScale(cpu_cores=1.0, memory_bytes=GIB, memory_excess=1.0)
    armed = state.successor()
    assert armed.calibrate_budget(POOLED, fleet) == 1.0 and armed.budget.memory_log_margin == 0.0  # the fleet has none
    # its own (0) plus 0.2 x 1 kill beyond budget per container
    assert armed.memory_budget_margin(POOLED, fleet, refresh=False) == pytest.approx(math.exp(0.2))
    # held: a fleet that moved is taken only on a refresh (the memory target goes out anyway)
    calmer = replace(fleet, memory_excess=0.5)
    assert armed.memory_budget_margin(POOLED, calmer, refresh=False) == pytest.approx(math.exp(0.2))
    assert armed.memory_budget_margin(POOLED, calmer, refresh=True) == pytest.approx(math.exp(0.1))
    assert armed.budget.memory_log_margin == 0.0  # the fleet's part is never folded into the container's own
    # at half the budget the step is twice as large (OOM_ETA_REFERENCE_PER_MONTH / budget)
    half = replace(POOLED, oom_per_month=0.5)
    assert armed.memory_budget_margin(half, fleet, refresh=True) == pytest.approx(math.exp(0.4))
    assert armed.memory_budget_margin(replace(POOLED, memory_fleet_eta=0.0), fleet, refresh=True) == 1.0
    assert armed.memory_budget_margin(POOLED, None, refresh=True) == 1.0  # no fleet: its own margin alone
    far = replace(fleet, memory_excess=-100.0)
    assert armed.memory_budget_margin(POOLED, far, refresh=True) == pytest.approx(POOLED.min_margin)
    assert state.successor().memory_budget_margin(POOLED, fleet, refresh=True) == 1.0  # not armed yet
    with pytest.raises(ValueError, match="budget"):
        RiskBudget(memory_fleet_eta=-0.1)
    with pytest.raises(ValueError, match="memory_excess"):
        FleetScale(cpu_cores=1.0, memory_bytes=1.0, memory_excess=math.nan)


def test_the_fleet_holds_the_mean_excess_of_the_containers_with_a_memory_margin() -> None:
    strategy, a = state_with(POOLED)
    _, b = state_with(POOLED)
    _, c = state_with(RiskBudget(cpu_over_share=0.01))  # no memory margin: not counted
    for s in (a, b, c):
        s.add(batch(np.full(12, 0.3), start=NOW - HOUR))
    a.budget.memory_log_margin, b.budget.memory_log_margin = 0.1, 0.0
    a.budget.total_memory_kills, a.budget.total_memory_allowed = 2, 0.5
    b.budget.total_memory_allowed = 0.25
    c.budget.cpu_log_margin = 0.0
    fleet = strategy.fleet_scale([a, b, c], NOW)
    assert fleet is not None and fleet.memory_excess == pytest.approx((1.5 - 0.25) / 2)
    lone = strategy.fleet_scale([c], NOW)
    assert lone is not None and lone.memory_excess is None


def _vm(name: str, start: float, days: float, *, jump_at_day: float | None = None) -> Series:
    """5-minute samples: CPU 0.3 cores, memory 1 GiB (1.6 GiB from ``jump_at_day`` on), a 4-core, 4 GiB VM."""
    n = int(days * 86400 / STEP)
    t = start + STEP * np.arange(n)
    mem = np.full(n, GIB)
    if jump_at_day is not None:
        mem[t >= start + jump_at_day * 86400] = 1.6 * GIB
    return Series(series_id=name, timestamps_s=t, cpu_cores=np.full(n, 0.3), memory_bytes=mem,
                  cpu_provisioned_cores=np.full(n, 4.0), memory_provisioned_bytes=np.full(n, 4 * GIB))


def test_a_fleet_replayed_together_carries_one_containers_kills_to_the_others() -> None:
    jumpy = _vm("jumpy", NOW, 6, jump_at_day=3)
    flat = _vm("flat", NOW + 0.5 * 86400, 5)
    later = _vm("later", NOW + 4 * 86400, 2)  # starts after the kill
    series = [jumpy, flat, later]
    cfg = ReplayConfig(fleet=fleet_of(series, ReplayConfig()))
    # without a budget the fleet's sizes are all a step sees: together is the same as one at a time
    plain = PodtailorStrategy(PodtailorParams())
    for s, got in zip(series, replay_fleet(series, plain, cfg), strict=True):
        want = replay(s, plain, cfg)
        assert all(np.array_equal(getattr(got, f), getattr(want, f)) for f in
                   ("cpu_request", "cpu_limit", "memory_request", "memory_limit", "changed"))
    pooled = PodtailorStrategy(PodtailorParams(budget=replace(POOLED, memory_fleet_eta=2.0)))
    together = replay_fleet(series, pooled, cfg)
    alone = [replay(s, pooled, cfg) for s in series]
    # the jumpy VM is killed when its memory jumps past its limit: its own margin rises either way
    assert np.nanmax(together[0].memory_limit) >= 1.6 * GIB
    # the flat VM never is, and its memory never moves by itself: the fleet's margin is held, so the kill moves
    # nothing of it (alone or together, its memory request is the same from a day before the kill to the end)
    kill_step = int((3 * 86400 - 0.5 * 86400) // HOUR)  # the flat VM's grid starts half a day later
    for plan in (together[1], alone[1]):
        assert np.unique(plan.memory_request[kill_step - 24:]).size == 1
    # a container that starts after the kill starts from the fleet's margin
    assert together[2].memory_request[30] > alone[2].memory_request[30]


def test_a_container_the_pods_floor_holds_counts_its_kills_but_not_its_time_nor_its_excess_in_the_fleet() -> None:
    """At 0.1x the Bitbrains VMs, the pod's floor held 34-46% of them above their usage: their months under the
    budget lowered their own margin for the day their usage outgrew the floor, and pulled the fleet's mean
    excess (the pooled margin every other container takes) toward under budget."""
    strategy, state = state_with(POOLED)
    tiny = 8.0 * 2**20  # far under the pod's minimum memory (MinResources.pod_memory_mib)
    state.add(batch(np.full(12, 0.3), start=NOW - HOUR, mem=tiny))
    _, state = strategy.recommend(state, now_s=NOW, policy=ContainerPolicy(), current=current(400))
    assert isinstance(state, PodtailorState) and state.budget.memory_floored
    state.add(batch(np.full(24, 0.3), start=NOW, mem=tiny))
    _, state = strategy.recommend(state, now_s=NOW + 2 * HOUR, policy=ContainerPolicy(), current=current(400))
    assert isinstance(state, PodtailorState)
    # two floor-held hours: no kill allowed, none taken, the margin as the fleet's (none) gave it
    assert state.budget.total_memory_seen_s == 0.0 and state.budget.total_memory_allowed == 0.0
    assert state.budget.memory_log_margin == 0.0
    free = state_with(POOLED)[1]
    free.add(batch(np.full(12, 0.3), start=NOW - HOUR))
    free = strategy.recommend(free, now_s=NOW, policy=ContainerPolicy(), current=current(400))[1]
    assert isinstance(free, PodtailorState) and not free.budget.memory_floored
    # a VPA's minAllowed above the target holds it as the pod's floor does
    held = strategy.recommend(free, now_s=NOW, policy=ContainerPolicy(min_allowed=Resources(memory_bytes=4 * GIB)),
                              current=current(400))[1]
    assert isinstance(held, PodtailorState) and held.budget.memory_floored
    free.budget.total_memory_allowed = 0.5
    fleet = strategy.fleet_scale([state, free], NOW + 2 * HOUR)
    # the excess is the free container's alone; both margins are pooled
    assert fleet is not None and fleet.memory_excess == pytest.approx(-0.5)
    assert strategy.fleet_sums([state, free], NOW + 2 * HOUR).memory_margin_count == 2
    # a kill while the floor holds counts (usage went past the floor: the margin was too low), and steps the
    # container's own margin though no time was seen
    state.add(batch(np.full(12, 0.3), start=NOW + 2 * HOUR, mem=tiny, kills=1))
    _, state = strategy.recommend(state, now_s=NOW + 3 * HOUR, policy=ContainerPolicy(), current=current(400))
    assert isinstance(state, PodtailorState)
    assert state.budget.memory_excess == 1.0 and state.budget.memory_log_margin > 0.0
    # and the state says so through a checkpoint
    again = strategy.restore(state.to_checkpoint())
    assert isinstance(again, PodtailorState) and again.budget == state.budget
