"""Drill 16, conflicts and a GitOps fight.

(a) Template fallback on (ResizePolicy ``fallback: template``) while another field manager (standing in for
Argo CD self-heal) puts the Deployment's pod template back every half second: the updater must notice, stop
after ``MAX_TEMPLATE_REVERTS`` and report it (Warning Event, journal message), not fight on.
(b) Another actor resizes a pod through ``pods/resize`` between the updater's read and its write: the
updater's resize gets 409 (resourceVersion precondition), it re-reads and re-decides, and never overwrites
the other manager's values.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from podtailor.units import parse_cpu_millicores
from tests.conftest import SimFactory
from tests.drills._rollout_scenario import (
    CountingResizer,
    DrillRow,
    DrillScenario,
    Sampler,
    Workload,
    generation_report,
    open_drill,
)
from tests.waiting import eventually
from updater.rollout.machine.journal import EntryState, Phase
from updater.rollout.machine.lifecycle import MAX_TEMPLATE_REVERTS

pytestmark = pytest.mark.cluster
GUARANTEED = {"cpu": "500m", "memory": "256Mi"}


@pytest.fixture
def drill(api: client.ApiClient, crds: list[str], namespace: str, make_sim: SimFactory,
          request: pytest.FixtureRequest) -> Iterator[tuple[DrillScenario, DrillRow]]:
    yield from open_drill(api, namespace, make_sim, request)


def test_drill_16_gitops_revert_of_the_template_is_not_fought(drill: tuple[DrillScenario, DrillRow]) -> None:
    s, row = drill
    row.fault = "template fallback; a GitOps stand-in (fieldManager argocd-controller) restores the template /0.5 s"
    s.pool("a")
    # Guaranteed pods; a RequestsOnly target lowers requests only -> QoS would change -> template fallback.
    s.deployment("web", "a", replicas=3, requests=GUARANTEED, limits=GUARANTEED)
    s.bounded_vpa("web", {"cpu": "250m", "memory": "256Mi"}, controlled_values="RequestsOnly")
    s.policy(steps=[{"fraction": 1, "bake": "1s"}], fallback="template")
    stop, reverts = threading.Event(), [0]
    body = {"spec": {"template": {"spec": {"containers": [
        {"name": "app", "resources": {"requests": GUARANTEED, "limits": GUARANTEED}}]}}}}

    def gitops() -> None:
        while not stop.wait(0.5):
            dep = s.apps.read_namespaced_deployment("web", s.ns)
            res = dep.spec.template.spec.containers[0].resources
            if dict(res.requests or {}) != GUARANTEED or dict(res.limits or {}) != GUARANTEED:
                s.apps.patch_namespaced_deployment("web", s.ns, body, field_manager="argocd-controller")
                reverts[0] += 1

    actor = threading.Thread(target=gitops, daemon=True)
    ex = s.counting_executor()
    actor.start()
    try:
        with Sampler(s, [Workload(app="web", floor=2)]) as sampler:
            s.drive(ex, 35)
    finally:
        stop.set()
        actor.join(timeout=5)
    sampler.assert_clean()
    patches = s.calls.of("template")
    entries = [e for r in s.rollouts() for e in r.entries if e.action == "template"]
    row.prove(f"35 s: {len(patches)} template patches by the updater, {reverts[0]} GitOps reverts, "
              f"{len(s.rollouts())} rollouts, entries {[(e.state.value, e.attempts) for e in entries]}")
    # The revert is reported on the workload, in its namespace, where its owners look.
    events = [e for e in s.core.list_namespaced_event(s.ns, field_selector="reason=TemplateReverted").items
              if e.involved_object.kind == "Deployment" and e.involved_object.name == "web"]
    assert any("stopped, not fighting" in e.message for e in events), [e.message for e in events]
    assert any(e.state == EntryState.SKIPPED and "not fighting" in e.message for e in entries)
    assert len(patches) <= MAX_TEMPLATE_REVERTS, f"{len(patches)} template patches: the updater kept fighting"
    row.passed()


class CompetingResizer(CountingResizer):
    """The real resizer; just before its first call another manager resizes the same pod (the race)."""

    def __init__(self, api: client.ApiClient, s: DrillScenario) -> None:
        super().__init__(api, s.calls)
        self.s = s
        self.raced: dict[str, str] = {}
        self.lock = threading.Lock()

    def resize(self, namespace: str, pod: str, uid: str, resource_version: str, values: Any,
               pod_level: Any = None) -> int:
        with self.lock:
            first = not self.raced
            if first:
                self.raced[uid] = pod
        if first:
            self.s.core.patch_namespaced_pod_resize(pod, namespace, {"spec": {"containers": [
                {"name": "app", "resources": {"requests": {"cpu": "750m"}}}]}}, field_manager="other-manager")
        return super().resize(namespace, pod, uid, resource_version, values, pod_level)


def test_drill_16_a_409_on_resize_is_re_decided_and_never_overwrites(drill: tuple[DrillScenario, DrillRow]) -> None:
    s, row = drill
    row.fault = "another field manager resizes a pod (cpu 500m -> 750m) between the updater's read and its resize"
    s.pool("a")
    s.deployment("web", "a", replicas=3)
    s.bounded_vpa("web", {"cpu": "250m", "memory": "256Mi"})
    s.policy(steps=[{"fraction": 1, "bake": "1s"}])
    ex = s.counting_executor()
    racer = CompetingResizer(s.api, s)
    ex.resizer = racer
    with Sampler(s, [Workload(app="web", floor=3)], external=lambda uid: int(uid in racer.raced)) as sampler:
        s.drive(ex, 30, until=lambda: s.rollouts() and s.rollouts()[0].phase == Phase.COMPLETED)
        time.sleep(2)
    sampler.assert_clean(min_samples=3)
    [(uid, name)] = racer.raced.items()
    calls = [c for c in s.calls.of("resize") if c.uid == uid]
    assert [c.ok for c in calls] == [False], calls  # refused (409 -> Conflict), never sent again
    [entry] = [e for e in s.rollouts()[0].entries if e.uid == uid]
    assert entry.state == EntryState.SKIPPED and "someone else" in entry.message, entry
    row.prove(f"updater's resize of {name} refused with 409; next pass re-read it: entry Skipped "
              f"({entry.message!r}); no second resize sent")
    pod = s.core.read_namespaced_pod(name, s.ns)
    assert pod.spec.containers[0].resources.requests["cpu"] == "750m"
    eventually("the other manager's value actuated", lambda: s.core.read_namespaced_pod(
        name, s.ns).status.container_statuses[0].resources.requests["cpu"] == "750m", timeout_s=10)
    owners = {m.manager for m in pod.metadata.managed_fields or [] if m.subresource == "resize"}
    assert "other-manager" in owners, owners
    bad = generation_report(s, sampler.base_generation, external=lambda u: int(u in racer.raced))
    assert not bad, bad
    _, plans = ex.plan(time.time())
    [d] = [d for _, p in plans for d in p.decisions if d.uid == uid]
    assert parse_cpu_millicores(str(d.changes[0].old_requests.cpu_millicores) + "m") == 750
    row.prove("pod keeps 750m in spec and status (managedFields: other-manager); generations: others +1, raced "
              "pod +1 (the other manager) only; the next plan starts from 750m (re-decided)")
    row.passed()
