"""The ``report`` command's flags, documented exit codes, and error messages (without a cluster)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, ClassVar

import pytest

from recommender.report.cli import EPILOG, EXIT_FAILED, EXIT_USAGE, add_report_parser, run_report
from recommender.report.types import Inventory


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
        ["a", "b"], "team=x", ["Deployment"], 14 * 86400.0, "markdown", ["prod"])  # repeatable: one per cluster
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


def test_without_prometheus_url_the_store_is_looked_for_through_the_api_server(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = str(kubeconfig(tmp_path))
    assert run_report(parse("--kubeconfig", cfg, "--prometheus-bearer-token-file", "t")) == EXIT_USAGE
    assert "--prometheus-bearer-token-file need --prometheus-url" in capsys.readouterr().err
    assert run_report(parse("--kubeconfig", cfg, "-o", "json")) == EXIT_FAILED  # asked, and it does not answer
    out = capsys.readouterr()
    assert out.out == "" and "finding the metrics store: list services cluster-wide: API server unreachable" in out.err


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


# ------------------------------------------------------------------ history read in namespace groups (#22)
def test_namespace_groups_are_sorted_whole_namespaces_of_about_equal_size() -> None:
    from recommender.report.cli import namespace_groups
    from tests.builders.report import cur, spec, workload

    c = (spec("app", cur(100, 64 * 2**20)),)
    sizes = (("b", 3), ("a", 3), ("c", 2), ("d", 1), ("e", 3))
    fleet = [workload(ns, f"w{i}", c) for ns, n in sizes for i in range(n)]
    groups = namespace_groups(fleet, 3)
    # cut where the running count first reaches a third, two thirds (4, 8 of 12): 6, 2, 4 workloads, and a
    # namespace is never cut
    assert groups == [("a", "b"), ("c",), ("d", "e")]
    assert namespace_groups(fleet, 1) == [("a", "b", "c", "d", "e")]
    assert namespace_groups(fleet, 64) == [("a",), ("b",), ("c",), ("d",), ("e",)]
    assert namespace_groups([], 3) == []
    with pytest.raises(SystemExit):
        parse("--prometheus-url", "http://p", "--read-groups", "0")


class _Source:
    """A stand-in for ``PrometheusSource``: answers each namespace group from ``batches``, records the groups
    asked, and fails the ``fail_on``-th read."""

    calls: ClassVar[list[tuple[str, ...]]] = []
    fail_on: ClassVar[int | None] = None
    batches: ClassVar[dict[Any, Any]] = {}

    def __init__(self, *_: object, **__: object) -> None:
        self.request_count = 0

    def history(self, namespaces: tuple[str, ...], start_s: float, end_s: float,
                pools: object = None) -> dict[Any, Any]:
        from recommender.sources.errors import TemporarySourceError

        type(self).calls.append(tuple(namespaces))
        self.request_count += 1
        if len(type(self).calls) == type(self).fail_on:
            raise TemporarySourceError("connection refused", endpoint="read")
        return {k: b for k, b in type(self).batches.items() if k.namespace in namespaces}

    def close(self) -> None:
        pass


def _fleet(monkeypatch: pytest.MonkeyPatch, fail_on: int | None) -> Any:
    from recommender.report import discovery
    from recommender.sources import prometheus
    from tests.builders.report import batch, cur, key, spec, workload

    c = (spec("app", cur(500, 256 * 2**20)),)
    fleet = tuple(workload(f"ns{n}", f"w{i}", c) for n in range(5) for i in range(3))
    inv = Inventory(workloads=fleet)
    batches = {key(w, "app"): batch(0.1 + 0.05 * i, (100 + 10 * i) * 2**20) for i, w in enumerate(fleet)}
    monkeypatch.setattr(discovery.Discovery, "read", lambda self, filters, progress=None: inv)
    monkeypatch.setattr(prometheus, "PrometheusSource", _Source)
    monkeypatch.setattr(_Source, "calls", [])
    monkeypatch.setattr(_Source, "fail_on", fail_on)
    monkeypatch.setattr(_Source, "batches", batches)
    return inv, batches


def test_groups_read_one_after_another_give_the_report_of_one_read(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import json

    _fleet(monkeypatch, fail_on=None)
    docs = {}
    for groups in ("1", "3"):
        out = tmp_path / f"r{groups}.json"
        args = parse("--kubeconfig", str(kubeconfig(tmp_path)), "--prometheus-url", "http://p", "-o", "json",
                     "--output-file", str(out), "--no-progress", "--read-groups", groups)
        assert run_report(args) == 0
        docs[groups] = json.loads(out.read_text())
    assert _Source.calls == [("ns0", "ns1", "ns2", "ns3", "ns4"), ("ns0", "ns1"), ("ns2", "ns3"), ("ns4",)]
    assert len(docs["3"]["workloads"]) == 15
    assert docs["1"]["workloads"] == docs["3"]["workloads"] and docs["1"]["summary"] == docs["3"]["summary"]
    assert docs["3"]["requests"]["prometheus"] == 3  # the source's count over the three reads


def test_a_failed_read_of_a_later_group_prints_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    _fleet(monkeypatch, fail_on=2)
    out = tmp_path / "r.json"
    args = parse("--kubeconfig", str(kubeconfig(tmp_path)), "--prometheus-url", "http://p", "-o", "json",
                 "--output-file", str(out), "--no-progress")
    assert run_report(args) == EXIT_FAILED
    assert not out.exists() and capsys.readouterr().out == ""
    assert len(_Source.calls) == 2  # the third group is never asked for after the second failed
