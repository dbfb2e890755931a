"""Output of a risk sweep: the frontier table, the pick line, the JSON section and the two-panel PNG.

Owns the presentation of ``sweep`` (which owns the rows, the frontier and the pick). The table lists, per
row, the risk, CPU and memory slack (absolute and relative), OOM-equivalents per series-day, CPU minutes over
the request per day and changes per series-day, and marks the rows on the memory frontier ("mem") and on the
CPU frontier ("cpu"); the oracle is the reference floor. Below the table, and in the JSON and the PNG, the
sweep's point at VPA's risk on every line (``equal_risk``): its setting, the binding line and its slack against
VPA's. The PNG (matplotlib, Agg, imported only when asked
for) plots memory slack against OOMs and CPU slack against CPU minutes over the request: the podtailor rows as
one line labelled by risk, VPA and KRR as single points, the oracle as a grey cross, the pick ringed and the
point at VPA's risk as a star.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from recommender.backtest.equal_risk import EqualRisk, at_baseline_risk
from recommender.backtest.report import print_fleet, row_name, unscored_text
from recommender.backtest.runner import SUBSETS, BacktestResult
from recommender.backtest.sweep import SWEPT, FrontierRow, Pick, pick, sweep_rows

COLUMNS = (("cpu_slack_cores", "CPU slack cores", "{:.4f}"), ("cpu_slack_rel", "CPU slack rel", "{:.1%}"),
           ("memory_slack_gib", "mem slack GiB", "{:.3f}"), ("memory_slack_rel", "mem slack rel", "{:.1%}"),
           ("ooms_per_series_day", "OOM / series-day", "{:.4f}"),
           ("cpu_over_request_min_per_day", "CPU min > request /day", "{:.1f}"),
           ("changes_per_series_day", "changes / series-day", "{:.2f}"))


def frontiers(result: BacktestResult) -> dict[str, list[FrontierRow]]:
    """Per subset, the sweep's rows with both frontiers marked."""
    per = result.metrics()
    return {sub: sweep_rows(result.strategies, per[sub]) for sub in SUBSETS}


def _marks(row: FrontierRow) -> str:
    if row.reference:
        return "floor"
    return " ".join(name for name, on in (("mem", row.memory_efficient), ("cpu", row.cpu_efficient)) if on)


def _cell(value: Any, fmt: str) -> str:
    return "n/a" if value is None else fmt.format(value)


def table(result: BacktestResult, rows: Sequence[FrontierRow], subset: str = "all") -> Table:
    out = Table(title=f"risk sweep: {subset} series ({result.source})", caption=unscored_text(result))
    for title in ("strategy", "risk"):
        out.add_column(title)
    for _, title, _ in COLUMNS:
        out.add_column(title, justify="right")
    out.add_column("Pareto-efficient")
    for row in rows:
        d = row.metrics.to_dict()
        out.add_row(row_name(row.strategy), "" if row.risk is None else f"{row.risk:g}",
                    *(_cell(d[key], fmt) for key, _, fmt in COLUMNS), _marks(row))
    return out


def print_sweep(result: BacktestResult, console: Console, oom_budget: float | None) -> None:
    rows = frontiers(result)["all"]
    console.print(table(result, rows))
    console.print("Pareto-efficient: mem = no other row has both less memory slack and fewer OOMs (or one and "
                  "the same other); cpu = the same for CPU slack and CPU minutes over the request.")
    if oom_budget is not None:
        chosen = pick(rows, oom_budget)
        console.print(f"pick for an OOM budget of {oom_budget:g} per series-day: {chosen.reason}")
    equal = at_baseline_risk(rows)
    if equal is not None:
        console.print(f"at {equal.baseline}'s risk on every line (OOMs, CPU minutes over the request and over the "
                      f"limit, changes): {equal.reason}")
    print_fleet(result, console)
    console.print(f"{result.series_days_per_s():.1f} series-days replayed per second ({result.elapsed_s:.1f} s)")


def row_json(row: FrontierRow) -> dict[str, Any]:
    return {"row": row.label, "strategy": row.strategy, "risk": row.risk, "reference": row.reference,
            "memory_efficient": row.memory_efficient, "cpu_efficient": row.cpu_efficient,
            **row.metrics.to_dict()}


def _pick_json(chosen: Pick) -> dict[str, Any]:
    return {"oom_budget": chosen.oom_budget, "risk": chosen.risk, "row": chosen.label, "reason": chosen.reason}


