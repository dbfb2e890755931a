"""Worked examples of the planner's per-pod decisions (NOW = 1_700_000_000.0, a Tuesday 22:13 UTC)."""

from __future__ import annotations

from podtailor.resize.types import Reason
from podtailor.vpa import UpdateMode
from tests.builders.policy import (
    GI,
    MI,
    NOW,
    container,
    ctarget,
    decide_one,
    node,
    only,
    pod,
    res,
    run,
    wtarget,
)
from updater.policy.types import Action, FallbackMode, MaintenanceWindow, RolloutPolicy

RESTART_CPU = {"cpu": "RestartContainer"}


def test_plain_increase_is_an_online_resize() -> None:
    d = decide_one()  # 500m -> 750m, +50%
    assert (d.action, d.reason) == (Action.RESIZE_ONLINE, Reason.CHANGE)
    assert d.changes[0].new_requests == res(750, 512 * MI)


def test_below_threshold_and_within_bounds() -> None:
    # 500m -> 520m is +4% < 10%; the request 500m lies inside [400m, 600m]: within bounds.
    inside = ctarget(cpu=520, lower=res(400, MI), upper=res(600, GI))
    assert decide_one(t=wtarget(inside)).reason == Reason.WITHIN_BOUNDS
    # Same 4% but the request is below lowerBound 510m: still too small a change.
    outside = ctarget(cpu=520, lower=res(510, MI), upper=res(600, GI))
    d = decide_one(t=wtarget(outside))
    assert (d.action, d.reason) == (Action.SKIP, Reason.BELOW_THRESHOLD)
    # A 50% change inside the bounds goes ahead (VPA: within bounds and diff >= threshold is eligible).
    big = ctarget(cpu=750, lower=res(400, MI), upper=res(800, GI))
    assert decide_one(t=wtarget(big)).action == Action.RESIZE_ONLINE


def test_stale_target_blocks_decreases_but_not_increases() -> None:
    # stale, 500m -> 300m (-40%): decrease withheld, nothing left: STALE_TARGET.
    d = decide_one(t=wtarget(ctarget(cpu=300), stale=True))
    assert (d.action, d.reason) == (Action.SKIP, Reason.STALE_TARGET)
    # stale, 500m -> 750m: increases may proceed.
    assert decide_one(t=wtarget(ctarget(cpu=750), stale=True)).action == Action.RESIZE_ONLINE
    # stale, cpu up 500m -> 750m and memory down 512Mi -> 256Mi: only the cpu increase is applied.
    d = decide_one(t=wtarget(ctarget(cpu=750, mem=256 * MI), stale=True))
    assert d.action == Action.RESIZE_ONLINE and d.changes[0].new_requests == res(750, 512 * MI)


def test_restart_policy_never_with_restart_container_falls_back() -> None:
    p = pod(containers=[container(policy=RESTART_CPU)], restart_policy="Never")
    d = decide_one(p)
    assert (d.action, d.reason) == (Action.FALLBACK, Reason.NEVER_RESTART)


def test_maintenance_window() -> None:
    p = pod(containers=[container(policy=RESTART_CPU)])
    tuesday_night = MaintenanceWindow(days=frozenset({1}), start_minute=22 * 60, end_minute=23 * 60)
    monday_early = MaintenanceWindow(days=frozenset({0}), start_minute=2 * 60, end_minute=4 * 60)
    d = decide_one(p, policy=RolloutPolicy(maintenance_windows=(monday_early,)))
    assert (d.action, d.reason) == (Action.SKIP, Reason.OUTSIDE_WINDOW)
    d = decide_one(p, policy=RolloutPolicy(maintenance_windows=(monday_early, tuesday_night)))
    assert (d.action, d.reason) == (Action.RESIZE_RESTART, Reason.CHANGE)
    # An over-midnight window Tue 23:00 -> 01:00 covers Wednesday 00:30 (NOW + 2h17m) but not NOW (22:13).
    overnight = RolloutPolicy(maintenance_windows=(
        MaintenanceWindow(days=frozenset({1}), start_minute=23 * 60, end_minute=60),))
    assert decide_one(p, policy=overnight).reason == Reason.OUTSIDE_WINDOW
    assert decide_one(p, policy=overnight, now_s=NOW + 8220).action == Action.RESIZE_RESTART
    # Online changes ignore windows.
    assert decide_one(policy=RolloutPolicy(maintenance_windows=(monday_early,))).action == Action.RESIZE_ONLINE


def test_restart_approval() -> None:
    p = pod(containers=[container(policy=RESTART_CPU)])
    policy = RolloutPolicy(require_approval_for_restart=True)
    d = decide_one(p, policy=policy)
    assert (d.action, d.reason) == (Action.SKIP, Reason.AWAITING_APPROVAL)
    d = decide_one(p, policy=policy, approvals=frozenset({("shop", "Deployment", "web")}))
    assert d.action == Action.RESIZE_RESTART


def test_single_replica_do_not_disrupt_and_bare_pods_are_not_replaced() -> None:
    infeasible = pod(resize_pending="Infeasible")
    d = decide_one(infeasible, wtarget(replicas=1))
    assert (d.action, d.reason) == (Action.SKIP, Reason.SINGLE_REPLICA)
    d = decide_one(infeasible, wtarget(replicas=1), policy=RolloutPolicy(allow_single_replica_eviction=True))
    assert (d.action, d.reason) == (Action.FALLBACK, Reason.INFEASIBLE)
    for key, value in (("karpenter.sh/do-not-disrupt", "true"),
                       ("cluster-autoscaler.kubernetes.io/safe-to-evict", "false")):
        d = decide_one(pod(resize_pending="Infeasible", annotations={key: value}))
        assert (d.action, d.reason) == (Action.SKIP, Reason.DO_NOT_DISRUPT)
    bare = pod(resize_pending="Infeasible", kind="Pod")
    assert decide_one(bare, wtarget(kind="Pod")).reason == Reason.NO_CONTROLLER


