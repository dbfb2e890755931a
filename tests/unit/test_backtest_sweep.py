"""Unit tests of the risk sweep's pure core: its rows, the Pareto frontiers and the pick for an OOM budget."""

from __future__ import annotations

import pytest

from recommender.backtest.replay import ReplayConfig
from recommender.backtest.runner import ORACLE, StrategySpec, run_series
from recommender.backtest.scoring import Metrics
from recommender.backtest.sweep import (
    DEFAULT_RISKS,
    FrontierRow,
    efficient,
    frontier,
    parse_risks,
    pick,
    sweep_specs,
)


def metrics(cpu: float, cpu_over: float, mem: float | None, ooms: float | None, series: int = 4) -> Metrics:
    return Metrics(series=series, series_days=40, cpu_slack_cores=cpu, cpu_slack_rel=0.5,
                   memory_slack_gib=mem, memory_slack_rel=None if mem is None else 0.5, ooms_per_series_day=ooms,
                   oom_free_days=None if ooms is None else 1.0 - ooms, cpu_over_limit_min_per_day=0.0,
                   cpu_over_request_min_per_day=cpu_over, changes_per_series_day=1.0)


def row(risk: float, cpu: float, cpu_over: float, mem: float | None, ooms: float | None,
        ) -> tuple[str, str, float | None, Metrics]:
    return f"podtailor risk={risk:g}", "podtailor", risk, metrics(cpu, cpu_over, mem, ooms)


def fleet() -> list[FrontierRow]:
    """Risk 0.5 / 1 / 2 / 4 trade memory slack for OOMs; risk 1 is dominated by VPA on memory (VPA has less
    slack, 1.9 < 2.0, and fewer OOMs, 0.10 < 0.12); the oracle beats everything and must not count."""
    return frontier([
        row(0.5, 0.40, 20.0, 2.4, 0.05), row(1.0, 0.35, 22.0, 2.0, 0.12), row(2.0, 0.30, 25.0, 1.6, 0.15),
        row(4.0, 0.30, 31.0, 1.5, 0.30),
        ("vpa", "vpa", None, metrics(0.50, 30.0, 1.9, 0.10)),
        ("krr-simple", "krr-simple", None, metrics(0.45, 60.0, 3.0, 0.02)),
        (ORACLE, ORACLE, None, metrics(0.05, 0.0, 0.2, 0.0)),
    ])


def test_efficient_marks_the_undominated_points() -> None:
    # (2, 2) is dominated by (1, 2): as good on y, better on x. Equal points keep each other.
    assert efficient([(1.0, 2.0), (2.0, 2.0), (2.0, 1.0), (3.0, 0.5)]) == [True, False, True, True]
    assert efficient([(1.0, 1.0), (1.0, 1.0)]) == [True, True]


def test_frontier_marks_each_trade_off_and_never_the_oracle() -> None:
    by = {r.label: r for r in fleet()}
    assert [label for label, r in by.items() if r.memory_efficient] == [
        "podtailor risk=0.5", "podtailor risk=2", "podtailor risk=4", "vpa", "krr-simple"]
    # CPU: risk 4 (0.30, 31) is dominated by risk 2 (0.30, 25); VPA (0.50, 30) by risk 1 and 2; KRR by all.
    assert [label for label, r in by.items() if r.cpu_efficient] == [
        "podtailor risk=0.5", "podtailor risk=1", "podtailor risk=2"]
    oracle = by[ORACLE]
    assert oracle.reference and oracle.memory_efficient is None and oracle.cpu_efficient is None


def test_pick_takes_the_least_memory_slack_within_the_budget() -> None:
    rows = fleet()
    # Within 0.12: risks 0.5 (2.4 GiB) and 1 (2.0 GiB); 1 has less slack. VPA and KRR are never picked.
    assert pick(rows, 0.12).risk == 1.0
    assert pick(rows, 0.15).risk == 2.0
    assert pick(rows, 1.0).risk == 4.0
    chosen = pick(rows, 0.15)
    assert chosen.label == "podtailor risk=2" and "0.1500 OOMs per series-day" in chosen.reason


