"""The updater against the real API server and the node simulator: canary rollouts of in-place resizes.

The test plays the recommender by writing VPA status itself, creates a ResizePolicy, and runs updater
passes in-process (the same Executor the ``run`` command drives) until the rollout settles. Every
expectation is about what the real API server and the simulated kubelets end up with.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from typing import Any

import pytest
from kubernetes import client

from podtailor.units import parse_cpu_millicores, parse_memory_bytes
from tests.builders.cluster import POOL_KEY, Mi, Scenario
from tests.nodesim.usage import Constant
from tests.waiting import eventually
from updater.kube.snapshot import ClusterReader
from updater.kube.writes import PodResizer
from updater.rollout.machine.journal import Phase

pytestmark = pytest.mark.cluster


def cpu_of(pod: client.V1Pod) -> int:
    return parse_cpu_millicores(pod.status.container_statuses[0].resources.requests["cpu"])


def test_cpu_change_is_applied_online_in_canary_batches(scenario: Scenario) -> None:
    scenario.pool("a")
    scenario.deployment("web", "a", replicas=3)
    scenario.vpa("web", {"cpu": "250m", "memory": "256Mi"})
    scenario.policy()
    executor = scenario.executor()
    executor.run_pass(time.time())
    [r] = scenario.rollouts()
    assert [len(r.entries_of(b.index)) for b in r.batches] == [1, 2]  # first batch: one pod
    # Batch 2 waits for batch 1 to be verified and baked (2 s).
    assert all(e.state.value == "Planned" for e in r.entries_of(1))
    scenario.run_until(executor, scenario.settled)
    [r] = scenario.rollouts()
    assert r.phase == Phase.COMPLETED, r.message
    pods = scenario.running("web")
    # 500m -> 250m; the 1-core limit keeps the 1:2 ratio -> 500m; no restart (CPU is NotRequired).
    assert [cpu_of(p) for p in pods] == [250, 250, 250]
    assert all(parse_cpu_millicores(p.spec.containers[0].resources.limits["cpu"]) == 500 for p in pods)
    assert all(p.status.container_statuses[0].restart_count == 0 for p in pods)
    assert all(p.status.qos_class == "Burstable" for p in pods)  # QoS never changes


def test_plan_shows_what_run_then_does(scenario: Scenario, cluster: Any) -> None:
    scenario.pool("a")
    scenario.deployment("web", "a", replicas=2)
    scenario.vpa("web", {"cpu": "300m", "memory": "256Mi"})
    scenario.policy()
    out = subprocess.run([sys.executable, "-m", "updater", "plan", "--kubeconfig", cluster.kubeconfig, "-n",
                          scenario.ns, "--pool-label", POOL_KEY, "-o", "json"], capture_output=True, text=True,
                         timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    planned = json.loads(out.stdout)["plans"][0]
    batches = [b["pods"] for b in planned["batches"]]
    executor = scenario.executor()
    executor.run_pass(time.time())
    [r] = scenario.rollouts()
    assert [[e.key for e in r.entries_of(b.index)] for b in r.batches] == batches


def test_small_changes_are_skipped(scenario: Scenario) -> None:
    scenario.pool("a")
    scenario.deployment("web", "a", replicas=2)
    scenario.vpa("web", {"cpu": "510m", "memory": "256Mi"})  # +2%, threshold 5%
    scenario.policy()
    executor = scenario.executor()
    result = executor.run_pass(time.time())
    assert not result.started and not scenario.rollouts()
    [(_, p)] = result.plans
    assert {d.reason.value for d in p.decisions} == {"below-threshold"}


def test_memory_restart_waits_for_approval_and_respects_the_budget(scenario: Scenario) -> None:
    scenario.pool("a")
    scenario.deployment("web", "a", replicas=4, memory_policy="RestartContainer")
    scenario.vpa("web", {"cpu": "500m", "memory": "384Mi"})
    scenario.policy(requireApprovalForRestart=True, disruptionBudget=0.25,
                    steps=[{"fraction": 1, "bake": "1s"}])
    executor = scenario.executor()
    result = executor.run_pass(time.time())
    assert not result.started
    [(_, p)] = result.plans
    assert {d.reason.value for d in p.decisions} == {"awaiting-restart-approval"}
    scenario.apps.patch_namespaced_deployment("web", scenario.ns, {
        "metadata": {"annotations": {"podtailor.io/approve-restart": "true"}}})
    executor.run_pass(time.time())
    [r] = scenario.rollouts()
    # One step covering all 4 pods, but at most 25% of 4 = 1 restarting pod at a time: 4 batches of 1.
    assert [len(r.entries_of(b.index)) for b in r.batches] == [1, 1, 1, 1]
    scenario.run_until(executor, scenario.settled, timeout_s=90)
    pods = scenario.running("web")
    assert all(p.status.container_statuses[0].restart_count == 1 for p in pods)
    assert all(parse_memory_bytes(p.status.container_statuses[0].resources.requests["memory"]) == 384 * Mi
               for p in pods)


def test_an_oom_after_a_decrease_halts_the_pool_and_restores_exactly(scenario: Scenario) -> None:
    sim = scenario.pool("a")
    scenario.deployment("web", "a", replicas=2, usage={"kind": "constant", "cpu_cores": 0.1,
                                                       "memory_bytes": 300 * Mi})
    # Target 200Mi: memory limit 512Mi -> 400Mi (ratio kept), still above the 300Mi the app uses...
    scenario.vpa("web", {"cpu": "500m", "memory": "200Mi"})
    scenario.policy(steps=[{"fraction": 0, "bake": "4s"}, {"fraction": 1, "bake": "1s"}])
    executor = scenario.executor()
    executor.run_pass(time.time())
    [r] = scenario.rollouts()
    first = r.entries_of(0)[0]
    eventually("first pod verified", lambda: (executor.run_pass(time.time()) and False) or any(
        e.state.value == "Verified" for e in scenario.rollouts()[0].entries), timeout_s=30, interval_s=0.3)
    # ...until the app grows past the new limit while the batch bakes: OOM kill.
    sim.set_usage(scenario.ns, first.pod, "app", Constant(cpu_cores=0.1, memory_bytes=450 * Mi))
    scenario.run_until(executor, scenario.settled)
    [r] = scenario.rollouts()
    assert r.phase == Phase.HALTED and "OOM" in r.message
    pod = scenario.core.read_namespaced_pod(first.pod, scenario.ns)
    c = pod.spec.containers[0].resources
    assert (c.requests["memory"], c.limits["memory"]) == ("256Mi", "512Mi")  # the recorded values, exactly
    # The second batch never ran: the other pod was not touched.
    other = r.entries_of(1)[0]
    assert other.state.value == "Planned"
    sim.set_usage(scenario.ns, first.pod, "app", Constant(cpu_cores=0.1, memory_bytes=100 * Mi))
    executor.run_pass(time.time())
    assert scenario.rollouts()[0].phase == Phase.HALTED  # halted until a person lets it go on


def test_a_memory_limit_below_usage_halts_the_pool_after_the_deferred_timeout(scenario: Scenario) -> None:
    scenario.pool("a")
    scenario.deployment("web", "a", replicas=2, usage={"kind": "constant", "cpu_cores": 0.1,
                                                       "memory_bytes": 450 * Mi})
    # Target 200Mi: memory limit 512Mi -> 400Mi (ratio kept), below the 450Mi the app uses. The API server takes
    # the resize (1.34+: NotRequired may decrease a memory limit); the kubelet refuses to actuate it and keeps
    # PodResizeInProgress with reason Error, retrying, so verification could only wait for its timeout.
    scenario.vpa("web", {"cpu": "500m", "memory": "200Mi"})
    scenario.policy(deferredTimeout="3s")
    executor = scenario.executor()
    executor.run_pass(time.time())
    [r] = scenario.rollouts()
    first = r.entries_of(0)[0]
    started = time.monotonic()
    scenario.run_until(executor, scenario.settled, timeout_s=40)
    [r] = scenario.rollouts()
    assert r.phase == Phase.HALTED and "has not been able to apply the resize" in r.message, r.message
    assert "usage" in r.message, r.message  # the kubelet's own words are carried into the reason
    assert 3 < time.monotonic() - started < 30  # after the Deferred timeout, not the 1 h in-progress one
    pod = scenario.core.read_namespaced_pod(first.pod, scenario.ns)
    spec, status = pod.spec.containers[0].resources, pod.status.container_statuses[0].resources
    assert (spec.requests["memory"], spec.limits["memory"]) == ("256Mi", "512Mi")  # restored, exactly
    assert (status.requests["memory"], status.limits["memory"]) == ("256Mi", "512Mi")
    assert pod.status.container_statuses[0].restart_count == 0
    assert not [c for c in pod.status.conditions or [] if c.type == "PodResizeInProgress"]
    assert r.entries_of(1)[0].state.value == "Planned"  # the second batch never ran
    reasons = {e.reason for e in scenario.core.list_namespaced_event("default").items
               if e.involved_object.name == r.name}
    assert "RolloutGateFailed" in reasons


def test_two_pools_progress_independently_and_a_not_ready_pool_is_frozen(scenario: Scenario) -> None:
    scenario.pool("a")
    sim_b = scenario.pool("b")
    scenario.deployment("web-a", "a", replicas=2)
    scenario.deployment("web-b", "b", replicas=2)
    scenario.vpa("web-a", {"cpu": "250m", "memory": "256Mi"})
    scenario.vpa("web-b", {"cpu": "250m", "memory": "256Mi"})
    scenario.policy()
    for node in sim_b.node_names():
        sim_b.set_node_ready(node, False)
    executor = scenario.executor()
    eventually("pool b NotReady in the API", lambda: all(
        not any(c.type == "Ready" and c.status == "True" for c in scenario.core.read_node(n).status.conditions)
        for n in sim_b.node_names()), timeout_s=15)
    scenario.run_until(executor, lambda: any(r.phase == Phase.COMPLETED for r in scenario.rollouts()))
    by_pool = {r.pool: r for r in scenario.rollouts()}
    assert by_pool[scenario.pools["a"]].phase == Phase.COMPLETED
    assert scenario.pools["b"] not in by_pool  # frozen: no rollout started there
    assert all(cpu_of(p) == 500 for p in scenario.running("web-b"))


class Crash(Exception):
    """Stands for the process dying."""


class DyingResizer(PodResizer):
    """The real resizer, but the process "dies" right after its first resize reached the API server."""

    def resize(self, *args: Any, **kwargs: Any) -> int:
        generation = super().resize(*args, **kwargs)
        raise Crash(f"killed after a resize (generation {generation})")


def test_crash_mid_batch_and_resume_resizes_nobody_twice(scenario: Scenario) -> None:
    scenario.pool("a")
    scenario.deployment("web", "a", replicas=3)
    scenario.vpa("web", {"cpu": "250m", "memory": "256Mi"})
    scenario.policy(steps=[{"fraction": 1, "bake": "1s"}])
    generations = {p.metadata.name: p.metadata.generation for p in scenario.running("web")}
    dying = scenario.executor()
    dying.resizer = DyingResizer(scenario.api)
    with pytest.raises(Crash):
        dying.run_pass(time.time())
    [r] = scenario.rollouts()
    # The intent was journaled before anything was sent; one resize reached the server before the crash.
    assert [e.state.value for e in r.entries] == ["Applying"] * 3
    resumed = scenario.executor()
    scenario.run_until(resumed, scenario.settled)
    [r] = scenario.rollouts()
    assert r.phase == Phase.COMPLETED
    for p in scenario.running("web"):
        assert p.metadata.generation == generations[p.metadata.name] + 1  # exactly one resize each
        assert cpu_of(p) == 250


def test_a_policy_we_cannot_read_stops_everything_with_a_clear_error(scenario: Scenario, cluster: Any) -> None:
    scenario.pool("a")
    scenario.deployment("web", "a", replicas=1)
    scenario.vpa("web", {"cpu": "250m", "memory": "256Mi"})
    # The schema accepts it, but a window that ends before it starts means nothing sensible.
    scenario.policy(maintenanceWindows=[{"days": ["Mon"], "start": "10:00", "end": "09:00"}])
    out = subprocess.run([sys.executable, "-m", "updater", "plan", "--kubeconfig", cluster.kubeconfig, "-n",
                          scenario.ns, "--pool-label", POOL_KEY], capture_output=True, text=True, timeout=120,
                         check=False)
    assert out.returncode == 1 and out.stdout == ""
    assert "ResizePolicy" in out.stderr and "Traceback" not in out.stderr
    with pytest.raises(Exception, match="cannot be read"):
        scenario.executor().run_pass(time.time())
    assert not scenario.rollouts()  # nothing acted on


class CountingReader(ClusterReader):
    """The real reader, recording every listing it sends (the watches' own lists are not counted)."""

    def __init__(self, api: client.ApiClient) -> None:
        super().__init__(api)
        self.fetched: list[str] = []

    def _fetch(self, kind: str, namespace: str | None, **kwargs: Any) -> list[Any]:
        self.fetched.append(kind)
        return super()._fetch(kind, namespace, **kwargs)


def test_run_from_the_watch_caches_completes_the_same_rollout_without_listing(scenario: Scenario) -> None:
    scenario.pool("a")
    scenario.deployment("web", "a", replicas=3)
    scenario.vpa("web", {"cpu": "250m", "memory": "256Mi"})
    scenario.policy()
    reader = CountingReader(scenario.api)
    executor = scenario.executor(reader, watch=True)

    def same() -> bool:  # from memory, the same pods at the same resourceVersions as a listing shows
        listed = ClusterReader(scenario.api).read(policy_pool_label=POOL_KEY, namespaces=(scenario.ns,))
        cached = reader.read(policy_pool_label=POOL_KEY, namespaces=(scenario.ns,))
        return len(cached.pods) == 3 and {p.name: p.resource_version for p in cached.pods} == {
            p.name: p.resource_version for p in listed.pods}

    eventually("the cached pods equal the listed ones", same, timeout_s=10)
    scenario.run_until(executor, scenario.settled)
    scenario.stop_watching()
    [r] = scenario.rollouts()
    assert r.phase == Phase.COMPLETED, r.message
    assert [len(r.entries_of(b.index)) for b in r.batches] == [1, 2]
    pods = scenario.running("web")
    assert [cpu_of(p) for p in pods] == [250, 250, 250]  # verified from the cache: the kubelet status shows it
    assert all(p.status.container_statuses[0].restart_count == 0 for p in pods)
    # Every read came from memory (the comparison above used another reader), except that each pass which ended
    # a bake listed the pods and nodes afresh, as run does: two bakes, each seen ended by at least one pass.
    assert reader.fallbacks == 0
    assert executor.fresh_reads >= 2 and reader.fetched == ["Pod", "Node"] * executor.fresh_reads, reader.fetched
