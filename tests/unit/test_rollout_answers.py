"""Each server version's answers, typed at the adapter and acted on by kind in the state machine.

- 1.36+: a target above the node's allocatable is a 403 from PodResizeValidator (cause type NodeCapacity):
  the entry is Infeasible and goes to the fallback.
- Any version: a 403 from ResourceQuota admission ("exceeded quota") is skipped, never handed to the fallback.
- Any version: an eviction refused by a PodDisruptionBudget (429, or 403, cause type DisruptionBudget) is told
  apart from API Priority and Fairness' 429.
- Up to 1.35: the kubelet marks it Infeasible ("Node didn't have enough capacity"): restored, fallback.
- 1.36+: the allocatable window is Deferred: waited for, bounded by the Deferred timeout, then the fallback.
- 1.37: the kubelet's other Infeasible reasons (swap, memory-backed volumes, static CPU/Memory Manager,
  pod-level resize not allowed, feature off) are read into their cause and restored for the fallback.
The message texts are the ones in the v1.37.2 source (files named in ``updater/answers.py``).
"""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from kubernetes import client

from podtailor.kube.errors import TemporaryKubeError
from tests.builders.rollout import NEW, NOW, OLD, entry, obs, rollout
from updater.answers import (
    InfeasibleCause,
    Refusal,
    features_for,
    forbidden_refusal,
    infeasible_cause,
    too_many_requests_refusal,
)
from updater.kube.pods import convert_pod
from updater.kube.refusals import NotNow, Refused, refusal_of, write_error
from updater.rollout.machine import lifecycle as machine
from updater.rollout.machine.fallback import infeasible_uids
from updater.rollout.machine.journal import BatchPhase, EntryState

NODE_CAPACITY = {"kind": "Status", "status": "Failure", "reason": "Forbidden", "code": 403,
                 "message": "pods \"p\" is forbidden: node didn't have enough allocatable resources: cpu, requested: "
                            "5000, allocatable: 4000",
                 "details": {"name": "p", "kind": "pods", "causes": [{"reason": "NodeCapacity"}]}}
QUOTA = {"kind": "Status", "status": "Failure", "reason": "Forbidden", "code": 403,
         "message": "pods \"p\" is forbidden: exceeded quota: compute, requested: requests.cpu=500m, used: "
                    "requests.cpu=2, limited: requests.cpu=2",
         "details": {"name": "p", "kind": "pods"}}
RBAC = {"kind": "Status", "status": "Failure", "reason": "Forbidden", "code": 403,
        "message": "pods \"p\" is forbidden: User \"x\" cannot patch resource \"pods/resize\" in API group \"\"",
        "details": {"name": "p", "kind": "pods"}}


def api_error(status: int, body: dict[str, object]) -> client.ApiException:
    err = client.ApiException(status=status, reason="Forbidden")
    err.body = json.dumps(body)
    return err


def test_a_403_is_typed_by_its_cause_or_its_admission_plugin() -> None:
    assert refusal_of(write_error(api_error(403, NODE_CAPACITY), "resize")) == Refusal.ABOVE_ALLOCATABLE
    quota = write_error(api_error(403, QUOTA), "resize")
    assert isinstance(quota, Refused) and quota.kind == Refusal.QUOTA and "exceeded quota: compute" in str(quota)
    assert refusal_of(write_error(api_error(403, RBAC), "resize")) == Refusal.OTHER
    assert refusal_of(write_error(api_error(422, {"message": "Invalid"}), "resize")) == Refusal.OTHER
    # Without the cause type (stripped by a proxy), the plugin's own message still tells it.
    assert forbidden_refusal(str(NODE_CAPACITY["message"])) == Refusal.ABOVE_ALLOCATABLE
    # A quota that needs limits ("must specify", pods.go Constraints) is a quota refusal too.
    assert forbidden_refusal('pods "p" is forbidden: must specify limits.cpu for: app') == Refusal.QUOTA


