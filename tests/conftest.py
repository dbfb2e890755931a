"""Shared pytest fixtures: one real control plane and one real Prometheus per test session.

Owns the fixtures every integration test uses: ``cluster`` (the state of a private local cluster started
for this session), ``kubelet_pool`` (real kubelets, hollow nodes, started once per session beside it),
``real_nodes`` (real nodes: the real kubelet over containerd and runc, ``tests/harness/realnode.py``),
``api`` (a kubernetes ``ApiClient`` with admin credentials), ``namespace`` (a fresh
namespace per test, deleted afterwards) and ``prometheus`` (a private Prometheus). Servers start only
when a test asks for them, on 127.0.0.1, and are stopped at the end of the session, also on SIGTERM
(turned into KeyboardInterrupt so that pytest runs the finalizers) and on SIGKILL of pytest
(the children have PR_SET_PDEATHSIG).
"""

from __future__ import annotations

import os
import re
import secrets
import signal
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType

import pytest
from hypothesis import settings
from kubernetes import client, config

from tests.harness.cluster import ClusterState, LocalCluster
from tests.harness.kubelets import KubeletPool
from tests.harness.prometheus import LocalPrometheus
from tests.harness.realhost import missing as real_node_host_gaps
from tests.harness.realnode import RealNodePool
from tests.nodesim.kubelet import NodeSimulator, SimConfig
from tests.nodesim.nodes import NodePool


def _sigterm(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


signal.signal(signal.SIGTERM, _sigterm)

# Property tests check correctness, not speed: per-example deadlines only make them flaky on a shared,
# loaded machine (speed goals are met in the benchmarks).
settings.register_profile("podtailor", deadline=None)
settings.load_profile("podtailor")


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterState]:
    workdir = tmp_path_factory.mktemp("cluster")
    local = LocalCluster(workdir)
    state = local.start()
    print(f"\nlocal cluster {state.version} at {state.server}, logs in {workdir / 'logs'} "
          f"(started in {local.timings['start_s']:.1f}s)", file=sys.stderr)
    try:
        yield state
    finally:
        local.stop()


@pytest.fixture(scope="session")
def api(cluster: ClusterState) -> Iterator[client.ApiClient]:
    api_client = config.new_client_from_config(config_file=cluster.kubeconfig)
    try:
        yield api_client
    finally:
        api_client.close()


def _namespace_name(test_name: str) -> str:
    stem = re.sub(r"[^a-z0-9-]+", "-", test_name.lower()).strip("-")[:40].rstrip("-")
    return f"t-{stem}-{secrets.token_hex(3)}"


@pytest.fixture
def namespace(api: client.ApiClient, request: pytest.FixtureRequest) -> Iterator[str]:
    core = client.CoreV1Api(api)
    name = _namespace_name(request.node.name)
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    # Pods cannot be created before the controller manager has made the default ServiceAccount.
    deadline = time.monotonic() + 30
    while True:
        try:
            core.read_namespaced_service_account("default", name)
            break
        except client.ApiException as err:
            if err.status != 404 or time.monotonic() > deadline:
                raise
            time.sleep(0.1)
    try:
        yield name
    finally:
        core.delete_namespace(name)


@pytest.fixture(scope="session")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalPrometheus]:
    prom = LocalPrometheus(Path(tmp_path_factory.mktemp("prometheus")), scrape_interval_s=2.0)
    prom.start()
    try:
        yield prom
    finally:
        prom.stop()


SimFactory = Callable[..., NodeSimulator]


@pytest.fixture
def make_sim(api: client.ApiClient, namespace: str) -> Iterator[SimFactory]:
    """Start node simulators for this test: ``make_sim(NodePool(...), ..., actuation_delay_s=...)``.

    Node names start with the test's namespace, so tests never share nodes; they are deleted afterwards.
    """
    sims: list[NodeSimulator] = []

    def make(*pools: NodePool, **options: object) -> NodeSimulator:
        config = SimConfig(pools=tuple(pools), name_prefix=f"n{namespace[-6:]}-{len(sims)}", **options)  # type: ignore[arg-type]
        sim = NodeSimulator(api, config).start()
        sims.append(sim)
        return sim

    try:
        yield make
    finally:
        for sim in sims:
            sim.stop(delete_nodes=True)


@pytest.fixture(scope="session")
def crds(api: client.ApiClient) -> list[str]:
    """Install every CRD in manifests/crds/ (as a platform team would) and wait until each is Established."""
    import yaml

    ext = client.ApiextensionsV1Api(api)
    names = []
    for path in sorted((Path(__file__).resolve().parents[1] / "manifests" / "crds").glob("*.yaml")):
        body = yaml.safe_load(path.read_text())
        try:
            ext.create_custom_resource_definition(body)
        except client.ApiException as err:
            if err.status != 409:
                raise
        names.append(body["metadata"]["name"])
    deadline = time.monotonic() + 30
    for name in names:
        while not any(c.type == "Established" and c.status == "True"
                      for c in ext.read_custom_resource_definition(name).status.conditions or []):
            if time.monotonic() > deadline:
                raise TimeoutError(f"CRD {name} not established")
            time.sleep(0.1)
    return names


KUBELET_POOL = NodePool(name="hollow", count=3, cpu_millicores=4000, memory_bytes=8 * 2**30)


@pytest.fixture(scope="session")
def kubelet_pool(cluster: ClusterState, tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeletPool]:
    """Real kubelets v1.37.2 (``tests/harness/kubelets.py``), one process per node, started once per session.

    Tests bind pods to one of its nodes with ``spec.nodeName`` and tolerate ``HOLLOW_TAINT``; the hollow-node
    binary is built on first use like the control plane.
    """
    pool = KubeletPool(cluster=cluster, workdir=tmp_path_factory.mktemp("kubelets"), pools=(KUBELET_POOL,))
    pool.start()
    print(f"\n{len(pool.nodes)} real kubelets ready in {pool.timings['start_s']:.1f}s", file=sys.stderr)
    try:
        yield pool
    finally:
        pool.stop()


REAL_POOL = NodePool(name="real", count=1, instance_type="local.real", zone="local-zone-a")
"""One real node; its capacity is the host's (the pool's CPU and memory are not used)."""


@pytest.fixture(scope="session")
def real_nodes(cluster: ClusterState, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealNodePool]:
    """Real nodes (``tests/harness/realnode.py``): kubelet v1.37 over containerd and runc, with real cgroups,
    started once per session. Skipped, naming what is missing, on a host that cannot run one (no root, no
    writable cgroups, no runtime packages) unless ``PODTAILOR_REQUIRE_REAL_NODE=1`` (CI): then a failure."""
    gaps = real_node_host_gaps()
    if gaps:
        why = "this host cannot run a real node: it lacks " + "; ".join(gaps)
        if os.environ.get("PODTAILOR_REQUIRE_REAL_NODE") == "1":
            pytest.fail(why + " (PODTAILOR_REQUIRE_REAL_NODE=1)")
        pytest.skip(why)
    pool = RealNodePool(cluster=cluster, workdir=tmp_path_factory.mktemp("realnodes"), pools=(REAL_POOL,))
    pool.start()
    print(f"\n{len(pool.nodes)} real node(s) ready in {pool.timings['start_s']:.1f}s "
          f"(cgroup {pool.layout.value})", file=sys.stderr)
    try:
        yield pool
    finally:
        pool.stop()
