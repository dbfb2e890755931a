"""Per training trace at 1x, the risk sweep's point at VPA's risk: how much podtailor saves when it takes no more
risk than VPA on any line.

Owns the ``frontier`` section of RESULTS.md (#39 item 4). For each training trace in ``../shared/traces/`` it
replays what ``backtest --sweep --sweep-values R`` replays (podtailor at each risk with its own floors, vpa,
krr-simple and the oracle: ``sweep.sweep_specs``, the fleet from every series' warm-up, as ``run_trace`` does)
and writes, trace by trace, the point at VPA's risk on every line (``equal_risk.at_baseline_risk``: the setting,
interpolated linearly in log risk between swept rows, the binding line, CPU and memory slack against VPA's) beside
the default (risk 1). ``--from-json NAME=FILE`` takes a trace's rows from a ``backtest --sweep --json`` document
instead of replaying it (how a run by hand enters the section; the point is computed again from its rows by the
same function). Nothing is averaged over traces.

``python -m tests.benchmarks.frontier_study [--trace NAME ...] [--series N] [--sweep-values 0.5,1,2]
[--from-json NAME=FILE ...] [--write]``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import time
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from recommender.backtest.equal_risk import EqualRisk, at_baseline_risk
from recommender.backtest.no_worse import RISK_LINES
from recommender.backtest.replay import ReplayConfig
from recommender.backtest.scoring import Metrics
from recommender.backtest.sweep import SWEPT, FrontierRow, parse_risks, sweep_specs
from recommender.backtest.sweep_report import frontiers, row_json
from tests.benchmarks.results import machine_facts, write_section
from tests.benchmarks.scale_study import TRACES, TRACES_DIR

DEFAULT_SWEEP = "0.5,1,2"
"""Risks replayed by ``make bench``: on the training traces VPA's risk lay between 1 and 2 or at 1 (RESULTS.md)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TraceFrontier:
    """One trace's sweep rows, where they came from, and the point at VPA's risk."""

    trace: str
    source: str
    rows: tuple[FrontierRow, ...]
    equal: EqualRisk | None


def rows_of_json(doc: dict[str, Any]) -> list[FrontierRow]:
    """The ``all`` rows of a ``backtest --sweep --json`` document as ``FrontierRow``s."""
    names = [f.name for f in fields(Metrics)]
    return [FrontierRow(label=r["row"], strategy=r["strategy"], risk=r["risk"], reference=r["reference"],
                        memory_efficient=r["memory_efficient"], cpu_efficient=r["cpu_efficient"],
                        metrics=Metrics(**{k: r[k] for k in names}))
            for r in doc["sweep"]["subsets"]["all"]["rows"]]


def rows_json(rows: tuple[FrontierRow, ...]) -> dict[str, Any]:
    """The rows in the shape ``rows_of_json`` reads (that of ``backtest --sweep --json``)."""
    return {"sweep": {"subsets": {"all": {"rows": [row_json(r) for r in rows]}}}}


def replay(name: str, risks: tuple[float, ...], series: int | None, workers: int) -> TraceFrontier | None:
    """The sweep's podtailor rows, VPA and the oracle on one trace (KRR, which the point does not need, is left
    out to save a replay)."""
    from recommender.backtest.runner import run_trace

    file, cols = TRACES[name]
    path = TRACES_DIR / file
    if not path.is_file():
        print(f"frontier_study: {path} is absent; {name} skipped", file=sys.stderr)
        return None
    t0 = time.perf_counter()
    specs = [s for s in sweep_specs(risks, {}) if s.name != "krr-simple"]
    result = run_trace(path, specs, ReplayConfig(), columns=cols, workers=workers, limit=series)
    rows = tuple(frontiers(result)["all"])
    return TraceFrontier(trace=name, source=f"replayed here in {time.perf_counter() - t0:.0f} s", rows=rows,
                         equal=at_baseline_risk(rows))


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:+.1%}"


def _vs(value: float | None, base: float | None) -> str:
    return "n/a" if value is None or not base else _pct(value / base - 1.0)


