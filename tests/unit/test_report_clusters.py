"""The report over several kube contexts: flag checking (nothing contacted on bad input) and the per-cluster build."""

from __future__ import annotations

import argparse
import csv
import io
import json
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from podtailor.runtime.cli import UsageError
from recommender.model.registry import get_strategy
from recommender.model.types import ContainerKey, UsageBatch
from recommender.report import clusters
from recommender.report.build import BuildConfig, Recommending, build_report, recommending
from recommender.report.cli import EXIT_USAGE, run_report
from recommender.report.html import as_html
from recommender.report.pricing import PriceSheet
from recommender.report.render import as_csv, as_json, as_markdown, as_yaml, table
from recommender.report.types import Report, Workload
from recommender.sources.clusters import qualify
from tests.builders.report import DAY, NOW, batch, sample_inputs
from tests.unit.test_report_cli import parse
from tests.unit.test_report_render import validator

KNOWN = ("eu", "us", "lab")


def flags(*argv: str) -> tuple[clusters.Fleet | None, argparse.Namespace]:
    return clusters.read_flags(parse("--prometheus-url", "http://p", *argv), lambda: KNOWN)


def test_several_contexts_default_to_their_names_as_cluster_values() -> None:
    fleet, args = flags("--context", "eu", "--context", "us", "--cluster-label", "cluster",
                        "--cluster-value", "us=us-east-1")
    assert fleet == clusters.Fleet(label="cluster", targets=(clusters.Target(context="eu", value="eu"),
                                                             clusters.Target(context="us", value="us-east-1")))
    # The one-cluster flags the rest of the command reads: the first context's client, no single cluster matcher.
    assert (args.context, args.cluster_label, args.cluster_value) == ("eu", None, None)
    everything, _ = flags("--all-contexts", "--cluster-label", "k8s_cluster")
    assert everything is not None and [t.context for t in everything.targets] == list(KNOWN)


def test_one_context_is_the_one_cluster_report() -> None:
    fleet, args = flags("--context", "eu", "--cluster-label", "cluster", "--cluster-value", "eu-1")
    assert fleet is None and (args.context, args.cluster_label, args.cluster_value) == ("eu", "cluster", "eu-1")
    fleet, args = flags("--context", "eu", "--cluster-label", "cluster", "--cluster-value", "eu=eu-1")
    assert fleet is None and args.cluster_value == "eu-1"
    fleet, args = flags()
    assert fleet is None and (args.context, args.cluster_value) == (None, None)


@pytest.mark.parametrize(("argv", "message"), [
    (["--context", "eu", "--context", "mars"], "no context 'mars' in the kubeconfig (it has: eu, lab, us)"),
    (["--context", "eu", "--context", "us", "--cluster-label", "c", "--cluster-value", "us=eu"],
     "contexts 'eu' and 'us' have the same cluster value 'eu'"),
    (["--context", "eu", "--context", "eu"], "context given twice: eu"),
    (["--context", "eu", "--context", "us"], "several contexts need --cluster-label"),
    (["--context", "eu", "--context", "us", "--cluster-label", "c", "--cluster-value", "x"],
     "--cluster-value is CONTEXT=VALUE, not 'x'"),
    (["--context", "eu", "--context", "us", "--cluster-label", "c", "--cluster-value", "lab=x"],
     "--cluster-value for 'lab', which is not reported"),
    (["--context", "eu", "--context", "us", "--cluster-label", "c", "--cluster-value", "eu=a", "--cluster-value",
      "eu=b"], "--cluster-value given twice for context 'eu'"),
    (["--all-contexts", "--context", "eu"], "--context or --all-contexts, not both"),
    (["--context", "eu", "--cluster-value", "a", "--cluster-value", "b"], "--cluster-value is given once"),
])
def test_bad_cluster_flags_are_usage_errors(argv: list[str], message: str) -> None:
    with pytest.raises(UsageError) as err:
        flags(*argv)
    assert message in str(err.value)


def two_context_kubeconfig(tmp_path: Path) -> Path:
    """Two contexts whose API servers do not answer: any request would end in exit 1, not 2."""
    path = tmp_path / "kubeconfig"
    path.write_text("""apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:9", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: eu, context: {cluster: c, user: u}}, {name: us, context: {cluster: c, user: u}}]
current-context: eu
""")
    return path


