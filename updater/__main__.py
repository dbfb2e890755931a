"""Command line of the updater (``podtailor-updater``).

Owns argument parsing and exit codes; the work itself lives in the subpackages. Exit codes: 0 success,
1 the command ran and failed, 2 bad usage or bad input (nothing changed).
"""

from __future__ import annotations

import argparse
import sys

from updater import __version__

DESCRIPTION = """\
Apply recommended CPU and memory to running Kubernetes pods in place, without restarting them.

podtailor's updater reads the targets the recommender wrote into VerticalPodAutoscaler status and
resizes running pods through the pods/resize subresource, in canary batches per node pool, honouring
each container's resizePolicy, verifying every step and rolling back on failure. Where a resize cannot
be done in place it falls back to rolling replacement.

This release has the command line skeleton only: the commands (plan, run, rollback, webhook)
arrive with the updater.
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="podtailor-updater",
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
