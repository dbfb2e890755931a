"""The webhook's command line: flags parse into the registration, and bad usage exits 2 before any contact."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

import pytest

from updater.webhook.cli import add_webhook_parser, run_webhook


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_webhook_parser(parser.add_subparsers(dest="command"))
    return parser.parse_args(["webhook", *argv])


def test_defaults() -> None:
    args = parse()
    assert (args.listen, args.resync, args.webhook_timeout, args.webhook_config_name) == (
        "0.0.0.0:9443", 15.0, 5.0, "podtailor-updater")
    assert args.register is True and args.tls_cert_file is None and args.cert_validity == 365 * 86400.0


@pytest.mark.parametrize("argv", [
    ["--tls-cert-file", "/nonexistent.crt"],
    ["--webhook-url", "http://127.0.0.1:1/mutate"],
    ["--listen", "nowhere"],
    ["--tls-cert-file", "/nonexistent.crt", "--tls-key-file", "/nonexistent.key", "--kubeconfig", "/nonexistent"],
])
def test_bad_usage_exits_2(argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_webhook(parse(*argv)) == 2
    assert capsys.readouterr().err.startswith("error: ")


def test_the_updater_entry_point_sets_up_the_webhook_logs_as_asked() -> None:
    """`podtailor-updater webhook --log-format json` (the Deployment's command line) logs JSON, at that level."""
    from pythonjsonlogger.json import JsonFormatter

    from updater.__main__ import main

    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        assert main(["webhook", "--log-format", "json", "--log-level", "warning", "--listen", "nowhere"]) == 2
        assert [type(h.formatter) for h in root.handlers] == [JsonFormatter]
        assert root.level == logging.WARNING
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
