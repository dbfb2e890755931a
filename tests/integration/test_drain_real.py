"""Drain before a restarting resize, on the real control plane (the EndpointSlice controller is the real one).

A Deployment opted in (pod template annotation ``podtailor.io/drain-before-restart: "true"``) behind a Service;
the real webhook adds the ``podtailor.io/serving`` readiness gate to its pod; the updater puts the pod in
service (gate True), then for a memory change with ``RestartContainer`` takes it out of the Service's
EndpointSlice before the restart and back after the restarted container is Ready. A sampler thread reads the
EndpointSlice and the pod every 50 ms throughout.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client

from podtailor.units import parse_memory_bytes
from tests.builders.cluster import POOL_KEY, Scenario
from tests.waiting import eventually
from updater.kube.writes import ServingGateWriter
from updater.observe import DRAIN_ANNOTATION, SERVING_GATE
from updater.rollout.machine.journal import Phase

pytestmark = pytest.mark.cluster
Mi = 2**20


def _deployment(s: Scenario) -> None:
    labels = {"app": "web"}
    container = {"name": "app", "image": "registry.invalid/app:1",
                 "resources": {"requests": {"cpu": "250m", "memory": "256Mi"},
                               "limits": {"cpu": "500m", "memory": "512Mi"}},
                 "resizePolicy": [{"resourceName": "memory", "restartPolicy": "RestartContainer"}]}
    s.apps.create_namespaced_deployment(s.ns, {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
        "spec": {"replicas": 1, "selector": {"matchLabels": labels}, "template": {
            "metadata": {"labels": labels, "annotations": {
                DRAIN_ANNOTATION: "true", "nodesim.podtailor.io/usage": json.dumps(
                    {"kind": "constant", "cpu_cores": 0.05, "memory_bytes": 100 * Mi})}},
            "spec": {"nodeSelector": {POOL_KEY: s.pools["d"]}, "terminationGracePeriodSeconds": 1,
                     "containers": [container]}}}})
    s.core.create_namespaced_service(s.ns, {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
                                            "spec": {"selector": labels, "ports": [{"port": 80}]}})


def _endpoint_ready(s: Scenario, uid: str) -> bool | None:
    slices = client.DiscoveryV1Api(s.api).list_namespaced_endpoint_slice(
        s.ns, label_selector="kubernetes.io/service-name=web").items
    for sl in slices:
        for e in sl.endpoints or ():
            if e.target_ref is not None and e.target_ref.uid == uid:
                return e.conditions is None or e.conditions.ready is not False
    return None


def test_a_restarting_resize_drains_the_endpoint_first_and_restores_it_after_ready(
    sc: Scenario, hook: Callable[[], None]
) -> None:
    s = sc
    s.pool("d", nodes=1, cpu=8000)
    _deployment(s)
    [pod] = eventually("the web pod running", lambda: s.running("web"), timeout_s=60)
    assert [g.condition_type for g in pod.spec.readiness_gates or ()] == [SERVING_GATE]  # added by the webhook
    uid = pod.metadata.uid
    s.vpa("web", {"cpu": "250m", "memory": "384Mi"})  # memory up: RestartContainer
    s.policy(steps=[{"fraction": 1, "bake": "1s"}])
    executor = s.executor()
    executor.gates = ServingGateWriter(s.api)

    # Without the gate True the pod is never Ready; the updater's pass puts it in service.
    [(_, plan)] = executor.run_pass(time.time()).plans
    assert [d.reason.value for d in plan.decisions] == ["pod-not-ready"]
    eventually("the endpoint ready", lambda: _endpoint_ready(s, uid) is True, timeout_s=30)

    samples: list[tuple[float, bool | None, int, bool]] = []
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            p = s.core.read_namespaced_pod(pod.metadata.name, s.ns)
            restarts = p.status.container_statuses[0].restart_count
            ready = any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or ())
            samples.append((time.monotonic(), _endpoint_ready(s, uid), restarts, ready))
            time.sleep(0.05)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        [(_, plan)] = executor.run_pass(time.time()).plans
        [d] = plan.decisions
        assert d.action.value == "resize-restart" and d.message == "resize restarts app (drained first)", d.message
        s.run_until(executor, lambda: s.settled() and _endpoint_ready(s, uid) is True, timeout_s=90)
    finally:
        stop.set()
        sampler.join(timeout=5)
    [r] = s.rollouts()
    assert r.phase == Phase.COMPLETED, r.message
    assert [(e.state.value, e.drain) for e in r.entries] == [("Verified", True)]
    final = s.core.read_namespaced_pod(pod.metadata.name, s.ns)
    assert final.metadata.uid == uid and final.status.container_statuses[0].restart_count == 1
    assert parse_memory_bytes(final.spec.containers[0].resources.requests["memory"]) == 384 * Mi
    first_restart = next(i for i, (_, _, restarts, _) in enumerate(samples) if restarts >= 1)
    assert first_restart > 0, samples[:3]
    before: list[Any] = samples[:first_restart]
    # Ready endpoint at first, then out of the EndpointSlice before the restart, and never back in until it:
    out = next(i for i, (_, ep, _, _) in enumerate(before) if ep is False)
    assert before[0][1] is True and all(ep is False for _, ep, _, _ in before[out:]), before
    # ...and back (ready endpoint, pod Ready) only after the restart.
    assert samples[-1][1] is True and samples[-1][3] is True
    drained_s = before[-1][0] - before[out][0]
    print(f"endpoint out {drained_s:.2f}s before the first sample of the restart; {len(samples)} samples")