def equal_risk_json(equal: EqualRisk | None) -> dict[str, Any] | None:
    """The point at VPA's risk: the setting, the binding line, the slack, each line held and the lines set aside
    (above VPA's at every swept risk), by field name."""
    if equal is None:
        return None
    return {"baseline": equal.baseline, "risk": equal.risk,
            "binding": None if equal.binding is None else equal.binding.value,
            "cpu_slack_cores": equal.cpu_slack_cores, "memory_slack_gib": equal.memory_slack_gib,
            "cpu_slack_vs_baseline": equal.cpu_slack_vs_baseline,
            "memory_slack_vs_baseline": equal.memory_slack_vs_baseline,
            "lines": {line.value: {"value": value, "baseline": base} for line, value, base in equal.lines},
            "set_aside": [line.value for line in equal.set_aside],
            "reason": equal.reason}


def to_json(result: BacktestResult, oom_budget: float | None) -> dict[str, Any]:
    """The ``sweep`` section of the JSON document: the risks, and per subset the rows, the pick and the point at
    VPA's risk."""
    risks = [float(dict(s.overrides)["risk"]) for s in result.strategies if s.name == SWEPT]
    out: dict[str, Any] = {"risks": risks, "oom_budget": oom_budget, "subsets": {}}
    for sub, rows in frontiers(result).items():
        out["subsets"][sub] = {"rows": [row_json(r) for r in rows],
                               "pick": None if oom_budget is None else _pick_json(pick(rows, oom_budget)),
                               "at_vpa_risk": equal_risk_json(at_baseline_risk(rows))}
    return out


def _star(ax: Any, equal: EqualRisk | None, x: float | None, y: float | None) -> None:
    """The point at VPA's risk (x: its slack, y: its figure on the panel's line), when there is one."""
    if equal is None or equal.risk is None or x is None or y is None:
        return
    ax.scatter([x], [y], marker="*", s=180, color="C3", zorder=3, label=f"at {equal.baseline}'s risk "
               f"(risk {equal.risk:.3g})")
    ax.legend(fontsize=8)


def _line(equal: EqualRisk | None, field: str) -> float | None:
    return None if equal is None else next((v for line, v, _ in equal.lines if line.value == field), None)


def _panel(ax: Any, rows: Sequence[FrontierRow], x: str, y: str, chosen: str | None) -> None:
    swept = [r for r in rows if r.strategy == SWEPT and getattr(r.metrics, x) is not None]
    xs = [getattr(r.metrics, x) for r in swept]
    ys = [getattr(r.metrics, y) for r in swept]
    ax.plot(xs, ys, "o-", color="C0", label="podtailor (by risk)")
    for r, px, py in zip(swept, xs, ys, strict=True):
        ax.annotate(f"{r.risk:g}", (px, py), textcoords="offset points", xytext=(4, 4), fontsize=8)
        if r.label == chosen:
            ax.scatter([px], [py], s=220, facecolors="none", edgecolors="C3", label="pick")
    for i, r in enumerate(r for r in rows if r.strategy != SWEPT):
        px, py = getattr(r.metrics, x), getattr(r.metrics, y)
        if px is None or py is None:
            continue
        style = {"color": "grey", "marker": "x"} if r.reference else {"color": f"C{i + 1}", "marker": "s"}
        ax.scatter([px], [py], label=row_name(r.label), **style)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)


def write_png(result: BacktestResult, path: Path, oom_budget: float | None) -> None:
    """Memory slack against OOMs and CPU slack against CPU minutes over the request, all series."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = frontiers(result)["all"]
    chosen = None if oom_budget is None else pick(rows, oom_budget).label
    fig, (ax_mem, ax_cpu) = plt.subplots(1, 2, figsize=(11, 4.5))
    equal = at_baseline_risk(rows)
    _panel(ax_mem, rows, "memory_slack_gib", "ooms_per_series_day", chosen)
    _star(ax_mem, equal, None if equal is None else equal.memory_slack_gib, _line(equal, "ooms_per_series_day"))
    if oom_budget is not None:
        ax_mem.axhline(oom_budget, color="C3", linestyle=":", label=f"OOM budget {oom_budget:g}")
        ax_mem.legend(fontsize=8)
    ax_mem.set(xlabel="memory slack (limit - used), GiB", ylabel="OOM-equivalents per series-day", title="memory")
    _panel(ax_cpu, rows, "cpu_slack_cores", "cpu_over_request_min_per_day", chosen)
    _star(ax_cpu, equal, None if equal is None else equal.cpu_slack_cores,
          _line(equal, "cpu_over_request_min_per_day"))
    ax_cpu.set(xlabel="CPU slack (request - used), cores", ylabel="CPU minutes over request per series-day",
               title="CPU")
    fig.suptitle(f"risk sweep: {Path(result.source).name}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)

