"""Drill 14, the resize never lands: the node is full, so the kubelet defers every increase past the policy's
deferredTimeout; the updater restores the pods and falls back to eviction.

Expected: evictions only within the PodDisruptionBudget and the disruption budget (one pod of the workload
at a time); while the PDB refuses (429) the updater retries each pod with exponential back-off, never hot, and a
refused pod does not hold up the others; a single-replica workload is left alone and flagged with the plan
reason ``single-replica``.
"""

from __future__ import annotations

import itertools
import time
from collections import Counter
from collections.abc import Iterator

import pytest
from kubernetes import client

from tests.conftest import SimFactory
from tests.drills._rollout_scenario import DrillRow, DrillScenario, Sampler, Workload, generation_report, open_drill
from tests.waiting import eventually
from updater.policy.types import Action
from updater.rollout.machine.journal import EntryState, Phase

pytestmark = pytest.mark.cluster
LIMITS = {"cpu": "2", "memory": "512Mi"}


@pytest.fixture
def drill(api: client.ApiClient, crds: list[str], namespace: str, make_sim: SimFactory,
          request: pytest.FixtureRequest) -> Iterator[tuple[DrillScenario, DrillRow]]:
    yield from open_drill(api, namespace, make_sim, request)


def _full_node(s: DrillScenario, app: str, replicas: int) -> None:
    """One 4-core node: ``app`` at 1 core a pod, and a filler taking the rest, so no increase fits now."""
    s.pool("a", nodes=1, cpu=4000)
    s.deployment("filler", "a", replicas=1, requests={"cpu": f"{4000 - 1000 * replicas}m", "memory": "256Mi"},
                 limits={"cpu": "4", "memory": "512Mi"})
    s.deployment(app, "a", replicas=replicas, requests={"cpu": "1", "memory": "256Mi"}, limits=LIMITS)
    s.bounded_vpa(app, {"cpu": "1500m", "memory": "256Mi"})
    s.policy(steps=[{"fraction": 1, "bake": "1s"}], deferredTimeout="2s")


def test_drill_14_deferred_resizes_fall_back_to_evictions_within_the_pdb_with_backoff(
        drill: tuple[DrillScenario, DrillRow]) -> None:
    s, row = drill
    row.fault = "node full: 3 resizes 1->1.5 cores Deferred past deferredTimeout 2s; PDB minAvailable 3 blocks"
    _full_node(s, "web", 3)
    s.pdb("web", min_available=3)  # refuses every eviction until relaxed
    ex = s.counting_executor()
    with Sampler(s, [Workload(app="web", floor=2, budget=1)]) as sampler:
        s.drive(ex, 30, until=lambda: any(r.phase == Phase.COMPLETED for r in s.rollouts()))
        [first] = s.rollouts()
        assert {e.state for e in first.entries} == {EntryState.INFEASIBLE}, [(e.key, e.state) for e in first.entries]
        row.prove(f"rollout 1: {len(first.entries)} entries Infeasible ({first.entries[0].message[:60]}...), "
                  "restored in place")
        # The next rollout evicts instead, one pod of the workload per batch; the PDB refuses each for now. A
        # refusal is that pod's outcome, not its batch's: each pod is tried in turn, and each backs off on its own
        # (10 s, then 20 s) across the rollouts that try it again.
        def tries() -> dict[str, list[float]]:
            by_uid: dict[str, list[float]] = {}
            for c in s.calls.of("evict"):
                by_uid.setdefault(c.uid, []).append(c.t)
            return by_uid

        s.drive(ex, 60, until=lambda: any(len(t) >= 3 for t in tries().values()))
        refused = s.calls.of("evict")
        assert not [c for c in refused if c.ok] and all("429" in c.error for c in refused), refused
        assert len(tries()) == 3, f"a refused pod held up the others: {tries()}"
        per_batch = Counter((r.name, e.batch) for r in s.rollouts() for e in r.entries if e.action == "evict")
        assert max(per_batch.values()) == 1, "more than one pod of the workload in an eviction batch"
        times = next(t for t in tries().values() if len(t) >= 3)
        gaps = [b - a for a, b in itertools.pairwise(times)]
        assert gaps[0] >= 9.5 and gaps[1] >= 19.0, gaps
        row.prove(f"PDB 429s on each of the 3 pods in turn, one per batch; one pod's attempts at "
                  f"+{', +'.join(f'{t - times[0]:.1f}' for t in times)} s (gaps {', '.join(f'{g:.1f}' for g in gaps)}"
                  " s: exponential, no hot retry)")
        s.pdb("web", min_available=2)  # relaxed while the updater is backing off
        # Each pod is evicted when its back-off ends; the workload gets back to 3 Ready before the next one goes.
        s.drive(ex, 90, until=lambda: len([c for c in s.calls.of("evict") if c.ok]) >= 2)
    sampler.assert_clean()
    ok = [c for c in s.calls.of("evict") if c.ok]
    assert len({c.uid for c in ok}) == len(ok), "a pod evicted twice"
    row.prove(f"{len(ok)} evictions, one at a time; sampler: {sampler.samples} samples, Ready web >= 2 (PDB) "
              "always, never more than 1 eviction in flight, values within bounds")
    bad = generation_report(s, sampler.base_generation)
    assert not bad, bad
    row.prove("generations of surviving pods match the journal (apply + restore each)")
    row.passed()


def test_drill_14_single_replica_is_left_alone_and_flagged(drill: tuple[DrillScenario, DrillRow]) -> None:
    s, row = drill
    row.fault = "single-replica workload on a full node: its resize 1->1.5 cores Deferred past deferredTimeout"
    _full_node(s, "solo", 1)
    ex = s.counting_executor()
    with Sampler(s, [Workload(app="solo", floor=1, budget=0)]) as sampler:
        s.drive(ex, 30, until=lambda: any(r.phase == Phase.COMPLETED for r in s.rollouts()))
        [first] = s.rollouts()
        assert [e.state for e in first.entries] == [EntryState.INFEASIBLE]
        uid = first.entries[0].uid
        s.drive(ex, 6)
        _, plans = ex.plan(time.time())
        [decision] = [d for _, p in plans for d in p.decisions if d.workload_name == "solo"]
        row.prove(f"plan after the Infeasible verdict: {decision.action.value} / {decision.reason.value}: "
                  f"{decision.message[:120]}")
        assert s.calls.of("evict") == [], f"single replica evicted: {s.calls.of('evict')}"
        assert decision.action == Action.SKIP and decision.reason.value == "single-replica-not-evicted", decision
    sampler.assert_clean()
    eventually("solo still the same pod", lambda: [p.metadata.uid for p in s.running("solo")] == [uid], timeout_s=5)
    row.passed()
