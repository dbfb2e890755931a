"""Write the shared trace with every container F times its size (run by hand, not by ``make bench``).

Why: the strategy's prices and floors are in absolute units (cores, GiB-hours, 10m / 64 MiB), so a trace of
smaller containers with the same shapes tests how it behaves away from Bitbrains' sizes. Usage and provisioned
CPU and memory are all multiplied by F (the backtest's --cpu-scale / --memory-scale convert units of the usage
columns only). ``python -m tests.benchmarks.scaled_trace F OUT.csv.gz``, then
``podtailor-recommender backtest OUT.csv.gz``; RESULTS.md's hand analysis quotes such a run.
"""

from __future__ import annotations

import gzip
import sys

from tests.benchmarks.bench_backtest import TRACE


def _scaled(text: str, factor: float, *, whole: bool) -> str:
    if text == "":
        return text
    value = float(text) * factor
    return str(round(value)) if whole else f"{value:.6g}"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python -m tests.benchmarks.scaled_trace FACTOR OUT.csv.gz", file=sys.stderr)
        return 2
    factor, out = float(args[0]), args[1]
    if not 0 < factor < float("inf"):
        print(f"error: FACTOR must be a positive number, not {args[0]!r}", file=sys.stderr)
        return 2
    with gzip.open(TRACE, "rt") as src, gzip.open(out, "wt", compresslevel=1) as dst:
        header = src.readline()
        if header.strip() != ("series_id,timestamp_s,cpu_cores,memory_bytes,cpu_provisioned_cores,"
                              "memory_provisioned_bytes"):
            print(f"error: unexpected header in {TRACE}: {header.strip()}", file=sys.stderr)
            return 2
        dst.write(header)
        for line in src:
            sid, ts, cpu, mem, cpu_prov, mem_prov = line.rstrip("\n").split(",")
            dst.write(",".join([sid, ts, _scaled(cpu, factor, whole=False), _scaled(mem, factor, whole=True),
                                _scaled(cpu_prov, factor, whole=False), _scaled(mem_prov, factor, whole=True)]) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
