"""Unit tests of the budgeted oracle: its block length, its level rules and its scored plan, by hand."""

from __future__ import annotations

import numpy as np
import pytest

from recommender.backtest.budget import BudgetParams, block_length, budget_levels, oracle_budget
from recommender.backtest.replay import ReplayConfig, make_grid
from recommender.backtest.report import goals
from recommender.backtest.runner import StrategySpec, run_series
from recommender.backtest.scoring import Metrics, Totals, metrics, score
from recommender.backtest.trace import Series

STEP = 300.0
GIB = float(1024**3)
T0 = 1_700_006_400.0  # a whole hour (and day) in epoch seconds

# Two blocks of four 300 s samples. Block 0 is flat at 0.2 core with one 1.0 sample; block 1 is 0.5 with one 0.6.
VALUES = np.array([1.0, 0.2, 0.2, 0.2, 0.6, 0.5, 0.5, 0.5])
SECONDS = np.full(8, STEP)
BLOCK = np.array([0, 0, 0, 0, 1, 1, 1, 1])


def test_block_length_leaves_at_most_the_baseline_changes() -> None:
    assert block_length(48, 1) == 24  # 2 blocks, 1 boundary
    assert block_length(48, 0) == 48  # one level for the whole scored range
    assert block_length(50, 2) == 17  # ceil(50 / 3): blocks of 17, 17, 16 -> 2 boundaries
    assert block_length(720, 39) == 18  # VPA's 1.3 changes a day over 30 days: a level per 18 h
    assert block_length(0, 5) == 1


@pytest.mark.parametrize(("budget_s", "levels"), [
    (0.0, [1.0, 0.6]),  # nothing may be over: each block's peak
    (299.0, [1.0, 0.6]),  # less than one sample fits nowhere
    # One sample's 300 s: dropping block 0 to 0.2 saves 3 x 300 x 0.8 = 720 core-s, dropping block 1 to 0.5 saves
    # 3 x 300 x 0.1 = 90, so the seconds go to block 0. (An equal share, 150 s a block, would drop neither.)
    (300.0, [0.2, 0.6]),
    (600.0, [0.2, 0.5]),  # both
    (2400.0, [0.2, 0.5]),  # more budget buys nothing: at 0.2 / 0.5 the slack is already 0
])
def test_cpu_levels_spend_the_seconds_where_they_save_the_most(budget_s: float, levels: list[float]) -> None:
    np.testing.assert_array_equal(budget_levels(VALUES, SECONDS, BLOCK, 2, budget_s), levels)


def test_memory_levels_count_steps_above_not_samples() -> None:
    # Two samples per step: steps 0 (1.0, 0.2), 1 (0.2, 0.2), 2 (0.6, 0.5), 3 (0.5, 0.5). Level 0.2 in block 0 puts
    # one step over (step 0), level 0.5 in block 1 one step (step 2); block 0 saves more, so it goes first.
    step = np.array([0, 0, 1, 1, 2, 2, 3, 3])
    np.testing.assert_array_equal(budget_levels(VALUES, SECONDS, BLOCK, 2, 0, step), [1.0, 0.6])
    np.testing.assert_array_equal(budget_levels(VALUES, SECONDS, BLOCK, 2, 1, step), [0.2, 0.6])
    np.testing.assert_array_equal(budget_levels(VALUES, SECONDS, BLOCK, 2, 2, step), [0.2, 0.5])


def test_a_block_without_samples_is_nan_and_a_nan_sample_is_ignored() -> None:
    values = np.array([0.4, np.nan, 0.3])
    out = budget_levels(values, np.full(3, STEP), np.array([0, 0, 2]), 3, 0.0)
    np.testing.assert_array_equal(out[[0, 2]], [0.4, 0.3])
    assert np.isnan(out[1])


def series() -> Series:
    """3 days of 5-minute samples (day 1 is warm-up). Day 2: CPU 0.2 with 15 minutes at 1.0 in hour 30,
    memory 1 GiB. Day 3: CPU 0.5, memory 2 GiB with one 3 GiB reading."""
    n = 3 * 288
    cpu = np.where(np.arange(n) < 2 * 288, 0.2, 0.5)
    cpu[30 * 12:30 * 12 + 3] = 1.0
    mem = np.where(np.arange(n) < 2 * 288, GIB, 2 * GIB)
    mem[60 * 12] = 3 * GIB
    return Series(series_id="s-1", timestamps_s=T0 + STEP * np.arange(n), cpu_cores=cpu, memory_bytes=mem,
                  cpu_provisioned_cores=np.full(n, 2.0), memory_provisioned_bytes=np.full(n, 8 * GIB))


