"""Drill 12, pod renames: a Deployment with 7 days of history, then a real rollout (template change: the
controller manager makes a new ReplicaSet) renames every pod.

Expected: history is joined by owner (pod -> ReplicaSet -> Deployment through kube-state-metrics owner
series), not by pod name, so the new pods' usage lands in the same workload container and the target after
the rollout is within tolerance of the target before it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from kubernetes import client

from recommender.model.types import ContainerKey
from tests.drills._recommender_fixtures import (
    LAG_S,
    Mi,
    backfill,
    drill_row,
    engine_for,
    grid_now,
    make_deployment,
    make_vpa,
    pods,
    statuses,
    target,
)
from tests.harness.prometheus import LocalPrometheus
from tests.nodesim.usage import Daily
from tests.waiting import eventually

pytestmark = [pytest.mark.cluster, pytest.mark.prometheus]
TOLERANCE = 0.10
"""Two more hours of the same daily pattern move the decayed percentiles by a few percent at most."""


def replicasets(api: client.ApiClient, ns: str) -> list[str]:
    items = client.AppsV1Api(api).list_namespaced_replica_set(ns).items
    return [rs.metadata.name for rs in sorted(items, key=lambda r: int(
        (r.metadata.annotations or {}).get("deployment.kubernetes.io/revision", "0")))]


def test_a_rollout_that_renames_every_pod_keeps_the_target(
    api: client.ApiClient, crds: list[str], namespace: str, prometheus: LocalPrometheus, tmp_path: Path,
) -> None:
    with drill_row(12, "Pod renames", "7 days of history, then a template change makes a new ReplicaSet and all "
                   "pods (new names) run 2 h more") as row:
        make_deployment(api, namespace, "web", cpu="100m", memory="128Mi")
        old_rs = eventually("first ReplicaSet", lambda: replicasets(api, namespace), timeout_s=30)[0]
        client.AppsV1Api(api).patch_namespaced_deployment("web", namespace, {"spec": {"template": {"metadata": {
            "annotations": {"rollout": "2"}}}}})
        rs_names = eventually("second ReplicaSet", lambda: [*replicasets(api, namespace)][:2] if len(
            replicasets(api, namespace)) == 2 else None, timeout_s=30)
        assert rs_names[0] == old_rs
        new_rs = rs_names[1]
        make_vpa(api, namespace, "web", "web")

        end_s = grid_now(-120)
        rollout_s = end_s - 2 * 3600
        model = Daily(cpu_cores=0.5, memory_bytes=300 * Mi, cpu_amplitude_cores=0.2,
                      memory_amplitude_bytes=50 * Mi, cpu_noise=0.1, memory_noise=0.05, seed=12)
        backfill(prometheus, tmp_path, "old", pods(namespace, "web", old_rs, 3, model), rollout_s, days=7)
        new_pods = pods(namespace, "web", new_rs, 3, model)
        assert not {c.pod for c in new_pods} & {f"{old_rs}-p{i}" for i in range(3)}
        backfill(prometheus, tmp_path, "new", new_pods, end_s, days=2 / 24 - 60 / 86400)

        engine, source, _ = engine_for(api, prometheus.url, [namespace], history_s=8 * 86400)
        engine.run_pass(rollout_s + LAG_S)
        before = target(statuses(api, [namespace])[(namespace, "web")])
        engine.run_pass(end_s + LAG_S)
        after = target(statuses(api, [namespace])[(namespace, "web")])
        key = ContainerKey(namespace=namespace, workload_kind="Deployment", workload_name="web", container="app")
        # The pass after the rollout saw only the new pods, and their samples went to the Deployment's key:
        # 3 pods x 120 steps, plus the old pods' last few steps inside the 4-minute rate window.
        assert list(source.results[-1]) == [key]
        assert 3 * 118 <= len(source.results[-1][key].cpu_cores) <= 3 * 124
        assert before is not None and after is not None
        assert abs(after[0] - before[0]) <= TOLERANCE * before[0], (before, after)
        assert abs(after[1] - before[1]) <= TOLERANCE * before[1], (before, after)
        # Sanity: the target reflects the daily peak (0.7 cores +- noise, x 1.1), not a request or a floor.
        assert 600 <= before[0] <= 1000, before
        row.proof += [
            f"ReplicaSets {old_rs} -> {new_rs} (real rollout); the post-rollout pass read "
            f"{len(source.results[-1][key].cpu_cores)} CPU samples of the 3 renamed pods into "
            "Deployment/web/app",
            f"target before {before[0]}m/{before[1] / Mi:.0f}Mi, after {after[0]}m/{after[1] / Mi:.0f}Mi "
            f"(within {TOLERANCE:.0%})",
        ]
