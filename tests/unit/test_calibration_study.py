"""The calibration study's OOM count against the budget (``tests/benchmarks/calibration_study.py``, #39 item 2)."""

from __future__ import annotations

from recommender.backtest.scoring import Totals
from recommender.model.podtailor_budget import MONTH_S, RiskBudget
from tests.benchmarks.calibration_study import oom_count, rates


def _series(kills: int, months: float) -> Totals:
    return Totals(series=1, seconds=months * MONTH_S, memory_seconds=months * MONTH_S, ooms=kills)


def test_the_kills_are_set_against_the_budgets_count_and_its_poisson_deviation() -> None:
    row = rates([_series(3, 2.0), _series(1, 2.5)])
    # 4 kills over 4.5 months; at 2 a month the budget allows 9, whose Poisson standard deviation is 3
    assert oom_count(row, [(False, False), (False, False)], RiskBudget(oom_per_month=2.0)) == \
        "; 4 kills where the budget allows 9.0 ± 3.0"


def test_the_series_the_floor_holds_are_left_out_where_there_are_any() -> None:
    row = rates([_series(3, 2.0), _series(0, 16.0)])
    assert oom_count(row, [(False, False), (True, True)], RiskBudget(oom_per_month=0.5)) == \
        "; 3 kills where the budget allows 1.0 ± 1.0"
    assert oom_count(row, [(False, False), (True, False)], RiskBudget(oom_per_month=0.5)) == \
        "; 3 kills where the budget allows 9.0 ± 3.0"  # a CPU floor alone leaves memory counted


def test_nothing_is_said_where_memory_is_not_budgeted() -> None:
    assert oom_count(rates([_series(3, 2.0)]), [(False, False)], RiskBudget(cpu_over_share=0.01)) == ""


def test_nothing_is_said_where_no_memory_was_scored() -> None:
    cpu_only = Totals(series=1, seconds=2.0 * MONTH_S)  # a CPU-only trace: its OOM rate is n/a
    assert rates([cpu_only]).oom_per_month is None
    assert oom_count(rates([cpu_only]), [(False, False)], RiskBudget(oom_per_month=1.0)) == ""
