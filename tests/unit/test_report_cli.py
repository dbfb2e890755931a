"""The ``report`` command's flags, documented exit codes, and error messages (without a cluster)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from recommender.report.cli import EPILOG, EXIT_FAILED, EXIT_USAGE, add_report_parser, run_report


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="podtailor-recommender")
    add_report_parser(parser.add_subparsers(dest="command"))
    return parser.parse_args(["report", *argv])


def kubeconfig(tmp_path: Path, server: str = "https://127.0.0.1:9") -> Path:
    path = tmp_path / "kubeconfig"
    path.write_text(f"""apiVersion: v1
kind: Config
clusters: [{{name: c, cluster: {{server: "{server}", insecure-skip-tls-verify: true}}}}]
users: [{{name: u, user: {{token: t}}}}]
contexts: [{{name: x, context: {{cluster: c, user: u}}}}]
current-context: x
""")
    return path


def test_flags_and_defaults() -> None:
    args = parse("--prometheus-url", "http://p:9090", "-n", "a", "-n", "b", "-l", "team=x", "--kind", "Deployment",
                 "--history", "14d", "-o", "markdown", "--context", "prod")
    assert (args.namespace, args.selector, args.kind, args.history, args.output, args.context) == (
        ["a", "b"], "team=x", ["Deployment"], 14 * 86400.0, "markdown", "prod")
    assert parse("--prometheus-url", "http://p").output == "table"
    assert parse("--prometheus-url", "http://p").strategy == "podtailor"


def test_help_documents_the_exit_codes() -> None:
    for line in ("0  the report was written", "1  failed", "2  bad usage", "3  empty result"):
        assert line in EPILOG


def test_bad_input_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    prices = tmp_path / "p.yaml"
    prices.write_text("cpuPerVcpuHour: -1\n")
    cfg = str(kubeconfig(tmp_path))
    for argv, message in ((["--prices", str(prices)], "must not be negative"), (["-l", "a in (b"], "label selector"),
                          (["--change-threshold", "-1"], "change-threshold")):
        assert run_report(parse("--kubeconfig", cfg, "--prometheus-url", "http://p", *argv)) == EXIT_USAGE
        assert message in capsys.readouterr().err
    assert run_report(parse("--kubeconfig", str(tmp_path / "none"), "--prometheus-url", "http://p")) == EXIT_USAGE
    assert "cannot load Kubernetes credentials" in capsys.readouterr().err


def test_unreachable_api_server_is_exit_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = parse("--kubeconfig", str(kubeconfig(tmp_path)), "--prometheus-url", "http://p", "-o", "json")
    assert run_report(args) == EXIT_FAILED
    out = capsys.readouterr()
    assert out.out == "" and "API server unreachable" in out.err


def test_risk_flag_sets_podtailors_risk_in_report_and_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from recommender.__main__ import build_parser
    from recommender.cli import build_strategy, strategy_at_risk
    from recommender.model.podtailor import PodtailorStrategy

    args = parse("--prometheus-url", "http://p", "--risk", "2")
    built = build_strategy(args)
    assert isinstance(built, PodtailorStrategy) and built.params.risk == 2.0
    default = build_strategy(parse("--prometheus-url", "http://p"))
    assert isinstance(default, PodtailorStrategy) and default.params.risk == 1.0
    run = build_parser().parse_args(["run", "--prometheus-url", "http://p", "--risk", "0.5"])
    at_run = build_strategy(run)
    assert isinstance(at_run, PodtailorStrategy) and at_run.params.risk == 0.5
    builder = strategy_at_risk(run)
    assert builder is not None and builder(4.0).parameters()["risk"] == 4.0
    cfg = str(kubeconfig(tmp_path))
    assert run_report(parse("--kubeconfig", cfg, "--prometheus-url", "http://p", "--strategy", "vpa", "--risk",
                            "2")) == EXIT_USAGE
    assert "--risk is a setting of the podtailor strategy; vpa has none" in capsys.readouterr().err
    for bad in ("0", "30", "nan", "high"):
        with pytest.raises(SystemExit) as exit_info:
            parse("--prometheus-url", "http://p", "--risk", bad)
        assert exit_info.value.code == 2
        assert "want a number in [0.05, 20]" in capsys.readouterr().err
