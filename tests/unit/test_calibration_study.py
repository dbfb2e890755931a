"""The calibration study's OOM count against the budget and its ``--set`` items
(``tests/benchmarks/calibration_study.py``, #39 item 2)."""

from __future__ import annotations

import re

import pytest

from recommender.backtest.scoring import Totals
from recommender.model.podtailor_budget import MONTH_S, RiskBudget
from tests.benchmarks.calibration_study import main, oom_count, oom_split, rates, settings, within_share


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


def test_a_cpu_only_series_keeps_the_floor_flags_beside_their_own_series() -> None:
    # A mixed trace: a CPU-only series first, then a memory series the floor does not hold, then one it does.
    # Before the rows kept their None, the memory rows shifted one place and took their neighbours' flags.
    cpu_only = Totals(series=1, seconds=2.0 * MONTH_S)
    row = rates([cpu_only, _series(1, 2.0), _series(0, 16.0)])
    assert row.oom_series == (None, (1.0, 2.0), (0.0, 16.0))
    bound = [(False, True), (False, False), (True, True)]
    budget = RiskBudget(oom_per_month=0.5)
    assert oom_count(row, bound, budget) == "; 1 kills where the budget allows 1.0 ± 1.0"
    assert oom_split(row, bound, budget) == "0.50 (1) / 0.00 (1)"
    assert within_share(row, bound, budget)[1] == 1.0  # the one judged series sits on its budget


def test_set_items_go_to_the_budget_or_to_podtailors_parts_by_their_name() -> None:
    extra, overrides = settings(["cpu_eta_start=1", "cpu.half_life_s=21600", "cpu.throttle_correction=false"])
    assert extra == {"cpu_eta_start": 1.0}
    assert overrides == (("cpu.half_life_s", 21600), ("cpu.throttle_correction", False))


@pytest.mark.parametrize("item", ["noeq", "=1", "cpu_eta_start=x", "cpu.half_life_s=six"])
def test_a_set_item_that_is_not_one_is_named_in_the_error(item: str) -> None:
    with pytest.raises(ValueError, match=re.escape(item)):
        settings([item])


def test_a_probe_never_writes_the_default_s_section(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["--set", "cpu.half_life_s=21600", "--write"])
    assert done.value.code == 2 and "--set is for probes by hand" in capsys.readouterr().err