PDB_429 = {"kind": "Status", "status": "Failure", "reason": "TooManyRequests", "code": 429,
           "message": "Cannot evict pod as it would violate the pod's disruption budget.",
           "details": {"causes": [{"reason": "DisruptionBudget",
                                   "message": "The disruption budget web needs 3 healthy pods and has 3 currently"}]}}
APF_429 = {"kind": "Status", "status": "Failure", "reason": "TooManyRequests", "code": 429,
           "message": "Too many requests, please try again later.", "details": {"retryAfterSeconds": 16}}


def test_a_429_is_a_disruption_budget_by_its_cause_and_otherwise_not_now() -> None:
    budget = write_error(api_error(429, PDB_429), "evict pod ns/p")
    assert isinstance(budget, NotNow) and isinstance(budget, TemporaryKubeError)
    assert refusal_of(budget) == Refusal.DISRUPTION_BUDGET
    assert str(budget) == ("evict pod ns/p: 429 Cannot evict pod as it would violate the pod's disruption budget. "
                           "(The disruption budget web needs 3 healthy pods and has 3 currently)")
    apf = api_error(429, APF_429)
    apf.headers = {"Retry-After": "16"}
    throttled = write_error(apf, "evict pod ns/p")
    assert refusal_of(throttled) == Refusal.NOT_NOW and throttled.retry_after_s == 16.0
    # Without the cause type (stripped by a proxy), the Eviction API's own message still tells it.
    assert too_many_requests_refusal(str(PDB_429["message"])) == Refusal.DISRUPTION_BUDGET
    assert too_many_requests_refusal("Cannot evict pod") == Refusal.NOT_NOW
    # A budget whose status is unusable answers 403 with the same cause type (eviction.go, checkAndDecrement).
    unusable = {"kind": "Status", "code": 403, "message": 'poddisruptionbudgets.policy "web" is forbidden: pdb '
                "disruptions allowed is negative", "details": {"causes": [{"reason": "DisruptionBudget"}]}}
    assert refusal_of(write_error(api_error(403, unusable), "evict pod ns/p")) == Refusal.DISRUPTION_BUDGET


def applying() -> machine.Rollout:
    r, effects = machine.advance(rollout(entry("a", 0), batches=1), {"ns/a": obs("a", OLD)}, NOW)
    assert [e.key for e in effects if isinstance(e, machine.Resize)] == ["ns/a"]
    return r


def test_above_allocatable_403_is_infeasible_and_goes_to_the_fallback() -> None:
    r = machine.settle(applying(), "ns/a", machine.Purpose.APPLY, ok=False, generation=None, now_s=NOW, error="403 ...",
                       refusal=Refusal.ABOVE_ALLOCATABLE)
    assert r.entries[0].state == EntryState.INFEASIBLE
    assert infeasible_uids([r]) == {"uid-a": "403 ..."}  # the next plan hands it to the fallback


def test_exceeded_quota_is_skipped_never_handed_to_the_fallback() -> None:
    r = machine.settle(applying(), "ns/a", machine.Purpose.APPLY, ok=False, generation=None, now_s=NOW,
                       error="resize pod ns/a: 403 exceeded quota: compute", refusal=Refusal.QUOTA)
    assert r.entries[0].state == EntryState.SKIPPED and r.entries[0].message.startswith("quota: ")
    assert infeasible_uids([r]) == {}
    assert r.batches[0].phase == BatchPhase.VERIFYING  # every resize answered: the batch goes on


def test_an_untyped_refusal_that_mentions_allocatable_is_only_a_skip() -> None:
    # The old string match took any error with "allocatable" in it for Infeasible; only the kind counts now.
    r = machine.settle(applying(), "ns/a", machine.Purpose.APPLY, ok=False, generation=None, now_s=NOW,
                       error="admission webhook denied: allocatable", refusal=Refusal.OTHER)
    assert r.entries[0].state == EntryState.SKIPPED


