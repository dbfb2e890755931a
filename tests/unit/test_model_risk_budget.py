"""Unit tests of podtailor's risk budget: the update rule, the fleet start, the text form, the checkpoint and a
replay that lands near the budget."""

from __future__ import annotations

import math

import numpy as np
import pytest

from podtailor.resources import CurrentResources, Resources
from recommender.backtest.replay import ReplayConfig, make_grid, replay
from recommender.backtest.scoring import score
from recommender.backtest.trace import Series
from recommender.model.podtailor import PodtailorStrategy
from recommender.model.podtailor_budget import MONTH_S, RiskBudget, budget_text, parse_budget
from recommender.model.podtailor_params import PodtailorParams
from recommender.model.podtailor_state import BudgetState, PodtailorState
from recommender.model.registry import get_strategy
from recommender.model.types import ContainerPolicy, FleetScale, OomKill, Samples, UsageBatch

NOW = 1_700_006_400.0
HOUR, DAY, STEP = 3600.0, 86400.0, 300.0
GIB = float(1024**3)
CPU_ONLY = RiskBudget(cpu_over_share=0.01)
BOTH = RiskBudget(cpu_over_share=0.01, oom_per_month=1.0)


def batch(cpu: np.ndarray, *, start: float, mem: float = GIB, kills: int = 0) -> UsageBatch:
    ts = start + STEP * np.arange(cpu.size)
    return UsageBatch(cpu_cores=Samples(timestamps_s=ts, values=cpu.astype(np.float64)), cpu_interval_s=STEP,
                      memory_peak_bytes=Samples(timestamps_s=ts, values=np.full(cpu.size, mem)),
                      memory_interval_s=STEP,
                      oom_kills=tuple(OomKill(timestamp_s=float(ts[0])) for _ in range(kills)))


def current(cpu_millicores: int, memory_bytes: int = int(GIB)) -> CurrentResources:
    return CurrentResources(requests=Resources(cpu_millicores=cpu_millicores, memory_bytes=memory_bytes),
                            limits=Resources(cpu_millicores=2 * cpu_millicores, memory_bytes=memory_bytes))


def test_the_cpu_step_is_eta_times_the_error_times_the_hours_within_the_bounds() -> None:
    # eta at 0 days is the start, 0.5: 0 + 0.5 x (1800 / 3600 - 0.01) x 1 h = 0.245.
    assert CPU_ONLY.cpu_step(0.0, over_s=1800.0, seen_s=HOUR, observed_days=0.0) == pytest.approx(0.245)
    # at 2 days (eta_decay_days) half-way down: 0.1 + (0.5 - 0.1) x 2 / 4 = 0.3; no overrun for 2 h:
    # 0.3 x (0 - 0.01) x 2 = -0.006.
    assert CPU_ONLY.eta(0.5, 0.1, 2.0) == pytest.approx(0.3)
    assert CPU_ONLY.cpu_step(0.0, over_s=0.0, seen_s=2 * HOUR, observed_days=2.0) == pytest.approx(-0.006)
    # far past the bound: clipped to log(max_margin) = log 4, and a day weighs at most STEP_HOURS_MAX (24 h)
    assert CPU_ONLY.cpu_step(1.2, over_s=HOUR, seen_s=HOUR, observed_days=0.0) == pytest.approx(math.log(4.0))
    assert CPU_ONLY.cpu_step(0.0, over_s=0.0, seen_s=10 * DAY, observed_days=1e9) == pytest.approx(
        0.1 * -0.01 * 24)
    assert CPU_ONLY.cpu_step(0.5, over_s=0.0, seen_s=0.0, observed_days=0.0) == 0.5  # nothing seen: no step


