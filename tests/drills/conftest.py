"""Drill-only fixtures: a private control plane per drill module, and the drills' result rows.

The ``drill_*`` fixtures start a private LocalCluster per drill module (a drill stops kube-apiserver or etcd, so it
must never touch the session cluster of ``tests/conftest.py``), with its own admin client, CRDs, one namespace per
test and node simulators on it; ``scenario`` is the ``Scenario`` (tests/builders/cluster.py) on them. The helpers
drills 1-7 share (invariants, pass loops, updater processes, fault helpers) are in tests/builders/drills.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from kubernetes import client, config

from tests.builders.cluster import Scenario
from tests.builders.drills import REPO_ROOT, DrillRow, api_port, default_sa_exists, kubeconfig_via, state_of
from tests.conftest import SimFactory, _namespace_name
from tests.harness.cluster import LocalCluster
from tests.harness.faultproxy import FaultProxy
from tests.nodesim.kubelet import NodeSimulator, SimConfig
from tests.nodesim.nodes import NodePool
from tests.waiting import eventually


# ------------------------------------------------------------------------------------------ private cluster
@pytest.fixture(scope="module")
def drill_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    local = LocalCluster(tmp_path_factory.mktemp("drill-cluster"))
    local.start()
    try:
        yield local
    finally:
        local.stop()


@pytest.fixture(scope="module")
def drill_api(drill_cluster: LocalCluster) -> Iterator[client.ApiClient]:
    api = config.new_client_from_config(config_file=state_of(drill_cluster).kubeconfig)
    try:
        yield api
    finally:
        api.close()


@pytest.fixture(scope="module")
def drill_crds(drill_api: client.ApiClient) -> list[str]:
    ext = client.ApiextensionsV1Api(drill_api)
    names = []
    for path in sorted((REPO_ROOT / "manifests" / "crds").glob("*.yaml")):
        body = yaml.safe_load(path.read_text())
        ext.create_custom_resource_definition(body)
        names.append(body["metadata"]["name"])
    for name in names:
        eventually(f"CRD {name} established", lambda n=name: any(  # type: ignore[misc]
            c.type == "Established" and c.status == "True"
            for c in ext.read_custom_resource_definition(n).status.conditions or []), timeout_s=30)
    return names


@pytest.fixture
def drill_namespace(drill_api: client.ApiClient, request: pytest.FixtureRequest) -> str:
    core = client.CoreV1Api(drill_api)
    name = _namespace_name(request.node.name)
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    eventually("default ServiceAccount", lambda: default_sa_exists(core, name), timeout_s=30)
    return name  # the whole cluster goes away with the module: no cleanup needed


@pytest.fixture(scope="module")
def sim_route(drill_cluster: LocalCluster) -> Iterator[FaultProxy]:
    """The node simulator's own route to the API server. The simulator's tick thread dies on a connection
    error (``NodeSimulator._refresh_replicasets`` catches only ``ApiException``), after which it renews no
    lease and actuates no resize; a drill that stops the API server holds this route meanwhile, so the
    simulated kubelets see a slow server (requests held, then delivered) rather than a refused one."""
    proxy = FaultProxy(api_port(drill_cluster), name="nodesim-route").start()
    try:
        yield proxy
    finally:
        proxy.stop()


@pytest.fixture(scope="module")
def sim_api(drill_cluster: LocalCluster, sim_route: FaultProxy,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[client.ApiClient]:
    path = kubeconfig_via(drill_cluster, sim_route.port, tmp_path_factory.mktemp("sim") / "kubeconfig")
    api = config.new_client_from_config(config_file=str(path))
    try:
        yield api
    finally:
        api.close()


@pytest.fixture
def drill_sim(sim_api: client.ApiClient, drill_namespace: str) -> Iterator[SimFactory]:
    sims: list[NodeSimulator] = []

    def make(*pools: NodePool, **options: Any) -> NodeSimulator:
        cfg = SimConfig(pools=tuple(pools), name_prefix=f"{drill_namespace}-{len(sims)}", **options)
        sims.append(NodeSimulator(sim_api, cfg).start())
        return sims[-1]

    try:
        yield make
    finally:
        for sim in sims:
            sim.stop(delete_nodes=False)


@pytest.fixture
def scenario(drill_api: client.ApiClient, drill_crds: list[str], drill_namespace: str,
             drill_sim: SimFactory) -> Scenario:
    return Scenario(drill_api, drill_namespace, drill_sim)


@pytest.fixture
def drill_row(request: pytest.FixtureRequest) -> Iterator[DrillRow]:
    """The drill fills ``fault`` and ``proof``; the row is written passed or failed when the test ends."""
    row = DrillRow(drill=0, name="", fault="")
    yield row
    report = getattr(request.node, "rep_call", None)
    row.write("passed" if report is not None and report.passed else "FAILED")


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    report = yield
    if report.when == "call":
        item.rep_call = report  # type: ignore[attr-defined]
    return report
