"""The risk sweep: podtailor replayed at several risk settings beside VPA and KRR, its frontier, and a pick.

Owns the sweep's rows and the decisions over them, as pure functions of scored figures (``Metrics``), so the
frontier and the pick are tested without a replay. ``sweep_specs`` lists the rows of one run: podtailor at each
risk (rows named "podtailor risk=R"), ``vpa`` and ``krr-simple`` once, and the oracle as the reference floor.
``frontier`` marks every row that is Pareto-efficient on each of the two trade-offs the backtest scores:

- memory: slack (GiB, time-weighted mean per series) against OOM-equivalents per series-day;
- CPU: slack (cores) against CPU minutes over the request per series-day.

A row is efficient on a trade-off when no other real row (podtailor at any risk, VPA or KRR; the oracle knows
the future and is never a candidate) is at least as good on both figures and better on one. ``pick`` answers
"which risk for an OOM budget": among the podtailor rows whose OOM rate is within the budget, the one with the
least memory slack (the resource the budget is about), ties broken by less CPU slack, then by the lower risk;
when none is within the budget, or the trace has no memory readings, there is no pick and the reason says so.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from recommender.backtest.runner import ORACLE, StrategySpec
from recommender.backtest.scoring import Metrics
from recommender.model.podtailor_params import check_risk

DEFAULT_RISKS = (0.25, 0.5, 1.0, 2.0, 4.0)
"""Risk settings replayed when ``--sweep-values`` is not given: each doubles the overrun prices of the next."""
SWEPT = "podtailor"
BASELINES = ("vpa", "krr-simple")
RISK_LABEL = "podtailor risk="


def parse_risks(text: str) -> tuple[float, ...]:
    """``"0.5,1,2"`` as sorted distinct risk settings; ``ValueError`` naming the bad item otherwise."""
    items = [item.strip() for item in text.split(",") if item.strip()]
    if not items:
        raise ValueError("--sweep-values needs at least one risk setting, e.g. 0.5,1,2")
    risks = []
    for item in items:
        try:
            risks.append(check_risk(float(item)))
        except ValueError as err:
            raise ValueError(f"bad --sweep-values item {item[:32]!r}: {err}") from None
    return tuple(sorted(set(risks)))


def risk_label(risk: float) -> str:
    return f"{RISK_LABEL}{risk:g}"


def sweep_specs(risks: Sequence[float], overrides: Mapping[str, Mapping[str, object]]) -> list[StrategySpec]:
    """podtailor at each risk (with its other ``overrides``), then VPA, KRR and the oracle, in table order."""
    if "risk" in overrides.get(SWEPT, {}):
        raise ValueError("--set podtailor.risk does not combine with --sweep: use --sweep-values")
    base = dict(overrides.get(SWEPT, {}))
    swept = [StrategySpec(name=SWEPT, label=risk_label(r), overrides=tuple(sorted({**base, "risk": r}.items())))
             for r in risks]
    others = [StrategySpec(name=n, overrides=tuple(sorted(dict(overrides.get(n, {})).items()))) for n in BASELINES]
    return [*swept, *others, StrategySpec(name=ORACLE)]


@dataclass(frozen=True, slots=True, kw_only=True)
class FrontierRow:
    """One row of the sweep's table: its scores and whether it is on each frontier."""

    label: str
    strategy: str
    risk: float | None
    """The risk setting (podtailor rows only)."""
    metrics: Metrics
    reference: bool = False
    """The oracle: shown for the floor, never on a frontier or picked."""
    memory_efficient: bool | None = None
    """On the memory frontier (None: the trace has no memory readings, or a reference row)."""
    cpu_efficient: bool | None = None
    """On the CPU frontier (None: a reference row)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Pick:
    """The risk setting a stated OOM budget selects, or why there is none."""

    oom_budget: float
    risk: float | None
    label: str | None
    reason: str


def _dominated(point: tuple[float, float], others: Sequence[tuple[float, float]]) -> bool:
    x, y = point
    return any(ox <= x and oy <= y and (ox < x or oy < y) for ox, oy in others)


def efficient(points: Sequence[tuple[float, float]]) -> list[bool]:
    """Per point (both figures lower is better) whether no other point dominates it; equal points keep each
    other efficient."""
    return [not _dominated(p, [*points[:i], *points[i + 1:]]) for i, p in enumerate(points)]


def _memory_point(m: Metrics) -> tuple[float, float] | None:
    if m.memory_slack_gib is None or m.ooms_per_series_day is None:
        return None
    return m.memory_slack_gib, m.ooms_per_series_day


def frontier(rows: Sequence[tuple[str, str, float | None, Metrics]]) -> list[FrontierRow]:
    """(label, strategy, risk, metrics) per row, in table order, as ``FrontierRow`` with both frontiers marked.
    Rows without scored series are left out."""
    scored = [r for r in rows if r[3].series > 0]
    real = [r for r in scored if r[1] != ORACLE]
    cpu = efficient([(m.cpu_slack_cores, m.cpu_over_request_min_per_day) for *_, m in real])
    memory_points = [_memory_point(m) for *_, m in real]
    known = [p for p in memory_points if p is not None]
    memory_marks = iter(efficient(known))
    memory = [None if p is None else next(memory_marks) for p in memory_points]
    marks = {r[0]: (mem, c) for r, mem, c in zip(real, memory, cpu, strict=True)}
    out = []
    for label, strategy, risk, m in scored:
        mem_mark, cpu_mark = marks.get(label, (None, None))
        out.append(FrontierRow(label=label, strategy=strategy, risk=risk, metrics=m, reference=strategy == ORACLE,
                               memory_efficient=mem_mark, cpu_efficient=cpu_mark))
    return out


def pick(rows: Sequence[FrontierRow], oom_budget: float) -> Pick:
    """The least-memory-slack podtailor row whose OOM rate is within ``oom_budget`` (module docstring)."""
    if not (math.isfinite(oom_budget) and oom_budget >= 0):
        raise ValueError(f"the OOM budget must be a finite number >= 0, got {oom_budget!r}")
    swept = [r for r in rows if r.strategy == SWEPT and r.risk is not None]
    if not swept:
        return Pick(oom_budget=oom_budget, risk=None, label=None, reason="no podtailor row was scored")
    if any(r.metrics.ooms_per_series_day is None for r in swept):
        return Pick(oom_budget=oom_budget, risk=None, label=None,
                    reason="the trace has no memory readings, so no OOM rate to hold to a budget")
    within = [r for r in swept if (r.metrics.ooms_per_series_day or 0.0) <= oom_budget]
    if not within:
        low = min(swept, key=lambda r: (r.metrics.ooms_per_series_day or 0.0, r.risk or 0.0))
        return Pick(oom_budget=oom_budget, risk=None, label=None,
                    reason=f"no swept risk keeps OOMs within {oom_budget:g} per series-day: the fewest are "
                           f"{low.metrics.ooms_per_series_day:.4f} at risk {low.risk:g} (sweep lower risks)")
    best = min(within, key=lambda r: (r.metrics.memory_slack_gib or 0.0, r.metrics.cpu_slack_cores, r.risk or 0.0))
    m = best.metrics
    return Pick(oom_budget=oom_budget, risk=best.risk, label=best.label,
                reason=f"risk {best.risk:g}: {m.ooms_per_series_day:.4f} OOMs per series-day (budget "
                       f"{oom_budget:g}), the least memory slack within it ({m.memory_slack_gib:.3f} GiB; CPU "
                       f"{m.cpu_slack_cores:.4f} cores, {m.cpu_over_request_min_per_day:.1f} min over the request "
                       "per day)")


def sweep_rows(specs: Sequence[StrategySpec], per: Mapping[str, Metrics]) -> list[FrontierRow]:
    """The frontier of one subset of a sweep's result (``per``: row name -> metrics)."""
    rows = []
    for spec in specs:
        if spec.key in per:
            risk = dict(spec.overrides).get("risk") if spec.name == SWEPT else None
            rows.append((spec.key, spec.name, None if risk is None else float(risk), per[spec.key]))
    return frontier(rows)
