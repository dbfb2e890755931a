"""Drill 3: the route from the updater to the API server turns into a blackhole (no FIN, no RST), then heals.

Setup: the in-process Executor talks to the API server through a FaultProxy (kubeconfig server URL -> proxy
-> kube-apiserver; TLS passes through), the node simulator and the invariant sampler talk to it directly.
Fault: while batch 1 bakes, the proxy drops every byte both ways for BLACKHOLE_S; connections that lived
through it stay dead. The reference drill says 5 minutes; 25 s covers two client read timeouts (9 s) and the
moment batch 1's bake ends, which is what matters. Without a client-side timeout the pass in flight would
hang on its dead connection forever, even after the route heals.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest
from kubernetes import config

from tests.builders.cluster import Mi, Scenario
from tests.builders.drills import (
    Bounds,
    DrillRow,
    Invariants,
    PassLoop,
    RecordingResizer,
    api_port,
    assert_each_resized_once,
    baking,
    kubeconfig_via,
    wait_settled,
)
from tests.harness.cluster import LocalCluster
from tests.harness.faultproxy import FaultProxy, Mode
from tests.waiting import eventually
from updater.rollout.machine.journal import Phase

pytestmark = pytest.mark.cluster
BLACKHOLE_S = 25.0
PODS = 6


class _Timeouts(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.seen: list[float] = []

    def emit(self, record: logging.LogRecord) -> None:
        if "timed out" in record.getMessage().lower():
            self.seen.append(time.monotonic())


def test_drill_03_blackhole_between_updater_and_api(scenario: Scenario, drill_cluster: LocalCluster,
                                                    drill_row: DrillRow, tmp_path: Path) -> None:
    drill_row.drill, drill_row.name = 3, "Silent watch death / blackhole"
    drill_row.fault = f"updater->API route black-holed (no FIN) for {BLACKHOLE_S:.0f}s while batch 1 bakes"
    scenario.pool("a")
    scenario.deployment("web", "a", replicas=PODS)
    scenario.vpa("web", {"cpu": "250m", "memory": "256Mi"})
    scenario.policy(steps=[{"fraction": 0, "bake": "4s"}, {"fraction": 1, "bake": "1s"}])
    proxy = FaultProxy(api_port(drill_cluster), name="updater-route").start()
    proxied_api = config.new_client_from_config(config_file=str(kubeconfig_via(drill_cluster, proxy.port,
                                                                               tmp_path / "proxied.kubeconfig")))
    updater = Scenario(proxied_api, scenario.ns, scenario.make_sim)
    executor = updater.executor()
    resizer = RecordingResizer(proxied_api)
    executor.resizer = resizer
    timeouts = _Timeouts()
    logging.getLogger("urllib3.connectionpool").addHandler(timeouts)
    bounds = Bounds(ranges={"requests.cpu": (250, 500), "limits.cpu": (500, 1000),
                            "requests.memory": (256 * Mi, 256 * Mi), "limits.memory": (512 * Mi, 512 * Mi)})
    try:
        with Invariants(scenario.api, scenario.ns, min_ready={"web": PODS}, bounds=bounds) as inv, \
                PassLoop(executor) as loop:
            eventually("batch 1 baking", lambda: any(
                baking(r, 0) for r in scenario.rollouts()), timeout_s=60, interval_s=0.2)
            [before] = scenario.rollouts()
            proxy.set_mode(Mode.DROP)
            cut_at, cut_wall = time.monotonic(), time.time()
            gens_at_cut = dict(inv.generations)
            time.sleep(BLACKHOLE_S)
            [during] = scenario.rollouts()  # read directly: the journal did not move in the window
            gens_at_heal = dict(inv.generations)
            proxy.set_mode(Mode.PASS)
            heal_at, heal_wall = time.monotonic(), time.time()
            wait_settled(scenario, loop, timeout_s=120)
    finally:
        logging.getLogger("urllib3.connectionpool").removeHandler(timeouts)
        proxy.stop()
        proxied_api.close()
    [r] = scenario.rollouts()
    assert r.phase == Phase.COMPLETED, r.message
    assert during.resource_version == before.resource_version, "the journal was written during the blackhole"
    assert gens_at_heal == gens_at_cut, "a pod was resized during the blackhole"
    assert not [c for c in resizer.calls if cut_at <= c.at < heal_at], "a resize was attempted while blind"
    assert before.batches[0].bake_until_s is not None and before.batches[0].bake_until_s < heal_wall
    second = {e.key for e in r.entries_of(1)}
    assert all(c.at >= heal_at for c in resizer.landed() if c.pod in second)  # promoted only after the heal
    in_window = [t for t in timeouts.seen if cut_at <= t < heal_at + 10]
    assert in_window, "no client-side timeout fired"
    hung = [p for p in loop.records if p.started < heal_at and p.ended - p.started > 60]
    assert not hung
    relists = [p for p in loop.records if p.started >= heal_at and not p.error]
    assert relists
    inv.assert_clean()
    assert_each_resized_once(inv, scenario.rollouts(), PODS)
    longest = max(p.ended - p.started for p in loop.records if p.started < heal_at)
    drill_row.prove(f"{len(in_window)} client read timeouts fired; longest blind pass {longest:.0f}s, none hung")
    drill_row.prove("0 resize calls and 0 journal writes in the window (rv unchanged); batch 2 due at "
                    f"+{before.batches[0].bake_until_s - cut_wall:.0f}s was sent only after the heal")
    drill_row.prove(f"{len(relists)} full re-reads after the heal; {PODS} pods generation +1 each = journal; "
                    f"{inv.samples} samples, 0 breaches")
