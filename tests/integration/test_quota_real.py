"""ResourceQuota on the real control plane: quota admission and the quota controller are the real ones.

- A namespace at its CPU quota where one rollout mixes increases and a decrease: the decrease lands, the
  increase that fits lands, the other is skipped with reason ``quota`` (never sent, so the API server refuses
  nothing), nothing is evicted; once the quota controller has counted the decrease, a later plan uses the
  room it freed.
- The API server's own 403s are typed from the real answers: ``exceeded quota`` and (1.36+) above the node's
  allocatable.
- A fallback whose replacement the quota would refuse is not taken.
- The webhook with a quota that the target would exceed: the pod is created at its template values, annotated
  with why, and the updater records a Warning Event on it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client
from prometheus_client import CollectorRegistry

from podtailor.resources import Resources
from podtailor.units import parse_cpu_millicores
from tests.builders.cluster import Scenario
from tests.integration.webhook_probe import mutated, replacements
from tests.waiting import eventually
from updater.answers import Refusal
from updater.kube.refusals import Refused
from updater.kube.writes import PodResizer
from updater.metrics import UpdaterMetrics
from updater.policy.quota import HELD_ANNOTATION
from updater.rollout.machine.journal import ContainerValues, Phase
from updater.webhook.review import ANNOTATION

pytestmark = pytest.mark.cluster


def quota(s: Scenario, hard: dict[str, str]) -> None:
    s.core.create_namespaced_resource_quota(s.ns, {"apiVersion": "v1", "kind": "ResourceQuota",
                                                   "metadata": {"name": "compute"}, "spec": {"hard": hard}})


def used_cpu(s: Scenario) -> int:
    """The quota's status.used requests.cpu in millicores, -1 while the quota controller has not counted it."""
    status = s.core.read_namespaced_resource_quota("compute", s.ns).status
    used = (status.used or {}).get("requests.cpu") if status else None
    return -1 if used is None else parse_cpu_millicores(used)


def requested(pod: client.V1Pod) -> int:
    return parse_cpu_millicores(pod.spec.containers[0].resources.requests["cpu"])


def test_a_batch_at_its_cpu_quota_lands_decreases_and_what_fits_and_skips_the_rest(sc: Scenario) -> None:
    s = sc
    s.pool("q", nodes=1, cpu=8000)
    # Used 2 x 500m + 1000m = 2000m; hard 2250m: room for one +250m increase.
    quota(s, {"requests.cpu": "2250m"})
    s.deployment("grow", "q", replicas=2)
    s.deployment("shrink", "q", replicas=1, requests={"cpu": "1", "memory": "256Mi"},
                 limits={"cpu": "2", "memory": "512Mi"})
    eventually("the quota counted", lambda: used_cpu(s) == 2000, timeout_s=30)
    s.vpa("grow", {"cpu": "750m", "memory": "256Mi"})
    s.vpa("shrink", {"cpu": "500m", "memory": "256Mi"})
    s.policy(steps=[{"fraction": 1, "bake": "1s"}])
    executor = s.executor()
    registry = CollectorRegistry()
    executor.metrics = UpdaterMetrics(registry)

    first = executor.run_pass(time.time())
    [(_, plan)] = first.plans
    by_workload: dict[str, list[Any]] = {}
    for d in plan.decisions:
        by_workload.setdefault(d.workload_name, []).append(d)
    assert [d.action.value for d in by_workload["shrink"]] == ["resize-online"]
    grow = sorted(by_workload["grow"], key=lambda d: d.action.value)
    assert [(d.action.value, d.reason.value) for d in grow] == [("resize-online", "change"), ("skip", "quota")]
    assert grow[1].message == ("resize would exceed ResourceQuota compute: requests.cpu used 2250m + 250m > hard "
                               "2250m")
    assert registry.get_sample_value("podtailor_updater_quota_held_pods", {"action": "resize"}) == 1.0
    print(f"plan: {[(d.pod, d.action.value, d.reason.value, d.message) for d in plan.decisions]}")

    s.run_until(executor, s.settled, timeout_s=90)
    [r] = s.rollouts()
    assert r.phase == Phase.COMPLETED, r.message
    assert sorted(e.state.value for e in r.entries) == ["Verified", "Verified"] and all(
        e.action == "resize" for e in r.entries)
    assert sorted(requested(p) for p in s.running("grow")) == [500, 750]
    assert [requested(p) for p in s.running("shrink")] == [500]
    # Never sent, so never refused: no 403 from quota admission.
    assert not registry.get_sample_value("podtailor_updater_resizes_total", {"outcome": "quota"})
    assert not registry.get_sample_value("podtailor_updater_resizes_total", {"outcome": "refused"})

    # The quota controller counts the decrease once the kubelet applied it (500 + 750 + 500 = 1750m): the
    # next plan has room for the held increase, and nothing was ever evicted.
    eventually("the decrease counted", lambda: used_cpu(s) == 1750, timeout_s=60)
    s.run_until(executor, lambda: sorted(requested(p) for p in s.running("grow")) == [750, 750] and s.settled(),
                timeout_s=90)
    assert all(e.action == "resize" for r in s.rollouts() for e in r.entries)
    assert used_cpu(s) <= 2250


