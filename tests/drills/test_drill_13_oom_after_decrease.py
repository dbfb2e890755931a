"""Drill 13, OOM after a decrease: a canary batch lowers memory on 2 of 10 pods, a spike OOM-kills one.

Expected: the batch fails on its OOM gate (failureLimit 0), every pod it touched is restored by resize to
exactly the journal's "before" values, the pool stays Halted (no later batch, no new rollout, no second
resize) until a person sets ``spec.retry``. Invariants are sampled throughout (``Sampler``).
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from kubernetes import client

from podtailor.units import parse_cpu_millicores, parse_memory_bytes
from tests.conftest import SimFactory
from tests.drills._rollout_scenario import (
    DrillRow,
    DrillScenario,
    Sampler,
    Workload,
    container_values,
    generation_report,
    open_drill,
)
from tests.nodesim.usage import Constant
from tests.waiting import eventually
from updater.rollout.machine.journal import EntryState, Phase

pytestmark = pytest.mark.cluster
Mi = 2**20


@pytest.fixture
def drill(api: client.ApiClient, crds: list[str], namespace: str, make_sim: SimFactory,
          request: pytest.FixtureRequest) -> Iterator[tuple[DrillScenario, DrillRow]]:
    yield from open_drill(api, namespace, make_sim, request)


def _parsed(res: dict[str, str]) -> tuple[int, int]:
    return parse_cpu_millicores(res["cpu"]), parse_memory_bytes(res["memory"])


def test_drill_13_oom_after_decrease_reverts_exactly_and_halts_the_pool(
        drill: tuple[DrillScenario, DrillRow]) -> None:
    s, row = drill
    row.fault = "canary batch lowers memory 512Mi->400Mi limit on 2 of 10 pods; usage of one grows to 450Mi (OOM)"
    sim = s.pool("a")
    s.deployment("web", "a", replicas=10, usage={"kind": "constant", "cpu_cores": 0.1, "memory_bytes": 300 * Mi})
    s.pdb("web", min_available=9)
    # Target 200Mi: request 256Mi -> 200Mi, limit 512Mi -> 400Mi (ratio kept), above the 300Mi in use.
    s.bounded_vpa("web", {"cpu": "500m", "memory": "200Mi"})
    s.policy(steps=[{"fraction": 0.2, "bake": "8s"}, {"fraction": 1, "bake": "1s"}])
    ex = s.counting_executor()
    with Sampler(s, [Workload(app="web", floor=9)]) as sampler:
        ex.run_pass(time.time())
        [r] = s.rollouts()
        assert [len(r.entries_of(b.index)) for b in r.batches] == [2, 8]
        canary = r.entries_of(0)
        s.drive(ex, 30, until=lambda: all(e.state == EntryState.VERIFIED for e in s.rollouts()[0].entries_of(0)))
        victim = canary[0]
        sim.set_usage(s.ns, victim.pod, "app", Constant(cpu_cores=0.1, memory_bytes=450 * Mi))
        s.drive(ex, 40, until=lambda: s.rollouts()[0].phase == Phase.HALTED)
        halted_at = time.time()
        [r] = s.rollouts()
        assert "OOM" in r.message, r.message
        row.prove(f"rollout Halted: {r.message}")
        # Halted: keep running passes; nothing more may happen in this pool.
        generations = {p.metadata.uid: p.metadata.generation for p in s.pods("web")}
        s.drive(ex, 6)
        assert s.calls.of("resize", since=halted_at) == [], "resize sent while the pool is Halted"
        [r] = s.rollouts()  # no new rollout either
        assert r.phase == Phase.HALTED
        assert all(e.state == EntryState.PLANNED for e in r.entries_of(1)), "a later batch ran"
        assert {p.metadata.uid: p.metadata.generation for p in s.pods("web")} == generations
        row.prove("6 s of passes while Halted: 0 resizes, no new rollout, batch 2 (8 pods) still Planned")
    sampler.assert_clean()
    row.prove(f"sampler: {sampler.samples} samples, Ready >= 9/10, requests/limits within VPA bounds, generations "
              "never ahead of the journal")
    # The touched pods hold exactly the journal's "before" values, in spec and as the kubelet reports them.
    for e in canary:
        [before] = e.before
        want_req = (before.requests.cpu_millicores, before.requests.memory_bytes)
        want_lim = (before.limits.cpu_millicores, before.limits.memory_bytes)

        def restored(name: str = e.pod, want_req: tuple[int, int] = want_req,
                     want_lim: tuple[int, int] = want_lim) -> bool:
            pod = s.core.read_namespaced_pod(name, s.ns)
            sreq, slim, areq, alim = container_values(pod)
            return _parsed(sreq) == want_req == _parsed(areq) and _parsed(slim) == want_lim == _parsed(alim)

        eventually(f"{e.pod} restored to the journal's before values", restored, timeout_s=20)
        assert next(x for x in s.rollouts()[0].entries if x.key == e.key).state == EntryState.REVERTED
    row.prove("both canary pods: spec and status == journal before (256Mi/512Mi, 500m/1) exactly; entries Reverted")
    bad = generation_report(s, sampler.base_generation)
    assert not bad, bad
    row.prove("generations: canary pods +2 (apply, revert), the 8 others +0, matching the journal")
    # The updater resized the victim exactly twice: the decrease and the restore (a memory bump is the
    # recommender's business, not a hot retry of the updater's). A call refused on its resourceVersion
    # precondition changed nothing (the OOM kill's status update can land between the read and the restore):
    # it is re-read and re-sent next pass (no hot loop: at most one such retry per resize), and is no resize.
    calls = [c for c in s.calls.of("resize") if c.uid == victim.uid]
    refused = [c for c in calls if not c.ok]
    assert sum(c.ok for c in calls) == 2 and calls[-1].ok, calls
    assert len(refused) <= 2 and all(c.error == f"{victim.namespace}/{victim.pod}" for c in refused), refused
    # An explicit retry closes the halted rollout; the pool is planned afresh.
    sim.set_usage(s.ns, victim.pod, "app", Constant(cpu_cores=0.1, memory_bytes=100 * Mi))
    s.custom.patch_cluster_custom_object("podtailor.io", "v1alpha1", "resizerollouts", r.name,
                                        {"spec": {"retry": True}})
    s.drive(ex, 15, until=lambda: len(s.rollouts()) == 2)
    phases = {x.name: x.phase for x in s.rollouts()}
    assert phases[r.name] == Phase.ROLLED_BACK, phases
    row.prove("after spec.retry=true: halted rollout closed RolledBack, a new rollout started for the pool")
    row.passed()
