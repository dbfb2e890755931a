"""Issue #39 item 3's verdict: a strategy no worse than VPA on any line, within a tolerance.

Owns the six lines the issue names (OOM-equivalents per series-day, CPU minutes over the request and over the
limit per day, changes per series-day, CPU slack in cores and memory slack in GiB; lower is better on every one)
and the one tolerance rule, ``within_tolerance``: a line holds when the strategy's figure is at most the
baseline's plus 2% of it (the issue's tolerance), so a line 1.9% worse than VPA's passes and one 2.1% worse
fails. Slack is the mean absolute slack (cores, GiB), as the goal lines' gap closed and the point at VPA's risk
count it, not the slack relative to the request. A line without a figure (memory on a CPU-only trace) is not
judged. Pure: ``Metrics`` in, the failing lines out.
"""

from __future__ import annotations

import enum
import math

from recommender.backtest.scoring import Metrics

TOLERANCE = 0.02
"""How much worse than the baseline a line may be, as a fraction of the baseline's figure (#39 item 3: 2%)."""


class Line(enum.Enum):
    """A line of #39 item 3, lower is better; the value is the ``Metrics`` field. The first four are the lines
    of risk (``RISK_LINES``), which the point at VPA's risk (``equal_risk``) holds to VPA's."""

    OOMS = "ooms_per_series_day"
    CPU_OVER_REQUEST = "cpu_over_request_min_per_day"
    CPU_OVER_LIMIT = "cpu_over_limit_min_per_day"
    CHANGES = "changes_per_series_day"
    CPU_SLACK = "cpu_slack_cores"
    MEMORY_SLACK = "memory_slack_gib"

    @property
    def title(self) -> str:
        """The short title, as the verdict names a failing line."""
        return _TITLES[self][0]

    @property
    def long_title(self) -> str:
        """The title with its unit, as a column heading."""
        return _TITLES[self][1]


_TITLES: dict[Line, tuple[str, str]] = {
    Line.OOMS: ("OOMs", "OOMs per series-day"),
    Line.CPU_OVER_REQUEST: ("CPU min > request", "CPU minutes over the request per day"),
    Line.CPU_OVER_LIMIT: ("CPU min > limit", "CPU minutes over the limit per day"),
    Line.CHANGES: ("changes", "changes per series-day"),
    Line.CPU_SLACK: ("CPU slack", "CPU slack (cores)"),
    Line.MEMORY_SLACK: ("memory slack", "memory slack (GiB)"),
}
"""Each line's short and long title (the unit tests read both for every line)."""

RISK_LINES: tuple[Line, ...] = (Line.OOMS, Line.CPU_OVER_REQUEST, Line.CPU_OVER_LIMIT, Line.CHANGES)
"""The lines of risk, in ``Line``'s order: every line but the two slacks."""


def within_tolerance(value: float, baseline: float, tolerance: float = TOLERANCE) -> bool:
    """Whether ``value`` is no worse than ``baseline`` where lower is better: at most the baseline plus
    ``tolerance`` of its size (a baseline of 0 allows nothing above 0). Refuses a figure or a tolerance that is
    not a finite number, and a negative tolerance."""
    if not all(math.isfinite(x) for x in (value, baseline, tolerance)) or tolerance < 0:
        raise ValueError(f"want finite figures and a tolerance >= 0, got {value!r}, {baseline!r}, {tolerance!r}")
    return value <= baseline + tolerance * abs(baseline)


def worse_lines(strategy: Metrics, baseline: Metrics, tolerance: float = TOLERANCE) -> tuple[Line, ...]:
    """The lines on which ``strategy`` is worse than ``baseline`` beyond ``tolerance`` (empty: none), in the
    order of ``Line``; a line either side has no figure for is not judged."""
    worse = []
    for line in Line:
        value, base = getattr(strategy, line.value), getattr(baseline, line.value)
        if value is not None and base is not None and not within_tolerance(float(value), float(base), tolerance):
            worse.append(line)
    return tuple(worse)
