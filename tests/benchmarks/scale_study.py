"""Each training trace replayed at several container sizes, per trace, with the goal lines against VPA.

Owns the check of #18's scale-free rule: every container of a trace (usage and provisioned amounts) is
multiplied by F in memory, for F in ``--scales`` (0.1, 1 and 10 by default), and ``vpa``, ``podtailor`` and
the oracle are replayed on it. podtailor's floors (10m, 64 MiB, the 100 MiB OOM bump) are set below the
smallest scaled container (``--tiny-floors``, on by default), so what is left is its rule itself: its
relative slack, OOMs per series-day, CPU minutes over the request and changes per day should stay within 5%
of their 1x values. VPA runs as it is, floors included, as the goal lines compare against it. The traces
are read from ``../shared/traces/`` and the study says so when they are absent.

``python -m tests.benchmarks.scale_study [--trace bitbrains-08 ...] [--series N] [--set podtailor.k=v ...]``
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from recommender.backtest.replay import ReplayConfig
from recommender.backtest.report import goals
from recommender.backtest.runner import ORACLE, StrategySpec, run_series
from recommender.backtest.trace import Series, TraceColumns, read_trace
from recommender.model.common import GIB

TRACES_DIR = Path(__file__).resolve().parents[3] / "shared" / "traces"
TRACES: dict[str, tuple[str, TraceColumns | None]] = {
    "bitbrains-08": ("bitbrains_rnd_2013-08.csv.gz", None),
    "bitbrains-07": ("bitbrains_rnd_2013-07.csv.gz", None),
    # Normalized to the largest machine of the cell: read as a 32-core, 64 GiB machine (the 1x).
    "google-odd": ("google2011_gcd_jobs_odd.csv.gz", TraceColumns(cpu_scale=32.0, memory_scale=64.0 * GIB)),
}
TINY_FLOORS = (("pod_min_cpu_millicores", 0.01), ("pod_min_memory_mib", 0.01), ("oom_min_bump_bytes", 1.0))
FIGURES = ("cpu_slack_rel", "memory_slack_rel", "ooms_per_series_day", "cpu_over_request_min_per_day",
           "changes_per_series_day")


def scaled(series: list[Series], factor: float) -> list[Series]:
    def times(a: Any) -> Any:
        return None if a is None else a * factor
    return [replace(s, cpu_cores=s.cpu_cores * factor, memory_bytes=times(s.memory_bytes),
                    cpu_provisioned_cores=times(s.cpu_provisioned_cores),
                    memory_provisioned_bytes=times(s.memory_provisioned_bytes)) for s in series]


def study(name: str, series: list[Series], scales: list[float], overrides: tuple[tuple[str, Any], ...],
          workers: int) -> dict[str, Any]:
    specs = [StrategySpec(name="vpa"), StrategySpec(name="podtailor", overrides=overrides), StrategySpec(name=ORACLE)]
    out: dict[str, Any] = {}
    for factor in scales:
        t0 = time.perf_counter()
        result = run_series(scaled(series, factor), specs, ReplayConfig(), workers=workers)
        per = result.metrics()["all"]
        out[f"{factor:g}"] = {"podtailor": {k: getattr(per["podtailor"], k) for k in FIGURES},
                              "vpa": {k: getattr(per["vpa"], k) for k in FIGURES},
                              "goals": goals(per, "podtailor"), "elapsed_s": time.perf_counter() - t0}
    return out


def _fmt(v: Any) -> str:
    return "n/a" if v is None else f"{v:.3f}" if isinstance(v, float) else str(v)


def print_study(name: str, res: dict[str, Any]) -> None:
    base = res.get("1", {}).get("podtailor", {})
    print(f"\n{name}")
    print("scale | " + " | ".join(FIGURES) + " | cpu gap | mem gap | goals met")
    for scale, r in res.items():
        p, v, g = r["podtailor"], r["vpa"], r["goals"] or {}
        cells = []
        for k in FIGURES:
            drift = "" if not base.get(k) or p[k] is None else f" ({p[k] / base[k] - 1:+.1%})"
            cells.append(f"{_fmt(p[k])}{drift} vs {_fmt(v[k])}")
        print(f"{scale} | " + " | ".join(cells) + f" | {_fmt(g.get('cpu_gap_closed'))} | "
              f"{_fmt(g.get('memory_gap_closed'))} | {g.get('all_met')}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trace", action="append", choices=sorted(TRACES), help="default: every trace")
    parser.add_argument("--series", type=int, help="only the first N series of each trace")
    parser.add_argument("--scales", default="0.1,1,10")
    parser.add_argument("--set", action="append", default=[], metavar="podtailor.KEY=VALUE")
    parser.add_argument("--no-tiny-floors", action="store_true")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    overrides: list[tuple[str, Any]] = [] if args.no_tiny_floors else list(TINY_FLOORS)
    for item in args.set:
        key, _, value = item.removeprefix("podtailor.").partition("=")
        overrides.append((key, json.loads(value)))
    scales = [float(x) for x in args.scales.split(",")]
    results = {}
    for name in args.trace or sorted(TRACES):
        file, cols = TRACES[name]
        path = TRACES_DIR / file
        if not path.is_file():
            print(f"scale_study: {path} is absent (the traces come with ../shared/traces/); {name} skipped",
                  file=sys.stderr)
            continue
        series = []
        for s in read_trace(path, cols):
            series.append(s)
            if args.series is not None and len(series) >= args.series:
                break
        results[name] = study(name, series, scales, tuple(overrides), args.workers)
        print_study(name, results[name])
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
