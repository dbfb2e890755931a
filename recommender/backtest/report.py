"""Output of a backtest: the goal check against VPA and the oracle, a rich table, JSON and a PNG.

Owns the presentation and the goal arithmetic. Gap closed = (VPA slack - strategy slack) / (VPA slack - oracle
slack), absolute slack, per resource; the default strategy's goals (#18 item 4) are: CPU gap closed >= 0.5, less
memory slack than VPA (memory gap closed > 0), OOM-equivalents, CPU minutes over the request and changes each <=
VPA's (``all_met``). The ambition beyond them (a quarter of the memory gap; at most Autopilot's 23 % relative
memory slack, meant for smooth job memory) is reported as ``ambition_*``, outside ``all_met``. When the run has the
budgeted oracle (``oracle-budget``: knows the future, VPA's changes and CPU time over the request), its own gap
closed says whether half the gap is reachable at all at VPA's change rate by a block oracle (``*_reachable``);
those entries describe the target, not the strategy, and do not enter ``all_met``. Reference rows are marked
"(reference)" in the tables. Google Autopilot's published memory figures (23 % relative slack, over 99.5 % OOM-free
job-days; Rzadca et al., EuroSys 2020) are printed beside ours as the anchor. The PNG (matplotlib, Agg backend,
imported only when asked for) plots relative slack against the OOM-equivalents per series-day (memory) and against
CPU minutes over the request (CPU), one point per strategy per subset.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from podtailor.units import format_cpu, format_memory
from recommender.backtest.runner import ORACLE, ORACLE_BUDGET, REFERENCES, SUBSETS, BacktestResult
from recommender.backtest.scoring import Metrics

SCHEMA = "podtailor.backtest/v1"
AUTOPILOT_MEMORY_SLACK_REL = 0.23
AUTOPILOT: dict[str, Any] = {"memory_slack_rel": AUTOPILOT_MEMORY_SLACK_REL, "oom_free_days": 0.995,
             "source": "Rzadca et al., Autopilot, EuroSys 2020: ML recommender, memory, job-days"}
COLUMNS = (("series", "series", "{:d}"), ("series_days", "series-days", "{:d}"),
           ("cpu_slack_cores", "CPU slack cores", "{:.4f}"), ("cpu_slack_rel", "CPU slack rel", "{:.1%}"),
           ("memory_slack_gib", "mem slack GiB", "{:.3f}"), ("memory_slack_rel", "mem slack rel", "{:.1%}"),
           ("ooms_per_series_day", "OOM / series-day", "{:.4f}"), ("oom_free_days", "OOM-free days", "{:.2%}"),
           ("cpu_over_limit_min_per_day", "CPU min > limit /day", "{:.1f}"),
           ("cpu_over_request_min_per_day", "CPU min > request /day", "{:.1f}"),
           ("changes_per_series_day", "changes / series-day", "{:.2f}"))


def gap_closed(base: float | None, best: float | None, value: float | None) -> float | None:
    """(base - value) / (base - best); None when a figure is missing or base is not above best."""
    if base is None or best is None or value is None or base - best <= 0:
        return None
    return (base - value) / (base - best)


def goals(by_name: dict[str, Metrics], name: str, baseline: str = "vpa") -> dict[str, Any] | None:
    """The goal check of ``name`` against ``baseline`` and the oracle (None if either is missing)."""
    if name not in by_name or baseline not in by_name or ORACLE not in by_name:
        return None
    m, b, o = by_name[name], by_name[baseline], by_name[ORACLE]
    cpu_gap = gap_closed(b.cpu_slack_cores, o.cpu_slack_cores, m.cpu_slack_cores)
    mem_gap = gap_closed(b.memory_slack_gib, o.memory_slack_gib, m.memory_slack_gib)
    checks = {
        "cpu_gap_closed": cpu_gap, "memory_gap_closed": mem_gap,
        "cpu_gap_at_least_half": cpu_gap is not None and cpu_gap >= 0.5,
        "less_memory_slack": mem_gap is None or mem_gap > 0.0,
        "ooms_not_above_baseline": (m.ooms_per_series_day or 0.0) <= (b.ooms_per_series_day or 0.0),
        "cpu_over_request_not_above_baseline": m.cpu_over_request_min_per_day <= b.cpu_over_request_min_per_day,
        "changes_not_above_baseline": m.changes_per_series_day <= b.changes_per_series_day,
    }
    checks["all_met"] = all(v for k, v in checks.items() if isinstance(v, bool))
    ambition = {"ambition_memory_gap_at_least_quarter": mem_gap is None or mem_gap >= 0.25,
                "ambition_memory_slack_rel_at_most_autopilot": (
                    m.memory_slack_rel is None or m.memory_slack_rel <= AUTOPILOT_MEMORY_SLACK_REL)}
    return {"strategy": name, "baseline": baseline, **checks, **ambition, **reachability(by_name, baseline)}


def reachability(by_name: dict[str, Metrics], baseline: str = "vpa") -> dict[str, Any]:
    """The budgeted oracle's gap closed per resource and whether it reaches half (empty without that row)."""
    if ORACLE_BUDGET not in by_name or baseline not in by_name or ORACLE not in by_name:
        return {}
    r, b, o = by_name[ORACLE_BUDGET], by_name[baseline], by_name[ORACLE]
    cpu_gap = gap_closed(b.cpu_slack_cores, o.cpu_slack_cores, r.cpu_slack_cores)
    mem_gap = gap_closed(b.memory_slack_gib, o.memory_slack_gib, r.memory_slack_gib)
    return {"budget_oracle_cpu_gap_closed": cpu_gap, "budget_oracle_memory_gap_closed": mem_gap,
            "half_cpu_gap_reachable": cpu_gap is not None and cpu_gap >= 0.5,
            "half_memory_gap_reachable": mem_gap is None or mem_gap >= 0.5}


