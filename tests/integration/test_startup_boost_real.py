"""CPU startup boost end to end: the real webhook boosts new pods, the updater takes the boost back in place.

Real API server, the real webhook (a subprocess, the ``webhook`` fixture), pods on the node simulator, updater
passes in-process. The VPA (written by the test, playing the recommender) has target cpu 250m, memory 256Mi and
``spec.startupBoost.cpu`` Factor 3 held 4 s after Ready; a second VPA has an invalid boost (factor 0.5).
Templates ask for cpu 500m / limit 1, memory 256Mi / 512Mi (Scenario.deployment).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client

from podtailor.resize.boost import ANNOTATION as BOOST
from podtailor.units import parse_cpu_millicores
from tests.builders.cluster import Scenario
from tests.integration.webhook_probe import replacements
from tests.waiting import eventually
from updater.policy.quota import BOOST_REJECTED_ANNOTATION
from updater.rollout.machine.journal import Phase

pytestmark = pytest.mark.cluster
TARGET = {"cpu": "250m", "memory": "256Mi"}


def _boost(s: Scenario, name: str, cpu: dict[str, Any]) -> None:
    s.custom.patch_namespaced_custom_object("autoscaling.k8s.io", "v1", s.ns, "verticalpodautoscalers", name,
                                            {"spec": {"startupBoost": {"cpu": cpu}}})


def _cpu(pod: client.V1Pod) -> tuple[int, int, int]:
    """(spec request, spec limit, the kubelet's actuated request) in millicores."""
    res = pod.spec.containers[0].resources
    return (parse_cpu_millicores(res.requests["cpu"]), parse_cpu_millicores(res.limits["cpu"]),
            parse_cpu_millicores(pod.status.container_statuses[0].resources.requests["cpu"]))


def _ready_s(pod: client.V1Pod) -> float:
    return float(next(c for c in pod.status.conditions if c.type == "Ready").last_transition_time.timestamp())


def _replacement_boosted(s: Scenario) -> bool:
    pods = replacements(s.api, s.ns)
    return bool(pods) and all(p is not None and (BOOST in (p["metadata"].get("annotations") or {})
                                                  or BOOST_REJECTED_ANNOTATION in p["metadata"].get("annotations", {}))
                              for p in pods.values())


def test_boosted_at_admission_and_taken_back_in_place(scenario: Scenario, webhook: Callable[[], None]) -> None:
    s = scenario
    s.pool("a")
    s.deployment("web", "a", replicas=0)
    s.deployment("bad", "a", replicas=0)
    s.vpa("web", TARGET)
    s.vpa("bad", TARGET)
    _boost(s, "web", {"type": "Factor", "factor": 3, "durationSeconds": 4})
    _boost(s, "bad", {"type": "Factor", "factor": 0.5})
    webhook()
    eventually("the webhook seeing both boosts", lambda: _replacement_boosted(s), timeout_s=30, interval_s=0.3)
    for name in ("web", "bad"):
        s.apps.patch_namespaced_deployment_scale(name, s.ns, {"spec": {"replicas": 2}})
    web = eventually("web running", lambda: len(p := s.running("web")) == 2 and p, timeout_s=60)
    bad = eventually("bad running", lambda: len(p := s.running("bad")) == 2 and p, timeout_s=60)
    # Boosted: 250m x 3 = 750m; the 500m/1 template keeps its 1:2 ratio, limit 1500m; the kubelet runs 750m.
    assert [_cpu(p) for p in web] == [(750, 1500, 750)] * 2
    for p in web:
        assert json.loads(p.metadata.annotations[BOOST]) == {"app": {"boosted": "750m", "target": "250m"}}
    # The invalid boost: admitted at the target (limit 500m), with the reason kept on the pod.
    assert [_cpu(p) for p in bad] == [(250, 500, 250)] * 2
    assert all("below 1" in p.metadata.annotations[BOOST_REJECTED_ANNOTATION] for p in bad)

    s.policy()
    executor = s.executor()
    first = executor.run_pass(time.time())
    web_names = {p.metadata.name for p in web}
    early = [d for _, plan in first.plans for d in plan.decisions if d.pod in web_names]
    # Never a plain 750m -> 250m decrease: held while boosted, then an un-boost; within 4 s of Ready (unless
    # this machine was slow to get here), held.
    assert {d.reason.value for d in early} <= {"startup-boost", "unboost"} and len(early) == 2
    if all(time.time() - _ready_s(p) < 3.5 for p in web):
        assert {(d.action.value, d.reason.value) for d in early} == {("skip", "startup-boost")}
    s.run_until(executor, lambda: s.settled() and all(_cpu(p)[2] == 250 for p in s.running("web")), timeout_s=90)
    assert all(r.phase == Phase.COMPLETED for r in s.rollouts()), [r.message for r in s.rollouts()]
    after = s.running("web")
    assert {p.metadata.name for p in after} == web_names  # taken back in place: the same pods, not replaced
    assert [_cpu(p) for p in after] == [(250, 500, 250)] * 2
    assert all(p.status.container_statuses[0].restart_count == 0 for p in after)
    events = s.core.list_namespaced_event(s.ns).items
    rejected = {e.involved_object.name for e in events if e.reason == "StartupBoostRejected"}
    assert rejected == {p.metadata.name for p in bad}