def test_the_memory_step_is_eta_per_kill_less_the_budget_of_the_time_seen() -> None:
    # eta 0.5 at first: 0.5 x (1 kill - 1 per month x 1 h / 720 h) = 0.5 x (1 - 1/720) = 0.49931 (no allowance:
    # every hour counts).
    plain = RiskBudget(cpu_over_share=0.01, oom_per_month=1.0, memory_kill_allowance=0.0)
    assert plain.memory_step(0.0, kills=1, seen_s=HOUR, observed_days=0.0) == pytest.approx(0.5 * (1 - 1 / 720))
    # a quiet day at eta_end (0.1, after very long): 0.1 x (0 - 24 / 720) = -0.003333
    assert BOTH.memory_step(0.0, kills=0, seen_s=DAY, observed_days=1e9) == pytest.approx(-0.1 / 30, rel=1e-6)
    assert MONTH_S == 30 * DAY


def test_the_memory_margin_is_lowered_only_past_the_first_budgeted_kill() -> None:
    # 1 kill per month and an allowance of 1 kill: the first 30 days lower nothing. A kill still raises it:
    # eta at 10 days = 0.1 + 0.4 x 2 / 12 = 0.16667.
    assert BOTH.memory_kill_allowance == 1.0
    assert BOTH.memory_step(0.0, kills=0, seen_s=DAY, observed_days=29.0) == 0.0
    assert BOTH.memory_step(0.0, kills=1, seen_s=HOUR, observed_days=10.0) == pytest.approx(0.1 + 0.4 * 2 / 12)
    # the day that crosses 30 days counts only its part past them: observed 30.5 days, half a day past, at eta
    # 0.1 + 0.4 x 2 / 32.5 = 0.12462: 0.12462 x (0 - 1 x 0.5 / 30) = -0.0020769.
    eta = 0.1 + 0.4 * 2 / 32.5
    assert BOTH.memory_step(0.0, kills=0, seen_s=DAY, observed_days=30.5) == pytest.approx(-eta * 0.5 / 30)
    assert BOTH.budget_months(DAY, 30.5) == pytest.approx(0.5 / 30)
    # 2 kills per month: the allowance is 15 days; half a kill of allowance: 7.5 days.
    assert RiskBudget(oom_per_month=2.0).budget_months(DAY, 16.0) == pytest.approx(1.0 / 30)
    assert RiskBudget(oom_per_month=2.0, memory_kill_allowance=0.5).budget_months(DAY, 8.0) == pytest.approx(
        0.5 / 30)
    assert RiskBudget(cpu_over_share=0.01).budget_months(DAY, 100.0) == 0.0  # memory not budgeted


@pytest.mark.parametrize("bad", [dict(cpu_over_share=1.0), dict(cpu_over_share=-0.1), dict(oom_per_month=math.nan),
                                 dict(min_margin=1.5), dict(max_margin=0.5), dict(cpu_eta_end=-1.0),
                                 dict(eta_decay_days=0.0), dict(memory_kill_allowance=-1.0),
                                 dict(memory_kill_allowance=math.inf), dict(cpu_level_factor=-1.0),
                                 dict(cpu_level_factor=math.nan)])
def test_bad_budget_settings_are_refused(bad: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="budget"):
        RiskBudget(**bad)  # type: ignore[arg-type]


def test_the_text_form_parses_and_round_trips() -> None:
    assert parse_budget("cpu=0.01,oom=1") == BOTH
    assert parse_budget(" oom=0.5 ") == RiskBudget(oom_per_month=0.5)
    assert parse_budget("cpu=.02") == RiskBudget(cpu_over_share=0.02)
    for budget in (BOTH, CPU_ONLY, RiskBudget(oom_per_month=0.25), RiskBudget(cpu_over_share=0.0005)):
        assert parse_budget(budget_text(budget)) == budget
    assert budget_text(RiskBudget()) == "" and not RiskBudget().on and BOTH.on


@pytest.mark.parametrize("text", ["", "cpu", "cpu=", "cpu=1", "cpu=1.5", "cpu=-0.1", "cpu=1e-3", "cpu=nan",
                                  "cpu=inf", "mem=1", "cpu=0.01,cpu=0.02", "cpu=0.01;oom=1", "oom=+1"])
def test_bad_text_is_a_clear_error(text: str) -> None:
    with pytest.raises(ValueError, match=r"risk budget .*want cpu=SHARE"):
        parse_budget(text)


