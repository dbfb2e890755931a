"""Calibration of podtailor's risk budget: the realized rate against the stated budget, per trace and scale.

Owns the check of #39 item 2: every container of a training trace (``scale_study.TRACES``, scaled by each of
``--scales``) is replayed under podtailor at each of three stated budgets (``--budgets``: "cpu=SHARE,oom=KILLS"
as ``--risk-budget`` takes them) and under VPA, in one run per trace and scale. Per budget it prints the realized
rate over all series (CPU: time over the request / time; memory: OOM-equivalents per container-month, as
``scoring`` counts them) against the budget (goal: within 15%), the share of series whose own rate is within
[1/2, 2]x of the budget (goal: 80%), and VPA's realized rate in the same run. Series that cannot meet a budget
are counted apart and left out of the share: those whose usage is above podtailor's per-pod floor for less
than half the budget (CPU time; memory: hours per month), which the floor holds above their usage whatever the
margin; where there are any, the CPU and OOM cells also give the realized rate over the other series. A series
whose scored span holds less than one budgeted kill cannot land within [1/2, 2]x of an OOM
budget (0 kills is below, 1 is above): the share counts only series with at least one. Even then a count is
Poisson-like: at exactly one budgeted kill, a perfectly calibrated series lands within [1/2, 2]x (1 or 2 kills)
with probability 0.55, so the 80% goal is out of reach for OOM budgets over a month. The last column splits the
OOM rate between those series and the rest: the margin of a series is lowered only past its first budgeted kill
(``RiskBudget.memory_kill_allowance``), so the rest run at the priced level, whatever the budget. The OOM cell
also gives the kills against the count the budget allows, with that count's Poisson standard deviation
(``oom_count``): 107 Google jobs hold 22.5 container-months, so the 11.3 kills a budget of 0.5 a month allows
there carry a standard deviation of 30% by chance alone, twice the 15% goal.

``--fleet`` replays each budget's series together in the order of time (``replay.replay_fleet``: one
recommender serving them all, each step with the fleet's margins of the containers running then), as the
fleet's pooled memory margin (``RiskBudget.memory_fleet_eta``) needs: replayed one at a time, every series sees a
fleet of one. It runs one process per budget.

``python -m tests.benchmarks.calibration_study [--trace NAME ...] [--series N] [--scales 0.1,1,10]
[--budgets B1;B2;B3] [--set FIELD=NUMBER | --set part.field=JSON ...] [--fleet] [--write]``; ``--write`` puts the
table into the ``calibration`` section of RESULTS.md. ``--set`` probes another setting by hand (never with
``--write``): a RiskBudget field at every budget (``cpu_eta_start=1``) or another parameter of podtailor's by part
(``cpu.half_life_s=21600``).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace

import numpy as np

from recommender.backtest.replay import ReplayConfig, fleet_of, make_grid, replay_fleet
from recommender.backtest.runner import StrategySpec, score_series
from recommender.backtest.scoring import Metrics, Totals, metrics, score
from recommender.backtest.trace import Series, read_trace
from recommender.model.common import MIB
from recommender.model.podtailor_budget import MONTH_S, RiskBudget, budget_text, parse_budget
from recommender.model.podtailor_params import MinResources
from recommender.model.registry import get_strategy
from tests.benchmarks.results import machine_facts, write_section
from tests.benchmarks.scale_study import TRACES, TRACES_DIR, scaled

DEFAULT_BUDGETS = "cpu=0.005,oom=0.5;cpu=0.01,oom=1;cpu=0.02,oom=2"
WITHIN = (0.5, 2.0)
"""A series lands on its budget when its own rate is within these multiples of it."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Rates:
    """One row's realized rates over all series, and per series."""

    cpu_share: float
    oom_per_month: float | None
    cpu_series: tuple[float | None, ...]
    """Per series, in the order of the totals: the share of time over the request; None where none was scored."""
    oom_series: tuple[tuple[float, float] | None, ...]
    """Per series, in the order of the totals: (kills, months); None where no memory was scored (a CPU-only
    series), so that each entry stays beside its series' floor-bound flags."""
    metrics: Metrics
    """The backtest's figures over all series (slack, changes)."""