def markdown_row(t: TraceFrontier) -> str:
    """One trace: the risks swept, the default's slack against VPA's, and the point at VPA's risk."""
    swept = [r for r in t.rows if r.strategy == SWEPT and r.risk is not None]
    vpa = next((r.metrics for r in t.rows if r.strategy == "vpa"), None)
    default = next((r.metrics for r in swept if r.risk == 1.0), None)
    at_default = "n/a" if default is None or vpa is None else (
        f"{_vs(default.cpu_slack_cores, vpa.cpu_slack_cores)} / "
        f"{_vs(default.memory_slack_gib, vpa.memory_slack_gib)}")
    series = max((r.metrics.series for r in t.rows), default=0)
    head = f"| {t.trace} ({series}) | {', '.join(f'{r.risk:g}' for r in swept)} | {at_default} | "
    e = t.equal
    if e is None or e.risk is None:
        return head + "none | | | | | " + " | ".join("" for _ in RISK_LINES) + " |"
    binding = "none (a bound)" if e.binding is None else e.binding.long_title
    aside = ", ".join(line.long_title for line in e.set_aside) or "none"
    lines = {line: f"{value:.4g} vs {base:.4g}" for line, value, base in e.lines}
    return (head + f"{e.risk:.3g} | {aside} | {binding} | {_pct(e.cpu_slack_vs_baseline)} | "
            f"{_pct(e.memory_slack_vs_baseline)} | " + " | ".join(lines.get(ln, "above at every risk")
                                                                    for ln in RISK_LINES) + " |")


def markdown(found: list[TraceFrontier], facts: str) -> str:
    out = [facts, "",
           "`python -m tests.benchmarks.frontier_study`: per training trace at 1x, podtailor swept over the risk "
           "settings listed beside VPA and the oracle (the rows of `backtest --sweep` but KRR's), and the sweep's "
           "point at VPA's risk on every line (`recommender/backtest/equal_risk.py`): the highest setting whose "
           "OOMs, CPU minutes over the request and over the limit, and changes are each at most VPA's, with every "
           "figure linear in log risk between two swept rows. The binding line is the one at VPA's figure there; the"
           " slack columns are podtailor's mean slack (cores, GiB) there against VPA's. Line cells: podtailor there "
           "vs VPA. A line above VPA's at every swept risk is set aside and named, and the point is then the one "
           "on the other lines: no risk setting reaches VPA's risk on that line.", "",
           "| trace (series) | risks swept | default (risk 1) CPU / mem slack vs VPA | setting at VPA's risk | "
           "lines set aside (above VPA at every risk) | binding line | CPU slack vs VPA | mem slack vs VPA | "
           + " | ".join(ln.long_title for ln in RISK_LINES) + " |",
           "|---" * (8 + len(RISK_LINES)) + "|"]
    out += [markdown_row(t) for t in found]
    out.append("")
    out += [f"- {t.trace} ({t.source}): {t.equal.reason if t.equal else 'no VPA or podtailor row'}." for t in found]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trace", action="append", choices=sorted(TRACES), help="default: every trace")
    parser.add_argument("--series", type=int, help="only the first N series of each trace")
    parser.add_argument("--sweep-values", default=DEFAULT_SWEEP, metavar="R1,R2,...")
    parser.add_argument("--from-json", action="append", default=[], metavar="NAME=FILE",
                        help="a trace's rows from a `backtest --sweep --json` document instead of a replay")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--json-dir", type=Path, help="write each replayed trace's rows here as NAME.json, as it ends")
    parser.add_argument("--write", action="store_true", help="write the `frontier` section of RESULTS.md")
    args = parser.parse_args(argv)
    given: dict[str, Path] = {}
    for item in args.from_json:
        name, _, file = str(item).partition("=")
        if name not in TRACES or not file:
            parser.error(f"--from-json {item!r}: want NAME=FILE with NAME one of {', '.join(sorted(TRACES))}")
        given[name] = Path(file)
    risks = parse_risks(args.sweep_values)
    found: list[TraceFrontier] = []
    for name in args.trace or sorted(TRACES):
        if name in given:
            rows = tuple(rows_of_json(json.loads(given[name].read_text())))
            t: TraceFrontier | None = TraceFrontier(trace=name, source=f"rows from {given[name].name}", rows=rows,
                                                    equal=at_baseline_risk(rows))
        else:
            t = replay(name, risks, args.series, args.workers)
            if t is not None and args.json_dir is not None:
                (args.json_dir / f"{name}.json").write_text(json.dumps(rows_json(t.rows), indent=2) + "\n")
        if t is not None:
            found.append(t)
            print(f"{t.trace}: {t.equal.reason if t.equal else 'no VPA or podtailor row'}", flush=True)
    if args.write and found:
        facts = machine_facts() if len(given) < len(found) else (
            f"Written {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC from saved sweep rows (--from-json): the machine "
            "and the time of each run are noted beside this section.")
        write_section("frontier", "podtailor at VPA's risk, per training trace at 1x (#39 item 4)",
                      markdown(found, facts))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