def state_with(budget: RiskBudget) -> tuple[PodtailorStrategy, PodtailorState]:
    strategy = PodtailorStrategy(PodtailorParams(budget=budget))
    state = strategy.new_state()
    assert isinstance(state, PodtailorState)
    return strategy, state


def test_overruns_are_counted_against_the_budgeted_target_from_the_first_recommendation() -> None:
    strategy, state = state_with(BOTH)
    state.add(batch(np.full(12, 0.5), start=NOW - 2 * HOUR))  # before the budget is first applied: not counted
    assert state.budget == BudgetState()
    _, state = strategy.recommend(state, now_s=NOW, policy=ContainerPolicy(), current=current(400))
    assert isinstance(state, PodtailorState)
    # the budgeted CPU target of 2 h at 0.5 cores is about 0.5 x 1.1 (the CPU margin): 3 of 12 samples above it
    target = state.budget.cpu_target_cores
    assert target is not None and 0.5 < target < 0.6
    state.add(batch(np.array([2.0] * 3 + [0.3] * 9), start=NOW, kills=1))
    b = state.budget
    assert (b.cpu_over_s, b.cpu_seen_s, b.memory_kills, b.memory_seen_s) == (900.0, HOUR, 1, HOUR)
    _, after = strategy.recommend(state, now_s=NOW + HOUR, policy=ContainerPolicy(), current=current(400))
    assert isinstance(after, PodtailorState)
    # first step from the fleet's margin (none: 0), with the hour counted so far (1/24 day) in eta:
    # CPU (0.1 + 0.4 x 2 / (2 + 1/24)) x (0.25 - 0.01) = 0.49184 x 0.24 = 0.11804;
    # memory (0.1 + 0.4 x 2 / (2 + 1/24)) x (1 - 0) = 0.49184: the hour is within the first budgeted kill
    # (``memory_kill_allowance``), so it lowers nothing
    assert after.budget.cpu_log_margin == pytest.approx(0.11804, abs=1e-5)
    assert after.budget.memory_log_margin == pytest.approx(0.49184, abs=1e-5)
    assert (after.budget.cpu_seen_s, after.budget.total_cpu_seen_s, after.budget.total_memory_kills) == (0, HOUR, 1)
    # the state recommend was given is not changed: armed at the fleet's margin (0) by the first, counts kept
    assert state.budget.cpu_log_margin == 0.0 and state.budget.cpu_seen_s == HOUR


def test_a_container_without_a_margin_starts_from_the_fleets() -> None:
    strategy, state = state_with(CPU_ONLY)
    fleet = FleetScale(cpu_cores=1.0, memory_bytes=GIB, cpu_log_margin=math.log(2.0), memory_log_margin=0.7)
    fresh = state.successor()
    assert fresh.calibrate_budget(CPU_ONLY, fleet) == pytest.approx(2.0)
    assert fresh.budget.cpu_log_margin == pytest.approx(math.log(2.0)) and fresh.budget.memory_log_margin is None
    assert fresh.memory_budget_margin(CPU_ONLY, fleet, refresh=False) == 1.0  # memory is not budgeted: 1
    unfleeted = state.successor()
    assert unfleeted.calibrate_budget(BOTH, None) == 1.0  # no fleet margin: 1
    assert unfleeted.budget.memory_log_margin == 0.0
    assert unfleeted.memory_budget_margin(BOTH, None, refresh=False) == 1.0
    unbudgeted = state.successor()
    assert unbudgeted.calibrate_budget(RiskBudget(), fleet) == 1.0  # no budget: 1, nothing armed
    assert unbudgeted.budget.cpu_log_margin is None and unbudgeted.budget.memory_log_margin is None
    state.add(batch(np.full(12, 0.3), start=NOW - HOUR))
    policy = ContainerPolicy(fleet=fleet)
    plain = get_strategy("podtailor").recommend(state, now_s=NOW, policy=policy, current=CurrentResources())[0]
    rec, _ = strategy.recommend(state, now_s=NOW, policy=policy, current=CurrentResources())
    plain_cpu, cpu = plain.target.cpu_millicores, rec.target.cpu_millicores
    assert plain_cpu is not None and cpu is not None
    assert cpu == pytest.approx(2 * plain_cpu, abs=1)  # the fleet's margin of 2 on the priced level
    assert rec.target.memory_bytes == plain.target.memory_bytes