def test_plan_with_one_change_and_the_burst_within_the_cpu_budget() -> None:
    s, cfg = series(), ReplayConfig()
    grid = make_grid(s, cfg)
    baseline = Totals(changes=1, cpu_over_request_s=900.0, ooms=1)  # what VPA spent on this series
    plan = oracle_budget(s, cfg, grid, baseline)
    # 48 scored hours, 1 change -> blocks of 24 h from hour 24; the warm-up takes block 0's values.
    np.testing.assert_array_equal(plan.cpu_request[[0, 24, 47, 48, 71]], [0.2, 0.2, 0.2, 0.5, 0.5])
    np.testing.assert_array_equal(plan.cpu_limit[[24, 48]], [1.0, 0.5])
    np.testing.assert_array_equal(plan.memory_limit[[0, 47, 48]], [GIB, GIB, 3 * GIB])
    np.testing.assert_array_equal(plan.memory_request, plan.memory_limit)
    m = metrics(score(s, plan, grid))
    assert m.changes_per_series_day == 0.5  # 1 change over 2 scored days
    assert m.cpu_over_request_min_per_day == pytest.approx(7.5)  # 3 samples = 15 min over 2 days
    assert m.cpu_slack_cores == 0.0 and m.cpu_over_limit_min_per_day == 0.0
    assert m.ooms_per_series_day == 0.0
    assert m.memory_slack_gib == pytest.approx(287 / 576)  # day 3: 287 readings 1 GiB under 3 GiB, of 576


def test_a_smaller_cpu_budget_covers_the_burst_and_memory_may_spend_the_ooms() -> None:
    s, cfg = series(), ReplayConfig()
    grid = make_grid(s, cfg)
    baseline = Totals(changes=1, cpu_over_request_s=600.0, ooms=1)
    plan = oracle_budget(s, cfg, grid, baseline, BudgetParams(memory_ooms=True))
    np.testing.assert_array_equal(plan.cpu_request[[24, 48]], [1.0, 0.5])  # 900 s of burst do not fit in 600
    np.testing.assert_array_equal(plan.memory_limit[[24, 48]], [GIB, 2 * GIB])  # the 3 GiB hour is the OOM
    m = metrics(score(s, plan, grid))
    assert m.cpu_slack_cores == pytest.approx(285 * 0.8 / 576)  # day 2: 285 samples 0.8 under 1.0, of 576
    assert m.cpu_over_request_min_per_day == 0.0
    assert m.ooms_per_series_day == 0.5 and m.memory_slack_gib == 0.0
    fixed = oracle_budget(s, cfg, grid, baseline, BudgetParams(block_hours=12))
    assert np.count_nonzero(fixed.changed[24:]) == 3  # 4 blocks of 12 h, whatever VPA spent


def test_runner_needs_the_baseline_and_keeps_within_its_budget() -> None:
    s = series()
    rng = np.random.default_rng(7)
    noisy = Series(series_id="s-2", timestamps_s=s.timestamps_s, cpu_cores=rng.gamma(2.0, 0.1, s.cpu_cores.size),
                   memory_bytes=GIB * (1 + rng.random(s.cpu_cores.size)), cpu_provisioned_cores=s.cpu_provisioned_cores,
                   memory_provisioned_bytes=s.memory_provisioned_bytes)
    with pytest.raises(ValueError, match="needs its baseline 'vpa'"):
        run_series([s], [StrategySpec(name="oracle-budget")], ReplayConfig())
    specs = [StrategySpec(name="oracle-budget"), StrategySpec(name="vpa"), StrategySpec(name="oracle")]
    result = run_series([s, noisy], specs, ReplayConfig())
    assert list(result.totals["all"]) == ["oracle-budget", "vpa", "oracle"]  # listed order, computed after vpa
    for sub in ("odd", "even"):
        vpa, ref = result.totals[sub]["vpa"], result.totals[sub]["oracle-budget"]
        assert ref.changes <= vpa.changes and ref.cpu_over_request_s <= vpa.cpu_over_request_s
        assert ref.ooms == 0


