"""The kubelet drills on real kubelets v1.37.2 (hollow nodes): 13, OOM after a decrease; 14, the resize never lands.

The same drills as ``test_drill_13_oom_after_decrease.py`` and ``test_drill_14_resize_never_lands.py`` (called
from there), with each pool started as real kubelets of its own (tainted with this test's own value, which only
its pods tolerate). Drill 13: usage set through the kubelets' control endpoint, the OOM kill through their hook,
the kubelet restarts the container itself. Drill 14: the kubelet's own allocation manager defers every increase,
the updater restores the pods after ``deferredTimeout`` and falls back to evictions within the
PodDisruptionBudget, backing off; a single replica is left alone and flagged.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from tests.builders.cluster import POOL_KEY
from tests.builders.kubelets import RealUsage, UsageOnKubelets
from tests.drills import test_drill_13_oom_after_decrease as drill13
from tests.drills import test_drill_14_resize_never_lands as base
from tests.drills._rollout_scenario import DrillRow, DrillScenario
from tests.harness.cluster import ClusterState
from tests.harness.kubelets import HOLLOW_TAINT, KubeletPool
from tests.nodesim.nodes import NodePool

pytestmark = pytest.mark.cluster


class KubeletDrillScenario(RealUsage, DrillScenario):
    def __init__(self, api: client.ApiClient, ns: str, cluster: ClusterState, workdir: Path) -> None:
        super().__init__(api, ns, make_sim=lambda *a, **k: None)
        self.cluster, self.workdir = cluster, workdir
        self.taint_value = ns[-6:]
        self.tolerations = [{"key": HOLLOW_TAINT["key"], "operator": "Equal", "value": self.taint_value,
                             "effect": HOLLOW_TAINT["effect"]}]
        self.kubelets: list[KubeletPool] = []
        self.hollow = {}

    def pool(self, short: str, nodes: int = 2, cpu: int = 8000) -> Any:
        name = f"{self.ns[-6:]}-{short}"
        self.pools[short] = name
        pool = KubeletPool(cluster=self.cluster, workdir=self.workdir / short, taint_value=self.taint_value,
                           name_prefix="hd", pools=(NodePool(name=name, count=nodes, cpu_millicores=cpu,
                                                             memory_bytes=32 * 2**30, label_keys=(POOL_KEY,)),))
        self.kubelets.append(pool)
        pool.start()
        self.hollow.update(pool.nodes)
        return UsageOnKubelets(self.core, self.hollow)


@pytest.fixture
def drill(api: client.ApiClient, crds: list[str], namespace: str, cluster: ClusterState, tmp_path: Path,
          request: pytest.FixtureRequest) -> Iterator[tuple[DrillScenario, DrillRow]]:
    s = KubeletDrillScenario(api, namespace, cluster, tmp_path / "kubelets")
    row = DrillRow(drill=request.node.name)
    try:
        yield s, row
    finally:
        row.write()
        for name in s.policies:
            s.custom.delete_cluster_custom_object("podtailor.io", "v1alpha1", "resizepolicies", name)
        for pool in s.kubelets:
            pool.stop()


def test_drill_14_deferred_resizes_fall_back_to_evictions_within_the_pdb_with_backoff(
        drill: tuple[DrillScenario, DrillRow]) -> None:
    base.test_drill_14_deferred_resizes_fall_back_to_evictions_within_the_pdb_with_backoff(drill)


def test_drill_14_single_replica_is_left_alone_and_flagged(drill: tuple[DrillScenario, DrillRow]) -> None:
    base.test_drill_14_single_replica_is_left_alone_and_flagged(drill)


def test_drill_13_oom_after_decrease_reverts_exactly_and_halts_the_pool(
        drill: tuple[DrillScenario, DrillRow]) -> None:
    drill13.test_drill_13_oom_after_decrease_reverts_exactly_and_halts_the_pool(drill)