def rates(totals: list[Totals]) -> Rates:
    seconds = sum(t.seconds for t in totals)
    mem_s = sum(t.memory_seconds for t in totals)
    return Rates(cpu_share=sum(t.cpu_over_request_s for t in totals) / seconds if seconds else 0.0,
                 oom_per_month=sum(t.ooms for t in totals) / (mem_s / MONTH_S) if mem_s else None,
                 cpu_series=tuple(t.cpu_over_request_s / t.seconds if t.seconds > 0 else None for t in totals),
                 oom_series=tuple((float(t.ooms), t.memory_seconds / MONTH_S) if t.memory_seconds else None
                                  for t in totals),
                 metrics=metrics(sum(totals, Totals())))


def floor_bound(series: Series, budget: RiskBudget) -> tuple[bool, bool]:
    """Whether the per-pod floor holds the series above its usage (CPU, memory): usage above the floor for less
    than half the budget (module docstring)."""
    floors = MinResources()
    cpu = float(np.mean(series.cpu_cores > floors.pod_cpu_millicores / 1000.0))
    mem = series.memory_bytes
    if mem is None or not np.any(np.isfinite(mem)):
        return cpu < budget.cpu_over_share / 2, False
    months = max(float(series.timestamps_s[-1] - series.timestamps_s[0]), 1.0) / MONTH_S
    hours_over = float(np.sum(mem[np.isfinite(mem)] > floors.pod_memory_mib * MIB)) / 12.0  # 5-minute samples
    return cpu < budget.cpu_over_share / 2, hours_over / months < budget.oom_per_month / 2


def _work(args: tuple[Series, list[StrategySpec], ReplayConfig]) -> dict[str, Totals]:
    return score_series(*args)


def _fleet_work(args: tuple[list[Series], StrategySpec, ReplayConfig]) -> list[Totals]:
    series, spec, cfg = args
    plans = replay_fleet(series, get_strategy(spec.name, **dict(spec.overrides)), cfg)
    return [score(s, p, make_grid(s, cfg)) for s, p in zip(series, plans, strict=True)]


def study(series: list[Series], budgets: list[RiskBudget], workers: int, *,
          fleet: bool = False, overrides: tuple[tuple[str, object], ...] = ()) -> dict[str, object]:
    """One replay of every series under VPA and podtailor at each budget; the rows and the floor-bound counts.
    ``fleet``: each budget's series are replayed together in time order (``replay.replay_fleet``, one process
    per budget), so the fleet's margins are those of a recommender serving them all. ``overrides``: podtailor's
    other parameters ("part.field", value), the same at every budget."""
    specs = [StrategySpec(name="vpa"), *(StrategySpec(name="podtailor", label=f"podtailor {budget_text(b)}",
                                                      overrides=(("budget", b), *overrides)) for b in budgets)]
    cfg = ReplayConfig(fleet=fleet_of(series, ReplayConfig()))
    series = [s for s in series if len(s) >= 2]  # score_series skips shorter ones
    with ProcessPoolExecutor(max_workers=max(workers, 1)) as pool:
        if fleet:
            per = list(pool.map(_work, [(s, specs[:1], cfg) for s in series], chunksize=4))
            for spec, totals in zip(specs[1:], pool.map(_fleet_work, [(series, sp, cfg) for sp in specs[1:]]),
                                    strict=True):
                for p, t in zip(per, totals, strict=True):
                    p[spec.key] = t
        else:
            per = list(pool.map(_work, [(s, specs, cfg) for s in series], chunksize=4))
    out: dict[str, object] = {}
    for spec, budget in zip(specs[1:], budgets, strict=True):
        bound = [floor_bound(s, budget) for s, p in zip(series, per, strict=True) if p]
        kept = [p for p in per if p]
        free = [p[spec.key] for p, (cpu_bound, _) in zip(kept, bound, strict=True) if not cpu_bound]
        free_mem = [p[spec.key] for p, (_, mem_bound) in zip(kept, bound, strict=True) if not mem_bound]
        out[spec.key] = {"budget": budget, "row": rates([p[spec.key] for p in kept]),
                         "vpa": rates([p["vpa"] for p in kept]), "bound": bound,
                         "free_cpu_share": rates(free).cpu_share if free else None,
                         "free_oom": rates(free_mem).oom_per_month if free_mem else None}
    return out


def _memory(row: Rates, bound: list[tuple[bool, bool]]) -> list[tuple[tuple[float, float], bool]]:
    """Each series with memory scored: its (kills, months) and whether the floor holds its memory. The rows and
    the flags are zipped whole, then the CPU-only series dropped, so that a mixed trace pairs them right."""
    return [(km, mem_bound) for km, (_, mem_bound) in zip(row.oom_series, bound, strict=True) if km is not None]


