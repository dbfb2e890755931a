"""A kernel OOM kill after a decrease, on a real node, caught by the updater's OOM gate, which rolls back.

The updater's real executor (as the drills drive it, ``tests/drills/_rollout_scenario.py``) lowers a real
container's memory limit 128Mi -> 80Mi in place; the new limit is in its cgroup. During the bake the process
grows past it (the test signals it through ``kubectl exec``), the kernel kills it (``OOMKilled``, exit 137),
the kubelet restarts it, and the OOM gate fails the batch: the pod is restored to the journal's "before"
values, in spec, in status and in the restarted container's cgroup, and the pool is Halted.
"""

from __future__ import annotations

import time

import pytest
from kubernetes import client

from tests.builders.cluster import run_deployment
from tests.builders.realpods import (
    GROW_FILE,
    Mi,
    container,
    container_id,
    hold_mib,
    kubectl_exec,
    read_cgroup,
    status_of,
)
from tests.drills._rollout_scenario import DrillScenario
from tests.harness.cluster import ClusterState
from tests.harness.realnode import RealNodePool
from tests.waiting import eventually
from updater.rollout.machine.journal import EntryState, Phase

pytestmark = pytest.mark.cluster


def _deployment(s: DrillScenario) -> None:
    app = container("app", hold_mib(16, grow_to_mib=100), requests={"cpu": "100m", "memory": "64Mi"},
                    limits={"cpu": "200m", "memory": "128Mi"})
    run_deployment(s, "web", app)


def test_a_kernel_oom_kill_after_a_decrease_fails_the_gate_and_the_batch_is_rolled_back(
        real_scenario: DrillScenario, real_nodes: RealNodePool, cluster: ClusterState) -> None:
    s, layout = real_scenario, real_nodes.layout
    node = next(iter(real_nodes.nodes.values()))
    _deployment(s)
    s.vpa("web", {"cpu": "100m", "memory": "40Mi"})  # request 64Mi -> 40Mi, limit 128Mi -> 80Mi (ratio kept)
    s.policy(steps=[{"fraction": 1, "bake": "60s"}])
    ex = s.counting_executor()
    s.drive(ex, 60, until=lambda: any(e.state == EntryState.VERIFIED for r in s.rollouts() for e in r.entries))
    [pod] = s.running("web")
    cid = container_id(pod, "app")
    assert read_cgroup(node, layout, cid).memory_limit_bytes == 80 * Mi, "the decrease is not in the cgroup"
    kubectl_exec(cluster, s.ns, pod.metadata.name, "app", "touch", GROW_FILE)
    s.drive(ex, 60, until=lambda: s.rollouts()[0].phase == Phase.HALTED)
    [r] = s.rollouts()
    assert "OOM" in r.message, r.message
    [entry] = r.entries
    assert entry.state == EntryState.REVERTED, entry

    def restored() -> client.V1Pod | None:
        p = s.core.read_namespaced_pod(pod.metadata.name, s.ns)
        st = status_of(p, "app")
        ok = st.resources.limits["memory"] == "128Mi" and st.state.running and p.spec.containers[
            0].resources.limits["memory"] == "128Mi"
        return p if ok else None

    now = eventually("the pod restored to 128Mi and running", restored, timeout_s=60)
    st = status_of(now, "app")
    assert st.last_state.terminated.reason == "OOMKilled" and st.last_state.terminated.exit_code == 137
    assert now.metadata.uid == pod.metadata.uid and st.restart_count >= 1
    assert read_cgroup(node, layout, container_id(now, "app")).memory_limit_bytes == 128 * Mi
    halted_at = time.time()
    s.drive(ex, 4)
    assert s.calls.of("resize", since=halted_at) == [], "a resize was sent while the pool is Halted"
    assert [c.ok for c in s.calls.of("resize")].count(True) == 2  # the decrease and the restore
