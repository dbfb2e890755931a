"""Drill 21, the runtime acknowledges a resize but does not apply it: status says done, the cgroup disagrees.

The node simulator is told to play such a runtime (``SimConfig.unapplied_cgroups``): the kubelet's status takes
the new values while the ``container_spec_*`` series it serves as cAdvisor's keep the old ones. The updater's
executor runs with its cgroup check reading those series (from the simulator's /metrics, as a Prometheus
would). Expected: the pod is never called verified; after the grace period the batch fails, the pool is Halted,
the pod gets no further patch (its entry is Skipped, naming the field), and a CgroupMismatch Event names it.
Without the check (``machine_verify.cgroup_failure`` and the ``cgroup_disagreement`` term of ``done``) the batch
is verified from status alone and the rollout completes, so this drill fails.
"""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Iterator

import pytest
from kubernetes import client

from tests.conftest import SimFactory
from tests.drills._rollout_scenario import DrillRow, DrillScenario, open_drill
from tests.nodesim.nodes import NodePool
from updater.cgroups import GRACE_S, CgroupReading
from updater.kube.cadvisor import CgroupCheck, parse_cadvisor
from updater.rollout.machine.journal import EntryState, Phase

pytestmark = pytest.mark.cluster


@pytest.fixture
def drill(api: client.ApiClient, crds: list[str], namespace: str, make_sim: SimFactory,
          request: pytest.FixtureRequest) -> Iterator[tuple[DrillScenario, DrillRow]]:
    yield from open_drill(api, namespace, make_sim, request)


def test_drill_21_status_done_but_cgroup_unchanged_halts_the_pool_and_leaves_the_pod(
        drill: tuple[DrillScenario, DrillRow]) -> None:
    s, row = drill
    row.fault = "the runtime acknowledges the resize (status) but leaves the cgroup (cAdvisor series) unchanged"
    name = f"{s.ns[-6:]}-a"
    s.pools["a"] = name
    sim = s.make_sim(NodePool(name=name, count=1, cpu_millicores=8000, memory_bytes=32 * 2**30),
                     tick_s=0.2, crash_backoff_s=0.5, metrics_port=0, unapplied_cgroups=True)

    def served(node: str) -> dict[str, CgroupReading]:
        with urllib.request.urlopen(f"http://127.0.0.1:{sim.metrics_port}/metrics", timeout=5) as resp:
            return parse_cadvisor(resp.read().decode())

    s.deployment("web", "a", replicas=1)  # requests 500m/256Mi, limits 1/512Mi
    s.vpa("web", {"cpu": "250m", "memory": "256Mi"})  # CPU 500m -> 250m, limit 1 -> 500m
    s.policy(steps=[{"fraction": 1, "bake": "5s"}])
    ex = s.counting_executor()
    ex.reads.cgroups = CgroupCheck(served)
    t0 = time.monotonic()
    s.drive(ex, GRACE_S + 30, until=lambda: s.rollouts()[0].phase == Phase.HALTED if s.rollouts() else False)
    took = time.monotonic() - t0
    [r] = s.rollouts()
    [entry] = r.entries
    assert took > GRACE_S, f"halted after {took:.0f}s, before the grace period"
    assert entry.state == EntryState.SKIPPED and "cpu limit" in entry.message, entry
    assert "cgroup disagrees" in r.message and "container_spec_cpu_quota" in r.message, r.message
    row.prove(f"Halted after {took:.0f}s: {r.message}")
    [pod] = s.pods("web")
    status = pod.status.container_statuses[0].resources
    assert (status.requests["cpu"], status.limits["cpu"]) == ("250m", "500m"), "status did not say done"
    events = s.core.list_namespaced_event(s.ns, field_selector=f"involvedObject.name={pod.metadata.name}").items
    mismatch = [e for e in events if e.reason == "CgroupMismatch"]
    assert mismatch and "cpu limit" in mismatch[0].message and mismatch[0].type == "Warning", events
    row.prove(f"Event CgroupMismatch on {pod.metadata.name}: {mismatch[0].message}")
    halted_at = time.time()
    s.drive(ex, 4)
    calls = s.calls.of("resize")
    assert [c.key for c in calls if c.ok] == [f"{s.ns}/{pod.metadata.name}"], calls  # the resize, no restore
    assert s.calls.of("resize", since=halted_at) == []
    row.prove("one resize sent to the pod, no restore or other patch after the failure; pool Halted")
    row.passed()
