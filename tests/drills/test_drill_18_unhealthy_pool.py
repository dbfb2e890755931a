"""Drill 18, unhealthy pool: 2 of 6 nodes of the pool come under MemoryPressure in the middle of a rollout.

Expected: the pool is frozen (unhealthyPoolFraction 0.2 < 2/6): no resize is sent in that pool while the
fault lasts (call log, journal timestamps, pods' generations), and the rollout resumes once the nodes are
healthy again.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from kubernetes import client

from tests.conftest import SimFactory
from tests.drills._rollout_scenario import DrillRow, DrillScenario, Sampler, Workload, generation_report, open_drill
from tests.waiting import eventually
from updater.rollout.machine.journal import EntryState, Phase

pytestmark = pytest.mark.cluster


@pytest.fixture
def drill(api: client.ApiClient, crds: list[str], namespace: str, make_sim: SimFactory,
          request: pytest.FixtureRequest) -> Iterator[tuple[DrillScenario, DrillRow]]:
    yield from open_drill(api, namespace, make_sim, request)


def _pressure(s: DrillScenario, nodes: list[str]) -> bool:
    return all(any(c.type == "MemoryPressure" and c.status == "True" for c in s.core.read_node(n).status.conditions)
               for n in nodes)


def test_drill_18_unhealthy_pool_is_frozen_and_resumes(drill: tuple[DrillScenario, DrillRow]) -> None:
    s, row = drill
    row.fault = "2 of 6 nodes MemoryPressure mid-rollout for 8 s (unhealthyPoolFraction 0.2)"
    sim = s.pool("a", nodes=6)
    s.deployment("web", "a", replicas=12)
    s.bounded_vpa("web", {"cpu": "250m", "memory": "256Mi"})
    s.policy(steps=[{"fraction": 0, "bake": "1s"}, {"fraction": 0.5, "bake": "3s"}, {"fraction": 1, "bake": "1s"}],
             unhealthyPoolFraction=0.2)
    ex = s.counting_executor()
    sick = sim.node_names()[:2]
    with Sampler(s, [Workload(app="web", floor=11)]) as sampler:
        s.drive(ex, 30, until=lambda: s.rollouts()[0].current_batch >= 1 and all(
            e.state == EntryState.VERIFIED for e in s.rollouts()[0].entries_of(1)))
        for n in sick:
            sim.set_memory_pressure(n, True)
        eventually("MemoryPressure in the API", lambda: _pressure(s, sick), timeout_s=15)
        fault_start = time.time()
        generations = {p.metadata.uid: p.metadata.generation for p in s.pods("web")}
        [r] = s.rollouts()
        row.prove(f"fault at batch {r.current_batch + 1}/{len(r.batches)} ({r.phase.value})")
        s.drive(ex, 8)
        fault_end = time.time()
        [r] = s.rollouts()
        assert s.calls.of("resize", since=fault_start, until=fault_end) == []
        assert {p.metadata.uid: p.metadata.generation for p in s.pods("web")} == generations
        assert not [e for e in r.entries if e.applied_s and fault_start <= e.applied_s <= fault_end]
        assert "frozen" in r.message, r.message
        row.prove(f"8 s under fault: 0 resizes, generations unchanged, no journal entry applied; message "
                  f"{r.message[:70]!r}")
        for n in sick:
            sim.set_memory_pressure(n, False)
        eventually("pressure gone", lambda: not any(_pressure(s, [n]) for n in sick), timeout_s=15)
        s.drive(ex, 40, until=lambda: s.rollouts()[0].phase == Phase.COMPLETED)
    sampler.assert_clean()
    resumed = s.calls.of("resize", since=fault_end)
    assert resumed and all(c.ok for c in resumed)
    bad = generation_report(s, sampler.base_generation)
    assert not bad, bad
    row.prove(f"healed: {len(resumed)} resizes after the fault, rollout Completed; every pod +1 generation once; "
              f"sampler {sampler.samples} samples clean")
    row.passed()
