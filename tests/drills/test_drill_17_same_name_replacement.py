"""Drill 17, same-name replacement: a StatefulSet pod chosen for eviction is deleted and recreated with the
same name between the updater's read and its eviction call.

Expected: the eviction carries the old pod's uid as a precondition, so the API server refuses it; the
journal entry ends, the decision is recomputed from a fresh read (the new pod gets its own uid), and the new
pod's uid never appears in an eviction made for the old decision.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from kubernetes import client

from tests.conftest import SimFactory
from tests.drills._rollout_scenario import CountingEvictor, DrillRow, DrillScenario, Sampler, Workload, open_drill
from tests.waiting import eventually
from updater.rollout.machine.journal import EntryState

pytestmark = pytest.mark.cluster


@pytest.fixture
def drill(api: client.ApiClient, crds: list[str], namespace: str, make_sim: SimFactory,
          request: pytest.FixtureRequest) -> Iterator[tuple[DrillScenario, DrillRow]]:
    yield from open_drill(api, namespace, make_sim, request)


class ReplacingEvictor(CountingEvictor):
    """Before the first eviction call goes out, the pod is deleted and its StatefulSet recreates it."""

    def __init__(self, s: DrillScenario) -> None:
        super().__init__(s.api, s.calls)
        self.s = s
        self.replaced: dict[str, str] = {}
        """old uid -> new uid of the same-named pod"""

    def evict(self, namespace: str, pod: str, uid: str) -> None:
        if not self.replaced:
            self.s.core.delete_namespaced_pod(pod, namespace, grace_period_seconds=0)

            def new_uid() -> str | None:
                try:
                    p = self.s.core.read_namespaced_pod(pod, namespace)
                except client.ApiException:
                    return None
                ready = any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])
                return p.metadata.uid if p.metadata.uid != uid and ready else None

            self.replaced[uid] = eventually(f"{pod} recreated", new_uid, timeout_s=30)
        super().evict(namespace, pod, uid)


def test_drill_17_uid_precondition_stops_a_stale_eviction(drill: tuple[DrillScenario, DrillRow]) -> None:
    s, row = drill
    row.fault = "StatefulSet pod deleted and recreated (same name, new uid) right before its eviction call"
    sim = s.pool("a", nodes=3)
    s.statefulset("db", "a", replicas=3, requests={"cpu": "500m", "memory": "256Mi"},
                  limits={"cpu": "1", "memory": "512Mi"})
    s.pdb("db", min_available=2)
    for node in sim.node_names():  # nodes now report 1.2 cores: a 1.5-core target only fits by replacement
        sim.set_allocatable(node, cpu_millicores=1200, memory_bytes=32 * 2**30)
    eventually("allocatable reported", lambda: all(
        s.core.read_node(n).status.allocatable["cpu"] == "1200m" for n in sim.node_names()))
    s.bounded_vpa("db", {"cpu": "1500m", "memory": "256Mi"}, kind="StatefulSet")
    s.policy(steps=[{"fraction": 1, "bake": "1s"}])
    ex = s.counting_executor()
    evictor = ReplacingEvictor(s)
    ex.evictor = evictor
    with Sampler(s, [Workload(app="db", floor=1, budget=1)]) as sampler:
        s.drive(ex, 40, until=lambda: bool(evictor.replaced) and any(
            e.uid in evictor.replaced and e.state not in (EntryState.PLANNED, EntryState.EVICTING)
            for r in s.rollouts() for e in r.entries))
        s.drive(ex, 4)
    sampler.assert_clean()
    [(old, new)] = evictor.replaced.items()
    [stale] = [e for r in s.rollouts() for e in r.entries if e.uid == old]
    first = [c for c in s.calls.of("evict") if c.uid == old]
    assert first and not first[0].ok and "409" in first[0].error, first
    row.prove(f"eviction of {stale.pod} with the old uid refused by the API server: {first[0].error[:120]}")
    assert stale.state in (EntryState.SKIPPED, EntryState.GONE), stale
    assert new not in {c.uid for c in s.calls.of("evict")}, "the replacement was evicted by a stale decision"
    assert s.core.read_namespaced_pod(stale.pod, s.ns).metadata.uid == new
    row.prove(f"journal entry {stale.state.value}; the new pod {stale.pod} (uid {new[:8]}) never in an eviction "
              f"and still running; other evictions: {len([c for c in s.calls.of('evict') if c.uid != old])}")
    _, plans = ex.plan(time.time())
    [d] = [d for _, p in plans for d in p.decisions if d.pod == stale.pod]
    assert d.uid == new
    row.prove(f"decision recomputed from a fresh read: {d.pod} uid {d.uid[:8]} ({d.action.value}/{d.reason.value})")
    row.passed()
