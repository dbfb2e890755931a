"""The setting of a risk sweep at VPA's risk: how much podtailor saves when it takes no more risk than VPA.

Owns ``at_baseline_risk`` (a pure function of the sweep's ``FrontierRow``s, so it is tested on a synthetic
sweep) and its answer, ``EqualRisk``. The risk lines are the four figures the goal lines of #39 item 3 hold
against VPA: OOM-equivalents per series-day, CPU minutes over the request and over the limit per day, and
changes per series-day (the OOM line only where the trace has memory readings). Between two neighbouring
swept rows every figure is taken as linear in log risk: at ``t`` in [0, 1] of the segment from risk a to risk b
the setting is a^(1-t) b^t and each figure (1-t) x_a + t x_b. A point is within VPA's risk when each line is at
most VPA's. The answer is the highest-risk point of that piecewise-linear path within VPA's risk on every line;
the line that reaches VPA's figure there is the binding line, and its slack (CPU cores and GiB, interpolated the
same way) is compared with VPA's. When the highest swept row is still below VPA on every line, no line binds and
that row's slack is a bound (a higher risk may save more: sweep higher). When no swept point is within VPA's risk
on every line, the answer names the lines that stay above it at every swept risk (with the fewest seen), sets
them aside (``EqualRisk.set_aside``) and gives the point on the other lines, so a line no risk setting moves (on
the Google jobs, CPU minutes over the limit) still leaves an answer for the rest, marked as such.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from recommender.backtest.no_worse import RISK_LINES, Line
from recommender.backtest.scoring import Metrics
from recommender.backtest.sweep import SWEPT, FrontierRow

BASELINE = "vpa"


@dataclass(frozen=True, slots=True, kw_only=True)
class EqualRisk:
    """The sweep's point at the baseline's risk (module docstring), or why there is none."""

    baseline: str
    risk: float | None
    """The setting, interpolated (None: no swept point is within the baseline's risk)."""
    binding: Line | None
    """The line at the baseline's figure there (None: none reaches it within the sweep, or no point)."""
    cpu_slack_cores: float | None
    memory_slack_gib: float | None
    cpu_slack_vs_baseline: float | None
    """slack / the baseline's slack - 1 (negative: less slack than the baseline)."""
    memory_slack_vs_baseline: float | None
    lines: tuple[tuple[Line, float, float], ...]
    """Each line held: (line, the point's figure, the baseline's figure)."""
    reason: str
    set_aside: tuple[Line, ...] = ()
    """Lines above the baseline's figure at every swept risk, left out: the point then holds the other lines
    only (empty: it holds every line)."""


def _figure(m: Metrics, line: Line) -> float | None:
    value = getattr(m, line.value)
    return None if value is None else float(value)


def _held_lines(swept: Sequence[FrontierRow], base: Metrics) -> list[Line]:
    """The lines the baseline and every swept row have a figure for."""
    return [line for line in RISK_LINES if _figure(base, line) is not None
            and all(_figure(r.metrics, line) is not None for r in swept)]


def _interval(a: float, b: float, limit: float) -> tuple[float, float] | None:
    """The t in [0, 1] where (1-t) a + t b <= limit, or None."""
    if a <= limit and b <= limit:
        return 0.0, 1.0
    if a > limit and b > limit:
        return None
    cross = (limit - a) / (b - a)
    return (0.0, cross) if a <= limit else (cross, 1.0)


def _highest_within(lo: FrontierRow, hi: FrontierRow, base: Metrics,
                    lines: Sequence[Line]) -> tuple[float, Line | None] | None:
    """The largest t of the segment within the baseline on every line and the line at the baseline's figure
    there (None: no line reaches it); None when no t of the segment is within on every line."""
    lower, upper, binding = 0.0, 1.0, None
    for line in lines:
        a, b, limit = _figure(lo.metrics, line), _figure(hi.metrics, line), _figure(base, line)
        assert a is not None and b is not None and limit is not None  # _held_lines
        span = _interval(a, b, limit)
        if span is None:
            return None
        lower = max(lower, span[0])
        if span[1] < upper or (binding is None and span[1] == upper and b >= limit):
            upper, binding = span[1], line
    return None if lower > upper else (upper, binding)


def _mix(a: float | None, b: float | None, t: float) -> float | None:
    return None if a is None or b is None else (1.0 - t) * a + t * b


def _versus(value: float | None, base: float | None) -> float | None:
    return None if value is None or base is None or base <= 0 else value / base - 1.0


def _always_above(base: Metrics, swept: Sequence[FrontierRow], lines: Sequence[Line]) -> dict[Line, str]:
    """The lines above the baseline's figure at every swept risk, each with the fewest seen and where."""
    above = {}
    for line in lines:
        limit = _figure(base, line) or 0.0
        low = min(swept, key=lambda r: (_figure(r.metrics, line) or 0.0, r.risk or 0.0))
        fewest = _figure(low.metrics, line) or 0.0
        if fewest > limit:
            above[line] = f"{line.long_title} (fewest {fewest:.4g} at risk {low.risk:g}, {BASELINE} {limit:.4g})"
    return above


def _none(reason: str) -> EqualRisk:
    return EqualRisk(baseline=BASELINE, risk=None, binding=None, cpu_slack_cores=None, memory_slack_gib=None,
                     cpu_slack_vs_baseline=None, memory_slack_vs_baseline=None, lines=(), reason=reason)


def _slack_text(cpu: float, cpu_vs: float | None, mem: float | None, mem_vs: float | None) -> str:
    def vs(x: float | None) -> str:
        return "" if x is None else f" ({x:+.1%} vs {BASELINE})"
    memory = "" if mem is None else f", memory slack {mem:.3f} GiB{vs(mem_vs)}"
    return f"CPU slack {cpu:.4f} cores{vs(cpu_vs)}{memory}"


def _point(lo: FrontierRow, hi: FrontierRow, t: float, binding: Line | None, base: Metrics,
           lines: Sequence[Line]) -> EqualRisk:
    a, b = lo.risk or 0.0, hi.risk or 0.0
    risk = math.exp((1.0 - t) * math.log(a) + t * math.log(b)) if a > 0 and b > 0 else a
    cpu = (1.0 - t) * lo.metrics.cpu_slack_cores + t * hi.metrics.cpu_slack_cores
    mem = _mix(lo.metrics.memory_slack_gib, hi.metrics.memory_slack_gib, t)
    held = tuple((ln, (1.0 - t) * (_figure(lo.metrics, ln) or 0.0) + t * (_figure(hi.metrics, ln) or 0.0),
                  _figure(base, ln) or 0.0) for ln in lines)
    cpu_vs, mem_vs = _versus(cpu, base.cpu_slack_cores), _versus(mem, base.memory_slack_gib)
    slack = _slack_text(cpu, cpu_vs, mem, mem_vs)
    if binding is None:
        reason = (f"every swept risk up to {b:g} is within {BASELINE}'s risk on every line held, so none binds "
                  f"(a higher risk may save more: sweep higher); at risk {b:g}: {slack}")
    else:
        limit = _figure(base, binding) or 0.0
        on_row = a == b or t in (0.0, 1.0)
        where = f"at the swept row {a if t == 0 else b:g}" if on_row else f"between {a:g} and {b:g}, linear in log risk"
        reason = f"risk {risk:.3g} ({where}): {binding.long_title} at {BASELINE}'s {limit:.4g}; {slack}"
    return EqualRisk(baseline=BASELINE, risk=risk, binding=binding, cpu_slack_cores=cpu, memory_slack_gib=mem,
                     cpu_slack_vs_baseline=cpu_vs, memory_slack_vs_baseline=mem_vs, lines=held, reason=reason)


def _search(swept: Sequence[FrontierRow], base: Metrics, lines: Sequence[Line]) -> EqualRisk | None:
    """The highest-risk point within the baseline on ``lines``, scanning the segments from the top."""
    segments = list(itertools.pairwise(swept)) or [(swept[0], swept[0])]
    for lo, hi in reversed(segments):
        found = _highest_within(lo, hi, base, lines)
        if found is not None:
            return _point(lo, hi, found[0], found[1], base, lines)
    return None


def at_baseline_risk(rows: Sequence[FrontierRow]) -> EqualRisk | None:
    """The sweep's highest-risk point within VPA's risk on every line (module docstring); None when the rows
    have no VPA row or no podtailor row with a risk. When no point is within VPA's risk on every line, the lines
    above it at every swept risk are named and set aside, and the point on the other lines is given."""
    base = next((r.metrics for r in rows if r.strategy == BASELINE and not r.reference), None)
    swept = sorted((r for r in rows if r.strategy == SWEPT and r.risk is not None), key=lambda r: r.risk or 0.0)
    if base is None or not swept:
        return None
    lines = _held_lines(swept, base)
    found = _search(swept, base, lines)
    if found is not None:
        return found
    above = _always_above(base, swept, lines)
    why = "; ".join(above.values()) if above else "none, but the lines are within it at different risks, never at one"
    head = f"no swept risk is within {BASELINE}'s risk on every line: above it at every swept risk on {why}"
    rest = [line for line in lines if line not in above]
    partial = _search(swept, base, rest) if above and rest else None
    if partial is None:
        return _none(f"{head} (sweep lower risks)")
    return replace(partial, set_aside=tuple(above), reason=f"{head}; on the other lines: {partial.reason}")
