"""Unit tests for tests.nodesim.resize: kubelet 1.37 resize admission, queue order, restarts, messages."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.nodesim.resize import (
    ContainerResources,
    NodeCapacity,
    PendingResize,
    PodResources,
    QOSClass,
    ResizeOutcome,
    containers_to_restart,
    decide_resize,
    infeasible_message,
    memory_decrease_message,
    memory_limit_error,
    order_pending,
    retry_pending,
)

GI = 2**30
NODE = NodeCapacity(cpu_millicores=4000, memory_bytes=8 * GI, pods=110)


def pod(uid: str, cpu: int, memory: int, *, priority: int = 0, guaranteed: bool = False) -> PodResources:
    limits = {"cpu_limit_millicores": cpu, "memory_limit_bytes": memory} if guaranteed else {}
    c = ContainerResources(name="app", cpu_request_millicores=cpu, memory_request_bytes=memory, **limits)
    return PodResources(uid=uid, containers=(c,), priority=priority)


def test_qos_class() -> None:
    assert PodResources(uid="a", containers=(ContainerResources(name="c"),)).qos_class is QOSClass.BEST_EFFORT
    assert pod("b", 100, GI).qos_class is QOSClass.BURSTABLE
    assert pod("c", 100, GI, guaranteed=True).qos_class is QOSClass.GUARANTEED
    # Limits only: requests default to the limits -> Guaranteed.
    limits_only = ContainerResources(name="c", cpu_limit_millicores=500, memory_limit_bytes=GI)
    assert PodResources(uid="d", containers=(limits_only,)).qos_class is QOSClass.GUARANTEED
    assert limits_only.effective_cpu_request_millicores == 500
    # One container without a memory limit makes the whole pod Burstable.
    mixed = (limits_only, ContainerResources(name="e", cpu_limit_millicores=100))
    assert PodResources(uid="e", containers=mixed).qos_class is QOSClass.BURSTABLE


def test_above_the_whole_allocatable_is_deferred_not_infeasible() -> None:
    # kubelet 1.36+ dropped canResizePod's Infeasible capacity check; the fit check defers instead
    # (seen on a real kubelet v1.37.2 by tests/conformance).
    decision = decide_resize(NODE, pod("p", 5000, GI), pod("p", 1000, GI), [])
    assert decision.outcome is ResizeOutcome.DEFERRED
    assert decision.reason == "Deferred"
    assert decision.message == "Node didn't have enough resource: cpu, requested: 5000, used: 0, capacity: 4000"


def test_cpu_reported_before_memory_when_both_exceed() -> None:
    decision = decide_resize(NODE, pod("p", 5000, 9 * GI), pod("p", 1000, GI), [])
    assert decision.message == "Node didn't have enough resource: cpu, requested: 5000, used: 0, capacity: 4000"


def test_deferred_message_uses_others_allocated() -> None:
    others = [pod("o1", 1500, GI), pod("o2", 1000, GI)]  # used cpu = 2500m
    decision = decide_resize(NODE, pod("p", 2000, GI), pod("p", 1000, GI), others)
    # 2000 > 4000 - 2500 = 1500 -> Deferred
    assert decision.outcome is ResizeOutcome.DEFERRED
    assert decision.reason == "Deferred"
    assert decision.message == "Node didn't have enough resource: cpu, requested: 2000, used: 2500, capacity: 4000"


def test_deferred_memory_after_cpu_fits() -> None:
    others = [pod("o1", 100, 6 * GI)]
    decision = decide_resize(NODE, pod("p", 200, 3 * GI), pod("p", 100, GI), others)
    # cpu: 200 <= 4000 - 100; memory: 3Gi > 8Gi - 6Gi -> memory message
    assert decision.message == (
        "Node didn't have enough resource: memory, requested: 3221225472, used: 6442450944, capacity: 8589934592"
    )


def test_deferred_too_many_pods() -> None:
    node = NodeCapacity(cpu_millicores=4000, memory_bytes=8 * GI, pods=2)
    decision = decide_resize(node, pod("p", 200, GI), pod("p", 100, GI), [pod("a", 1, 1), pod("b", 1, 1)])
    assert decision.message == "Node didn't have enough resource: pods, requested: 1, used: 2, capacity: 2"


def test_accept_and_unchanged() -> None:
    assert decide_resize(NODE, pod("p", 2000, GI), pod("p", 1000, GI), [pod("o", 2000, GI)]).outcome is (
        ResizeOutcome.ACCEPT  # 2000 <= 4000 - 2000
    )
    same = decide_resize(NODE, pod("p", 9000, GI), pod("p", 9000, GI), [])
    assert same.outcome is ResizeOutcome.ACCEPT and same.message == ""
    # The pod itself in others_allocated is ignored (kubelet filters it out).
    assert decide_resize(NODE, pod("p", 3000, GI), pod("p", 2000, GI), [pod("p", 2000, GI)]).outcome is (
        ResizeOutcome.ACCEPT
    )


def test_requests_default_to_limits_in_admission() -> None:
    desired = PodResources(uid="p", containers=(
        ContainerResources(name="c", cpu_limit_millicores=4500, memory_limit_bytes=GI),))
    decision = decide_resize(NODE, desired, pod("p", 1000, GI), [])
    assert decision.message == "Node didn't have enough resource: cpu, requested: 4500, used: 0, capacity: 4000"


def pending(uid: str, old_cpu: int, new_cpu: int, *, priority: int = 0, guaranteed: bool = False,
            since: float | None = 0.0) -> PendingResize:
    return PendingResize(desired=pod(uid, new_cpu, GI, priority=priority, guaranteed=guaranteed),
                         allocated=pod(uid, old_cpu, GI, priority=priority, guaranteed=guaranteed),
                         pending_since_s=since)


def test_order_pending() -> None:
    items = [
        pending("late-low", 100, 200, since=50.0),
        pending("early-low", 100, 200, since=10.0),
        pending("no-since", 100, 200, since=None),
        pending("guaranteed", 100, 200, guaranteed=True, since=90.0),
        pending("high-priority", 100, 200, priority=1000, since=99.0),
        pending("shrink", 200, 100, since=100.0),
    ]
    ordered = [p.uid for p in order_pending(items)]
    assert ordered == ["shrink", "high-priority", "guaranteed", "early-low", "late-low", "no-since"]


def test_retry_pending_head_does_not_block_and_shrink_frees_room() -> None:
    allocated = {
        "big": pod("big", 1000, GI),
        "small": pod("small", 500, GI),
        "shrinker": pod("shrinker", 2000, GI),
    }  # used = 3500m of 4000m
    items = [
        pending("big", 1000, 3500, priority=100, since=1.0),
        pending("small", 500, 1500, since=2.0),
        pending("shrinker", 2000, 200, since=3.0),
    ]
    result = retry_pending(NODE, items, allocated)
    # shrinker first (does not increase requests): 2000m -> 200m.
    # big next (priority 100): others = small 500 + shrinker 200 = 700; 3500 > 4000 - 700 -> Deferred.
    # small last: others = big 1000 (still allocated) + shrinker 200; 1500 <= 4000 - 1200 -> accepted.
    assert [p.uid for p in result.accepted] == ["shrinker", "small"]
    [(still, decision)] = result.still_pending
    assert still.uid == "big"
    assert decision.message == "Node didn't have enough resource: cpu, requested: 3500, used: 700, capacity: 4000"
    assert result.allocated["small"].cpu_request_millicores == 1500
    assert allocated["small"].cpu_request_millicores == 500  # input not mutated


def test_containers_to_restart() -> None:
    old = PodResources(uid="p", containers=(
        ContainerResources(name="a", cpu_request_millicores=100, memory_request_bytes=GI),
        ContainerResources(name="b", cpu_request_millicores=100, memory_limit_bytes=GI),
        ContainerResources(name="c", cpu_request_millicores=100),
    ))
    new = PodResources(uid="p", containers=(
        ContainerResources(name="a", cpu_request_millicores=200, memory_request_bytes=GI),  # cpu changed
        ContainerResources(name="b", cpu_request_millicores=100, memory_limit_bytes=2 * GI),  # memory changed
        ContainerResources(name="c", cpu_request_millicores=300),  # cpu changed, policy unset
    ))
    policy = {"a": {"memory": "RestartContainer"}, "b": {"memory": "RestartContainer", "cpu": "NotRequired"}}
    assert containers_to_restart(old, new, policy) == {"b"}
    assert containers_to_restart(old, new, {"a": {"cpu": "RestartContainer"}}) == {"a"}
    assert containers_to_restart(old, new, {}) == set()


def test_memory_limit_error() -> None:
    c = ContainerResources(name="app", memory_request_bytes=GI, memory_limit_bytes=2 * GI)
    assert memory_limit_error(c, GI, 1_500_000_000) == (
        'attempting to set container "app" memory limit (1073741824) below current usage (1500000000)'
    )
    assert memory_limit_error(c, GI, GI) is not None  # kubelet refuses when usage >= new limit
    assert memory_limit_error(c, GI, GI - 1) is None
    assert memory_limit_error(c, 3 * GI, 5 * GI) is None  # an increase is never checked
    assert memory_limit_error(c, GI, 5 * GI, restart_policy="RestartContainer") is None
    unlimited = ContainerResources(name="app")
    assert memory_limit_error(unlimited, GI, 2 * GI) is not None  # adding a limit is a decrease
    # The message prints the pod's usage when given (kubelet v1.37.2's slip), the check uses the container's.
    assert memory_limit_error(c, GI, GI, reported_usage_bytes=3 * GI) == (
        'attempting to set container "app" memory limit (1073741824) below current usage (3221225472)')
    assert memory_limit_error(c, GI, GI - 1, reported_usage_bytes=3 * GI) is None


def test_memory_decrease_message_joins_errors_as_go_aggregates_do() -> None:
    assert memory_decrease_message(["a"]) == "cannot decrease memory limits: a"
    assert memory_decrease_message(["a", "b"]) == "cannot decrease memory limits: [a, b]"
    with pytest.raises(ValueError):
        memory_decrease_message([])


_pods = st.builds(
    lambda uid, cpu, mem, prio, g: pod(uid, cpu, mem, priority=prio, guaranteed=g),
    st.text(alphabet="abcdef", min_size=1, max_size=4),
    st.integers(0, 5000), st.integers(0, 10 * GI), st.integers(-10, 10), st.booleans(),
)


@given(st.lists(st.tuples(_pods, st.integers(0, 5000), st.one_of(st.none(), st.floats(0, 1e6))), max_size=8))
def test_order_pending_is_permutation(raw: list[tuple[PodResources, int, float | None]]) -> None:
    items = [PendingResize(desired=p, allocated=pod(p.uid, old, GI), pending_since_s=s) for p, old, s in raw]
    ordered = order_pending(items)
    assert sorted(map(id, ordered)) == sorted(map(id, items))
    flags = [p.increases_requests for p in ordered]
    assert flags == sorted(flags)  # all non-increasing resizes come first


@given(
    st.lists(st.tuples(st.integers(0, 3000), st.integers(0, 3 * GI), st.integers(0, 3000),
                       st.integers(0, 3 * GI)), min_size=1, max_size=8),
)
def test_retry_pending_never_overcommits(raw: list[tuple[int, int, int, int]]) -> None:
    allocated: dict[str, PodResources] = {}
    items: list[PendingResize] = []
    for i, (old_cpu, old_mem, new_cpu, new_mem) in enumerate(raw):
        uid = f"p{i}"
        allocated[uid] = PodResources(uid=uid, containers=(ContainerResources(
            name="c", cpu_request_millicores=old_cpu, memory_request_bytes=old_mem),))
        items.append(PendingResize(desired=PodResources(uid=uid, containers=(ContainerResources(
            name="c", cpu_request_millicores=new_cpu, memory_request_bytes=new_mem),)),
            allocated=allocated[uid], pending_since_s=float(i)))
    before_cpu = sum(p.cpu_request_millicores for p in allocated.values())
    before_mem = sum(p.memory_request_bytes for p in allocated.values())
    result = retry_pending(NODE, items, allocated)
    after_cpu = sum(p.cpu_request_millicores for p in result.allocated.values())
    after_mem = sum(p.memory_request_bytes for p in result.allocated.values())
    # Never beyond allocatable, unless it already was and did not grow.
    assert after_cpu <= max(NODE.cpu_millicores, before_cpu)
    assert after_mem <= max(NODE.memory_bytes, before_mem)
    if before_cpu <= NODE.cpu_millicores and before_mem <= NODE.memory_bytes:
        assert after_cpu <= NODE.cpu_millicores and after_mem <= NODE.memory_bytes
    assert len(result.accepted) + len(result.still_pending) == len(items)


def test_infeasible_only_for_a_guaranteed_cpu_change_under_the_static_cpu_manager() -> None:
    g = PodResources(uid="g", containers=(ContainerResources(
        name="c", cpu_request_millicores=1000, cpu_limit_millicores=1000, memory_request_bytes=GI,
        memory_limit_bytes=GI),))
    g_cpu = PodResources(uid="g", containers=(ContainerResources(
        name="c", cpu_request_millicores=2000, cpu_limit_millicores=2000, memory_request_bytes=GI,
        memory_limit_bytes=GI),))
    g_mem = PodResources(uid="g", containers=(ContainerResources(
        name="c", cpu_request_millicores=1000, cpu_limit_millicores=1000, memory_request_bytes=2 * GI,
        memory_limit_bytes=2 * GI),))
    message = 'Resize is infeasible for Guaranteed Pods alongside CPU Manager policy "static"'
    assert infeasible_message("static", g_cpu, g) == message
    assert infeasible_message("static", g_mem, g) is None
    assert infeasible_message("none", g_cpu, g) is None
    assert infeasible_message("static", pod("b", 2000, GI), pod("b", 1000, GI)) is None  # Burstable
