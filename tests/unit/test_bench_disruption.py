"""The disruption benchmark's counting (tests/benchmarks/disruption.py) on hand-written audit lines and snapshots."""

from __future__ import annotations

import json

from tests.benchmarks.disruption import PodTimeline, PodView, count_writes, placement, write_kind


def _audit(user: str, verb: str, resource: str, sub: str = "", code: int = 200, name: str = "p",
           stage: str = "ResponseComplete", at: str = "2026-12-03T10:00:05.000000Z") -> str:
    return json.dumps({"kind": "Event", "stage": stage, "verb": verb, "user": {"username": user},
                       "requestReceivedTimestamp": at,
                       "objectRef": {"resource": resource, "subresource": sub, "name": name},
                       "responseStatus": {"code": code}})


def test_writes_are_counted_per_user_kind_and_outcome() -> None:
    lines = [
        _audit("vpa-updater", "create", "pods", "eviction", 201, name="web-1"),
        _audit("vpa-updater", "create", "pods", "eviction", 429, name="guarded-1"),
        _audit("vpa-updater", "create", "pods", "eviction", 429, name="guarded-1"),
        _audit("vpa-updater", "patch", "pods", "resize", 200, name="web-2"),
        _audit("vpa-updater", "patch", "pods", "resize", 403, name="big-1"),
        _audit("vpa-updater", "patch", "pods", "", 200, name="web-2"),
        _audit("vpa-updater", "create", "events", ""),
        _audit("vpa-admission-controller", "update", "leases", ""),
        _audit("vpa-updater", "get", "pods"),  # a read: not counted
        _audit("vpa-updater", "patch", "pods", "resize", stage="ResponseStarted"),  # not completed yet
        _audit("podtailor-updater", "patch", "pods", "resize"),  # another tool
        _audit("vpa-updater", "patch", "pods", "resize", at="2026-12-03T09:59:59.000000Z"),  # before the targets
    ]
    since = 1796292000.0  # 2026-12-03T10:00:00Z
    w = count_writes(lines, ["vpa-updater", "vpa-admission-controller"], since_s=since)
    # 3 evictions, 2 resizes, 1 pod patch, 1 event, 1 lease: 8 writes; the read, the unfinished request, the other
    # tool's and the early one are left out.
    assert w.total == 8
    assert w.by_kind == {"eviction": 3, "resize": 2, "pod": 1, "event": 1, "lease": 1}
    assert (w.done("eviction"), w.refused("eviction")) == (1, 2)
    assert (w.done("resize"), w.refused("resize")) == (1, 1)
    assert w.done_by_object[("eviction", "web-1")] == 1 and ("eviction", "guarded-1") not in w.done_by_object


def test_write_kinds_name_the_subresource() -> None:
    assert write_kind("pods", "status", "patch") == "pod-status"
    assert write_kind("resizerollouts", "status", "update") == "rollout/status"
    assert write_kind("configmaps", "", "create") == "configmaps"


def _pod(uid: str, workload: str = "web", running: bool = True, cpu: int = 250, mem: int = 100,
         restarts: int = 0) -> PodView:
    return PodView(uid=uid, name=f"{workload}-{uid}", workload=workload, running=running, requests=((cpu, mem),),
                   restarts=restarts)


def test_the_timeline_counts_replacements_restarts_and_the_last_change() -> None:
    t = PodTimeline(t0_s=100.0)
    t.add(101.0, [_pod("a", cpu=500), _pod("b", cpu=500)])
    t.add(102.0, [_pod("a", cpu=500), _pod("b", cpu=500)])  # no change
    t.add(110.0, [_pod("a", cpu=250), _pod("b", cpu=500, restarts=1)])  # a resized, b restarted
    t.add(130.0, [_pod("a", cpu=250), _pod("c", running=False)])  # b evicted, c its replacement, pending
    t.add(140.0, [_pod("a", cpu=250), _pod("c", restarts=0)])
    t.add(200.0, [_pod("a", cpu=250), _pod("c")])
    assert t.created == 1  # c
    assert t.restarts == 1  # b's one restart, kept after b is gone
    assert t.last_change_s == 40.0  # 140 - 100: c became Running


def test_placement_against_the_targets() -> None:
    targets = {"web": (250, 100), "big": (3000, 100)}
    pods = [_pod("a", cpu=250, mem=100), _pod("b", cpu=251, mem=100),  # at (within 1%)
            _pod("c", cpu=500), _pod("d", workload="big", cpu=500), _pod("e", running=False),
            _pod("f", cpu=500, mem=50)]  # above in CPU, below in memory: below
    p = placement(pods, targets)
    assert (p.at_target, p.above, p.below, p.not_running) == (2, 1, 2, 1)