def test_fallback_disabled_and_in_place_mode_skip_with_the_same_reason() -> None:
    d = decide_one(pod(resize_pending="Infeasible"), policy=RolloutPolicy(fallback=FallbackMode.NONE))
    assert (d.action, d.reason) == (Action.SKIP, Reason.INFEASIBLE) and d.message.startswith("fallback disabled")
    d = decide_one(pod(resize_pending="Infeasible"), wtarget(mode=UpdateMode.IN_PLACE))
    assert (d.action, d.reason) == (Action.SKIP, Reason.INFEASIBLE)


def test_frozen_pool() -> None:
    # 1 of 2 nodes NotReady: 0.5 > 0 freezes with the default fraction 0, not with fraction 0.5.
    nodes = [node("n1"), node("n2", ready=False)]
    result = run(nodes=nodes)
    assert "general" in result.frozen_pools and "n2" in result.frozen_pools["general"]
    assert result.decisions[0].reason == Reason.POOL_FROZEN and not result.batches
    assert not run(nodes=nodes, policy=RolloutPolicy(unhealthy_pool_fraction=0.5)).frozen_pools
    assert run(nodes=[node("n1", pressure=True)]).decisions[0].reason == Reason.POOL_FROZEN


def test_pending_resizes() -> None:
    d = decide_one(pod(resize_pending="Infeasible"))
    assert (d.action, d.reason) == (Action.FALLBACK, Reason.INFEASIBLE)
    # Deferred 301s ago > 300s timeout: fallback; 100s ago: still in flight; unknown age: in flight.
    d = decide_one(pod(resize_pending="Deferred", resize_pending_since_s=NOW - 301))
    assert (d.action, d.reason) == (Action.FALLBACK, Reason.DEFERRED_TIMEOUT)
    for since in (NOW - 100, None):
        d = decide_one(pod(resize_pending="Deferred", resize_pending_since_s=since))
        assert (d.action, d.reason) == (Action.SKIP, Reason.RESIZE_IN_FLIGHT)
    d = decide_one(pod(resize_in_progress=True, resize_in_progress_since_s=NOW - 3601))
    assert (d.action, d.reason) == (Action.FALLBACK, Reason.IN_PROGRESS_TIMEOUT)
    assert decide_one(pod(resize_in_progress=True)).reason == Reason.RESIZE_IN_FLIGHT
    assert decide_one(pod(generation=3, observed_generation=2)).reason == Reason.RESIZE_IN_FLIGHT


def test_above_node_allocatable_falls_back() -> None:
    # node allocatable 1000m; target 1500m for the only container -> 1500m > 1000m.
    d = decide_one(t=wtarget(ctarget(cpu=1500)), nodes=[node(cpu=1000)])
    assert (d.action, d.reason) == (Action.FALLBACK, Reason.ABOVE_NODE)
    assert "cpu requests 1500m > node n1 allocatable 1" in d.message


def test_best_effort_pods_are_left_alone() -> None:
    d = decide_one(pod(containers=[container(cpu=None, mem=None)]))
    assert (d.action, d.reason) == (Action.SKIP, Reason.BEST_EFFORT)


def test_pod_and_target_skips() -> None:
    assert decide_one(pod(deleting=True)).reason == Reason.DELETING
    assert only(run(targets=[])).reason == Reason.NO_TARGET
    for mode in (UpdateMode.OFF, UpdateMode.INITIAL):
        assert decide_one(t=wtarget(mode=mode)).reason == Reason.UPDATE_MODE
    for mode in (UpdateMode.RECREATE, UpdateMode.AUTO, UpdateMode.IN_PLACE):
        assert decide_one(t=wtarget(mode=mode)).action == Action.RESIZE_ONLINE
    assert decide_one(pod(ready=False)).reason == Reason.NOT_READY
    assert decide_one(pod(created_s=NOW - 299)).reason == Reason.TOO_YOUNG
    assert decide_one(pod(node="gone")).reason == Reason.NODE_UNKNOWN


def test_policy_coverage() -> None:
    kube = pod(ns="kube-system")
    assert only(run([kube], [wtarget(ns="kube-system")])).reason == Reason.NOT_COVERED
    assert decide_one(policy=RolloutPolicy(namespaces=frozenset({"other"}))).reason == Reason.NOT_COVERED
    selector = RolloutPolicy(workload_selector={"tier": "web"})
    assert decide_one(policy=selector).reason == Reason.NOT_COVERED
    assert decide_one(pod(labels={"tier": "web"}), policy=selector).action == Action.RESIZE_ONLINE


def test_pod_level_resources_scale_with_the_containers() -> None:
    # pod-level cpu 1000m over containers summing 500m; 500m -> 750m is x1.5, so pod-level 1000m -> 1500m.
    p = pod(pod_level=res(cpu=1000, mem=GI))
    d = decide_one(p)
    assert d.action == Action.RESIZE_ONLINE and d.new_pod_level == res(1500, GI)
    d = decide_one(p, pod_level_resize_supported=False)
    assert (d.action, d.reason) == (Action.SKIP, Reason.POD_LEVEL_UNSUPPORTED)
