"""Unit tests of the backtest command line: exit codes, the JSON schema and the PNG."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import numpy as np
import pytest

from recommender.backtest.cli import add_backtest_parser, run_backtest

HOUR = 3600.0
T0 = 1_700_006_400


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_backtest_parser(parser.add_subparsers(dest="command"))
    return parser.parse_args(["backtest", *argv])


@pytest.fixture(scope="module")
def trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two 2-day series at 5-minute samples with a daily CPU cycle."""
    path = tmp_path_factory.mktemp("cli") / "trace.csv"
    lines = ["series_id,timestamp_s,cpu_cores,memory_bytes,cpu_provisioned_cores,memory_provisioned_bytes"]
    for sid in (1, 2):
        for i in range(2 * 288):
            cpu = 0.2 + 0.1 * sid * (1 + np.sin(2 * np.pi * i / 288))
            lines.append(f"vm-{sid},{T0 + 300 * i},{cpu:.4f},{(100 + i % 7) * 2**20},2,{4 * 2**30}")
    path.write_text("\n".join(lines) + "\n")
    return path


def test_missing_file_and_bad_column_exit_2(tmp_path: Path, trace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_backtest(parse(str(tmp_path / "nope.csv"), "--workers", "1")) == 2
    assert "trace file not found" in capsys.readouterr().err
    assert run_backtest(parse(str(trace), "--cpu-column", "cpu_millis", "--workers", "1")) == 2
    assert "CPU column 'cpu_millis' not in the header" in capsys.readouterr().err
    assert run_backtest(parse(str(trace), "--strategies", "vpa,nope", "--workers", "1")) == 2
    assert "unknown strategy 'nope'" in capsys.readouterr().err
    assert run_backtest(parse(str(trace), "--set", "vpa.bogus=1", "--workers", "1")) == 2
    assert "unknown parameter" in capsys.readouterr().err
    assert run_backtest(parse("--prometheus")) == 2  # no --prometheus-url is no error: the store is then found
    assert "--prometheus needs at least one -n NAMESPACE" in capsys.readouterr().err
    assert run_backtest(parse("--prometheus", "-n", "a", "--kubeconfig", str(tmp_path / "none"))) == 2
    assert "cannot load Kubernetes credentials" in capsys.readouterr().err
    assert run_backtest(parse("--prometheus", "-n", "a", "--prometheus-ca-file", "ca.pem")) == 2
    assert "--prometheus-ca-file need --prometheus-url" in capsys.readouterr().err
    assert run_backtest(parse("--prometheus", "--prometheus-url", "http://127.0.0.1:9")) == 2
    assert "at least one -n NAMESPACE" in capsys.readouterr().err
    assert run_backtest(parse(str(trace), "--prometheus", "--prometheus-url", "http://127.0.0.1:9", "-n", "a")) == 2
    assert "either a trace file or --prometheus" in capsys.readouterr().err
    assert run_backtest(parse()) == 2
    assert "a trace file (or --prometheus) is required" in capsys.readouterr().err


def test_json_schema_and_png(tmp_path: Path, trace: Path) -> None:
    out, png = tmp_path / "r.json", tmp_path / "r.png"
    args = parse(str(trace), "--workers", "1", "--json", str(out), "--png", str(png), "--quiet",
                 "--strategies", "vpa,podtailor", "--set", "podtailor.resize.down_fraction=0.3")
    assert run_backtest(args) == 0
    doc = json.loads(out.read_text())
    assert doc["schema"] == "podtailor.backtest/v1"
    assert set(doc["subsets"]) == {"all", "odd", "even"}
    assert set(doc["subsets"]["all"]) == {"vpa", "podtailor", "oracle", "oracle-budget"}  # the budget rides on vpa
    row = doc["subsets"]["all"]["oracle"]
    assert set(row) == {"series", "series_days", "cpu_slack_cores", "cpu_slack_rel", "memory_slack_gib",
                        "memory_slack_rel", "ooms_per_series_day", "oom_free_days", "cpu_over_limit_min_per_day",
                        "cpu_over_request_min_per_day", "changes_per_series_day"}
    assert row["series"] == 2 and row["series_days"] == 2 and row["ooms_per_series_day"] == 0.0
    assert doc["strategies"]["podtailor"]["parameters"]["resize.down_fraction"] == 0.3
    assert doc["strategies"]["vpa"]["parameters"]["margin_fraction"] == 0.15
    assert doc["goals"]["all"]["strategy"] == "podtailor" and "memory_gap_closed" in doc["goals"]["all"]
    assert isinstance(doc["goals"]["all"]["half_cpu_gap_reachable"], bool)
    assert doc["strategies"]["oracle-budget"]["parameters"]["baseline"] == "vpa"
    budget, vpa = doc["subsets"]["all"]["oracle-budget"], doc["subsets"]["all"]["vpa"]
    assert budget["changes_per_series_day"] <= vpa["changes_per_series_day"] and budget["ooms_per_series_day"] == 0
    assert doc["config"]["warmup_s"] == 86400.0 and doc["speed"]["series_days_per_s"] > 0
    assert set(doc["config"]["fleet"]) == {"cpu_cores", "memory_bytes"}  # the sizes the prices were relative to
    assert doc["config"]["fleet"]["cpu_cores"] > 0 and doc["config"]["fleet"]["memory_bytes"] > 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_table_piped_to_a_file_keeps_every_figure(trace: Path, capsys: pytest.CaptureFixture[str],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Redirected output (not a terminal, no $COLUMNS) is printed wide, not folded into 80 columns with every
    figure cut to '0.…' as rich does by default."""
    monkeypatch.delenv("COLUMNS", raising=False)
    assert run_backtest(parse(str(trace), "--strategies", "vpa,podtailor")) == 0
    out = capsys.readouterr().out
    assert "…" not in out
    assert "CPU slack cores" in out and "OOM / series-day" in out
    rows = [line for line in out.splitlines() if line.startswith("│ podtailor ")]
    assert len(rows) == 3  # all, odd, even
    assert "\x1b[" not in out  # no colour codes in a file
    [fleet] = [line for line in out.splitlines() if line.startswith("fleet ")]
    assert re.search(r"mean CPU p95 \d+m?, mean memory peak \d+(Ki|Mi|Gi)?$", fleet), fleet


def test_a_normalized_trace_needs_its_machine_size(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    frac = tmp_path / "frac.csv"
    frac.write_text("series_id,timestamp_s,cpu_frac,mem_frac\n" +
                    "".join(f"j-1,{T0 + 300 * i},0.25,0.5\n" for i in range(2 * 288)))
    assert run_backtest(parse(str(frac), "--workers", "1", "--quiet")) == 2
    assert "give --cpu-scale CORES" in capsys.readouterr().err
    out = tmp_path / "r.json"
    assert run_backtest(parse(str(frac), "--workers", "1", "--quiet", "--cpu-scale", "4", "--memory-scale",
                              str(8 * 2**30), "--json", str(out))) == 0
    doc = json.loads(out.read_text())
    assert doc["series_read"] == 1 and doc["series_unscored"] == {}
    assert doc["subsets"]["all"]["oracle"]["series"] == 1


def test_sweep_replays_each_risk_beside_vpa_and_krr(tmp_path: Path, trace: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    out, png = tmp_path / "s.json", tmp_path / "s.png"
    assert run_backtest(parse(str(trace), "--workers", "1", "--sweep", "--sweep-values", "2,0.5,1", "--oom-budget",
                              "0", "--json", str(out), "--png", str(png))) == 0
    printed = capsys.readouterr().out
    assert "risk sweep: all series" in printed and "Pareto-efficient" in printed
    assert "pick for an OOM budget of 0 per series-day: risk " in printed
    assert "fleet (the prices relative to it, from every series' warm-up): mean CPU p95 " in printed
    doc = json.loads(out.read_text())
    sweep = doc["sweep"]
    assert sweep["risks"] == [0.5, 1.0, 2.0] and sweep["oom_budget"] == 0.0
    rows = sweep["subsets"]["all"]["rows"]
    assert [r["row"] for r in rows] == ["podtailor risk=0.5", "podtailor risk=1", "podtailor risk=2", "vpa",
                                        "krr-simple", "oracle"]
    assert rows[-1]["reference"] and rows[-1]["cpu_efficient"] is None
    assert any(r["memory_efficient"] for r in rows) and any(r["cpu_efficient"] for r in rows)
    chosen = sweep["subsets"]["all"]["pick"]
    # This trace never exceeds its memory (about 100 MiB, sized from its own peaks): every risk has 0 OOMs, so
    # the pick is the one with the least memory slack.
    assert all(r["ooms_per_series_day"] == 0 for r in rows[:3])
    picked = next(r for r in rows if r["row"] == chosen["row"])
    assert picked["risk"] == chosen["risk"] and f"risk {chosen['risk']:g}: " in printed
    assert picked["memory_slack_gib"] == min(r["memory_slack_gib"] for r in rows[:3])
    assert doc["strategies"]["podtailor risk=2"]["parameters"]["risk"] == 2.0
    equal = sweep["subsets"]["all"]["at_vpa_risk"]
    said = " ".join(f"at vpa's risk on every line (OOMs, CPU minutes over the request and over the limit, "
                    f"changes): {equal['reason']}".split())
    assert equal["baseline"] == "vpa" and said in " ".join(printed.split())  # the table wraps long lines
    vpa = next(r for r in rows if r["row"] == "vpa")
    assert set(equal["lines"]) == {"ooms_per_series_day", "cpu_over_request_min_per_day",
                                   "cpu_over_limit_min_per_day", "changes_per_series_day"}
    assert all(v["baseline"] == vpa[k] for k, v in equal["lines"].items())
    if equal["risk"] is not None:
        assert 0.5 <= equal["risk"] <= 2.0 and all(v["value"] <= v["baseline"] for v in equal["lines"].values())
        assert equal["cpu_slack_vs_baseline"] == pytest.approx(equal["cpu_slack_cores"] / vpa["cpu_slack_cores"] - 1)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # The sweep's risk 1 row is the default strategy's row of a plain run on the same trace.
    plain = tmp_path / "p.json"
    assert run_backtest(parse(str(trace), "--workers", "1", "--quiet", "--strategies", "podtailor", "--json",
                              str(plain))) == 0
    assert json.loads(plain.read_text())["subsets"]["all"]["podtailor"] == doc["subsets"]["all"]["podtailor risk=1"]


@pytest.mark.parametrize(("flags", "message"), [
    (("--oom-budget", "0.1"), "--oom-budget needs --sweep"),
    (("--sweep-values", "1,2", "--oom-budget", "0"), "--sweep-values and --oom-budget need --sweep"),
    (("--sweep", "--strategies", "vpa"), "leave out --strategies"),
    (("--sweep", "--oom-budget", "-1"), "--oom-budget must be a finite number >= 0"),
    (("--sweep", "--oom-budget", "nan"), "--oom-budget must be a finite number >= 0"),
    (("--sweep", "--sweep-values", "1,30"), "bad --sweep-values item '30'"),
    (("--sweep", "--set", "podtailor.risk=2"), "does not combine with --sweep"),
    (("--sweep", "--set", "oracle.x=2"), "bad --set"),
])
def test_bad_sweep_flags_exit_2(trace: Path, capsys: pytest.CaptureFixture[str], flags: tuple[str, ...],
                                message: str) -> None:
    assert run_backtest(parse(str(trace), "--workers", "1", "--quiet", *flags)) == 2
    assert message in capsys.readouterr().err