def test_pick_breaks_memory_ties_by_cpu_slack_then_the_lower_risk() -> None:
    # Same memory slack and OOMs; risk 1 has more CPU slack (0.35), risks 2 and 4 tie (0.30): the lower, 2.
    rows = frontier([row(1.0, 0.35, 20.0, 2.0, 0.1), row(2.0, 0.30, 25.0, 2.0, 0.1), row(4.0, 0.30, 30.0, 2.0, 0.1)])
    assert pick(rows, 0.1).risk == 2.0


def test_no_pick_when_no_risk_meets_the_budget_and_it_says_which_came_closest() -> None:
    chosen = pick(fleet(), 0.01)
    assert chosen.risk is None and chosen.label is None
    assert "no swept risk keeps OOMs within 0.01" in chosen.reason and "0.0500 at risk 0.5" in chosen.reason


def test_a_cpu_only_trace_has_no_memory_frontier_and_no_pick() -> None:
    rows = frontier([row(1.0, 0.35, 22.0, None, None), row(2.0, 0.30, 25.0, None, None)])
    assert all(r.memory_efficient is None for r in rows) and all(r.cpu_efficient for r in rows)
    chosen = pick(rows, 0.1)
    assert chosen.risk is None and "no memory readings" in chosen.reason


def test_unscored_rows_are_left_out() -> None:
    rows = frontier([row(1.0, 0.35, 22.0, 2.0, 0.1), ("vpa", "vpa", None, metrics(0, 0, None, None, series=0))])
    assert [r.label for r in rows] == ["podtailor risk=1"]


@pytest.mark.parametrize("bad", [-0.1, float("nan"), float("inf")])
def test_a_bad_budget_is_refused(bad: float) -> None:
    with pytest.raises(ValueError, match="OOM budget must be a finite number >= 0"):
        pick(fleet(), bad)


def test_risks_are_parsed_sorted_and_distinct() -> None:
    assert parse_risks("2, 0.5,1,2") == (0.5, 1.0, 2.0)
    assert DEFAULT_RISKS == (0.25, 0.5, 1.0, 2.0, 4.0)


@pytest.mark.parametrize(("text", "message"), [
    ("", "at least one risk setting"), (" , ", "at least one risk setting"),
    ("1,abc", "bad --sweep-values item 'abc'"), ("0", r"risk must be a number in \[0.05, 20\]"),
    ("nan", "risk must be"), ("1e9", "risk must be"), ("x" * 500, "'x{32}'"),
])
def test_bad_risks_name_the_item(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_risks(text)


def test_sweep_specs_label_each_risk_and_keep_the_other_overrides() -> None:
    overrides = {"podtailor": {"memory_price.peak_hours": 12.0}, "vpa": {"margin_fraction": 0.2}}
    specs = sweep_specs((0.5, 2.0), overrides)
    assert [s.key for s in specs] == ["podtailor risk=0.5", "podtailor risk=2", "vpa", "krr-simple", ORACLE]
    assert dict(specs[1].overrides) == {"memory_price.peak_hours": 12.0, "risk": 2.0}
    assert dict(specs[2].overrides) == {"margin_fraction": 0.2}
    with pytest.raises(ValueError, match="does not combine with --sweep"):
        sweep_specs((1.0,), {"podtailor": {"risk": 2.0}})


def test_one_strategy_twice_needs_a_label_per_row() -> None:
    twice = [StrategySpec(name="podtailor"), StrategySpec(name="podtailor", overrides=(("risk", 2.0),))]
    with pytest.raises(ValueError, match="share a row name"):
        run_series([], twice, ReplayConfig())
    labelled = [twice[0], StrategySpec(name="podtailor", overrides=(("risk", 2.0),), label="podtailor risk=2")]
    assert set(run_series([], labelled, ReplayConfig()).totals["all"]) == {"podtailor", "podtailor risk=2"}