def test_bad_input_reads_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = str(two_context_kubeconfig(tmp_path))
    base = ("--kubeconfig", cfg, "--prometheus-url", "http://127.0.0.1:9", "--cluster-label", "cluster")
    for argv, message in ((["--context", "eu", "--context", "mars"], "no context 'mars'"),
                          (["--all-contexts", "--cluster-value", "us=eu"], "the same cluster value 'eu'")):
        assert run_report(parse(*base, *argv)) == EXIT_USAGE
        out = capsys.readouterr()
        assert message in out.err and out.out == ""
    assert run_report(parse("--kubeconfig", str(tmp_path / "none"), "--prometheus-url", "http://p",
                            "--all-contexts")) == EXIT_USAGE
    assert "cannot read the kubeconfig's contexts" in capsys.readouterr().err


def two_clusters() -> tuple[Report, dict[str, Report]]:
    """The sample fleet in clusters eu and us (us at twice the usage): the report of both, and each alone."""
    inv, batches = sample_inputs()
    # The second cluster has the same workloads under the same names, at twice the CPU and memory.
    busier = {k: batch(2 * float(b.cpu_cores.values[0]), 2 * int(b.memory_peak_bytes.values[0]),
                       points=len(b.cpu_cores)) for k, b in batches.items()}
    fleet = clusters.Fleet(label="cluster", targets=(clusters.Target(context="eu", value="eu-1"),
                                                     clusters.Target(context="us", value="us-1")))
    read = {replace(k, namespace=qualify(value, k.namespace)): b
            for value, found in (("eu-1", batches), ("us-1", busier)) for k, b in found.items()}
    strategy = get_strategy("krr-simple")
    cfg = BuildConfig(now_s=NOW, start_s=NOW - DAY, end_s=NOW, strategy_name="krr-simple", prices=PriceSheet())

    def inputs(_: str, own: Sequence[Workload], found: Mapping[ContainerKey, UsageBatch]) -> Recommending:
        return recommending(own, found, strategy, NOW)

    report = clusters.build({"eu": inv, "us": inv}, read, fleet, inputs, cfg)
    return report, {c: build_report(inv, found, strategy, cfg) for c, found in (("eu", batches), ("us", busier))}


def test_each_cluster_is_recommended_and_summed_as_its_own_report() -> None:
    report, alone = two_clusters()
    assert [(w.cluster, w.namespace, w.name) for w in report.workloads] == [
        (c, w.namespace, w.name) for c in ("eu", "us") for w in alone[c].workloads]
    for w in report.workloads:  # each workload exactly as its cluster's own report has it, tagged
        assert replace(w, cluster="") in alone[w.cluster].workloads
    assert report.clusters == tuple(replace(alone[c].total, name=c) for c in ("eu", "us"))
    assert report.total.cost == alone["eu"].total.cost + alone["us"].total.cost
    assert [g.name for g in report.namespaces] == ["eu/jobs", "eu/shop", "us/jobs", "us/shop"]
    assert report.warnings[:2] == ("eu: cannot list nodes: example", "us: cannot list nodes: example")
    assert alone["us"].total.cost.recommended > alone["eu"].total.cost.recommended  # the usage is each cluster's
    assert all(c.usage is not None for w in report.workloads for c in w.containers if c.role.value != "init")


def test_every_format_has_the_cluster_column_and_table_only_over_several_clusters() -> None:
    report, alone = two_clusters()
    one = alone["eu"]
    text = table(report)
    header = next(line for line in text.splitlines() if "namespace" in line)
    assert "By cluster" in text and header.split("┃")[1].strip() == "cluster" and "By cluster" not in table(one)
    assert "┃ cluster" not in table(one)
    rows = list(csv.DictReader(io.StringIO(as_csv(report))))
    assert next(iter(rows[0])) == "cluster" and "cluster" not in next(csv.reader(io.StringIO(as_csv(one))))
    for c in ("eu", "us"):  # the CSV's rows of a cluster sum to its line of the cluster table
        assert sum(int(r["cost_current_micros"]) for r in rows if r["cluster"] == c) == next(
            g for g in report.clusters if g.name == c).cost.current
    doc = json.loads(as_json(report))
    validator().validate(doc)
    assert [g["name"] for g in doc["summary"]["clusters"]] == ["eu", "us"]
    assert {w["cluster"] for w in doc["workloads"]} == {"eu", "us"}
    single = json.loads(as_json(one))
    assert "clusters" not in single["summary"] and all("cluster" not in w for w in single["workloads"])
    assert yaml.safe_load(as_yaml(report))["summary"]["clusters"] == doc["summary"]["clusters"]
    md = as_markdown(report)
    assert "### By cluster" in md and "| cluster | workload |" in md and "| us | `shop/Deployment/web` |" in md
    assert "cluster" not in as_markdown(one)
    page = as_html(report)
    assert "<h2>By cluster</h2>" in page and "<h3>us: shop / Deployment / web" in page
    assert "By cluster" not in as_html(one)


