"""Benchmark: the cold report's peak RSS per strategy, side by side, on one fleet and one Prometheus (#40 item 4).

``bench_report``'s fleet (its ``bench_workloads``, ``create_fleet`` and ``backfill``: paused Deployments of
3 replicas, one container, 5-minute samples) on a private control plane and Prometheus; then, in rounds that
alternate the order, ``report -o json`` in a fresh ``python`` per strategy as ``bench_report.cli`` runs it,
each child printing its own ``VmHWM`` (peak RSS, interpreter and imports included) when the report returns.
The last JSON report of each strategy is kept in ``--keep`` if given, so that two versions of the code can be
compared on the same Prometheus; ``--hold`` keeps the control plane and Prometheus up until that file exists.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.benchmarks.bench_report import STEP_S, fleet_servers
from tests.benchmarks.results import machine_facts
from tests.harness.cluster import REPO_ROOT

CHILD = ("import sys, argparse; from recommender.report.cli import add_report_parser, run_report; "
         "p = argparse.ArgumentParser(); add_report_parser(p.add_subparsers(dest='c')); "
         "rc = run_report(p.parse_args(['report', *sys.argv[1:]])); "
         "hwm = [l for l in open('/proc/self/status') if l.startswith('VmHWM:')][0].split()[1]; "
         "print('VmHWM_KIB', hwm, file=sys.stderr); sys.exit(rc)")
"""The report as ``bench_report.cli`` runs it, then its own peak RSS (KiB) on stderr."""


def report_peak_mib(kubeconfig: str, url: str, strategy: str, days: float, out: Path,
                    repo: Path = REPO_ROOT) -> tuple[float, float]:
    """One cold ``report -o json`` in a fresh process from ``repo``: (peak RSS MiB, wall seconds)."""
    extra = [] if strategy == "default" else ["--strategy", strategy]
    t0 = time.monotonic()
    done = subprocess.run([sys.executable, "-c", CHILD, "--kubeconfig", kubeconfig, "--prometheus-url", url,
                           "--step", f"{STEP_S}s", "--scrape-interval", f"{STEP_S}s", "--history", f"{days:g}d",
                           *extra, "-o", "json", "--output-file", str(out), "--no-progress"],
                          capture_output=True, text=True, cwd=repo, check=False, timeout=3600,
                          env={**os.environ, "PYTHONPATH": str(repo)})
    wall = time.monotonic() - t0
    if done.returncode != 0:
        raise RuntimeError(f"report exited {done.returncode}: {done.stderr[-2000:]}")
    kib = next(line.split()[1] for line in done.stderr.splitlines() if line.startswith("VmHWM_KIB"))
    return int(kib) / 1024, wall


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--workloads", type=int, default=3000)
    parser.add_argument("--days", type=float, default=8.0)
    parser.add_argument("--rounds", type=int, default=2, help="alternating rounds (default: %(default)s)")
    parser.add_argument("--strategies", default="default,krr-simple", help="comma-separated, 'default' for none")
    parser.add_argument("--keep", type=Path, help="directory for each strategy's last JSON report and the state")
    parser.add_argument("--hold", type=Path, help="keep the servers up until this file exists")
    args = parser.parse_args(argv)
    strategies = args.strategies.split(",")
    print(machine_facts(), flush=True)
    with tempfile.TemporaryDirectory() as tmp, fleet_servers(Path(tmp), args.workloads, args.days) as sv:
        print(f"backfilled {args.workloads} x {args.days:g} d in {sv.backfill_s:.1f} s; load {os.getloadavg()}",
              flush=True)
        keep = args.keep or Path(tmp)
        keep.mkdir(parents=True, exist_ok=True)
        (keep / "state.json").write_text(json.dumps({"kubeconfig": sv.kubeconfig, "url": sv.url}))
        peaks: dict[str, list[float]] = {s: [] for s in strategies}
        for r in range(args.rounds):
            for s in strategies if r % 2 == 0 else strategies[::-1]:
                mib, wall = report_peak_mib(sv.kubeconfig, sv.url, s, args.days, keep / f"{s}.json")
                peaks[s].append(mib)
                print(f"round {r + 1} {s}: peak RSS {mib:.0f} MiB, wall {wall:.1f} s, "
                      f"load {os.getloadavg()}", flush=True)
        for s, xs in peaks.items():
            print(f"{s}: peak RSS median {statistics.median(xs):.0f} MiB ({', '.join(f'{x:.0f}' for x in xs)})")
        while args.hold is not None and not args.hold.exists():
            time.sleep(5)


if __name__ == "__main__":
    main()