def row_name(name: str) -> str:
    """The table label: reference rows (which know the future) are marked."""
    return f"{name} (reference)" if name in REFERENCES else name


def _config(result: BacktestResult) -> dict[str, Any]:
    """The replay's settings; of the fleet only what it holds (the budget's margins only when known)."""
    config = asdict(result.config)
    if config["fleet"] is not None:
        config["fleet"] = {k: v for k, v in config["fleet"].items() if v is not None}
    return config


def to_json(result: BacktestResult, default: str = "podtailor") -> dict[str, Any]:
    """The JSON document (schema ``podtailor.backtest/v1``)."""
    per = result.metrics()
    return {
        "schema": SCHEMA, "source": result.source,
        "columns": result.read_stats.columns, "rows_read": result.read_stats.rows,
        "rows_dropped": result.read_stats.dropped_rows, "series_read": result.read_stats.series,
        "series_unscored": dict(result.unscored),
        "config": _config(result),
        "strategies": {s.key: {"name": s.name, "overrides": dict(s.overrides), "parameters": s.parameters()}
                       for s in result.strategies},
        "subsets": {sub: {name: m.to_dict() for name, m in per[sub].items()} for sub in SUBSETS},
        "goals": {sub: goals(per[sub], default) for sub in SUBSETS},
        "anchor": AUTOPILOT,
        "speed": {"elapsed_s": result.elapsed_s, "series_days_per_s": result.series_days_per_s()},
    }


def write_json(result: BacktestResult, path: Path, default: str = "podtailor") -> None:
    path.write_text(json.dumps(to_json(result, default), indent=2, default=str) + "\n")


def _cell(value: Any, fmt: str) -> str:
    return "n/a" if value is None else fmt.format(value)


def unscored_text(result: BacktestResult) -> str | None:
    """"3 series read but not scored: 2 fewer than 2 usable samples, 1 no sample after the warm-up", or None."""
    if not result.unscored:
        return None
    total = sum(result.unscored.values())
    parts = ", ".join(f"{n} {reason}" for reason, n in sorted(result.unscored.items()))
    return f"{total} series read but not scored: {parts}"


