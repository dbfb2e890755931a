"""Drill 7: split brain: two real updaters with leader election disabled plan and act on the same pool.

Setup: 4 pods whose memory change restarts the container (resizePolicy RestartContainer), restart approved,
disruption budget 25% (one restarting pod at a time); both replicas run ``podtailor-updater run
--no-leader-elect`` at once. Expected: the conditional writes (ResizeRollout status by resourceVersion,
pods/resize with uid + resourceVersion preconditions) make one side lose with 409 and re-read. Proof: no
double resize (each pod's generation +1 and exactly one restart), restarting pods in flight never above the
budget, no eviction (every pod keeps its uid).
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
    state_of,
)
from tests.harness.cluster import LocalCluster
from tests.waiting import eventually

pytestmark = pytest.mark.cluster
PODS = 4


def test_drill_07_split_brain(scenario: Scenario, drill_cluster: LocalCluster, drill_row: DrillRow,
                              tmp_path: Path) -> None:
    drill_row.drill, drill_row.name = 7, "Split brain"
    drill_row.fault = "two updaters with --no-leader-elect on the same pool (restarting memory resizes)"
    scenario.pool("a")
    scenario.deployment("web", "a", replicas=PODS, memory_policy="RestartContainer",
                        annotations={"podtailor.io/approve-restart": "true"})
    scenario.vpa("web", {"cpu": "500m", "memory": "384Mi"})
    scenario.policy(requireApprovalForRestart=True, disruptionBudget=0.25, steps=[{"fraction": 1, "bake": "1s"}])
    kc = Path(state_of(drill_cluster).kubeconfig)
    bounds = Bounds(ranges={"requests.cpu": (500, 500), "limits.cpu": (1000, 1000),
                            "requests.memory": (256 * Mi, 384 * Mi), "limits.memory": (512 * Mi, 768 * Mi)})
    replicas = [UpdaterProcess(f"updater-{i}", kc, scenario.ns, tmp_path, leader_elect=False) for i in range(2)]
    # One restarting pod at a time may be down: floor PODS - 1; restarts: one per pod at most.
    with Invariants(scenario.api, scenario.ns, min_ready={"web": PODS - 1}, bounds=bounds,
                    max_restarts=PODS) as inv:
        try:
            for u in replicas:
                u.start()
            eventually("rollouts settled", lambda: scenario.settled() and all(
                p.status.container_statuses[0].restart_count == 1 for p in scenario.running("web")),
                timeout_s=120, interval_s=0.5)
            time.sleep(3)  # both keep running: a late double action would show here
        finally:
            for u in replicas:
                u.stop()
    rollouts = scenario.rollouts()
    pods = scenario.running("web")
    assert len(pods) == PODS and all(p.status.container_statuses[0].restart_count == 1 for p in pods)
    assert {p.metadata.uid for p in pods} <= inv.uids and len(inv.uids) == PODS  # no eviction
    inv.assert_clean()
    assert_each_resized_once(inv, rollouts, PODS)
    conflicts = sum(u.log().count("another writer") + u.log().count("409") for u in replicas)
    drill_row.prove(f"{len(rollouts)} rollout(s) for the pool; {conflicts} conflict log lines (409 / re-read)")
    drill_row.prove(f"{PODS} pods: generation +1 and exactly 1 restart each (no double resize), 0 evictions, "
                    f"Ready >= {PODS - 1} in {inv.samples} samples, 0 breaches")
