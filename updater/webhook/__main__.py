"""``python -m updater.webhook ...``: the webhook alone, with the same flags as ``podtailor-updater webhook``."""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    from podtailor.runtime.cli import setup_logging
    from updater.webhook.cli import add_webhook_parser, run_webhook

    parser = argparse.ArgumentParser(prog="python -m updater.webhook")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    add_webhook_parser(sub)
    args = parser.parse_args(["webhook", *(sys.argv[1:] if argv is None else argv)])
    setup_logging(args.log_format, args.log_level)
    return run_webhook(args)


if __name__ == "__main__":
    sys.exit(main())