def test_the_reads_depend_on_the_namespaces_not_on_the_clusters() -> None:
    inv, _ = sample_inputs()  # namespaces jobs (1 workload) and shop (2)
    targets = tuple(clusters.Target(context=c, value=f"{c}-1") for c in ("eu", "us", "ap"))
    fleet = clusters.Fleet(label="cluster", targets=targets)
    only_shop = replace(inv, workloads=tuple(w for w in inv.workloads if w.namespace == "shop"))
    inventories = {"eu": inv, "us": inv, "ap": only_shop}
    # Three clusters, two namespaces: at most two reads (even with 64 groups allowed), each with that namespace
    # of every cluster having it.
    assert clusters.read_groups(inventories, fleet, 64) == [("eu-1/jobs", "us-1/jobs"),
                                                           ("ap-1/shop", "eu-1/shop", "us-1/shop")]
    assert clusters.read_groups(inventories, fleet, 1) == [
        ("ap-1/shop", "eu-1/jobs", "eu-1/shop", "us-1/jobs", "us-1/shop")]


def test_one_clusters_read_asks_for_its_qualified_namespaces_and_gets_back_only_its_own() -> None:
    _, batches = sample_inputs()
    fleet = clusters.Fleet(label="cluster", targets=(clusters.Target(context="eu", value="eu-1"),
                                                     clusters.Target(context="us", value="us-1")))
    asked: list[tuple[tuple[str, ...], float, float]] = []

    def many(namespaces: Sequence[str], start_s: float, end_s: float) -> Mapping[ContainerKey, UsageBatch]:
        asked.append((tuple(namespaces), start_s, end_s))  # answers for both clusters, as a store may
        return {replace(k, namespace=qualify(v, k.namespace)): b for v in ("eu-1", "us-1") for k, b in batches.items()}
    found = clusters.one_cluster(many, fleet, "us")(["shop"], NOW - 600, NOW)
    assert asked == [(("us-1/shop",), NOW - 600, NOW)]
    assert found == batches  # plain namespaces, us's batches only (the fake's eu answers dropped)


def test_backtest_takes_the_same_cluster_flags_and_refuses_bad_ones_before_reading(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from recommender.backtest.cli import add_backtest_parser, run_backtest

    parser = argparse.ArgumentParser()
    add_backtest_parser(parser.add_subparsers(dest="command"))
    cfg = str(two_context_kubeconfig(tmp_path))
    base = ["backtest", "--prometheus", "--prometheus-url", "http://127.0.0.1:9", "-n", "shop", "--kubeconfig", cfg,
            "--workers", "1"]
    # Prometheus at port 9 does not answer: a read would exit 1; each of these exits 2 before it.
    for argv, message in ((["--context", "eu", "--context", "us"], "several contexts need --cluster-label"),
                          (["--context", "eu", "--context", "mars", "--cluster-label", "c"], "no context 'mars'"),
                          (["--all-contexts", "--cluster-label", "c", "--cluster-value", "eu=us"],
                           "the same cluster value 'us'")):
        assert run_backtest(parser.parse_args([*base, *argv])) == 2
        assert message in capsys.readouterr().err
    args = parser.parse_args([*base, "--all-contexts", "--cluster-label", "c", "--prometheus-timeout", "1s"])
    assert run_backtest(args) == 1  # good flags: the store is asked (and does not answer)
    assert "reading history from Prometheus failed" in capsys.readouterr().err


def test_patches_are_written_for_one_cluster_at_a_time(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = str(two_context_kubeconfig(tmp_path))
    out = tmp_path / "patches"
    args = parse("--kubeconfig", cfg, "--prometheus-url", "http://127.0.0.1:9", "--cluster-label", "cluster",
                 "--all-contexts", "-o", "patches", "--output-dir", str(out))
    assert run_report(args) == EXIT_USAGE
    assert "run it once per --context" in capsys.readouterr().err and not out.exists()