def within_share(row: Rates, bound: list[tuple[bool, bool]], budget: RiskBudget) -> tuple[float, float | None]:
    """The share of series within [1/2, 2]x of the budget, floor-bound series left out (CPU, memory)."""
    low, high = WITHIN
    cpu = [r for r, (b, _) in zip(row.cpu_series, bound, strict=True) if r is not None and not b]
    cpu_in = float(np.mean([low * budget.cpu_over_share <= r <= high * budget.cpu_over_share for r in cpu])) \
        if cpu else 0.0
    mem = [(k, m) for (k, m), b in _memory(row, bound) if not b and budget.oom_per_month * m >= 1.0]
    mem_in = None if not mem else float(np.mean([low * budget.oom_per_month <= k / m <= high * budget.oom_per_month
                                                 for k, m in mem]))
    return cpu_in, mem_in


def oom_split(row: Rates, bound: list[tuple[bool, bool]], budget: RiskBudget) -> str:
    """The OOM rate per container-month over the series whose scored span holds at least one budgeted kill (the
    ones the budget governs: ``RiskBudget.memory_kill_allowance``) and over the rest, each with its count."""
    parts = [[(k, m) for (k, m), b in _memory(row, bound) if (not b and budget.oom_per_month * m >= 1.0) is want]
             for want in (True, False)]
    return " / ".join("n/a (0)" if not p else f"{sum(k for k, _ in p) / sum(m for _, m in p):.2f} ({len(p)})"
                      for p in parts)


def oom_count(row: Rates, bound: list[tuple[bool, bool]], budget: RiskBudget) -> str:
    """"; 16 kills where the budget allows 11.3 ± 3.4": the OOM count over the series the rate is judged on (those
    the floor does not hold, where it holds any) against the count the budget allows over their container-months,
    ± its Poisson standard deviation (the square root: the least noise a count of independent kills has, so the
    error a cell may show by chance alone; "" where memory is not budgeted or no memory was scored)."""
    held = any(m for _, m in bound)
    pairs = [(k, m) for (k, m), b in _memory(row, bound) if not (held and b)]
    kills, allowed = sum(k for k, _ in pairs), budget.oom_per_month * sum(m for _, m in pairs)
    if allowed <= 0:
        return ""
    shown = f"{kills:.0f}" if float(kills).is_integer() else f"{kills:.1f}"
    return f"; {shown} kills where the budget allows {allowed:.1f} ± {math.sqrt(allowed):.1f}"


def lines(name: str, scale: str, res: dict[str, object]) -> list[str]:
    out = []
    for raw in res.values():
        assert isinstance(raw, dict)
        budget, row, vpa, bound = raw["budget"], raw["row"], raw["vpa"], raw["bound"]
        cpu_in, mem_in = within_share(row, bound, budget)
        oom = "n/a" if row.oom_per_month is None else f"{row.oom_per_month:.2f}{_error(row.oom_per_month, budget)}"
        free_oom = raw["free_oom"]
        if free_oom is not None and any(m for _, m in bound):
            oom += f"; {free_oom:.2f}{_error(free_oom, budget)} without the floor-bound"
        oom += oom_count(row, bound, budget)
        oom_vpa = "n/a" if vpa.oom_per_month is None else f"{vpa.oom_per_month:.2f}"
        free = raw["free_cpu_share"]
        apart = "" if not any(c for c, _ in bound) or free is None else \
            f"; {free:.4f} ({free / budget.cpu_over_share - 1:+.0%}) without the floor-bound"
        out.append(f"| {name} | {scale}x | {budget_text(budget)} | {row.cpu_share:.4f} "
                   f"({row.cpu_share / budget.cpu_over_share - 1:+.0%}) vs {vpa.cpu_share:.4f}{apart} | {cpu_in:.0%} | "
                   f"{oom} (VPA {oom_vpa}) | {'n/a' if mem_in is None else f'{mem_in:.0%}'} | "
                   f"{sum(c for c, _ in bound)} / {sum(m for _, m in bound)} | {_vs(row, vpa)} | "
                   f"{oom_split(row, bound, budget)} |")
    return out


