"""Unit tests of the CPU half of podtailor's risk budget: what its overruns are counted against (the request
that goes out, after the resize bands), and the step size scaled to the budget."""

from __future__ import annotations

import numpy as np
import pytest

from recommender.model.podtailor_budget import RiskBudget
from recommender.model.podtailor_state import PodtailorState
from recommender.model.types import ContainerPolicy
from tests.unit.test_model_risk_budget import CPU_ONLY, DAY, HOUR, NOW, batch, current, state_with


def test_overruns_count_against_the_request_the_bands_hold_not_the_fresh_target() -> None:
    strategy, state = state_with(CPU_ONLY)
    state.add(batch(np.full(int(2 * DAY / 300), 0.5), start=NOW - 2 * DAY))  # 2 days: no thin-history hold
    # memory at its own target (1 GiB x its margin): only the CPU band decides whether anything moves
    rec, state = strategy.recommend(state, now_s=NOW, policy=ContainerPolicy(), current=current(600, 1127428916))
    assert isinstance(state, PodtailorState)
    # the fresh target (about 0.5 x 1.1 = 0.55 cores) is 0.92 x the request of 600m: inside the band
    # [0.8, 1.1], so the request is kept, and the overruns count against the kept 0.6 cores
    assert rec.target.cpu_millicores == 600
    assert state.budget.cpu_target_cores == pytest.approx(0.6)
    # 0.58 cores is over the fresh target but under the request in force: not an overrun; 0.7 is one
    state.add(batch(np.array([0.58] * 9 + [0.7] * 3), start=NOW))
    assert (state.budget.cpu_over_s, state.budget.cpu_seen_s) == (900.0, HOUR)


def test_no_overrun_is_counted_while_thin_history_holds_the_request() -> None:
    strategy, state = state_with(CPU_ONLY)
    state.add(batch(np.full(12, 0.5), start=NOW - HOUR))  # an hour of history: thin (under a day)
    rec, state = strategy.recommend(state, now_s=NOW, policy=ContainerPolicy(), current=current(2000))
    assert isinstance(state, PodtailorState)
    # the fresh target (about 0.55 cores) is below the 2 cores in force, which thin history keeps: the margin
    # cannot act on that request, so its hours under the budget are not counted (they would be spent later)
    assert rec.target.cpu_millicores == 2000 and any("low confidence" in r for r in rec.reasons)
    assert state.budget.cpu_target_cores is None and state.budget.cpu_log_margin == 0.0
    state.add(batch(np.full(12, 0.5), start=NOW))
    assert (state.budget.cpu_over_s, state.budget.cpu_seen_s) == (0.0, 0.0)


def test_the_cpu_step_size_scales_with_the_reference_over_the_budget() -> None:
    # an hour half over, at 0 days (eta 0.5): at the reference 1%, 0.5 x (0.5 - 0.01) = 0.245;
    # at 0.5% eta doubles: 1.0 x (0.5 - 0.005) = 0.495; at 2% it halves: 0.25 x (0.5 - 0.02) = 0.12
    def step(share: float, power: float = 1.0) -> float:
        budget = RiskBudget(cpu_over_share=share, cpu_eta_budget_power=power)
        return budget.cpu_step(0.0, over_s=1800.0, seen_s=HOUR, observed_days=0.0)

    assert step(0.01) == pytest.approx(0.245)
    assert step(0.005) == pytest.approx(0.495)
    assert step(0.02) == pytest.approx(0.12)
    assert step(0.02, power=0.0) == pytest.approx(0.5 * 0.48)  # power 0: the step sizes as stated
    # an hour without overruns lowers the log-margin by the same amount at every budget: eta x budget is fixed
    quiet = [RiskBudget(cpu_over_share=a).cpu_step(0.0, over_s=0.0, seen_s=HOUR, observed_days=0.0)
             for a in (0.005, 0.01, 0.02)]
    assert quiet == pytest.approx([-0.005] * 3)
    with pytest.raises(ValueError, match="budget"):
        RiskBudget(cpu_over_share=0.01, cpu_eta_budget_power=-1.0)


def test_a_cpu_budget_sets_the_slow_level_to_its_own_percentile_not_the_priced_one() -> None:
    # two days of 5-minute samples, 1.0 core except 5% of them at 3.0 cores: at a 1% budget the slow level is
    # the 99th percentile (3 cores, since 5% are above 1 core), at 10% the 90th (1 core); the priced level
    # (no budget, or cpu_level_factor 0) is capped at the 95th percentile and ignores the budget
    cpu = np.ones(int(2 * DAY / 300))
    cpu[::20] = 3.0

    def target(budget: RiskBudget | None) -> int:
        strategy, state = state_with(budget or RiskBudget())
        state.add(batch(cpu, start=NOW - 2 * DAY))
        rec, _ = strategy.recommend(state, now_s=NOW, policy=ContainerPolicy(), current=current(1000))
        assert rec.target.cpu_millicores is not None
        return rec.target.cpu_millicores

    tight, loose = target(RiskBudget(cpu_over_share=0.01)), target(RiskBudget(cpu_over_share=0.1))
    assert 3.0 * 1.1 * 0.97 * 1000 <= tight <= 3.0 * 1.1 * 1.03 * 1000  # p99 x the 10% CPU margin, a margin of 1
    assert 1.0 * 1.1 * 0.97 * 1000 <= loose <= 1.0 * 1.1 * 1.03 * 1000
    priced = target(RiskBudget(cpu_over_share=0.01, cpu_level_factor=0.0))
    assert priced == target(None) and priced < tight
