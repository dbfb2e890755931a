"""Unit tests of the sweep's point at VPA's risk, on synthetic sweeps: the binding line, the interpolation in log
risk, the bound when no line binds, the answer when none is within, and the invariant on random sweeps."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from recommender.backtest.equal_risk import at_baseline_risk
from recommender.backtest.no_worse import RISK_LINES, Line
from recommender.backtest.runner import ORACLE
from recommender.backtest.scoring import Metrics
from recommender.backtest.sweep import FrontierRow


def metrics(cpu: float, mem: float | None, ooms: float | None, over_request: float, over_limit: float,
            changes: float) -> Metrics:
    return Metrics(series=4, series_days=40, cpu_slack_cores=cpu, cpu_slack_rel=0.5, memory_slack_gib=mem,
                   memory_slack_rel=None if mem is None else 0.5, ooms_per_series_day=ooms,
                   oom_free_days=None if ooms is None else 1.0 - ooms, cpu_over_limit_min_per_day=over_limit,
                   cpu_over_request_min_per_day=over_request, changes_per_series_day=changes)


def swept(risk: float, m: Metrics) -> FrontierRow:
    return FrontierRow(label=f"podtailor risk={risk:g}", strategy="podtailor", risk=risk, metrics=m)


def other(name: str, m: Metrics) -> FrontierRow:
    return FrontierRow(label=name, strategy=name, risk=None, metrics=m, reference=name == ORACLE)


VPA = metrics(0.50, 1.9, 0.10, 30.0, 1.0, 1.3)
ORACLE_ROW = other(ORACLE, metrics(0.05, 0.2, 0.0, 0.0, 0.0, 20.0))


def sweep(vpa: Metrics = VPA, *, over_limit: tuple[float, ...] = (0.1, 0.2, 0.3, 0.5),
          memory: bool = True) -> list[FrontierRow]:
    """Risk 0.5 / 1 / 2 / 4 (slack falls, every risk line rises); rows out of risk order on purpose."""
    cpu, mem = (0.40, 0.35, 0.30, 0.30), (2.4, 2.0, 1.6, 1.5)
    ooms, over_request, changes = (0.05, 0.08, 0.14, 0.30), (20.0, 22.0, 25.0, 31.0), (1.0, 1.1, 1.2, 1.5)
    rows = [swept(r, metrics(cpu[i], mem[i] if memory else None, ooms[i] if memory else None, over_request[i],
                             over_limit[i], changes[i])) for i, r in enumerate((0.5, 1.0, 2.0, 4.0))]
    return [rows[2], rows[0], rows[3], rows[1], other("vpa", vpa), ORACLE_ROW]


def test_the_first_line_to_reach_vpa_binds_and_the_slack_is_interpolated_in_log_risk() -> None:
    got = at_baseline_risk(sweep())
    assert got is not None and got.binding is Line.OOMS
    # OOMs reach VPA's 0.10 a third of the way from risk 1 (0.08) to risk 2 (0.14): t = 0.02 / 0.06. The other
    # lines reach theirs later (CPU over the request at t = 5/6 from risk 2, changes at t = 1/3 from risk 2).
    assert got.risk == pytest.approx(2.0 ** (1 / 3))  # 1^(2/3) * 2^(1/3)
    assert got.cpu_slack_cores == pytest.approx(0.35 - 0.05 / 3)  # 0.3333
    assert got.memory_slack_gib == pytest.approx(2.0 - 0.4 / 3)  # 1.8667
    assert got.cpu_slack_vs_baseline == pytest.approx((0.35 - 0.05 / 3) / 0.50 - 1)  # -33.3%
    assert got.memory_slack_vs_baseline == pytest.approx((2.0 - 0.4 / 3) / 1.9 - 1)  # -1.75%
    held = {line: (value, base) for line, value, base in got.lines}
    assert held[Line.OOMS] == pytest.approx((0.10, 0.10))
    assert held[Line.CPU_OVER_REQUEST] == pytest.approx((23.0, 30.0))  # 22 + 3 / 3
    assert held[Line.CPU_OVER_LIMIT] == pytest.approx((0.2 + 0.1 / 3, 1.0))
    assert held[Line.CHANGES] == pytest.approx((1.1 + 0.1 / 3, 1.3))
    assert "OOMs per series-day at vpa's 0.1" in got.reason and "-33.3% vs vpa" in got.reason


def test_a_row_exactly_at_vpa_binds_at_that_risk() -> None:
    got = at_baseline_risk(sweep(metrics(0.50, 1.9, 0.14, 30.0, 1.0, 1.3)))
    assert got is not None and got.binding is Line.OOMS and got.risk == pytest.approx(2.0)
    assert got.cpu_slack_cores == pytest.approx(0.30) and got.memory_slack_gib == pytest.approx(1.6)
    assert got.reason.startswith("risk 2 (at the swept row 2): OOMs per series-day at vpa's 0.14;")


def test_a_sweep_below_vpa_on_every_line_is_a_bound_at_its_highest_risk() -> None:
    got = at_baseline_risk(sweep(metrics(0.50, 1.9, 0.5, 40.0, 1.0, 2.0)))
    assert got is not None and got.binding is None and got.risk == pytest.approx(4.0)
    assert got.cpu_slack_cores == pytest.approx(0.30) and got.cpu_slack_vs_baseline == pytest.approx(-0.4)
    assert "none binds" in got.reason and "sweep higher" in got.reason


def test_a_line_above_vpa_at_every_risk_is_named_and_set_aside_for_the_point_on_the_others() -> None:
    got = at_baseline_risk(sweep(over_limit=(1.6, 1.7, 1.9, 2.4)))  # VPA: 1.0 minute over the limit a day
    assert got is not None and got.set_aside == (Line.CPU_OVER_LIMIT,)
    assert got.reason.startswith("no swept risk is within vpa's risk on every line: above it at every swept risk on "
                                 "CPU minutes over the limit per day (fewest 1.6 at risk 0.5, vpa 1); on the other "
                                 "lines: risk 1.26 (between 1 and 2, linear in log risk): OOMs per series-day")
    # On the other three lines the point is the one of the first test: OOMs bind at 2^(1/3).
    assert got.binding is Line.OOMS and got.risk == pytest.approx(2.0 ** (1 / 3))
    assert [line for line, *_ in got.lines] == [Line.OOMS, Line.CPU_OVER_REQUEST, Line.CHANGES]


def test_no_point_when_every_line_is_above_vpa_or_the_lines_are_within_it_at_different_risks() -> None:
    above = at_baseline_risk(sweep(metrics(0.5, 1.9, 0.01, 1.0, 0.01, 0.5)))  # every line above at every risk
    assert above is not None and above.risk is None and above.cpu_slack_cores is None and above.lines == ()
    assert "OOMs per series-day (fewest 0.05 at risk 0.5, vpa 0.01)" in above.reason
    assert above.reason.endswith("changes per series-day (fewest 1 at risk 0.5, vpa 0.5) (sweep lower risks)")
    # Over the limit within VPA's only at risk 4, OOMs only up to risk 1.26: each line within it somewhere.
    apart = at_baseline_risk(sweep(over_limit=(3.0, 3.0, 2.0, 0.5)))
    assert apart is not None and apart.risk is None and apart.set_aside == ()
    assert "none, but the lines are within it at different risks, never at one (sweep lower risks)" in apart.reason


def test_the_highest_point_within_is_taken_when_a_line_falls_back_below_vpa() -> None:
    # CPU over the limit (VPA 1.0) rises from 0.5 at risk 0.5 to 1.2 at risk 1 and falls to 0.2 at risk 2: the path
    # is within VPA's risk up to t = 5/7 from risk 0.5, leaves it, and is back from t = 0.2 from risk 1 until the
    # OOMs reach VPA's at t = 1/3 from risk 1; above that (risk 2 to 4) the OOMs stay above it.
    got = at_baseline_risk(sweep(over_limit=(0.5, 1.2, 0.2, 0.2)))
    assert got is not None and got.binding is Line.OOMS and got.risk == pytest.approx(2.0 ** (1 / 3))
    # Without the way back (0.2 -> 1.5 at risk 2), the highest point is where that line first reaches VPA's.
    before = at_baseline_risk(sweep(over_limit=(0.5, 1.2, 1.5, 1.5)))
    assert before is not None and before.binding is Line.CPU_OVER_LIMIT
    assert before.risk == pytest.approx(0.5 ** (1 - 5 / 7))  # 0.5^(2/7) * 1^(5/7)


def test_a_cpu_only_trace_holds_the_three_cpu_and_change_lines() -> None:
    got = at_baseline_risk(sweep(metrics(0.50, None, None, 30.0, 1.0, 1.3), memory=False))
    assert got is not None and got.binding is Line.CHANGES
    assert [line for line, *_ in got.lines] == [Line.CPU_OVER_REQUEST, Line.CPU_OVER_LIMIT,
                                                Line.CHANGES]
    # Changes reach 1.3 a third of the way from risk 2 (1.2) to 4 (1.5): risk 2^(4/3); CPU slack stays 0.30.
    assert got.risk == pytest.approx(2.0 ** (4 / 3)) and got.cpu_slack_cores == pytest.approx(0.30)
    assert got.memory_slack_gib is None and got.memory_slack_vs_baseline is None


def test_no_answer_without_vpa_or_a_swept_row() -> None:
    rows = sweep()
    assert at_baseline_risk([r for r in rows if r.strategy != "vpa"]) is None
    assert at_baseline_risk([r for r in rows if r.strategy != "podtailor"]) is None


def test_one_swept_row_is_its_own_point_or_none() -> None:
    one = [swept(1.0, metrics(0.35, 2.0, 0.08, 22.0, 0.2, 1.1)), other("vpa", VPA)]
    got = at_baseline_risk(one)
    assert got is not None and got.risk == 1.0 and got.binding is None
    over = at_baseline_risk([swept(1.0, metrics(0.35, 2.0, 0.2, 22.0, 0.2, 1.1)), other("vpa", VPA)])
    assert over is not None and over.set_aside == (Line.OOMS,) and over.risk == 1.0 and over.binding is None
    assert "OOMs per series-day (fewest 0.2 at risk 1, vpa 0.1); on the other lines: every swept risk" in over.reason


figures = st.lists(st.floats(min_value=0.0, max_value=10.0), min_size=4, max_size=4)


@given(ooms=figures, over_request=figures, over_limit=figures, changes=figures, limits=figures)
def test_the_point_is_within_vpa_on_every_line_and_at_it_on_the_binding_one(
        ooms: list[float], over_request: list[float], over_limit: list[float], changes: list[float],
        limits: list[float]) -> None:
    vpa = metrics(0.5, 1.9, *limits)
    rows = [swept(r, metrics(0.4, 2.0, ooms[i], over_request[i], over_limit[i], changes[i]))
            for i, r in enumerate((0.25, 1.0, 2.0, 4.0))]
    got = at_baseline_risk([*rows, other("vpa", vpa)])
    assert got is not None
    if got.risk is None or got.set_aside:
        # No point on every line: then no swept row is within VPA's risk on every line either, and each line set
        # aside is above VPA's at every swept risk.
        assert all(any(getattr(r.metrics, ln.value) > getattr(vpa, ln.value) for ln in RISK_LINES) for r in rows)
        assert all(getattr(r.metrics, ln.value) > getattr(vpa, ln.value) for ln in got.set_aside for r in rows)
    if got.risk is None:
        return
    held = [line for line, *_ in got.lines]
    assert set(held) | set(got.set_aside) == set(RISK_LINES) and not set(held) & set(got.set_aside)
    assert 0.25 <= got.risk <= 4.0 + 1e-9
    for line, value, base in got.lines:
        assert value <= base + 1e-9 * max(1.0, base), line
    if got.binding is not None:
        value, base = next((v, b) for ln, v, b in got.lines if ln is got.binding)
        assert math.isclose(value, base, rel_tol=1e-9, abs_tol=1e-9)
    # No swept row above the point is within VPA's risk on every line held.
    for r in rows:
        if (r.risk or 0.0) > got.risk * (1 + 1e-9):
            assert any(getattr(r.metrics, ln.value) > getattr(vpa, ln.value) for ln in held)