def test_the_fleet_holds_the_mean_margin_of_the_containers_that_have_one() -> None:
    strategy, a = state_with(BOTH)
    _, b = state_with(BOTH)
    for s in (a, b):
        s.add(batch(np.full(12, 0.3), start=NOW - HOUR))
    a.budget.cpu_log_margin, b.budget.cpu_log_margin = 0.2, 0.6
    a.budget.memory_log_margin = -0.4
    fleet = strategy.fleet_scale([a, b], NOW)
    assert fleet is not None
    assert fleet.cpu_log_margin == pytest.approx(0.4) and fleet.memory_log_margin == pytest.approx(-0.4)
    plain = get_strategy("podtailor")
    unbudgeted = plain.fleet_scale([plain.new_state(), a.successor()], NOW)
    assert unbudgeted is not None and unbudgeted.cpu_log_margin == pytest.approx(0.2)
    with pytest.raises(ValueError, match="cpu_log_margin"):
        FleetScale(cpu_cores=1.0, memory_bytes=1.0, cpu_log_margin=math.inf)


def test_the_budget_state_round_trips_through_the_checkpoint_and_is_absent_without_one() -> None:
    strategy, state = state_with(BOTH)
    assert "budget" not in state.to_checkpoint()  # a state without a budget checkpoints as before
    state.budget = BudgetState(cpu_log_margin=0.3, memory_log_margin=None, cpu_target_cores=0.4, cpu_over_s=300.0,
                               cpu_seen_s=HOUR,
                               memory_kills=1, memory_seen_s=HOUR, total_cpu_over_s=600.0,
                               total_cpu_seen_s=DAY, total_memory_kills=2, total_memory_seen_s=DAY,
                               total_memory_allowed=0.5, memory_fleet_log=-0.05, memory_floored=True)
    data = state.to_checkpoint()
    assert len(data["budget"]) == 14  # thirteen numbers and a flag: the checkpoint stays small
    restored = strategy.restore(data)
    assert isinstance(restored, PodtailorState) and restored.budget == state.budget
    for bad in ({"cpu_log_margin": "x"}, {"nope": 1.0}, {"memory_kills": math.inf}, [1.0], {"memory_floored": 1}):
        with pytest.raises(ValueError, match="budget"):
            strategy.restore({**data, "budget": bad})


def synthetic(days: int, seed: int) -> Series:
    """A daily wave with noise, 5-minute samples (1 core +- 40% over a day, 15% noise)."""
    rng = np.random.default_rng(seed)
    n = int(days * DAY / STEP)
    t = np.arange(n) * STEP
    cpu = (1.0 + 0.4 * np.sin(2 * np.pi * t / DAY)) * rng.lognormal(0.0, 0.15, n)
    return Series(series_id=f"syn-{seed}", timestamps_s=NOW + t, cpu_cores=cpu, memory_bytes=np.full(n, GIB),
                  cpu_provisioned_cores=np.full(n, 4.0), memory_provisioned_bytes=np.full(n, 4 * GIB))


@pytest.mark.parametrize("share", [0.01, 0.03])
def test_a_replay_lands_near_its_cpu_budget(share: float) -> None:
    cfg = ReplayConfig()
    shares = []
    for seed in (1, 2):
        s = synthetic(20, seed)
        grid = make_grid(s, cfg)
        plan = replay(s, PodtailorStrategy(PodtailorParams(budget=RiskBudget(cpu_over_share=share))), cfg, grid)
        t = score(s, plan, grid)
        shares.append(t.cpu_over_request_s / t.seconds)
    # 19 scored days of a stationary series: within 35% of the budget (one overrun hour is 1/456 = 0.0022 of
    # the time, a fifth of the lower budget, and the up band of 10% delays each rise)
    assert np.mean(shares) == pytest.approx(share, rel=0.35)
