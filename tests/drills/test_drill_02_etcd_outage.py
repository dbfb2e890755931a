"""Drill 2: etcd is unavailable for ETCD_DOWN_S while a canary batch bakes; nothing is promoted meanwhile.

Setup: as drill 1 (one pool, 20 pods, first batch 5), with an 8 s bake after batch 1 so that its end falls
inside the outage. Fault: the etcd process is stopped for 20 s (what Kubernetes' own [Disruptive] e2e does
by SIGKILL or by dropping port 2379), then started again on the same data. Expected: every write (and the
consistent reads) fail with 5xx or time out, the batch is not promoted although its bake ended, and the
first action after the outage comes from a pass that re-read the journal and the pods after etcd was back.

The outage is timed from the moment the test sends etcd its SIGTERM (etcd stops answering then; its exit may
take seconds more) to the moment it is started again. A pass is judged by when its reads returned, not by when
it began: one begun before the fault may finish its writes before it and then spend the outage on best-effort
Events; one begun during the outage may have its reads held by the API server until etcd is back, and then act
on what it read after the outage, as it should.
"""

from __future__ import annotations

import time

import pytest

from tests.builders.cluster import Mi, Scenario
from tests.builders.drills import (
    Bounds,
    DrillRow,
    Invariants,
    PassLoop,
    ReadLog,
    RecordingResizer,
    RecordingStore,
    assert_each_resized_once,
    baking,
    component,
    wait_api_ready,
    wait_settled,
)
from tests.harness.cluster import LocalCluster
from tests.waiting import eventually
from updater.rollout.machine.journal import Phase

pytestmark = pytest.mark.cluster
ETCD_DOWN_S = 20.0
PODS = 20


def test_drill_02_etcd_unavailable(scenario: Scenario, drill_cluster: LocalCluster, drill_row: DrillRow) -> None:
    drill_row.drill, drill_row.name = 2, "etcd unavailable"
    drill_row.fault = f"etcd stopped {ETCD_DOWN_S:.0f}s while batch 1 (5 of {PODS} pods) bakes; its bake ends inside"
    scenario.pool("a", nodes=2, cpu=16000)
    scenario.deployment("web", "a", replicas=PODS)
    scenario.vpa("web", {"cpu": "250m", "memory": "256Mi"})
    scenario.policy(steps=[{"fraction": 0.25, "bake": "8s"}, {"fraction": 1, "bake": "1s"}])
    executor = scenario.executor()
    resizer = RecordingResizer(scenario.api)
    executor.resizer = resizer
    reads = ReadLog()
    executor.store = RecordingStore(scenario.api, reads)
    read_cluster = executor.read
    executor.read = lambda: reads.timed(read_cluster)
    bounds = Bounds(ranges={"requests.cpu": (250, 500), "limits.cpu": (500, 1000),
                            "requests.memory": (256 * Mi, 256 * Mi), "limits.memory": (512 * Mi, 512 * Mi)})
    etcd = component(drill_cluster, "etcd")
    with Invariants(scenario.api, scenario.ns, min_ready={"web": PODS}, bounds=bounds) as inv, \
            PassLoop(executor) as loop:
        eventually("batch 1 baking", lambda: any(baking(r, 0) for r in scenario.rollouts()),
                   timeout_s=90, interval_s=0.2)
        [at_fault] = scenario.rollouts()
        down_at, down_wall = time.monotonic(), time.time()
        etcd.stop()
        time.sleep(ETCD_DOWN_S)
        etcd.start()
        up_at, up_wall = time.monotonic(), time.time()
        wait_api_ready(drill_cluster, timeout_s=90)
        wait_settled(scenario, loop, timeout_s=120)
    [r] = scenario.rollouts()
    assert r.phase == Phase.COMPLETED, r.message
    due = at_fault.batches[0].bake_until_s
    assert due is not None and down_wall < due < up_wall, "the bake must end inside the outage"
    blind = [c for c in reads.answered() if c.started >= down_at and c.ended < up_at]
    assert not blind, f"reads answered while etcd was down: {blind}"
    # a pass begun before the fault may outlast the whole outage (its reads held by the API server), so none
    # need begin inside it; every pass that ran across it is seen, and one begun inside never succeeds blind
    across = [p for p in loop.records if p.started < up_at and p.ended > down_at]
    window = [p for p in across if p.started >= down_at]
    assert across and all(p.error or p.ended >= up_at for p in window), (across, window)
    assert not [c for c in resizer.calls if down_at <= c.at < up_at], "an action during the outage"
    second = {e.key for e in r.entries_of(1)}
    first_new = min(c.at for c in resizer.landed() if c.pod in second)
    acting = next(p for p in loop.records if p.started <= first_new <= p.ended)
    used = [c for c in reads.answered() if acting.started <= c.started and c.ended <= first_new]
    assert used and min(c.ended for c in used) >= up_at, \
        f"the first new action came from a pass that read before etcd was back: {used}"
    inv.assert_clean()
    assert_each_resized_once(inv, scenario.rollouts(), PODS)
    errors = sorted({p.error.split(":")[0] for p in across if p.error})
    longest = max(p.ended - p.started for p in across)
    drill_row.prove(f"{len(across)} passes ran across the outage, {len(window)} begun in it: none of those "
                    "succeeded before etcd was back "
                    f"(errors: {', '.join(errors) or 'none'}; longest {longest:.0f}s); 0 reads answered and "
                    "0 resize calls in it; batch 2 "
                    f"was due {due - down_wall:.0f}s into the outage and promoted only "
                    f"{first_new - up_at:.1f}s after etcd returned, by a pass whose {len(used)} reads all "
                    f"returned after it (the first {min(c.ended for c in used) - up_at:.1f}s after)")
    drill_row.prove(f"{PODS} pods: generation +1 each = journal; {inv.samples} samples ({inv.unreachable} "
                    "unreachable), 0 breaches")
