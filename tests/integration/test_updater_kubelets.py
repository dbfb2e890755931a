"""The updater's rollouts on real kubelets v1.37.2 (hollow nodes) instead of the node simulator.

The same scenarios and assertions as ``test_updater_real.py`` (called from there), with the test's pool made
of real kubelets lent from the session's ``kubelet_pool`` and labelled with the test's pool name: the in-place
canary rollout, a memory change with ``RestartContainer`` behind approval and the disruption budget, a crash
mid-batch then resume, an OOM kill after a decrease, and a memory limit below usage until the Deferred
timeout. Usage reaches the real kubelets through their control endpoint (``UsageOnKubelets``): a pod's
constant usage annotation is set on its node once it runs, and usage raised past the container's memory limit
OOM-kills it once through the node's hook, as the kernel would (the kubelet then restarts it itself).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from tests.builders.cluster import POOL_KEY
from tests.builders.kubelets import RealUsage, UsageOnKubelets
from tests.harness.kubelets import HOLLOW_TOLERATION, KubeletPool
from tests.integration import test_updater_real as base

pytestmark = pytest.mark.cluster


class KubeletScenario(RealUsage):
    def __init__(self, api: client.ApiClient, ns: str, kubelets: KubeletPool) -> None:
        super().__init__(api, ns, make_sim=lambda *a, **k: None)
        self.kubelets = kubelets
        self.hollow = kubelets.nodes
        self.tolerations = [HOLLOW_TOLERATION]
        self.lent: list[tuple[list[str], dict[str, str]]] = []

    def pool(self, short: str, nodes: int = 2, cpu: int = 8000) -> Any:
        name = f"{self.ns[-6:]}-{short}"
        self.pools[short] = name
        labels = {POOL_KEY: name}
        self.lent.append((self.kubelets.lend(nodes, labels), labels))
        return UsageOnKubelets(self.core, self.hollow)

    def give_back(self) -> None:
        for names, labels in self.lent:
            self.kubelets.give_back(names, labels)


@pytest.fixture
def kubelet_scenario(api: client.ApiClient, crds: list[str], namespace: str,
                     kubelet_pool: KubeletPool) -> Iterator[KubeletScenario]:
    s = KubeletScenario(api, namespace, kubelet_pool)
    try:
        yield s
    finally:
        s.stop_watching()
        for name in s.policies:
            s.custom.delete_cluster_custom_object("podtailor.io", "v1alpha1", "resizepolicies", name)
        s.give_back()


def test_cpu_change_is_applied_online_in_canary_batches(kubelet_scenario: KubeletScenario) -> None:
    base.test_cpu_change_is_applied_online_in_canary_batches(kubelet_scenario)


def test_memory_restart_waits_for_approval_and_respects_the_budget(kubelet_scenario: KubeletScenario) -> None:
    base.test_memory_restart_waits_for_approval_and_respects_the_budget(kubelet_scenario)


def test_crash_mid_batch_and_resume_resizes_nobody_twice(kubelet_scenario: KubeletScenario) -> None:
    base.test_crash_mid_batch_and_resume_resizes_nobody_twice(kubelet_scenario)


def test_an_oom_after_a_decrease_halts_the_pool_and_restores_exactly(kubelet_scenario: KubeletScenario) -> None:
    base.test_an_oom_after_a_decrease_halts_the_pool_and_restores_exactly(kubelet_scenario)


def test_a_memory_limit_below_usage_halts_the_pool_after_the_deferred_timeout(
        kubelet_scenario: KubeletScenario) -> None:
    base.test_a_memory_limit_below_usage_halts_the_pool_after_the_deferred_timeout(kubelet_scenario)
