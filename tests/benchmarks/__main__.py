"""Run every benchmark (``make bench``) and write RESULTS.md."""

from __future__ import annotations

import sys

from tests.benchmarks import (
    bench_backtest,
    bench_cluster,
    bench_kubelets,
    bench_nodesim,
    bench_realnode,
    bench_recommender,
    bench_report,
    bench_updater,
    bench_vpa,
    calibration_study,
    frontier_study,
    scale_study,
)


def main() -> int:
    for name, module in (("cluster", bench_cluster), ("nodesim", bench_nodesim), ("kubelets", bench_kubelets),
                         ("realnode", bench_realnode),
                         ("recommender", bench_recommender), ("updater", bench_updater), ("backtest", bench_backtest),
                         ("vpa", bench_vpa), ("report", bench_report)):
        print(f"benchmark {name} ...", file=sys.stderr, flush=True)
        module.main([])
    print("benchmark scale (every training trace at 0.1x, 1x, 10x) ...", file=sys.stderr, flush=True)
    scale_study.main(["--write"])
    print("benchmark frontier (podtailor at VPA's risk, every training trace at 1x) ...", file=sys.stderr, flush=True)
    frontier_study.main(["--write"])
    print("benchmark calibration (the risk budget on every training trace at 0.1x, 1x and 10x) ...", file=sys.stderr,
          flush=True)
    calibration_study.main(["--scales", "0.1,1,10", "--fleet", "--write"])
    print("tables written to tests/benchmarks/RESULTS.md", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
