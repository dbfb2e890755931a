"""Every resizable surface, version by version: plain init containers, pod-level resources, and the Node
Declared Features refusal (``updater/policy/surfaces.py``, ``updater/answers.py``).

Per server version (``features_for``):
- 1.33-1.35: a plain init container's change is held (the API server refuses any change to one); the pod's
  other containers are resized. Pod-level resources cannot be resized (the snapshot says so up to 1.35).
- 1.36-1.37: a plain init container is resized in place, never restarted, unless its resizePolicy says
  RestartContainer (refused since 1.36) or its node does not declare InPlacePodVerticalScalingInitContainers
  (NodeDeclaredFeatureValidator): then it waits for the node, re-planned, nothing written. The same for a
  pod-level change and InPlacePodLevelResourcesVerticalScaling.
The refusal's text is the one in ``plugin/pkg/admission/nodedeclaredfeatures/admission.go`` (v1.37.2).
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest
from kubernetes import client

from podtailor.resize.types import Reason
from tests.builders.policy import GI, MI, container, ctarget, decide_one, node, pod, res, run, wtarget
from tests.builders.rollout import NOW, OLD, entry, obs, rollout
from updater.answers import NodeFeature, Refusal, ServerFeatures, features_for, forbidden_refusal
from updater.kube.fields import MalformedObject
from updater.kube.objects import convert_node
from updater.kube.pods import convert_pod
from updater.kube.refusals import Refused, refusal_of, write_error
from updater.kube.writes import resize_body
from updater.policy.quota import usage
from updater.policy.types import Action, PodDecision
from updater.rollout.machine import lifecycle as machine
from updater.rollout.machine.effects import resize_effect
from updater.rollout.machine.entries import entries_for
from updater.rollout.machine.fallback import infeasible_uids
from updater.rollout.machine.journal import ContainerValues, EntryState, from_object, to_status

VERSIONS = [(1, 33), (1, 34), (1, 35), (1, 36), (1, 37)]
NDF_MESSAGE = ('pods "web-0" is forbidden: pod update requires features InPlacePodVerticalScalingInitContainers '
               'which are not available on node "n1"')
NDF_STATUS = {"kind": "Status", "status": "Failure", "reason": "Forbidden", "code": 403, "message": NDF_MESSAGE,
              "details": {"name": "web-0", "kind": "pods"}}


def with_init(*, init_policy: dict[str, str] | None = None, **kw: Any) -> Any:
    """web-0 with app (500m) and a completed plain init container setup (200m, 256Mi)."""
    setup = container("setup", cpu=200, mem=256 * MI, policy=init_policy, init=True)
    return pod(containers=[container(), setup], **kw)


def decide_on(version: tuple[int, int], *, app_cpu: int = 750, setup_cpu: int | None = 400,
              declared: tuple[str, ...] = tuple(NodeFeature), **kw: Any) -> PodDecision:
    targets = [ctarget(cpu=app_cpu)] + ([ctarget("setup", cpu=setup_cpu, mem=256 * MI)] if setup_cpu else [])
    return decide_one(kw.pop("p", None) or with_init(), wtarget(*targets), features=features_for(*version),
                      nodes=[node(declared=declared)], **kw)


def changed(d: PodDecision) -> dict[str, int | None]:
    return {c.name: c.new_requests.cpu_millicores for c in d.changes}


# ------------------------------------------------------------------------------------- server versions
@pytest.mark.parametrize("version", VERSIONS)
def test_what_each_version_gives(version: tuple[int, int]) -> None:
    f = features_for(*version)
    since_136 = version >= (1, 36)
    assert (f.init_container_resize, f.node_declared_features, f.pod_level_resize) == (since_136,) * 3


@pytest.mark.parametrize("version", [(1, 33), (1, 34), (1, 35)])
def test_up_to_1_35_an_init_container_is_held_and_the_app_resized(version: tuple[int, int]) -> None:
    d = decide_on(version)
    assert (d.action, d.reason) == (Action.RESIZE_ONLINE, Reason.CHANGE)
    assert changed(d) == {"app": 750}  # setup's 200m -> 400m is left out
    assert "init container setup kept: plain init containers are resizable in place from 1.36" in d.message
    only_init = decide_on(version, app_cpu=500)  # nothing else to do: a skip that says why
    assert only_init.action == Action.SKIP and only_init.changes == ()
    assert "resizable in place from 1.36" in only_init.message


@pytest.mark.parametrize("version", [(1, 36), (1, 37)])
def test_from_1_36_an_init_container_is_resized_in_place_never_restarted(version: tuple[int, int]) -> None:
    d = decide_on(version)
    assert (d.action, d.reason) == (Action.RESIZE_ONLINE, Reason.CHANGE)
    assert changed(d) == {"app": 750, "setup": 400}
    assert not any(c.restarts for c in d.changes)
    only_init = decide_on(version, app_cpu=500)  # 200m -> 400m is +100%: worth a resize on its own
    assert only_init.action == Action.RESIZE_ONLINE and changed(only_init) == {"setup": 400}


@pytest.mark.parametrize("version", [(1, 36), (1, 37)])
def test_an_init_container_with_restart_container_is_held(version: tuple[int, int]) -> None:
    d = decide_on(version, p=with_init(init_policy={"cpu": "RestartContainer"}))
    assert d.action == Action.RESIZE_ONLINE and changed(d) == {"app": 750}
    assert "init container setup kept: its resizePolicy RestartContainer" in d.message


@pytest.mark.parametrize("version", [(1, 36), (1, 37)])
def test_a_node_without_the_feature_makes_the_init_change_wait(version: tuple[int, int]) -> None:
    undeclared = (NodeFeature.POD_LEVEL_RESIZE.value,)
    only_init = decide_on(version, app_cpu=500, declared=undeclared)
    assert (only_init.action, only_init.reason) == (Action.SKIP, Reason.NODE_FEATURE)
    assert only_init.message == ("init container setup waits for node n1 to declare "
                                 "InPlacePodVerticalScalingInitContainers (re-planned every pass, nothing written "
                                 "before)")
    both = decide_on(version, declared=undeclared)  # the app goes ahead, the init container waits
    assert both.action == Action.RESIZE_ONLINE and changed(both) == {"app": 750}
    assert "setup waits for node n1" in both.message
    small = decide_on(version, app_cpu=500, setup_cpu=210, declared=undeclared)  # +5%: not worth waiting for
    assert small.reason in (Reason.WITHIN_BOUNDS, Reason.BELOW_THRESHOLD)


def test_the_next_pass_after_the_node_declares_it_resizes() -> None:
    waiting = decide_on((1, 37), app_cpu=500, declared=())
    assert waiting.reason == Reason.NODE_FEATURE
    upgraded = decide_on((1, 37), app_cpu=500, declared=(NodeFeature.INIT_CONTAINER_RESIZE.value,))
    assert upgraded.action == Action.RESIZE_ONLINE and changed(upgraded) == {"setup": 400}


def test_init_containers_count_as_the_api_server_counts_them() -> None:
    # Node 3000m. app 1500m -> 1600m, setup 200m -> 2000m: the aggregate is max(1600, 2000) = 2000m <= 3000m
    # (a plain sum, 3600m, would have called it above the node); setup 200m -> 3500m is above it.
    p = pod(containers=[container(cpu=1500), container("setup", cpu=200, init=True)])
    nodes = [node(cpu=3000)]
    fits = run([p], [wtarget(ctarget(cpu=1600), ctarget("setup", cpu=2000))], nodes=nodes).decisions[0]
    assert fits.action == Action.RESIZE_ONLINE
    above = run([p], [wtarget(ctarget(cpu=1600), ctarget("setup", cpu=3500))], nodes=nodes).decisions[0]
    assert above.reason == Reason.ABOVE_NODE


def test_quota_usage_takes_the_larger_of_the_sum_and_an_init_container() -> None:
    # app 500m + sidecar 100m = 600m; setup 200m + the sidecar's 100m = 300m: 600m. After setup -> 900m:
    # 900m + 100m = 1000m > 600m.
    p = pod(containers=[container("proxy", cpu=100, sidecar=True), container(), container("setup", cpu=200,
                                                                                             init=True)])
    d = run([p], [wtarget(ctarget("setup", cpu=900))]).decisions[0]
    assert d.action == Action.RESIZE_ONLINE
    assert usage(p, d, new=False, with_status=False).requests["cpu"] == 600
    assert usage(p, d, new=True, with_status=False).requests["cpu"] == 1000


# ------------------------------------------------------------------------------------ pod-level resources
def test_pod_level_waits_for_a_node_that_does_not_declare_it() -> None:
    p = pod(pod_level=res(cpu=1000, mem=GI))
    ready = decide_one(p, features=features_for(1, 37))
    assert ready.action == Action.RESIZE_ONLINE and ready.new_pod_level == res(1500, GI)
    d = decide_one(p, features=features_for(1, 37), nodes=[node(declared=())])
    assert (d.action, d.reason) == (Action.SKIP, Reason.NODE_FEATURE)
    assert "InPlacePodLevelResourcesVerticalScaling" in d.message


@pytest.mark.parametrize("version", [(1, 33), (1, 34), (1, 35)])
def test_pod_level_up_to_1_35_is_unsupported(version: tuple[int, int]) -> None:
    features = features_for(*version)
    d = decide_one(pod(pod_level=res(cpu=1000, mem=GI)), features=features,
                   pod_level_resize_supported=features.pod_level_resize)
    assert (d.action, d.reason) == (Action.SKIP, Reason.POD_LEVEL_UNSUPPORTED)


def test_pod_level_scales_with_the_aggregate_not_the_sum() -> None:
    # pod-level 2000m; app 500m, setup (init) 1000m: aggregate 1000m. app -> 750m leaves it at 1000m: unchanged.
    # setup -> 1500m makes it 1500m: x1.5, so 2000m -> 3000m.
    p = pod(containers=[container(), container("setup", cpu=1000, init=True)], pod_level=res(cpu=2000, mem=GI))
    app_only = decide_one(p, features=features_for(1, 37))
    assert app_only.action == Action.RESIZE_ONLINE and app_only.new_pod_level is None
    d = decide_one(p, wtarget(ctarget(cpu=500), ctarget("setup", cpu=1500)), features=features_for(1, 37))
    assert d.new_pod_level == res(3000, GI)


# --------------------------------------------------------------------------- the refusal and the writes
def test_the_node_declared_features_403_is_typed() -> None:
    assert forbidden_refusal(NDF_MESSAGE) == Refusal.NODE_FEATURE
    err = client.ApiException(status=403, reason="Forbidden")
    err.body = json.dumps(NDF_STATUS)
    refused = write_error(err, "resize pod shop/web-0")
    assert isinstance(refused, Refused) and refusal_of(refused) == Refusal.NODE_FEATURE
    # The DRA text of the same plugin is not a resize's refusal.
    assert forbidden_refusal('pods "p" is forbidden: node "n1" does not support DRANodeAllocatableResources '
                             'feature') == Refusal.OTHER


def test_a_refused_resize_waits_for_the_node_and_never_goes_to_the_fallback() -> None:
    r, _ = machine.advance(rollout(entry("a", 0), batches=1), {"ns/a": obs("a", OLD)}, NOW)
    r = machine.settle(r, "ns/a", machine.Purpose.APPLY, ok=False, generation=None, now_s=NOW,
                       error=f"resize pod ns/a: 403 {NDF_MESSAGE}", refusal=Refusal.NODE_FEATURE)
    assert r.entries[0].state == EntryState.SKIPPED
    assert r.entries[0].message.startswith("node feature: ") and "once the node declares" in r.entries[0].message
    assert infeasible_uids([r]) == {}


def test_the_resize_body_carries_init_containers_and_the_journal_keeps_the_kind() -> None:
    setup = ContainerValues(name="setup", requests=res(400, 256 * MI), limits=res(), init=True)
    app = ContainerValues(name="app", requests=res(750, 512 * MI), limits=res())
    body = resize_body("uid-1", "42", [app, setup])
    assert body["spec"] == {"containers": [{"name": "app", "resources": {"requests": {"cpu": "750m",
                                                                                      "memory": "512Mi"}}}],
                            "initContainers": [{"name": "setup", "resources": {"requests": {"cpu": "400m",
                                                                                            "memory": "256Mi"}}}]}
    r = rollout(replace(entry("a", 0), before=(setup,), after=(setup,)))
    status = to_status(r)
    assert status["entries"][0]["before"][0]["init"] is True
    obj = {"metadata": {"name": "r", "resourceVersion": "1"}, "spec": {"pool": "p1", "policy": "default"},
           "status": status}
    assert from_object(obj).entries[0].before == (setup,)


def test_a_pods_plain_init_containers_are_read_with_their_status() -> None:
    raw = {"metadata": {"namespace": "ns", "name": "p", "uid": "u", "generation": 1,
                        "creationTimestamp": "2026-01-01T00:00:00Z"},
           "spec": {"nodeName": "n1", "initContainers": [
               {"name": "setup", "resources": {"requests": {"cpu": "200m"}}},
               {"name": "proxy", "restartPolicy": "Always", "resources": {"requests": {"cpu": "100m"}}}],
               "containers": [{"name": "app", "resources": {"requests": {"cpu": "1"}}}]},
           "status": {"phase": "Running", "observedGeneration": 1, "initContainerStatuses": [
               {"name": "setup", "restartCount": 0, "resources": {"requests": {"cpu": "200m"}},
                "state": {"terminated": {"reason": "Completed", "exitCode": 0}}}]}}
    view, observation = convert_pod(raw, {}, lambda *_: ("Pod", "p"))
    assert view is not None
    assert [(c.name, c.sidecar, c.init) for c in view.containers] == [("proxy", True, False), ("app", False, False),
                                                                      ("setup", False, True)]
    assert observation.containers["setup"].actual_requests == res(200)


def test_a_nodes_declared_features_are_read_and_a_bad_list_is_malformed() -> None:
    raw: dict[str, Any] = {"metadata": {"name": "n1"}, "status": {"declaredFeatures": [
        "InPlacePodVerticalScalingInitContainers", "InPlacePodLevelResourcesVerticalScaling"]}}
    assert convert_node(raw, None).declared_features == frozenset(NodeFeature)
    assert convert_node({"metadata": {"name": "n0"}, "status": {}}, None).declared_features == frozenset()
    with pytest.raises(MalformedObject, match="declaredFeatures"):
        convert_node({"metadata": {"name": "n2"}, "status": {"declaredFeatures": "all"}}, None)


def test_server_features_default_to_the_older_answers() -> None:
    old = ServerFeatures(resize_subresource=True, resize_validator=False, pod_level_resize=False,
                         deferred_above_allocatable=False)
    assert (old.init_container_resize, old.node_declared_features) == (False, False)


def test_a_pod_level_change_is_journaled_written_with_the_containers_and_restored() -> None:
    # pod-level cpu 1000m over app 500m; app 500m -> 750m (x1.5): pod-level 1000m -> 1500m, memory 1Gi kept.
    p = pod(pod_level=res(cpu=1000, mem=GI))
    result = run([p], features=features_for(1, 37))
    _, entries = entries_for(result.decisions, result, "general", {}, {"shop/web-0": p})
    (e,) = entries
    assert (e.pod_level_before, e.pod_level_after) == (res(1000, GI), res(1500, GI))
    apply, revert = resize_effect(e, machine.Purpose.APPLY), resize_effect(e, machine.Purpose.REVERT)
    assert (apply.pod_level, revert.pod_level) == (res(1500, GI), res(1000, GI))
    body = resize_body("uid", "1", apply.values, apply.pod_level)
    assert body["spec"]["resources"] == {"requests": {"cpu": "1500m", "memory": "1Gi"}}
    assert body["spec"]["containers"][0]["resources"]["requests"]["cpu"] == "750m"
    assert "resources" not in resize_body("uid", "1", apply.values)["spec"]
    obj = {"metadata": {"name": "r", "resourceVersion": "1"}, "spec": {"pool": "p1", "policy": "default"},
           "status": to_status(rollout(e, batches=1))}
    assert from_object(obj).entries == (e,)


def test_a_pod_without_pod_level_resources_journals_none() -> None:
    result = run(features=features_for(1, 37))
    _, (e,) = entries_for(result.decisions, result, "general", {}, {"shop/web-0": pod()})
    assert (e.pod_level_before, e.pod_level_after) == (None, None)
    assert "podLevelAfter" not in to_status(rollout(e, batches=1))["entries"][0]


def test_a_fallback_carries_no_init_container_change() -> None:
    # Node 3000m: app 1500m -> 3500m is above it (fallback); setup 200m -> 400m would be resizable in place,
    # but a replacement never changes a plain init container, so the fallback carries app's change alone.
    p = pod(containers=[container(cpu=1500), container("setup", cpu=200, init=True)])
    d = run([p], [wtarget(ctarget(cpu=3500), ctarget("setup", cpu=400))], nodes=[node(cpu=3000)],
            features=features_for(1, 37)).decisions[0]
    assert (d.action, d.reason) == (Action.FALLBACK, Reason.ABOVE_NODE)
    assert changed(d) == {"app": 3500}


def test_a_change_above_the_pod_level_limit_is_left_alone_with_why() -> None:
    # Pod-level requests 1000m, limit 1200m: app 500m -> 750m derives pod-level 1500m (x1.5) > 1200m.
    p = pod(pod_level=res(cpu=1000, mem=GI), pod_level_limits=res(cpu=1200))
    d = decide_one(p, features=features_for(1, 37))
    assert (d.action, d.reason) == (Action.SKIP, Reason.POD_LEVEL_LIMIT)
    assert d.message.startswith("pod-level cpu request would be 1500 above the pod-level limit 1200")
    # Pod-level limit only: app's limit 1000m -> 1500m (the ratio kept) would pass the pod-level limit 1200m.
    q = pod(containers=[container(cpu_lim=1000)], pod_level_limits=res(cpu=1200))
    d = decide_one(q, features=features_for(1, 37))
    assert (d.action, d.reason) == (Action.SKIP, Reason.POD_LEVEL_LIMIT) and "cpu limit of app" in d.message
    # Room under a pod-level limit of 2 CPUs: resized.
    assert decide_one(replace(p, pod_level_limits=res(cpu=2000)), features=features_for(1, 37)).action == \
        Action.RESIZE_ONLINE


def test_a_pods_pod_level_limits_are_read() -> None:
    raw = {"metadata": {"namespace": "ns", "name": "p", "uid": "u", "generation": 1,
                        "creationTimestamp": "2026-01-01T00:00:00Z"},
           "spec": {"nodeName": "n1", "resources": {"requests": {"cpu": "1"}, "limits": {"cpu": "2"}},
                    "containers": [{"name": "app"}]},
           "status": {"phase": "Running", "observedGeneration": 1}}
    view, _ = convert_pod(raw, {}, lambda *_: ("Pod", "p"))
    assert view is not None and (view.pod_level, view.pod_level_limits) == (res(1000), res(2000))
