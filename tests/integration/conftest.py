"""Fixtures shared by the integration tests that drive a ``Scenario`` (tests/builders/cluster.py).

``scenario`` is the simulator-backed scenario of the updater, fallback, quota and drain tests (cleaned up
after the test: its watches stopped, its ResizePolicies deleted); ``test_fallback_kubelets.py`` overrides it
with its own real-kubelet scenario, which ``webhook`` (the real admission webhook, registered for the
scenario's namespace) then uses. ``sc`` and ``hook`` are the quota and drain tests' short names for them.
``real_scenario`` is the drills' scenario (the updater's real executor, driven pass by pass) on the real node's
pool, for the real-node tests that go through the updater.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client

from tests.builders.cluster import Scenario
from tests.conftest import SimFactory
from tests.drills._rollout_scenario import DrillScenario
from tests.harness.process import free_port
from tests.harness.realnode import RealNodePool
from tests.integration.webhook_probe import all_mutated
from tests.waiting import eventually


@pytest.fixture
def scenario(api: client.ApiClient, crds: list[str], namespace: str, make_sim: SimFactory) -> Iterator[Scenario]:
    s = Scenario(api, namespace, make_sim)
    try:
        yield s
    finally:
        s.stop_watching()
        for name in s.policies:
            s.custom.delete_cluster_custom_object("podtailor.io", "v1alpha1", "resizepolicies", name)


@pytest.fixture
def real_scenario(api: client.ApiClient, crds: list[str], namespace: str,
                  real_nodes: RealNodePool) -> Iterator[DrillScenario]:
    """A ``DrillScenario`` whose pool "real" is the real node's (no simulator); its ResizePolicies deleted after."""
    s = DrillScenario(api, namespace, make_sim=lambda *a, **k: None)
    s.pools["real"] = next(iter(real_nodes.nodes.values())).pool.name
    try:
        yield s
    finally:
        for name in s.policies:
            s.custom.delete_cluster_custom_object("podtailor.io", "v1alpha1", "resizepolicies", name)


@pytest.fixture
def webhook(scenario: Scenario, cluster: Any, tmp_path: Any) -> Iterator[Callable[[], None]]:
    """The real webhook (a subprocess), registered for this test's namespace only. Yields a function that waits
    until its cache holds this test's VPA and ReplicaSet (it resyncs every second), so no eviction races it."""
    import ssl
    import urllib.request

    port, name = free_port(), f"{scenario.ns}-hook"[:63]
    log = (tmp_path / "webhook.log").open("wb")
    proc = subprocess.Popen([sys.executable, "-m", "updater", "webhook", "--kubeconfig", cluster.kubeconfig,
                             "--listen", f"127.0.0.1:{port}", "--webhook-url", f"https://127.0.0.1:{port}/mutate",
                             "--webhook-config-name", name, "--only-namespace", scenario.ns, "--resync", "1s",
                            "--log-level", "debug"],
                            stdout=subprocess.DEVNULL, stderr=log)

    def ready() -> bool:
        try:
            ctx = ssl._create_unverified_context()  # our own loopback endpoint
            with urllib.request.urlopen(f"https://127.0.0.1:{port}/readyz", context=ctx, timeout=2) as r:
                return bool(r.status == 200)
        except OSError:
            return False

    def metric(prefix: str) -> float:
        """Sum of the webhook's /metrics samples whose line starts with ``prefix``."""
        ctx = ssl._create_unverified_context()
        with urllib.request.urlopen(f"https://127.0.0.1:{port}/metrics", context=ctx, timeout=2) as r:
            lines = r.read().decode().splitlines()
        return sum(float(x.split()[-1]) for x in lines if x.startswith(prefix))

    def admissions() -> float:
        return metric("podtailor_webhook_admissions_total")

    def called() -> bool:
        """The API server loads a new webhook configuration asynchronously: ready is not enough, a dry-run pod
        creation must actually reach us."""
        before = admissions()
        probe = {"metadata": {"generateName": "probe-"},
                 "spec": {"containers": [{"name": "c", "image": "registry.invalid/probe:1"}]}}
        client.CoreV1Api(scenario.api).create_namespaced_pod(scenario.ns, probe, dry_run="All")
        return admissions() > before

    def synced() -> None:
        # Per namespace and workload: the object counts of the cache were satisfied by other tests' VPAs and
        # ReplicaSets (still there while their namespaces are deleted), and the first eviction then raced the
        # cache: its replacement came up unmutated (see tests/integration/webhook_probe.py).
        eventually("the webhook mutating this test's replacement pods", lambda: all_mutated(scenario.api, scenario.ns),
                   timeout_s=30, interval_s=0.3)

    try:
        eventually("the webhook ready", ready, timeout_s=30, interval_s=0.3)
        eventually("the API server calling the webhook", called, timeout_s=30, interval_s=0.3)
        yield synced
    finally:
        proc.terminate()
        proc.wait(timeout=20)
        log.close()
        try:
            client.AdmissionregistrationV1Api(scenario.api).delete_mutating_webhook_configuration(name)
        except client.ApiException as err:
            if err.status != 404:
                raise


@pytest.fixture
def sc(scenario: Scenario) -> Scenario:
    return scenario


@pytest.fixture
def hook(webhook: Callable[[], None]) -> Callable[[], None]:
    return webhook