def table(result: BacktestResult, subset: str = "all") -> Table:
    per = result.metrics()[subset]
    out = Table(title=f"backtest: {subset} series ({result.source})", caption=unscored_text(result))
    out.add_column("strategy")
    for _, title, _ in COLUMNS:
        out.add_column(title, justify="right")
    for name, m in per.items():
        d = m.to_dict()
        out.add_row(row_name(name), *(_cell(d[key], fmt) for key, _, fmt in COLUMNS))
    out.add_row("Autopilot (paper)", "", "", "", "", "", f"{AUTOPILOT['memory_slack_rel']:.0%}", "",
                f">{AUTOPILOT['oom_free_days']:.1%}", "", "", "")
    return out


def markdown(result: BacktestResult, subset: str = "all") -> str:
    """The same table as Markdown (for RESULTS.md)."""
    per = result.metrics()[subset]
    head = "| strategy | " + " | ".join(title for _, title, _ in COLUMNS) + " |"
    lines = [head, "|---" * (len(COLUMNS) + 1) + "|"]
    for name, m in per.items():
        d = m.to_dict()
        lines.append(f"| {row_name(name)} | " + " | ".join(_cell(d[key], fmt) for key, _, fmt in COLUMNS) + " |")
    lines.append("| Autopilot (paper, ML) | | | | | | 23% | | >99.5% | | | |")
    note = unscored_text(result)
    return "\n".join(lines if note is None else [*lines, "", note + "."])


def print_report(result: BacktestResult, console: Console, default: str = "podtailor") -> None:
    per = result.metrics()
    for sub in SUBSETS:
        if per[sub] and any(m.series for m in per[sub].values()):
            console.print(table(result, sub))
            g = goals(per[sub], default)
            if g is not None:
                console.print(f"goals for {default} vs {g['baseline']} ({sub}): " + ", ".join(
                    f"{k}={v:.2f}" if isinstance(v, float) else f"{k}={v}" for k, v in g.items()
                    if k not in ("strategy", "baseline")))
    print_fleet(result, console)
    console.print(f"{result.series_days_per_s():.1f} series-days replayed per second ({result.elapsed_s:.1f} s)")


def print_fleet(result: BacktestResult, console: Console) -> None:
    """The fleet the replay's fleet-relative prices were in units of (nothing when there was none)."""
    fleet = result.config.fleet
    if fleet is not None:
        console.print(f"fleet (the prices relative to it, from every series' warm-up): mean CPU p95 "
                      f"{format_cpu(math.ceil(fleet.cpu_cores * 1000.0))}, mean memory peak "
                      f"{format_memory(math.ceil(fleet.memory_bytes / 2**20) * 2**20)}")


def write_png(result: BacktestResult, path: Path) -> None:
    """Slack against OOM rate (memory) and against CPU minutes over the request, per strategy and subset."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    per = result.metrics()
    fig, (ax_mem, ax_cpu) = plt.subplots(1, 2, figsize=(11, 4.5))
    markers = {"all": "o", "odd": "^", "even": "s"}
    for i, spec in enumerate(result.strategies):
        color = f"C{i}"
        for sub in SUBSETS:
            m = per[sub].get(spec.key)
            if m is None or not m.series:
                continue
            label = row_name(spec.key) if sub == "all" else None
            if m.memory_slack_rel is not None:
                ax_mem.scatter(m.memory_slack_rel, m.ooms_per_series_day, color=color, marker=markers[sub],
                               label=label)
            ax_cpu.scatter(m.cpu_slack_rel, m.cpu_over_request_min_per_day, color=color, marker=markers[sub],
                           label=label)
    ax_mem.axvline(AUTOPILOT["memory_slack_rel"], color="grey", linestyle=":", label="Autopilot 23%")
    ax_mem.set(xlabel="memory slack (limit - used) / limit", ylabel="OOM-equivalents per series-day",
               title="memory")
    ax_cpu.set(xlabel="CPU slack (request - used) / request", ylabel="CPU minutes over request per series-day",
               title="CPU")
    for ax in (ax_mem, ax_cpu):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, title="o all, ^ odd, s even", title_fontsize=7)
    fig.suptitle(f"backtest: {Path(result.source).name}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
