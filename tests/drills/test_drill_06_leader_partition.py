"""Drill 6: only the leader's route to the API server is cut; it must stop and exit, the standby takes over.

Setup: two real ``podtailor-updater run`` replicas, each through its own FaultProxy (its own kubeconfig).
Fault: while batch 2 bakes, the leader's proxy black-holes every byte (process alive, no FIN). Expected: the
leader's lease calls time out (client-side timeout), its renew deadline passes, it exits with code 1; the
standby acquires after LeaseDuration and finishes. Proof: the old leader's proxy delivered no byte upstream
after the cut, the old leader was gone before its route came back, so nothing it sent can land later.
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
    api_port,
    assert_each_resized_once,
    baking,
    kubeconfig_via,
    lease_holder,
)
from tests.harness.cluster import LocalCluster
from tests.harness.faultproxy import FaultProxy, Mode
from tests.waiting import eventually
from updater.rollout.machine.journal import Phase

pytestmark = pytest.mark.cluster
PODS = 6
LEASE_S, RENEW_DEADLINE_S, RETRY_S = 15.0, 10.0, 2.0


def test_drill_06_leader_partition(scenario: Scenario, drill_cluster: LocalCluster, drill_row: DrillRow,
                                   tmp_path: Path) -> None:
    drill_row.drill, drill_row.name = 6, "Leader partition"
    drill_row.fault = "the leader's route to the API server black-holed (process alive) while batch 2 of 3 bakes"
    scenario.pool("a")
    scenario.deployment("web", "a", replicas=PODS)
    scenario.vpa("web", {"cpu": "250m", "memory": "256Mi"})
    scenario.policy(steps=[{"fraction": 0, "bake": "2s"}, {"fraction": 0.5, "bake": "20s"},
                           {"fraction": 1, "bake": "1s"}])
    proxies = [FaultProxy(api_port(drill_cluster), name=f"route-{i}").start() for i in range(2)]
    replicas = [UpdaterProcess(f"updater-{i}", kubeconfig_via(drill_cluster, p.port, tmp_path / f"kc-{i}"),
                               scenario.ns, tmp_path) for i, p in enumerate(proxies)]
    bounds = Bounds(ranges={"requests.cpu": (250, 500), "limits.cpu": (500, 1000),
                            "requests.memory": (256 * Mi, 256 * Mi), "limits.memory": (512 * Mi, 512 * Mi)})
    try:
        with Invariants(scenario.api, scenario.ns, min_ready={"web": PODS}, bounds=bounds) as inv:
            for u in replicas:
                u.start()
            holder = eventually("a leader", lambda: lease_holder(scenario.api, scenario.ns), timeout_s=30)
            [li] = [i for i, u in enumerate(replicas) if u.identity == holder]
            leader, standby, route = replicas[li], replicas[1 - li], proxies[li]
            eventually("batch 2 baking", lambda: any(baking(r, 1)
                                                     for r in scenario.rollouts()), timeout_s=60, interval_s=0.2)
            route.set_mode(Mode.DROP)
            cut_at = time.monotonic()
            up_at_cut = route.counters().bytes_up
            code = eventually("the old leader exits", lambda: (leader.returncode(),) if leader.returncode()
                              is not None else None, timeout_s=40, interval_s=0.2)[0]
            assert leader.exited_at is not None
            exited_s = leader.exited_at - cut_at
            eventually("the standby leads", lambda: lease_holder(scenario.api, scenario.ns) == standby.identity,
                       timeout_s=40, interval_s=0.2)
            took_over_s = time.monotonic() - cut_at
            route.set_mode(Mode.PASS)  # the route is back, but nobody is left behind it
            eventually("rollout completed", lambda: scenario.settled(), timeout_s=90, interval_s=0.5)
            up_at_end = route.counters().bytes_up
    finally:
        for u in replicas:
            u.stop()
        for p in proxies:
            p.stop()
    [r] = scenario.rollouts()
    assert r.phase == Phase.COMPLETED, r.message
    assert code == 1, "lost leadership exits with 1"
    # The library's renew loop gives up RenewDeadline after the retry that followed the last renewal, plus one
    # timed-out attempt: at most ~RenewDeadline + 2 x RetryPeriod after the cut; the safety property is that
    # the old leader is gone before anyone else can lead (LeaseDuration after the last renewal it saw).
    assert exited_s <= LEASE_S + RETRY_S, f"exited {exited_s:.1f}s after the cut"
    assert exited_s < took_over_s, "the old leader was still alive when the standby took over"
    assert up_at_end == up_at_cut, "bytes from the old leader reached the API server after the cut"
    inv.assert_clean()
    assert_each_resized_once(inv, scenario.rollouts(), PODS)
    drill_row.prove(f"old leader exited (code {code}) {exited_s:.1f}s after the cut (renew deadline 10s + retries), "
                    f"standby led {took_over_s:.1f}s after the cut and completed")
    drill_row.prove("0 bytes delivered upstream from the old leader's route after the cut, incl. after the route "
                    f"healed; {PODS} pods generation +1 each = journal; {inv.samples} samples, 0 breaches")
