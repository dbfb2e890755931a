"""#39 item 3's rule: no line worse than VPA's beyond 2%, lower is better on every line."""

from __future__ import annotations

from dataclasses import replace

import pytest

from recommender.backtest.no_worse import TOLERANCE, Line, within_tolerance, worse_lines
from recommender.backtest.scoring import Metrics

VPA = Metrics(series=10, series_days=100, cpu_slack_cores=0.5, cpu_slack_rel=0.6, memory_slack_gib=2.0,
              memory_slack_rel=0.8, ooms_per_series_day=0.1, oom_free_days=0.9, cpu_over_limit_min_per_day=10.0,
              cpu_over_request_min_per_day=30.0, changes_per_series_day=1.5)


def test_the_tolerance_is_two_percent_of_the_baseline() -> None:
    assert TOLERANCE == 0.02  # the figure
    assert within_tolerance(1.019, 1.0)  # 1.9% worse passes
    assert not within_tolerance(1.021, 1.0)  # 2.1% worse fails
    assert within_tolerance(0.5, 1.0)  # better passes: lower is better
    assert within_tolerance(0.0, 0.0) and not within_tolerance(1e-9, 0.0)  # nothing above a baseline of 0
    assert within_tolerance(1.05, 1.0, tolerance=0.05) and not within_tolerance(1.051, 1.0, tolerance=0.05)


@pytest.mark.parametrize("bad", [(float("nan"), 1.0, 0.02), (1.0, float("inf"), 0.02), (1.0, 1.0, -0.01)])
def test_a_figure_or_tolerance_that_is_not_a_finite_number_is_refused(bad: tuple[float, float, float]) -> None:
    with pytest.raises(ValueError, match="finite"):
        within_tolerance(*bad)


@pytest.mark.parametrize("line", list(Line))
def test_each_line_fails_alone_at_2_1_percent_worse_and_passes_at_1_9(line: Line) -> None:
    base = float(getattr(VPA, line.value))
    assert worse_lines(replace(VPA, **{line.value: base * 1.021}), VPA) == (line,)
    assert worse_lines(replace(VPA, **{line.value: base * 1.019}), VPA) == ()
    assert worse_lines(replace(VPA, **{line.value: base * 0.5}), VPA) == ()


def test_the_failing_lines_are_named_in_order_and_lines_without_figures_are_not_judged() -> None:
    worse = replace(VPA, changes_per_series_day=3.0, ooms_per_series_day=0.2, cpu_slack_rel=0.9)
    # relative slack is not a line (slack is judged in cores and GiB): only OOMs and changes fail
    assert worse_lines(worse, VPA) == (Line.OOMS, Line.CHANGES)
    cpu_only = replace(VPA, memory_slack_gib=None, ooms_per_series_day=None)
    assert worse_lines(replace(cpu_only, cpu_over_limit_min_per_day=11.0), cpu_only) == (Line.CPU_OVER_LIMIT,)
    assert [line.title for line in Line] == ["OOMs", "CPU min > request", "CPU min > limit", "changes",
                                             "CPU slack", "memory slack"]
    assert [line.long_title for line in Line] == [
        "OOMs per series-day", "CPU minutes over the request per day", "CPU minutes over the limit per day",
        "changes per series-day", "CPU slack (cores)", "memory slack (GiB)"]
