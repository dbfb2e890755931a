"""The report shows a DaemonSet on two node pools as one row per pool, each from its own pool's usage, in
every format (the JSON row's ``pool`` names it); other workloads, and a DaemonSet on one pool, keep one row."""

from __future__ import annotations

import csv
import io
import json
from dataclasses import replace
from pathlib import Path

from podtailor.resources import Resources
from recommender.model.registry import get_strategy
from recommender.model.types import ContainerKey
from recommender.report.build import BuildConfig, build_report
from recommender.report.discovery import by_pool
from recommender.report.patches import Skip, write_patches
from recommender.report.pricing import PriceSheet
from recommender.report.render import as_csv, as_json, as_markdown, table
from recommender.report.types import Inventory, NodeInfo, PodInfo, Workload
from tests.builders.report import DAY, NOW, Gi, Mi, batch, cur, spec, workload

NODES = {name: NodeInfo(name=name, pool=pool, allocatable=Resources(cpu_millicores=cpu, memory_bytes=64 * Gi))
         for name, pool, cpu in (("s1", "small", 2000), ("s2", "small", 2000), ("l1", "large", 32000))}


def agent() -> Workload:
    """A DaemonSet's pods on two small nodes and one large one."""
    w = workload("sys", "agent", (spec("agent", cur(100, 64 * Mi)),), kind="DaemonSet", replicas=3)
    return replace(w, pods=tuple(PodInfo(name=f"agent-{n}", node=n, restart_policy="Always", containers=w.containers)
                                 for n in ("s1", "s2", "l1")))


def test_a_daemonset_on_two_pools_is_one_row_per_pool() -> None:
    rows = by_pool(agent(), NODES)
    assert [(r.pool, r.replicas, [p.node for p in r.pods]) for r in rows] == [
        ("large", 1, ["l1"]), ("small", 2, ["s1", "s2"])]
    one_pool = workload("sys", "agent", (spec("agent", cur(100, 64 * Mi)),), kind="DaemonSet", node="s1")
    assert by_pool(one_pool, NODES) == [one_pool]
    web = workload("shop", "web", (spec("app", cur(100, 64 * Mi)),), node="s1")
    assert by_pool(web, NODES) == [web]


def test_each_pools_row_is_recommended_from_its_own_usage_in_every_format() -> None:
    rows = by_pool(agent(), NODES)
    inv = Inventory(workloads=tuple(rows), nodes=NODES)

    def k(pool: str) -> ContainerKey:
        return ContainerKey(namespace="sys", workload_kind="DaemonSet", workload_name="agent", container="agent",
                            pool=pool)

    batches = {k(""): batch(0.5, 200 * Mi), k("small"): batch(0.1, 32 * Mi), k("large"): batch(1.6, 512 * Mi)}
    cfg = BuildConfig(now_s=NOW, start_s=NOW - DAY, end_s=NOW, strategy_name="krr-simple", prices=PriceSheet(),
                      settings={"namespaces": [], "selector": "", "kinds": []})
    report = build_report(inv, batches, get_strategy("krr-simple"), cfg)
    targets = {w.pool: rec.target for w in report.workloads if (rec := w.containers[0].recommendation) is not None}
    # krr-simple: CPU = p95 of flat usage (0.1 and 1.6 cores), read at its histogram bucket's upper edge (within
    # 1%); memory = peak x 1.15 rounded up to a MiB, floor 100Mi: 32Mi -> 100Mi, 512Mi x 1.15 = 588.8Mi -> 589Mi
    small, large = targets["small"], targets["large"]
    assert set(targets) == {"small", "large"}
    assert small.cpu_millicores is not None and 100 <= small.cpu_millicores <= 101
    assert large.cpu_millicores is not None and 1600 <= large.cpu_millicores <= 1616
    assert (small.memory_bytes, large.memory_bytes) == (100 * Mi, 589 * Mi)
    doc = json.loads(as_json(report))
    assert sorted((w["name"], w["pool"]) for w in doc["workloads"]) == [("agent", "large"), ("agent", "small")]
    assert sorted(r["pool"] for r in csv.DictReader(io.StringIO(as_csv(report)))) == ["large", "small"]
    md, text = as_markdown(report), table(report, width=250)
    assert all(pool in md and pool in text for pool in ("small", "large"))


def test_a_pools_row_gets_no_patch_file(tmp_path: Path) -> None:
    rows = by_pool(agent(), NODES)
    batches = {ContainerKey(namespace="sys", workload_kind="DaemonSet", workload_name="agent", container="agent",
                            pool=pool): batch(0.1, 32 * Mi) for pool in ("small", "large")}
    cfg = BuildConfig(now_s=NOW, start_s=NOW - DAY, end_s=NOW, strategy_name="krr-simple", prices=PriceSheet(),
                      settings={"namespaces": [], "selector": "", "kinds": []})
    report = build_report(Inventory(workloads=tuple(rows), nodes=NODES), batches, get_strategy("krr-simple"), cfg)
    assert [w.pool_row for w in report.workloads] == [True, True]
    written = write_patches(report, tmp_path)
    assert written.files == () and written.skipped == {Skip.PER_POOL: 2}
