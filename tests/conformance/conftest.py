"""Fixtures of the conformance suite: ``backend`` runs each test on a real kubelet (a hollow node), on the
simulator and on the real node (kubelet on containerd and runc; the scenarios that fit it and need no control).

The real kubelet is one node of the session's ``kubelet_pool``, taken for this test alone: the fixture waits
until the previous test's pods have left it and restores its allocatable afterwards. The simulated node is a
fresh simulator with one node of the same size.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from tests.conformance.backends import (
    CPU_MILLICORES,
    MEMORY_BYTES,
    KubeletBackend,
    NodeBackend,
    RealBackend,
    SimBackend,
)
from tests.conftest import SimFactory
from tests.harness.cluster import ClusterState
from tests.harness.kubelets import KubeletPool
from tests.harness.realnode import RealNodePool
from tests.nodesim.nodes import NodePool
from tests.waiting import eventually

_turn = itertools.count()


def _take_hollow(pool: KubeletPool, core: client.CoreV1Api) -> KubeletBackend:
    names = pool.node_names()
    name = names[next(_turn) % len(names)]
    selector = f"spec.nodeName={name}"
    eventually(f"{name} free of earlier tests' pods",
               lambda: not core.list_pod_for_all_namespaces(field_selector=selector).items, timeout_s=90,
               interval_s=0.25)
    return KubeletBackend(hollow=pool.nodes[name])


NOT_ON_THE_REAL_NODE = {
    "test_deferred_until_capacity_frees_then_applied_in_priority_order":
        "its pods fill a 4-CPU node; the real node has the host's CPUs",
    "test_allocatable_window_is_deferred_never_infeasible":
        "it sets the node's allocatable, which on the real node is the host's",
    "test_memory_limit_below_usage_is_an_error_until_usage_falls":
        "it sets usage from outside; test_real_node.py lowers a limit below a real process's usage",
    "test_oom_kill_after_a_decrease_restarts_with_the_new_limit":
        "it injects the OOM kill; test_real_node_oom.py has the kernel's",
}
"""Scenarios that need a control the real node does not have; they run on the hollow and simulated nodes, and
are not collected for the real one (``pytest_collection_modifyitems``), so that nothing is skipped at run time."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Leave out the real-node case of each scenario in ``NOT_ON_THE_REAL_NODE`` (deselected, with the count
    in pytest's summary); every other scenario runs on all three kinds of node."""
    left_out = [item for item in items if isinstance(item, pytest.Function) and
                item.originalname in NOT_ON_THE_REAL_NODE and "[real]" in item.name]
    if left_out:
        config.hook.pytest_deselected(items=left_out)
        items[:] = [item for item in items if item not in left_out]


@pytest.fixture(params=["kubelet", "sim", "real"])
def backend(request: pytest.FixtureRequest, api: client.ApiClient, namespace: str) -> Iterator[NodeBackend]:
    if request.param == "real":
        real: RealNodePool = request.getfixturevalue("real_nodes")
        name = next(iter(real.nodes))
        eventually(f"{name} free of earlier tests' pods", lambda: not client.CoreV1Api(api).list_pod_for_all_namespaces(
            field_selector=f"spec.nodeName={name}").items, timeout_s=90, interval_s=0.25)
        yield RealBackend(node=name)
        return
    if request.param == "sim":
        make_sim: SimFactory = request.getfixturevalue("make_sim")
        pool = NodePool(name="c", count=1, cpu_millicores=CPU_MILLICORES, memory_bytes=MEMORY_BYTES)
        yield SimBackend(sim=make_sim(pool, tick_s=0.2, actuation_delay_s=0.2, crash_backoff_s=1.0))
        return
    kubelets: KubeletPool = request.getfixturevalue("kubelet_pool")
    hollow = _take_hollow(kubelets, client.CoreV1Api(api))
    try:
        yield hollow
    finally:
        hollow.set_allocatable(cpu_millicores=CPU_MILLICORES, memory_bytes=MEMORY_BYTES)


@pytest.fixture
def real_kubelet(api: client.ApiClient, kubelet_pool: KubeletPool, namespace: str) -> Iterator[KubeletBackend]:
    """A real kubelet only, for the scenarios the simulator cannot follow (said in its docstring)."""
    hollow = _take_hollow(kubelet_pool, client.CoreV1Api(api))
    try:
        yield hollow
    finally:
        hollow.set_allocatable(cpu_millicores=CPU_MILLICORES, memory_bytes=MEMORY_BYTES)


@pytest.fixture(params=["kubelet", "sim"])
def static_cpu_backend(request: pytest.FixtureRequest, cluster: ClusterState, namespace: str,
                       tmp_path: Path) -> Iterator[NodeBackend]:
    """One node whose kubelet runs the static CPU Manager policy: a real kubelet started for this test (about
    a second), or a simulator node configured so."""
    pool = NodePool(name="static", count=1, cpu_millicores=CPU_MILLICORES, memory_bytes=MEMORY_BYTES,
                    cpu_manager_policy="static")
    if request.param == "sim":
        make_sim: SimFactory = request.getfixturevalue("make_sim")
        yield SimBackend(sim=make_sim(pool, tick_s=0.2, actuation_delay_s=0.2))
        return
    kubelets = KubeletPool(cluster=cluster, workdir=tmp_path, pools=(pool,), name_prefix=f"hs{namespace[-6:]}")
    kubelets.start()
    try:
        yield KubeletBackend(hollow=next(iter(kubelets.nodes.values())))
    finally:
        kubelets.stop()