def verifying(pending: str, since: float, message: str) -> tuple[machine.Rollout, machine.PodObservation]:
    r = machine.settle(applying(), "ns/a", machine.Purpose.APPLY, ok=True, generation=2, now_s=NOW)
    o = obs("a", NEW, OLD, generation=2, observed=2, pending=pending, since=since)
    return r, replace(o, resize_pending_message=message,
                      infeasible_cause=infeasible_cause(message) if pending == "Infeasible" else None)


def test_kubelet_infeasible_up_to_1_35_is_restored_for_the_fallback() -> None:
    r, o = verifying("Infeasible", NOW, "Node didn't have enough capacity: cpu, requested: 5000, capacity: 4000")
    r2, effects = machine.advance(r, {"ns/a": o}, NOW + 1)
    assert r2.entries[0].state == EntryState.INFEASIBLE
    assert r2.entries[0].message.startswith("Infeasible (node-capacity): Node didn't have enough capacity")
    assert [(e.purpose, e.values) for e in effects if isinstance(e, machine.Resize)] == [("revert", (OLD,))]


def test_deferred_in_1_36_waits_for_the_timeout_then_goes_to_the_fallback() -> None:
    message = "Node didn't have enough resource: cpu, requested: 1500, used: 3000, capacity: 4000"
    r, o = verifying("Deferred", NOW, message)
    timeouts = machine.Timeouts(deferred_s=300.0)
    r2, effects = machine.advance(r, {"ns/a": o}, NOW + 299, timeouts=timeouts)
    assert r2.entries[0].state == EntryState.APPLIED and not [e for e in effects if isinstance(e, machine.Resize)]
    r3, effects = machine.advance(r, {"ns/a": o}, NOW + 301, timeouts=timeouts)
    assert r3.entries[0].state == EntryState.INFEASIBLE and "Deferred for more than 300s" in r3.entries[0].message
    assert [e.purpose for e in effects if isinstance(e, machine.Resize)] == ["revert"]
    assert features_for(1, 36).deferred_above_allocatable and not features_for(1, 35).deferred_above_allocatable


@pytest.mark.parametrize(("message", "cause"), [
    ("In-place resize of containers with swap is not supported.", InfeasibleCause.SWAP),
    ("Memory-backed emptyDir volume resize is disabled", InfeasibleCause.MEMORY_VOLUME),
    ("Memory-backed emptyDir volume resize is not supported on cgroups v1", InfeasibleCause.MEMORY_VOLUME),
    ('Resize is infeasible for Guaranteed Pods alongside CPU Manager policy "static"', InfeasibleCause.STATIC_POLICY),
    ('Resize is infeasible for Guaranteed Pods alongside Memory Manager policy "Static"',
     InfeasibleCause.STATIC_POLICY),
    ("InPlacePodLevelResourcesVerticalScaling is disabled", InfeasibleCause.POD_LEVEL),
    ("InPlacePodVerticalScaling is disabled", InfeasibleCause.NOT_SUPPORTED),
    ("In-place pod resize is not supported on Windows", InfeasibleCause.NOT_SUPPORTED),
    ("something new", InfeasibleCause.UNKNOWN),
])
def test_1_37_infeasible_reasons_are_typed_and_restored_for_the_fallback(message: str,
                                                                         cause: InfeasibleCause) -> None:
    r, o = verifying("Infeasible", NOW, message)
    assert o.infeasible_cause == cause
    r2, effects = machine.advance(r, {"ns/a": o}, NOW + 1)
    assert r2.entries[0].state == EntryState.INFEASIBLE and r2.entries[0].message.startswith(f"Infeasible ({cause})")
    assert [e.purpose for e in effects if isinstance(e, machine.Resize)] == ["revert"]