def _error(oom_per_month: float, budget: RiskBudget) -> str:
    """" (+22%)": an OOM rate's error against the budget ("" where memory is not budgeted)."""
    return f" ({oom_per_month / budget.oom_per_month - 1:+.0%})" if budget.oom_per_month > 0 else ""


def _vs(row: Rates, vpa: Rates) -> str:
    a, b = row.metrics, vpa.metrics
    mem = "n/a" if a.memory_slack_rel is None or b.memory_slack_rel is None else \
        f"{a.memory_slack_rel:.3f} vs {b.memory_slack_rel:.3f}"
    return f"{a.cpu_slack_rel:.3f} vs {b.cpu_slack_rel:.3f} / {mem} / " \
           f"{a.changes_per_series_day:.2f} vs {b.changes_per_series_day:.2f}"


def settings(items: list[str]) -> tuple[dict[str, float], tuple[tuple[str, object], ...]]:
    """``--set`` items: RiskBudget's fields ("cpu_eta_start=1", a number) and podtailor's other parameters by
    part ("cpu.half_life_s=21600", a JSON value). ValueError names the item that is not one."""
    extra: dict[str, float] = {}
    overrides: list[tuple[str, object]] = []
    for item in items:
        key, eq, value = item.partition("=")
        try:
            if not key or not eq:
                raise ValueError("not NAME=VALUE")
            if "." in key:
                overrides.append((key, json.loads(value)))
            else:
                extra[key] = float(value)
        except ValueError as e:
            raise ValueError(f"{item!r}: {e}") from None
    return extra, tuple(overrides)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trace", action="append", choices=sorted(TRACES), help="default: every trace")
    parser.add_argument("--series", type=int, help="only the first N series of each trace")
    parser.add_argument("--scales", default="1")
    parser.add_argument("--budgets", default=DEFAULT_BUDGETS, help="three budgets, ';'-separated")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                        help="another setting of every budget (RiskBudget's fields, e.g. cpu_eta_start=0.5), or of "
                             "podtailor's other parameters by part (e.g. cpu.half_life_s=21600)")
    parser.add_argument("--fleet", action="store_true",
                        help="replay each budget's series together in time order, as one recommender serving the "
                             "fleet (its pooled margins: RiskBudget.memory_fleet_eta); one process per budget")
    parser.add_argument("--write", action="store_true", help="write the table into RESULTS.md (`calibration`)")
    args = parser.parse_args(argv)
    if args.write and args.set:
        parser.error("--write: the section is the default's calibration; --set is for probes by hand")
    try:
        extra, overrides = settings(args.set)
        budgets = [replace(parse_budget(b), **extra) for b in args.budgets.split(";")]
        get_strategy("podtailor", **dict(overrides)).new_state()  # refused here, not in a worker later
    except (TypeError, ValueError) as e:
        parser.error(f"--set / --budgets: {e}")
    header = ["| trace | scale | budget | CPU share over request (vs budget) vs VPA | series within [1/2, 2]x "
              "(CPU) | OOM / container-month (vs budget) | series within [1/2, 2]x (OOM) | floor-bound series (CPU / "
              "memory) | CPU slack rel / mem slack rel / changes per day, vs VPA | OOM / container-month: series "
              "holding >= 1 budgeted kill (n) / the rest (n) |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    table = list(header)
    print("\n".join(header))
    for name in args.trace or sorted(TRACES):
        file, cols = TRACES[name]
        path = TRACES_DIR / file
        if not path.is_file():
            print(f"calibration_study: {path} is absent; {name} skipped", file=sys.stderr)
            continue
        series = [s for _, s in zip(range(args.series or 10**9), read_trace(path, cols), strict=False)]
        for scale in args.scales.split(","):
            rows = lines(name, scale, study(scaled(series, float(scale)), budgets, args.workers,
                                                 fleet=args.fleet, overrides=overrides))
            table += rows
            print("\n".join(rows), flush=True)
    if args.write:
        which = "every series" if args.series is None else f"the first {args.series} series"
        write_section("calibration", "Risk budget calibration per training trace (#39 item 2)",
                      f"{machine_facts()}\n\n`python -m tests.benchmarks.calibration_study --scales {args.scales}"
                      f"{' --fleet' if args.fleet else ''}` ({which} of each trace, {args.workers} workers"
                      f"{'; each budget replayed over the fleet together' if args.fleet else ''}).\n\n"
                      + "\n".join(table))
    return 0


if __name__ == "__main__":
    sys.exit(main())