def _m(cpu: float, mem: float, ooms: float = 0.0, over: float = 0.0, changes: float = 1.0) -> Metrics:
    return Metrics(series=1, series_days=10, cpu_slack_cores=cpu, cpu_slack_rel=0.0, memory_slack_gib=mem,
                   memory_slack_rel=0.0, ooms_per_series_day=ooms, oom_free_days=1.0, cpu_over_limit_min_per_day=0.0,
                   cpu_over_request_min_per_day=over, changes_per_series_day=changes)


def test_goals_state_whether_the_budgeted_oracle_reaches_half_the_gap() -> None:
    by_name = {"vpa": _m(0.5, 2.3, 0.14, 30.0, 1.3), "podtailor": _m(0.44, 2.2, 0.12, 28.0, 1.1),
               "oracle": _m(0.1, 0.3), "oracle-budget": _m(0.26, 1.5)}
    g = goals(by_name, "podtailor")
    assert g is not None
    # CPU: (0.5 - 0.26) / (0.5 - 0.1) = 0.60 >= 0.5; memory: (2.3 - 1.5) / (2.3 - 0.3) = 0.40 < 0.5.
    assert g["budget_oracle_cpu_gap_closed"] == pytest.approx(0.6)
    assert g["budget_oracle_memory_gap_closed"] == pytest.approx(0.4)
    assert g["half_cpu_gap_reachable"] is True and g["half_memory_gap_reachable"] is False
    assert g["cpu_gap_closed"] == pytest.approx(0.15) and g["all_met"] is False  # the strategy's own goals
    del by_name["oracle-budget"]
    g = goals(by_name, "podtailor")
    assert g is not None and "half_cpu_gap_reachable" not in g


def test_goals_are_the_lines_of_issue_18_item_4_and_the_ambition_stays_outside() -> None:
    vpa, oracle = _m(0.5, 2.3, 0.14, 30.0, 1.3), _m(0.1, 0.3)
    # half the CPU gap, a tenth of the memory gap, and OOMs, minutes and changes equal to VPA's: every goal holds
    at = {"vpa": vpa, "oracle": oracle, "podtailor": _m(0.3, 2.1, 0.14, 30.0, 1.3)}
    g = goals(at, "podtailor")
    assert g is not None and g["all_met"] is True and g["less_memory_slack"] is True
    assert g["memory_gap_closed"] == pytest.approx(0.1)
    assert g["ambition_memory_gap_at_least_quarter"] is False
    # each line on its own breaks it
    for worse in (_m(0.31, 2.1, 0.14, 30.0, 1.3), _m(0.3, 2.3, 0.14, 30.0, 1.3), _m(0.3, 2.1, 0.15, 30.0, 1.3),
                  _m(0.3, 2.1, 0.14, 30.1, 1.3), _m(0.3, 2.1, 0.14, 30.0, 1.31)):
        g = goals({**at, "podtailor": worse}, "podtailor")
        assert g is not None and g["all_met"] is False, worse


def test_an_equal_share_per_block_wastes_the_seconds_the_price_split_spends() -> None:
    # The series' burst is 900 s in block 0; VPA's 900 s over 172,800 scored seconds is a 0.52% share, i.e. 450 s
    # per 24 h block: neither block may drop under the equal split, so block 0 keeps the burst's 1.0 core.
    s, cfg = series(), ReplayConfig()
    grid = make_grid(s, cfg)
    baseline = Totals(changes=1, cpu_over_request_s=900.0, seconds=2 * 86400.0)
    equal = oracle_budget(s, cfg, grid, baseline, BudgetParams(cpu_split="equal"))
    np.testing.assert_array_equal(equal.cpu_request[[24, 48]], [1.0, 0.5])
    price = oracle_budget(s, cfg, grid, baseline)
    np.testing.assert_array_equal(price.cpu_request[[24, 48]], [0.2, 0.5])
    with pytest.raises(ValueError, match="cpu_split"):
        oracle_budget(s, cfg, grid, baseline, BudgetParams(cpu_split="even"))