def test_the_api_servers_403s_are_typed(sc: Scenario) -> None:
    s = sc
    s.pool("t", nodes=1, cpu=4000)
    quota(s, {"requests.cpu": "1"})
    s.deployment("one", "t", replicas=1)
    eventually("the quota counted", lambda: used_cpu(s) == 500, timeout_s=30)
    [pod] = s.running("one")
    resizer = PodResizer(s.api)

    def resize(cpu: int) -> Refused:
        values = [ContainerValues(name="app", requests=Resources(cpu_millicores=cpu, memory_bytes=256 * 2**20),
                                  limits=Resources(cpu_millicores=2 * cpu, memory_bytes=512 * 2**20))]
        fresh = s.core.read_namespaced_pod(pod.metadata.name, s.ns)
        with pytest.raises(Refused) as caught:
            resizer.resize(s.ns, pod.metadata.name, pod.metadata.uid, fresh.metadata.resource_version, values)
        return caught.value

    over_quota = resize(1500)  # 500m used + 1000m more > 1 core
    assert over_quota.kind == Refusal.QUOTA and "exceeded quota: compute" in str(over_quota)
    s.core.replace_namespaced_resource_quota("compute", s.ns, {
        "apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "compute"},
        "spec": {"hard": {"requests.cpu": "100"}}})
    eventually("the quota raised", lambda: s.core.read_namespaced_resource_quota(
        "compute", s.ns).status.hard.get("requests.cpu") == "100", timeout_s=30)
    above_node = resize(5000)  # the node has 4 cores
    assert above_node.kind == Refusal.ABOVE_ALLOCATABLE, str(above_node)
    assert "node didn't have enough allocatable resources" in str(above_node)


def test_a_fallback_whose_replacement_the_quota_refuses_is_not_taken(sc: Scenario) -> None:
    s = sc
    s.pool("small", nodes=2, cpu=2000)
    quota(s, {"requests.cpu": "3"})
    s.deployment("big", "small", replicas=2)
    eventually("the quota counted", lambda: used_cpu(s) == 1000, timeout_s=30)
    s.vpa("big", {"cpu": "2500m", "memory": "256Mi"})  # above the 2-core nodes: fallback by eviction
    s.policy(disruptionBudget=0.5, steps=[{"fraction": 1, "bake": "1s"}])
    executor = s.executor()
    before = {p.metadata.uid for p in s.running("big")}
    for _ in range(3):
        result = executor.run_pass(time.time())
        time.sleep(0.3)
    [(_, plan)] = result.plans
    assert {(d.action.value, d.reason.value) for d in plan.decisions} == {("skip", "quota")}
    assert all("its replacement would exceed ResourceQuota compute: requests.cpu used 1000m + 2500m > hard 3000m"
               in d.message for d in plan.decisions)
    assert not s.rollouts() and {p.metadata.uid for p in s.running("big")} == before


def test_the_webhook_leaves_a_pod_at_its_template_when_the_target_exceeds_the_quota(
    sc: Scenario, hook: Callable[[], None]
) -> None:
    s = sc
    s.pool("w", nodes=1, cpu=8000)
    s.deployment("web", "w", replicas=1)  # 500m, created before its VPA exists
    s.vpa("web", {"cpu": "2", "memory": "256Mi"})
    hook()  # the webhook mutates this Deployment's replacements (no quota yet)
    quota(s, {"requests.cpu": "1500m"})  # 500m used + 2 cores > 1500m; the template's 500m fits
    eventually("the quota counted", lambda: used_cpu(s) == 500, timeout_s=30)
    eventually("the webhook holding the quota (a replacement admitted, unmutated)", lambda: (
        probes := replacements(s.api, s.ns)) and all(p is not None and not mutated(p) for p in probes.values()),
        timeout_s=30, interval_s=0.3)
    s.apps.patch_namespaced_deployment_scale("web", s.ns, {"spec": {"replicas": 2}})
    pods = eventually("a second web pod", lambda: len(p := s.running("web")) == 2 and p, timeout_s=60)
    assert [requested(p) for p in pods] == [500, 500]  # created at the template's values, not refused
    assert all(ANNOTATION not in (p.metadata.annotations or {}) for p in pods)
    [held] = [p for p in pods if HELD_ANNOTATION in (p.metadata.annotations or {})]
    assert "ResourceQuota compute: requests.cpu used 500m + 2000m > hard 1500m" in held.metadata.annotations[
        HELD_ANNOTATION]
    assert used_cpu(s) == 1000
    # The webhook is read-only: the updater's next pass records the Event on that pod (and holds the resize
    # of both pods to 2 cores: 1000m used + 1500m each > 1500m).
    s.policy()
    result = s.executor().run_pass(time.time())
    [(_, plan)] = result.plans
    assert {(d.action.value, d.reason.value) for d in plan.decisions} == {("skip", "quota")}
    events = eventually("the Event on the pod", lambda: [
        e for e in s.core.list_namespaced_event(s.ns).items
        if e.reason == "TargetExceedsQuota" and e.involved_object.name == held.metadata.name], timeout_s=20)
    assert events[0].type == "Warning" and events[0].involved_object.kind == "Pod"
    assert events[0].source.component == "podtailor-updater"
    assert "ResourceQuota compute: requests.cpu used 500m + 2000m > hard 1500m" in events[0].message
