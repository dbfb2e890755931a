"""Benchmark: the local control plane's binaries and how fast a cluster starts from the cache.

Measures the size of the cached binaries and the warm start time of the whole cluster (etcd,
kube-apiserver, controller manager, scheduler, up to the default ServiceAccount existing) and of
Prometheus, a few times in a row. The cold build time is measured separately by timing
``scripts/build-control-plane.sh`` on empty Go caches (``--cold-build``; takes many minutes).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from tests.benchmarks.results import machine_facts, write_section
from tests.harness.cluster import BUILD_SCRIPT, COMPONENTS, LocalCluster, control_plane_bin_dir
from tests.harness.prometheus import LocalPrometheus


def _cold_build() -> float:
    cache = Path(tempfile.mkdtemp(prefix="podtailor-cold-"))
    env = dict(os.environ, PODTAILOR_CACHE=str(cache / "bins"), GOMODCACHE=str(cache / "mod"),
               GOCACHE=str(cache / "gocache"))
    t0 = time.monotonic()
    subprocess.run(["bash", str(BUILD_SCRIPT)], env=env, check=True, stdout=subprocess.DEVNULL)
    elapsed = time.monotonic() - t0
    subprocess.run(["chmod", "-R", "u+w", str(cache)], check=False)
    shutil.rmtree(cache, ignore_errors=True)
    return elapsed


def run(repeats: int = 3, cold_build: bool = False) -> str:
    bin_dir = control_plane_bin_dir()
    sizes = {c: (bin_dir / c).resolve().stat().st_size for c in COMPONENTS}
    starts, prom_starts = [], []
    for _ in range(repeats):
        with tempfile.TemporaryDirectory() as tmp:
            cluster = LocalCluster(Path(tmp) / "c", bin_dir=bin_dir)
            cluster.start()
            starts.append(cluster.timings["start_s"])
            cluster.stop()
            prom = LocalPrometheus(Path(tmp) / "p")
            t0 = time.monotonic()
            prom.start()
            prom_starts.append(time.monotonic() - t0)
            prom.stop()
    rows = [f"| {c} | {sizes[c] / 1e6:.1f} MB |" for c in COMPONENTS]
    body = [machine_facts(), "", f"Binaries in `{bin_dir}`:", "", "| binary | size |", "|---|---|", *rows,
            f"| total | {sum(sizes.values()) / 1e6:.1f} MB |", "",
            "| measurement | median | runs |", "|---|---|---|",
            f"| warm start of the control plane (etcd → default ServiceAccount exists) | "
            f"{statistics.median(starts):.1f} s | {', '.join(f'{s:.1f}' for s in starts)} |",
            f"| start of Prometheus (to /-/ready) | {statistics.median(prom_starts):.2f} s | "
            f"{', '.join(f'{s:.2f}' for s in prom_starts)} |"]
    if cold_build:
        body.append(f"| cold build (empty Go module and build caches) | {_cold_build() / 60:.1f} min | 1 |")
    return "\n".join(body)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--cold-build", action="store_true", help="also time a build on empty Go caches")
    args = parser.parse_args(argv)
    write_section("cluster", "Local control plane", run(args.repeats, args.cold_build))


if __name__ == "__main__":
    main()
