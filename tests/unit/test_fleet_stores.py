"""A report over several clusters without --prometheus-url: each cluster's history from its own store.

``OwnStores`` is given small fakes of the source (``fleet_stores.Source``): each records what it was asked
and answers one batch per namespace, keyed by the plain namespace as a one-cluster source does.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from recommender.model.types import ContainerKey, UsageBatch
from recommender.report import clusters
from recommender.report.cli import run_report
from recommender.report.fleet_stores import OwnStores
from tests.builders.report import batch
from tests.unit.test_report_cli import parse
from tests.unit.test_report_clusters import two_context_kubeconfig

FLEET = clusters.Fleet(label=None, targets=(clusters.Target(context="eu", value="eu"),
                                            clusters.Target(context="us", value="us-east-1")))


class FakeSource:
    def __init__(self, cores: float) -> None:
        self.cores = cores
        self.asked: list[tuple[str, ...]] = []
        self.closed = False

    @property
    def request_count(self) -> int:
        return 3 * len(self.asked)

    def history(self, namespaces: Sequence[str], start_s: float, end_s: float) -> dict[ContainerKey, UsageBatch]:
        self.asked.append(tuple(namespaces))
        return {ContainerKey(namespace=ns, workload_kind="Deployment", workload_name="web", container="c"):
                batch(self.cores, 2**30, points=4) for ns in namespaces}

    def close(self) -> None:
        self.closed = True


def test_each_qualified_namespace_is_read_from_its_own_clusters_store_and_comes_back_qualified() -> None:
    eu, us = FakeSource(1.0), FakeSource(3.0)
    stores = OwnStores({"eu": eu, "us": us}, FLEET)
    found = stores.history(["eu/shop", "us-east-1/shop", "us-east-1/db"], 0.0, 3600.0)
    assert (eu.asked, us.asked) == ([("shop",)], [("shop", "db")])
    assert {k.namespace: float(b.cpu_cores.values.max()) for k, b in found.items()} == {
        "eu/shop": 1.0, "us-east-1/shop": 3.0, "us-east-1/db": 3.0}
    # split back per context, as the fleet report does, each cluster keeps its own usage
    per = clusters.per_cluster(found, FLEET)
    assert sorted(k.namespace for k in per["us"]) == ["db", "shop"] and len(per["eu"]) == 1
    assert stores.request_count == 6    # 3 per fake read: eu once, us once
    assert set(stores.one("us")(["x"], 0.0, 1.0)) == {
        ContainerKey(namespace="x", workload_kind="Deployment", workload_name="web", container="c")}
    stores.close()
    assert eu.closed and us.closed


def test_several_contexts_need_no_cluster_label_without_a_url_but_do_with_one() -> None:
    fleet, _ = clusters.read_flags(parse("--context", "eu", "--context", "us"), lambda: ("eu", "us"))
    assert fleet == FLEET.__class__(label=None, targets=(clusters.Target(context="eu", value="eu"),
                                                         clusters.Target(context="us", value="us")))


def test_without_a_url_each_contexts_api_server_is_asked_for_its_store(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = str(two_context_kubeconfig(tmp_path))
    assert run_report(parse("--kubeconfig", cfg, "--context", "eu", "--context", "us", "-o", "json")) == 1
    out = capsys.readouterr()
    assert out.out == "" and "context eu: finding the metrics store: list services cluster-wide: API server " \
                              "unreachable" in out.err
    assert run_report(parse("--kubeconfig", cfg, "--all-contexts", "--prometheus-ca-file", "ca.pem")) == 2
    assert "--prometheus-ca-file need --prometheus-url" in capsys.readouterr().err


def test_backtest_over_several_contexts_without_a_url_asks_each_api_server_too(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import argparse

    from recommender.backtest.cli import add_backtest_parser, run_backtest

    parser = argparse.ArgumentParser()
    add_backtest_parser(parser.add_subparsers(dest="command"))
    cfg = str(two_context_kubeconfig(tmp_path))
    args = parser.parse_args(["backtest", "--prometheus", "-n", "shop", "--kubeconfig", cfg, "--all-contexts"])
    assert run_backtest(args) == 1
    assert "context eu: finding the metrics store: list services cluster-wide: API server unreachable" in \
        capsys.readouterr().err
