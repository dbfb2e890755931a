"""Command-line plumbing both halves share: durations, Kubernetes flags and client, logging setup.

Owns the pieces of the two CLIs that have nothing to do with recommending or updating, so the updater can
use them without importing the recommender's engine (the import-linter contracts in .importlinter hold
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

_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(s|m|h|d)$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


class UsageError(Exception):
    """Bad command-line input; nothing was contacted or changed."""


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


def kube_client(args: argparse.Namespace) -> client.ApiClient:
    try:
        if args.kubeconfig is None and args.context is None and "KUBERNETES_SERVICE_HOST" in os.environ:
            config.load_incluster_config()  # type: ignore[no-untyped-call]
            return client.ApiClient()
        path = str(args.kubeconfig) if args.kubeconfig else None
        api: client.ApiClient = config.new_client_from_config(  # type: ignore[no-untyped-call]
            config_file=path, context=args.context)
        return api
    except (config.ConfigException, OSError) as err:
        raise UsageError(f"cannot load Kubernetes credentials: {err}") from None


def setup_logging(fmt: str, level: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        from pythonjsonlogger.json import JsonFormatter

        handler.setFormatter(JsonFormatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    logging.basicConfig(level=level.upper(), handlers=[handler], force=True)
