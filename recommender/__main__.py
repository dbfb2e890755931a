"""Command line of the recommender (``podtailor-recommender``).

Owns argument parsing and exit codes; the work itself lives in the subpackages. Exit codes: 0 success,
1 the command ran and failed, 2 bad usage or bad input (nothing changed).
"""

from __future__ import annotations

import argparse
import sys

from recommender import __version__

DESCRIPTION = """\
Recommend CPU and memory for Kubernetes containers from their Prometheus usage history.

podtailor's recommender reads percentiles of usage history from Prometheus (or Thanos, Mimir,
VictoriaMetrics) with a few batched queries, and turns them into per-container targets with lower
and upper bounds. It writes them into VerticalPodAutoscaler status for the updater
(podtailor-updater) to apply in place.

This release has the command line skeleton only: the commands (once, run, report, backtest)
arrive with the recommender engine.
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="podtailor-recommender",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Exit codes: 0 success, 1 the command failed, 2 bad usage or input (nothing was changed).",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    parser.parse_args(argv)
    parser.print_help(sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
