"""Drill 5: two real ``podtailor-updater run`` replicas with Lease election; the leader is SIGKILLed mid-rollout.

Setup: 6 pods, a ladder of one pod (bake 2 s), half (bake 20 s), all; both replicas run the real CLI with
leader election in the test namespace (LeaseDuration 15 s, the default: the CLI has no flag for it and the
drill accepts the wait). Fault: when batch 2 is baking (part of the rollout applied, part planned), the
leader gets SIGKILL. Expected: the standby acquires the lease after LeaseDuration, reads the journal and
finishes the rollout. Proof: each pod resized exactly once (generation +1 = journal), Ready never dropped.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.builders.cluster import Mi, Scenario
from tests.builders.drills import (
    Bounds,
    DrillRow,
    Invariants,
    UpdaterProcess,
    assert_each_resized_once,
    baking,
    lease_holder,
    state_of,
)
from tests.harness.cluster import LocalCluster
from tests.waiting import eventually
from updater.rollout.machine.journal import EntryState, Phase

pytestmark = pytest.mark.cluster
PODS = 6


def test_drill_05_leader_crash(scenario: Scenario, drill_cluster: LocalCluster, drill_row: DrillRow,
                               tmp_path: Path) -> None:
    drill_row.drill, drill_row.name = 5, "Leader crash"
    drill_row.fault = "SIGKILL of the leading updater replica while batch 2 of 3 bakes"
    scenario.pool("a")
    scenario.deployment("web", "a", replicas=PODS)
    scenario.vpa("web", {"cpu": "250m", "memory": "256Mi"})
    scenario.policy(steps=[{"fraction": 0, "bake": "2s"}, {"fraction": 0.5, "bake": "20s"},
                           {"fraction": 1, "bake": "1s"}])
    kc = Path(state_of(drill_cluster).kubeconfig)
    bounds = Bounds(ranges={"requests.cpu": (250, 500), "limits.cpu": (500, 1000),
                            "requests.memory": (256 * Mi, 256 * Mi), "limits.memory": (512 * Mi, 512 * Mi)})
    replicas = [UpdaterProcess(f"updater-{i}", kc, scenario.ns, tmp_path) for i in range(2)]
    with Invariants(scenario.api, scenario.ns, min_ready={"web": PODS}, bounds=bounds) as inv:
        for u in replicas:
            u.start()
        try:
            holder = eventually("a leader", lambda: lease_holder(scenario.api, scenario.ns), timeout_s=30)
            [leader] = [u for u in replicas if u.identity == holder]
            [standby] = [u for u in replicas if u is not leader]
            eventually("batch 2 baking", lambda: any(baking(r, 1)
                                                     for r in scenario.rollouts()), timeout_s=60, interval_s=0.2)
            [half] = scenario.rollouts()
            leader.kill()
            killed_at = time.monotonic()
            eventually("the standby leads", lambda: lease_holder(scenario.api, scenario.ns) == standby.identity,
                       timeout_s=40, interval_s=0.2)
            took_over_s = time.monotonic() - killed_at
            eventually("rollout completed", lambda: scenario.settled(), timeout_s=90, interval_s=0.5)
        finally:
            for u in replicas:
                u.stop()
    [r] = scenario.rollouts()
    assert r.phase == Phase.COMPLETED, r.message
    applied = sum(1 for e in half.entries if e.state == EntryState.VERIFIED)
    planned = sum(1 for e in half.entries if e.state == EntryState.PLANNED)
    assert applied and planned, "the crash must land mid-rollout"
    assert took_over_s >= 10, "the standby waits out the lease"
    inv.assert_clean()
    assert_each_resized_once(inv, scenario.rollouts(), PODS)
    drill_row.prove(f"killed with {applied} pods verified, {planned} planned; standby led after {took_over_s:.1f}s "
                    "(LeaseDuration 15s) and completed the rollout from the journal")
    drill_row.prove(f"{PODS} pods: generation +1 each = journal; {inv.samples} samples, 0 breaches (Ready>={PODS})")
