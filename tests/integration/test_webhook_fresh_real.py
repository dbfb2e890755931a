"""The webhook's unexplained misses: a VPA or target written moments before a pod is created.

Cause (found here): the webhook's cache was refreshed only every ``--resync`` (15 s by default, 1 s in the
tests), so a pod created within that window after its VPA (the updater evicting right after the first
target of a new workload) was admitted unmutated, as ``no-vpa``. In the fallback test the window was opened
by the test's own readiness check, which counted the cache's objects cluster-wide and was satisfied by other
tests' VPAs (see ``webhook_probe.py``). The fix is in the webhook: it watches the VPAs and refreshes at once
on a change. This test runs the webhook with a 60 s resync, so only that watch can bring the VPA in: without
it the new pod is admitted unmutated and the test fails.
"""

from __future__ import annotations

import ssl
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client

from podtailor.units import parse_cpu_millicores
from tests.builders.cluster import Scenario
from tests.harness.process import free_port
from tests.waiting import eventually
from updater.webhook.review import ANNOTATION

pytestmark = pytest.mark.cluster


@pytest.fixture
def slow_webhook(api: client.ApiClient, crds: list[str], namespace: str, make_sim: Any, cluster: Any,
                 tmp_path: Any) -> Iterator[tuple[Scenario, Callable[[str], float]]]:
    """The real webhook with a 60 s resync; yields the scenario and a reader of its /metrics samples."""
    s = Scenario(api, namespace, make_sim)
    port, name = free_port(), f"{namespace}-hook"[:63]
    log = (tmp_path / "webhook.log").open("wb")
    proc = subprocess.Popen([sys.executable, "-m", "updater", "webhook", "--kubeconfig", cluster.kubeconfig,
                             "--listen", f"127.0.0.1:{port}", "--webhook-url", f"https://127.0.0.1:{port}/mutate",
                             "--webhook-config-name", name, "--only-namespace", namespace, "--resync", "60s"],
                            stdout=subprocess.DEVNULL, stderr=log)

    def metric(line_prefix: str) -> float:
        ctx = ssl._create_unverified_context()  # our own loopback endpoint
        try:
            with urllib.request.urlopen(f"https://127.0.0.1:{port}/metrics", context=ctx, timeout=2) as r:
                lines = r.read().decode().splitlines()
        except OSError:
            return -1.0
        return sum(float(x.split()[-1]) for x in lines if x.startswith(line_prefix))

    def called() -> bool:
        before = metric("podtailor_webhook_admissions_total")
        probe = {"metadata": {"generateName": "probe-"},
                 "spec": {"containers": [{"name": "c", "image": "registry.invalid/probe:1"}]}}
        client.CoreV1Api(api).create_namespaced_pod(namespace, probe, dry_run="All")
        return metric("podtailor_webhook_admissions_total") > before >= 0

    try:
        eventually("the API server calling the webhook", called, timeout_s=30, interval_s=0.3)
        yield s, metric
    finally:
        proc.terminate()
        proc.wait(timeout=20)
        log.close()
        client.AdmissionregistrationV1Api(api).delete_mutating_webhook_configuration(name)


def test_a_vpa_written_moments_before_a_pod_is_applied_to_it(
        slow_webhook: tuple[Scenario, Callable[[str], float]]) -> None:
    s, metric = slow_webhook
    s.pool("f", nodes=1, cpu=8000)
    s.deployment("web", "f", replicas=1)  # no VPA yet: admitted as it is, counted as no-vpa
    assert metric('podtailor_webhook_admissions_total{outcome="no-vpa"}') >= 2  # the probe and this pod
    s.vpa("web", {"cpu": "250m", "memory": "256Mi"})
    time.sleep(1.0)  # far below the 60 s resync: only the VPA watch can have brought the target in
    s.apps.patch_namespaced_deployment_scale("web", s.ns, {"spec": {"replicas": 2}})
    pods = eventually("a second web pod", lambda: len(p := s.running("web")) == 2 and p, timeout_s=60)
    new = [p for p in pods if ANNOTATION in (p.metadata.annotations or {})]
    assert len(new) == 1, [(p.metadata.name, p.spec.containers[0].resources.requests) for p in pods]
    assert parse_cpu_millicores(new[0].spec.containers[0].resources.requests["cpu"]) == 250
    assert metric('podtailor_webhook_admissions_total{outcome="mutated"}') == 1
