"""Command-line plumbing both halves share: durations, Kubernetes flags and client, logging setup, the tables' console.

Owns the pieces of the two CLIs that have nothing to do with recommending or updating, so each half
uses them without importing the other (the import-linter contracts in .importlinter hold
this). Bad input raises ``UsageError`` (exit code 2) before anything is contacted.
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import re
import sys
from pathlib import Path

from kubernetes import client, config
from rich.console import Console

from podtailor.kube.pacing import AdaptiveRate, RateConfig, install

_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(s|m|h|d)$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


class UsageError(Exception):
    """Bad command-line input; nothing was contacted or changed."""


EXIT_CODES = "Exit codes: 0 success, 1 the command failed, 2 bad usage or input (nothing was changed)."


def command_parser(prog: str, description: str, version: str) -> tuple[argparse.ArgumentParser,
                                                                          argparse._SubParsersAction]:  # type: ignore[type-arg]
    """A CLI's top-level parser (description kept as written, exit codes in the epilog, --version) and its
    subcommands."""
    parser = argparse.ArgumentParser(prog=prog, description=description, epilog=EXIT_CODES,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"%(prog)s {version}")
    return parser, parser.add_subparsers(dest="command", metavar="COMMAND")


def duration_s(text: str) -> float:
    m = _DURATION.match(text.strip())
    if m is None:
        raise argparse.ArgumentTypeError(f"bad duration {text!r}: use a number with s, m, h or d (e.g. 90s, 8d)")
    value = float(m[1]) * _UNITS[m[2]]
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"duration {text!r} must be positive")
    return value


def add_kube_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("Kubernetes")
    g.add_argument("--kubeconfig", type=Path, help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config, "
                   "or the in-cluster service account)")
    g.add_argument("--context", help="kubeconfig context to use (default: the current context)")
    g.add_argument("--kube-api-qps", type=_non_negative, default=RateConfig().qps, metavar="QPS",
                   help="requests per second to the API server (default: %(default)s; 0: unpaced). Halved, down to "
                   "1/s, each time API Priority and Fairness answers 429, and every request waits out its Retry-After")
    g.add_argument("--kube-api-burst", type=_positive_int, default=RateConfig().burst, metavar="N",
                   help="requests allowed back to back before the rate applies (default: %(default)s)")


def _non_negative(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be a finite number >= 0")
    return value


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be at least 1")
    return value


def kube_client(args: argparse.Namespace) -> client.ApiClient:
    """A client for the flags' cluster, paced by ``--kube-api-qps``/``--kube-api-burst`` (see podtailor.kube.pacing)."""
    try:
        if args.kubeconfig is None and args.context is None and "KUBERNETES_SERVICE_HOST" in os.environ:
            config.load_incluster_config()  # type: ignore[no-untyped-call]
            api = client.ApiClient()
        else:
            path = str(args.kubeconfig) if args.kubeconfig else None
            api = config.new_client_from_config(  # type: ignore[no-untyped-call]
                config_file=path, context=args.context)
    except (config.ConfigException, OSError) as err:
        raise UsageError(f"cannot load Kubernetes credentials: {err}") from None
    qps = getattr(args, "kube_api_qps", RateConfig().qps)
    burst = getattr(args, "kube_api_burst", RateConfig().burst)
    install(api, AdaptiveRate(RateConfig(qps=qps, burst=burst, min_qps=min(1.0, qps) if qps > 0 else 1.0)))
    return api


LOG_FORMATS = ("text", "json")
LOG_LEVELS = ("debug", "info", "warning", "error")


def add_logging_flags(p: argparse._ActionsContainer, level: str = "info") -> None:
    """``--log-format`` and ``--log-level`` (on a parser or an argument group), read by ``setup_logging``."""
    p.add_argument("--log-format", choices=LOG_FORMATS, default="text", help="log format (default: text)")
    p.add_argument("--log-level", choices=LOG_LEVELS, default=level, help=f"logs go to stderr (default: {level})")


def setup_logging(fmt: str, level: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        from pythonjsonlogger.json import JsonFormatter

        handler.setFormatter(JsonFormatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    logging.basicConfig(level=level.upper(), handlers=[handler], force=True)


PIPED_WIDTH = 200
"""Table width when the output is not a terminal (rich would fold every column into 80)."""


def console(*, stderr: bool = False) -> Console:
    """A rich console for the CLIs' tables: the terminal's width on a terminal, ``PIPED_WIDTH`` columns and
    no colour codes when piped to a file or a log, so a redirected table stays readable ($COLUMNS wins)."""
    stream = sys.stderr if stderr else sys.stdout
    if stream.isatty() or os.environ.get("COLUMNS"):
        return Console(stderr=stderr)
    return Console(stderr=stderr, width=PIPED_WIDTH, color_system=None)