def test_the_pod_adapter_reads_the_cause_and_marks_mirror_pods() -> None:
    raw = {"metadata": {"namespace": "ns", "name": "p", "uid": "u", "generation": 2,
                        "creationTimestamp": "2026-01-01T00:00:00Z",
                        "annotations": {"kubernetes.io/config.mirror": "abc"}},
           "spec": {"nodeName": "n1", "priorityClassName": "high", "activeDeadlineSeconds": 60,
                    "containers": [{"name": "app", "resources": {"requests": {"cpu": "1"}}}]},
           "status": {"phase": "Running", "observedGeneration": 2, "conditions": [
               {"type": "PodResizePending", "status": "True", "reason": "Infeasible",
                "message": "In-place resize of containers with swap is not supported."}]}}
    view, observation = convert_pod(raw, {}, lambda *_: ("Pod", "p"))
    assert observation.infeasible_cause == InfeasibleCause.SWAP
    assert view is not None and view.static and view.priority_class == "high" and view.terminating


def test_an_oom_kill_is_read_while_the_container_is_still_down_not_only_once_restarted() -> None:
    def raw(status: dict[str, object]) -> dict[str, object]:
        return {"metadata": {"namespace": "ns", "name": "p", "uid": "u", "generation": 2,
                             "creationTimestamp": "2026-01-01T00:00:00Z"},
                "spec": {"nodeName": "n1", "containers": [{"name": "app", "resources": {}}]},
                "status": {"phase": "Running", "observedGeneration": 2, "containerStatuses": [
                    {"name": "app", "restartCount": 0, "containerID": "containerd://abc", **status}]}}

    killed = {"terminated": {"reason": "OOMKilled", "exitCode": 137, "finishedAt": "2026-01-01T00:01:00Z"}}
    _, down = convert_pod(raw({"state": killed, "lastState": {}}), {}, lambda *_: ("Pod", "p"))
    c = down.containers["app"]
    # 2026-01-01T00:01:00Z = 1767225660 s; the container ID without its runtime prefix.
    assert (c.last_termination_reason, c.last_termination_s, c.container_id) == ("OOMKilled", 1767225660.0, "abc")
    _, up = convert_pod(raw({"state": {"running": {}}, "lastState": killed}), {}, lambda *_: ("Pod", "p"))
    assert up.containers["app"].last_termination_reason == "OOMKilled"
    done = {"terminated": {"reason": "Completed", "exitCode": 0, "finishedAt": "2026-01-01T00:02:00Z"}}
    _, completed = convert_pod(raw({"state": done, "lastState": killed}), {}, lambda *_: ("Pod", "p"))
    assert completed.containers["app"].last_termination_reason == "OOMKilled"  # lastState's, as before


def test_versions_give_their_own_features() -> None:
    assert not features_for(1, 35).resize_validator and features_for(1, 36).resize_validator
    assert not features_for(1, 31).resize_subresource and features_for(1, 32).resize_subresource
    assert features_for(1, 37).pod_level_resize and not features_for(1, 35).pod_level_resize


def test_the_plan_says_which_answer_a_target_above_the_node_gets_and_skips_mirror_pods() -> None:
    from podtailor.resize.types import Reason
    from tests.builders.policy import ctarget, decide_one, pod, wtarget
    from updater.policy.types import Action

    above = wtarget(ctarget(cpu=6000))  # 6000m on a 4-core node
    old = decide_one(t=above, features=features_for(1, 35))
    new = decide_one(t=above, features=features_for(1, 37))
    assert old.reason == new.reason == Reason.ABOVE_NODE and old.action == new.action == Action.FALLBACK
    assert "the kubelet marks it Infeasible (up to 1.35)" in old.message
    assert "the API server refuses it (403, PodResizeValidator, 1.36+)" in new.message
    mirror = decide_one(pod(static=True))
    assert (mirror.action, mirror.reason) == (Action.SKIP, Reason.STATIC_POD)
