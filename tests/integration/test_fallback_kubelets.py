"""Fallback to replacement on real kubelets v1.37.2 (hollow nodes), with the real admission webhook.

The same tests as ``test_fallback_real.py`` (called from there), with each of the test's pools started as its
own real kubelets (a 2-core pool the target does not fit, an 8-core one it does), tainted with a value of this
test's own so that its pods, tolerating only that value, are scheduled on its pools and nowhere else.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from tests.builders.cluster import POOL_KEY, Scenario
from tests.harness.cluster import ClusterState
from tests.harness.kubelets import HOLLOW_TAINT, KubeletPool
from tests.integration import test_fallback_real as base
from tests.nodesim.nodes import NodePool

pytestmark = pytest.mark.cluster


class OwnKubeletsScenario(Scenario):
    def __init__(self, api: client.ApiClient, ns: str, cluster: ClusterState, workdir: Path) -> None:
        super().__init__(api, ns, make_sim=lambda *a, **k: None)
        self.cluster, self.workdir = cluster, workdir
        self.taint_value = ns[-6:]
        self.tolerations = [{"key": HOLLOW_TAINT["key"], "operator": "Equal", "value": self.taint_value,
                             "effect": HOLLOW_TAINT["effect"]}]
        self.kubelets: list[KubeletPool] = []

    def pool(self, short: str, nodes: int = 2, cpu: int = 8000) -> Any:
        name = f"{self.ns[-6:]}-{short}"
        self.pools[short] = name
        pool = KubeletPool(cluster=self.cluster, workdir=self.workdir / short, taint_value=self.taint_value,
                           name_prefix="hf", pools=(NodePool(name=name, count=nodes, cpu_millicores=cpu,
                                                             memory_bytes=32 * 2**30, label_keys=(POOL_KEY,)),))
        self.kubelets.append(pool)
        pool.start()
        return pool


@pytest.fixture
def scenario(api: client.ApiClient, crds: list[str], namespace: str, cluster: ClusterState,
             tmp_path: Path) -> Iterator[OwnKubeletsScenario]:
    s = OwnKubeletsScenario(api, namespace, cluster, tmp_path / "kubelets")
    try:
        yield s
    finally:
        for name in s.policies:
            s.custom.delete_cluster_custom_object("podtailor.io", "v1alpha1", "resizepolicies", name)
        for pool in s.kubelets:
            pool.stop()


def test_a_target_above_the_node_is_replaced_at_the_target_where_it_fits(
        scenario: OwnKubeletsScenario, webhook: Any, tmp_path: Any) -> None:
    base.test_a_target_above_the_node_is_replaced_at_the_target_where_it_fits(scenario, webhook, tmp_path)


def test_a_budget_that_allows_nothing_holds_the_eviction_then_lets_it_go(
        scenario: OwnKubeletsScenario, webhook: Any) -> None:
    base.test_a_budget_that_allows_nothing_holds_the_eviction_then_lets_it_go(scenario, webhook)


def test_a_budget_that_allows_nothing_holds_only_its_own_pods(
        scenario: OwnKubeletsScenario, webhook: Any) -> None:
    base.test_a_budget_that_allows_nothing_holds_only_its_own_pods(scenario, webhook)


def test_a_single_replica_is_left_alone_and_flagged(scenario: OwnKubeletsScenario) -> None:
    base.test_a_single_replica_is_left_alone_and_flagged(scenario)


def test_template_mode_rolls_the_workload(scenario: OwnKubeletsScenario, webhook: Any) -> None:
    base.test_template_mode_rolls_the_workload(scenario, webhook)
