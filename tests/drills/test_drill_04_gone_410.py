"""Drill 4: 410 Gone: etcd is compacted past every resourceVersion the watchers hold, and they must relist.

Setup: 6 pods, batch 1 (one pod) baking; the node simulator watches pods (it relists on 410 or a broken
stream); the updater reads from its watch-fed caches (as ``run`` does) and sends each resize with the cached
resourceVersion as precondition.
Fault: every pod is touched (new resourceVersions), etcd is compacted at its current revision through its v3
HTTP gateway (etcdctl is not installed), and kube-apiserver is restarted so that its watch cache, which
would otherwise still serve the old versions, is rebuilt from the compacted store. Proof: a watch resumed
from a pre-compaction resourceVersion gets 410; every resize sent afterwards carries a resourceVersion newer
than the compaction (keyed to the relist, not to an old event); replaying a pre-compaction decision is
refused with 409 by the API server; a pod cache listed before the fault gets 410 when its watch resumes and,
relisted, holds every pod at its post-churn version; the simulated kubelets, after their relist, actuate
batch 2.
"""

from __future__ import annotations

import json
import time

import pytest
from kubernetes import client

from tests.builders.cluster import Mi, Scenario
from tests.builders.drills import (
    Bounds,
    DrillRow,
    Invariants,
    PassLoop,
    RecordingResizer,
    assert_each_resized_once,
    baking,
    etcd_compact,
    start_apiserver,
    stop_apiserver,
    wait_settled,
)
from tests.harness.cluster import LocalCluster
from tests.harness.faultproxy import FaultProxy
from tests.waiting import eventually
from updater.kube.informer import Informer
from updater.kube.snapshot import LIST_OPTIONS, ClusterReader
from updater.kube.writes import Conflict, PodResizer
from updater.rollout.machine.journal import Phase

pytestmark = pytest.mark.cluster
PODS = 6


def _watch_from(core: client.CoreV1Api, ns: str, rv: str) -> int:
    """HTTP status, or the code of the first ERROR event, of a pod watch resumed from ``rv`` (0: none)."""
    try:
        resp = core.list_namespaced_pod(ns, watch=True, resource_version=rv, timeout_seconds=2,
                                        _preload_content=False, _request_timeout=(3, 5))
    except client.ApiException as err:
        return int(err.status or 0)
    for line in resp.data.decode().splitlines():
        event = json.loads(line)
        if event["type"] == "ERROR":
            return int(event["object"].get("code") or 0)
    return 0


def test_drill_04_compaction_forces_410_and_relist(scenario: Scenario, drill_cluster: LocalCluster,
                                                  drill_row: DrillRow, sim_route: FaultProxy) -> None:
    drill_row.drill, drill_row.name = 4, "410 Gone"
    drill_row.fault = "etcd compacted at its current revision + API server watch cache rebuilt, while batch 1 bakes"
    scenario.pool("a")
    scenario.deployment("web", "a", replicas=PODS)
    scenario.vpa("web", {"cpu": "250m", "memory": "256Mi"})
    scenario.policy(steps=[{"fraction": 0, "bake": "6s"}, {"fraction": 1, "bake": "1s"}])
    executor = scenario.executor(watch=True)  # reads from the watch-fed caches, as `run` does
    probe = Informer(ClusterReader(scenario.api).listings["Pod"], scenario.ns, list_options=LIST_OPTIONS["Pod"])
    resizer = RecordingResizer(scenario.api)
    executor.resizer = resizer
    bounds = Bounds(ranges={"requests.cpu": (250, 500), "limits.cpu": (500, 1000),
                            "requests.memory": (256 * Mi, 256 * Mi), "limits.memory": (512 * Mi, 512 * Mi)})
    with Invariants(scenario.api, scenario.ns, min_ready={"web": PODS}, bounds=bounds) as inv, \
            PassLoop(executor) as loop:
        eventually("batch 1 baking", lambda: any(baking(r, 0) for r in scenario.rollouts()),
                   timeout_s=60, interval_s=0.2)
        [r0] = scenario.rollouts()
        old = {p.metadata.name: (p.metadata.uid, p.metadata.resource_version)
               for p in scenario.core.list_namespaced_pod(scenario.ns).items}
        old_list_rv = scenario.core.list_namespaced_pod(scenario.ns).metadata.resource_version
        probe.relist()  # a cache listed now; its watch resumes only after the fault
        churned = {}  # new versions for every pod: whatever an old event said is now out of date
        for name in old:
            patched = scenario.core.patch_namespaced_pod(name, scenario.ns,
                                                         {"metadata": {"annotations": {"drill": "4"}}})
            churned[f"{scenario.ns}/{name}"] = int(patched.metadata.resource_version)
        compacted = etcd_compact(drill_cluster)
        stop_apiserver(drill_cluster, sim_route)
        start_apiserver(drill_cluster, sim_route)
        relist_at = time.monotonic()
        gone = _watch_from(scenario.core, scenario.ns, old_list_rv)
        with pytest.raises(client.ApiException) as probe_gone:
            probe.watch_once()
        probe.mark_broken("410")
        untrusted = probe.items() is None
        probe.relist()
        relisted = {o["metadata"]["name"]: int(o["metadata"]["resourceVersion"]) for o in probe.items() or []}
        wait_settled(scenario, loop, timeout_s=90)
    scenario.stop_watching()
    assert probe_gone.value.status == 410 and untrusted  # the cache saw the 410 and was not read until relisted
    assert set(relisted) == set(old)
    assert all(rv >= churned[f"{scenario.ns}/{name}"] for name, rv in relisted.items()), relisted
    [r] = scenario.rollouts()
    assert r.phase == Phase.COMPLETED, r.message
    assert gone == 410, f"a watch from the pre-compaction version got {gone}"
    later = [c for c in resizer.landed() if c.at >= relist_at]
    second = {e.key for e in r0.entries_of(1)}
    assert {c.pod for c in later} == second
    assert all(int(c.resource_version) >= churned[c.pod] for c in later), later  # keyed to the relist
    # A replay of a decision taken from a pre-compaction event: the API server refuses it.
    victim = sorted(second)[0].split("/")[1]
    entry = next(e for e in r.entries if e.pod == victim)
    uid, stale_rv = old[victim]
    with pytest.raises(Conflict):
        PodResizer(scenario.api).resize(scenario.ns, victim, uid, stale_rv, entry.before)
    inv.assert_clean()
    assert_each_resized_once(inv, scenario.rollouts(), PODS)
    drill_row.prove(f"watch from rv {old_list_rv} after compaction at {compacted}: {gone} (the updater's pod cache "
                    f"too: {probe_gone.value.status}, relisted); the {len(later)} "
                    f"resizes after the relist all carried the pods' post-churn rv, none an older one; a replay with a "
                    "pre-compaction rv: 409")
    drill_row.prove(f"simulated kubelets relisted and actuated batch 2; {PODS} pods generation +1 each = journal; "
                    f"{inv.samples} samples, 0 breaches")
