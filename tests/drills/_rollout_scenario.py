"""Shared machinery of drills 13-18: a drill scenario, counting ports and the continuous invariant sampler.

Owns what every rollout drill needs on top of ``tests.builders.cluster.Scenario``: VPAs with
admin bounds (``resourcePolicy`` minAllowed/maxAllowed), StatefulSets, PodDisruptionBudgets, an executor
whose ports are the real ones wrapped with a timestamped record of every call (a spy, not a fake), and
``Sampler``, a background thread that reads the API server every ~0.5 s during the fault and records every
breach of the drill invariants: Ready pods per workload below the floor, a request or limit outside the admin
bounds, evictions or restarting resizes in flight above the budget, a pod whose ``metadata.generation`` is
ahead of what the journal says was sent to it. ``generation_report`` is the exact end-of-drill form of the
last check (applied exactly once, or reverted). ``DrillRow`` writes the drill's row to
``tests/artifacts/drills-13-18.json``.
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from podtailor.kube.errors import KubeError
from podtailor.units import parse_cpu_millicores, parse_memory_bytes
from tests.builders.cluster import POOL_KEY, Scenario
from tests.builders.drills import SAMPLE_FLOOR, await_sample_floor
from tests.conftest import SimFactory
from tests.waiting import eventually
from updater.kube.writes import Evictor, PodResizer, TemplatePatcher
from updater.rollout.act.executor import Executor
from updater.rollout.machine.journal import EntryState, Rollout

ARTIFACT = Path(__file__).resolve().parents[1] / "artifacts" / "drills-13-18.json"
Mi = 2**20

# How many pod-spec changes (resize requests accepted by the API server) a journal entry stands for: the most
# while it is in this state (the write may be in flight), and exactly, once the rollout has settled.
SENT_AT_MOST = {EntryState.PLANNED: 0, EntryState.APPLYING: 1, EntryState.APPLIED: 1, EntryState.VERIFIED: 1,
                EntryState.REVERTING: 2, EntryState.REVERTED: 2, EntryState.INFEASIBLE: 2, EntryState.SKIPPED: 1,
                EntryState.GONE: 2, EntryState.NOT_RESTORED: 2}


def sent_exactly(state: EntryState, generation: int | None) -> int | None:
    """Resize requests an entry in a settled state stands for (None: not settled, no exact answer)."""
    if state in (EntryState.VERIFIED, EntryState.APPLIED):
        return 1
    if state in (EntryState.REVERTED, EntryState.NOT_RESTORED, EntryState.INFEASIBLE):
        return 2 if generation is not None else 0
    if state == EntryState.SKIPPED:
        return 1 if generation is not None else 0
    if state == EntryState.PLANNED:
        return 0
    return None


# ------------------------------------------------------------------------------------------- counting ports
@dataclass(frozen=True, slots=True, kw_only=True)
class Call:
    t: float
    kind: str
    """resize | evict | template"""
    key: str
    uid: str
    ok: bool
    error: str = ""


class CallLog:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.calls: list[Call] = []

    def add(self, call: Call) -> None:
        with self.lock:
            self.calls.append(call)

    def of(self, kind: str, since: float = 0.0, until: float = math.inf) -> list[Call]:
        with self.lock:
            return [c for c in self.calls if c.kind == kind and since <= c.t <= until]


class CountingResizer(PodResizer):
    def __init__(self, api: client.ApiClient, log: CallLog) -> None:
        super().__init__(api)
        self.log = log

    def resize(self, namespace: str, pod: str, uid: str, resource_version: str, values: Sequence[Any],
               pod_level: Any = None) -> int:
        t = time.time()
        try:
            out = super().resize(namespace, pod, uid, resource_version, values, pod_level)
        except Exception as err:
            self.log.add(Call(t=t, kind="resize", key=f"{namespace}/{pod}", uid=uid, ok=False, error=str(err)))
            raise
        self.log.add(Call(t=t, kind="resize", key=f"{namespace}/{pod}", uid=uid, ok=True))
        return out


class CountingEvictor(Evictor):
    def __init__(self, api: client.ApiClient, log: CallLog) -> None:
        super().__init__(api)
        self.log = log

    def evict(self, namespace: str, pod: str, uid: str) -> None:
        t = time.time()
        try:
            super().evict(namespace, pod, uid)
        except Exception as err:
            self.log.add(Call(t=t, kind="evict", key=f"{namespace}/{pod}", uid=uid, ok=False, error=str(err)))
            raise
        self.log.add(Call(t=t, kind="evict", key=f"{namespace}/{pod}", uid=uid, ok=True))


class CountingTemplates(TemplatePatcher):
    def __init__(self, api: client.ApiClient, log: CallLog) -> None:
        super().__init__(api)
        self.log = log

    def patch(self, namespace: str, kind: str, name: str, values: Sequence[Any]) -> None:
        t = time.time()
        try:
            super().patch(namespace, kind, name, values)
        except Exception as err:
            self.log.add(Call(t=t, kind="template", key=f"{namespace}/{kind}/{name}", uid="", ok=False,
                              error=str(err)))
            raise
        self.log.add(Call(t=t, kind="template", key=f"{namespace}/{kind}/{name}", uid="", ok=True))


# ------------------------------------------------------------------------------------------------ scenario
@dataclass(frozen=True, slots=True, kw_only=True)
class Bounds:
    """Admin bounds of one container, millicores and bytes (VPA minAllowed/maxAllowed)."""

    cpu_min: int
    cpu_max: int
    memory_min: int
    memory_max: int

    def as_policy(self, container: str) -> dict[str, Any]:
        return {"containerName": container,
                "minAllowed": {"cpu": f"{self.cpu_min}m", "memory": str(self.memory_min)},
                "maxAllowed": {"cpu": f"{self.cpu_max}m", "memory": str(self.memory_max)}}

    def breach(self, res: Mapping[str, str] | None) -> str | None:
        for name, raw in (res or {}).items():
            value = parse_cpu_millicores(raw) if name == "cpu" else parse_memory_bytes(raw)
            low, high = (self.cpu_min, self.cpu_max) if name == "cpu" else (self.memory_min, self.memory_max)
            if not low <= value <= high:
                return f"{name} {raw} outside [{low}, {high}]"
        return None


DEFAULT_BOUNDS = Bounds(cpu_min=100, cpu_max=4000, memory_min=64 * Mi, memory_max=2048 * Mi)


class DrillScenario(Scenario):
    """``Scenario`` plus bounded VPAs, StatefulSets, PDBs and an executor whose ports keep a call log."""

    def __init__(self, api: client.ApiClient, ns: str, make_sim: SimFactory) -> None:
        super().__init__(api, ns, make_sim)
        self.policy_api = client.PolicyV1Api(api)
        self.calls = CallLog()
        self.bounds: dict[str, Bounds] = {}

    def bounded_vpa(self, name: str, target: dict[str, str], *, kind: str = "Deployment",
                    bounds: Bounds = DEFAULT_BOUNDS, controlled_values: str | None = None) -> None:
        self.bounds[name] = bounds
        policy = bounds.as_policy("app")
        if controlled_values:
            policy["controlledValues"] = controlled_values
        self.custom.create_namespaced_custom_object("autoscaling.k8s.io", "v1", self.ns, "verticalpodautoscalers", {
            "apiVersion": "autoscaling.k8s.io/v1", "kind": "VerticalPodAutoscaler", "metadata": {"name": name},
            "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": kind, "name": name},
                     "updatePolicy": {"updateMode": "InPlaceOrRecreate"}, "recommenders": [{"name": "podtailor"}],
                     "resourcePolicy": {"containerPolicies": [policy]}}})
        self.set_target(name, target)

    def set_target(self, name: str, target: dict[str, str]) -> None:
        obj = self.custom.get_namespaced_custom_object("autoscaling.k8s.io", "v1", self.ns,
                                                       "verticalpodautoscalers", name)
        obj["status"] = {"recommendation": {"containerRecommendations": [{
            "containerName": "app", "target": target, "lowerBound": target, "upperBound": target,
            "uncappedTarget": target}]},
            "conditions": [{"type": "RecommendationProvided", "status": "True",
                            "lastTransitionTime": "2026-01-01T00:00:00Z"}]}
        self.custom.replace_namespaced_custom_object_status("autoscaling.k8s.io", "v1", self.ns,
                                                            "verticalpodautoscalers", name, obj)

    def statefulset(self, name: str, pool: str, replicas: int, *, requests: dict[str, str],
                    limits: dict[str, str]) -> None:
        labels = {"app": name}
        usage = json.dumps({"kind": "constant", "cpu_cores": 0.1, "memory_bytes": 100 * Mi})
        self.apps.create_namespaced_stateful_set(self.ns, {
            "apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": name},
            "spec": {"replicas": replicas, "serviceName": name, "podManagementPolicy": "Parallel",
                     "selector": {"matchLabels": labels}, "template": {
                         "metadata": {"labels": labels, "annotations": {"nodesim.podtailor.io/usage": usage}},
                         "spec": {"nodeSelector": {POOL_KEY: self.pools[pool]}, "terminationGracePeriodSeconds": 1,
                                  "containers": [{"name": "app", "image": "registry.invalid/app:1",
                                                  "resources": {"requests": requests, "limits": limits},
                                                  "resizePolicy": [{"resourceName": "memory",
                                                                    "restartPolicy": "NotRequired"}]}]}}}})
        eventually(f"{name} pods running", lambda: len(self.running(name)) == replicas, timeout_s=60)

    def pdb(self, app: str, *, min_available: int) -> None:
        body = {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": app},
                "spec": {"minAvailable": min_available, "selector": {"matchLabels": {"app": app}}}}
        try:
            self.policy_api.create_namespaced_pod_disruption_budget(self.ns, body)
        except client.ApiException as err:
            if err.status != 409:
                raise
            self.policy_api.patch_namespaced_pod_disruption_budget(app, self.ns,
                                                                   {"spec": {"minAvailable": min_available}})
        eventually(f"PDB {app} observed", lambda: (self.policy_api.read_namespaced_pod_disruption_budget(
            app, self.ns).status.observed_generation or 0) >= (self.policy_api.read_namespaced_pod_disruption_budget(
                app, self.ns).metadata.generation or 1), timeout_s=30)

    def counting_executor(self, api: client.ApiClient | None = None) -> Executor:
        """The real executor with the real ports, each wrapped to log its calls (optionally as another user)."""
        ex = self.executor()
        if api is not None:
            from updater.kube.snapshot import ClusterReader
            from updater.kube.writes import EventRecorder, RolloutStore

            reader = ClusterReader(api)
            ex.read = lambda: reader.read(policy_pool_label=POOL_KEY, namespaces=(self.ns,))
            ex.store, ex.recorder = RolloutStore(api), EventRecorder(api)
        ex.resizer = CountingResizer(api or self.api, self.calls)
        ex.evictor = CountingEvictor(api or self.api, self.calls)
        ex.templates = CountingTemplates(api or self.api, self.calls)
        return ex

    def drive(self, executor: Executor, seconds: float, until: Callable[[], bool] | None = None,
              interval_s: float = 0.3) -> int:
        """Run passes like ``podtailor-updater run`` does (one broad catch per pass) for ``seconds`` or until
        ``until()``; returns the number of failed passes."""
        failed = 0
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            try:
                executor.run_pass(time.time())
            except KubeError:
                failed += 1
            if until is not None and until():
                return failed
            time.sleep(interval_s)
        if until is not None:
            seen = [(r.name, r.phase, r.message) for r in self.rollouts()]
            raise AssertionError(f"not reached in {seconds}s: {seen}")
        return failed

    def pods(self, app: str | None = None) -> list[client.V1Pod]:
        selector = f"app={app}" if app else None
        return self.core.list_namespaced_pod(self.ns, label_selector=selector).items


# ------------------------------------------------------------------------------------------------ invariants
@dataclass(frozen=True, slots=True, kw_only=True)
class Workload:
    app: str
    floor: int
    """Ready pods never fewer than this (PDB minAvailable, or replicas minus the budget)."""
    budget: int = 1
    """Evictions and restarting resizes in flight at once, at most."""


@dataclass
class Sampler:
    """Reads pods and journals every ``interval_s`` in the background and records invariant breaches."""

    scenario: DrillScenario
    workloads: Sequence[Workload]
    interval_s: float = 0.5
    external: Callable[[str], int] = lambda uid: 0
    """Spec changes made to a pod (by uid) by other actors, which the journal cannot know about."""
    ready_filter: Callable[[client.V1Pod], bool] = lambda pod: True
    """Which pods the Ready floor counts (a drill may exclude pods a node fault makes unready)."""
    violations: list[str] = field(default_factory=list)
    samples: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    base_generation: dict[str, int] = field(default_factory=dict)

    def __enter__(self) -> Sampler:
        for pod in self.scenario.pods():
            self.base_generation[pod.metadata.uid] = pod.metadata.generation or 1
        self._thread = threading.Thread(target=self._loop, name="drill-sampler", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if exc[0] is None and self._thread is not None:
            await_sample_floor(lambda: self.samples, self._thread, self.interval_s)
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.check_once()
            except client.ApiException as err:
                self.violations.append(f"sampler could not read the API server: {err.status}")

    def check_once(self) -> None:
        pods = self.scenario.pods()
        rollouts = self.scenario.rollouts()
        now = time.strftime("%H:%M:%S")
        for w in self.workloads:
            mine = [p for p in pods if (p.metadata.labels or {}).get("app") == w.app]
            ready = sum(1 for p in mine if self.ready_filter(p) and is_ready(p))
            if ready < w.floor:
                self.violations.append(f"{now} {w.app}: {ready} Ready < floor {w.floor}")
            bounds = self.scenario.bounds.get(w.app)
            for p in mine if bounds else []:
                for c in p.spec.containers:
                    why = bounds.breach(c.resources.requests) or bounds.breach(c.resources.limits)
                    if why:
                        self.violations.append(f"{now} {p.metadata.name} spec {why}")
                for s in p.status.container_statuses or []:
                    res = s.resources
                    why = res and (bounds.breach(res.requests) or bounds.breach(res.limits))
                    if why:
                        self.violations.append(f"{now} {p.metadata.name} status {why}")
            disrupting = [e for r in rollouts for e in r.entries if e.workload_name == w.app and (
                e.state in (EntryState.EVICTING, EntryState.EVICTED) or (
                    e.restarting and e.state in (EntryState.APPLYING, EntryState.APPLIED)))]
            if len(disrupting) > w.budget:
                self.violations.append(f"{now} {w.app}: {len(disrupting)} disruptions in flight > budget {w.budget}")
        allowed = journal_sent(rollouts, SENT_AT_MOST)
        for p in pods:
            uid = p.metadata.uid
            if p.metadata.deletion_timestamp or uid not in self.base_generation:
                continue
            most = self.base_generation[uid] + allowed.get(uid, 0) + self.external(uid)
            if (p.metadata.generation or 1) > most:
                self.violations.append(f"{now} {p.metadata.name}: generation {p.metadata.generation} > {most} "
                                       f"(journal allows {allowed.get(uid, 0)} resizes)")
        self.samples += 1

    def assert_clean(self, min_samples: int = SAMPLE_FLOOR) -> None:
        assert self.samples >= min_samples, f"only {self.samples} samples taken"
        assert not self.violations, "\n".join(self.violations[:20])


def is_ready(pod: client.V1Pod) -> bool:
    return (pod.status.phase == "Running" and not pod.metadata.deletion_timestamp
            and any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or []))


def journal_sent(rollouts: Sequence[Rollout], table: Mapping[EntryState, int]) -> dict[str, int]:
    out: dict[str, int] = {}
    for r in rollouts:
        for e in r.entries:
            if e.action == "resize":
                out[e.uid] = out.get(e.uid, 0) + table.get(e.state, 0)
    return out


def generation_report(scenario: DrillScenario, base: Mapping[str, int],
                      external: Callable[[str], int] = lambda uid: 0) -> list[str]:
    """Every live pod's generation against the settled journal: base + resizes sent + other actors' changes."""
    exact: dict[str, int] = {}
    for r in scenario.rollouts():
        for e in r.entries:
            if e.action != "resize":
                continue
            n = sent_exactly(e.state, e.generation)
            if n is None:
                return [f"{r.name}: entry {e.key} not settled ({e.state})"]
            exact[e.uid] = exact.get(e.uid, 0) + n
    bad = []
    for p in scenario.pods():
        uid = p.metadata.uid
        if p.metadata.deletion_timestamp or uid not in base:
            continue
        want = base[uid] + exact.get(uid, 0) + external(uid)
        if p.metadata.generation != want:
            bad.append(f"{p.metadata.name}: generation {p.metadata.generation}, journal says {want}")
    return bad


def container_values(pod: client.V1Pod) -> tuple[dict[str, str], dict[str, str], dict[str, str], dict[str, str]]:
    """(spec requests, spec limits, status requests, status limits) of the pod's container ``app``."""
    spec = next(c for c in pod.spec.containers if c.name == "app").resources
    status = next(c for c in pod.status.container_statuses if c.name == "app").resources
    return dict(spec.requests or {}), dict(spec.limits or {}), dict(status.requests or {}), dict(status.limits or {})


# ------------------------------------------------------------------------------------------------ artifact
@dataclass
class DrillRow:
    drill: str
    fault: str = ""
    proof: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    outcome: str = "failed"
    started: float = field(default_factory=time.monotonic)

    def prove(self, line: str) -> None:
        self.proof.append(line)

    def passed(self, outcome: str = "passed") -> None:
        self.outcome = outcome

    def write(self) -> None:
        ARTIFACT.parent.mkdir(parents=True, exist_ok=True)
        rows = json.loads(ARTIFACT.read_text()) if ARTIFACT.exists() else {}
        if not isinstance(rows, dict):
            rows = {}
        rows.setdefault("runs", [])
        row = {"drill": self.drill, "fault": self.fault, "outcome": self.outcome, "proof": self.proof,
               "run_time_s": round(time.monotonic() - self.started, 1), "notes": self.notes,
               "at": time.strftime("%Y-%m-%dT%H:%M:%S")}
        rows["runs"].append(row)
        rows.setdefault("latest", {})[self.drill] = row
        ARTIFACT.write_text(json.dumps(rows, indent=2) + "\n")


def open_drill(api: client.ApiClient, namespace: str, make_sim: SimFactory,
               request: pytest.FixtureRequest) -> Iterator[tuple[DrillScenario, DrillRow]]:
    """Body of each drill module's ``drill`` fixture: the scenario and its artifact row, cleaned up after."""
    s = DrillScenario(api, namespace, make_sim)
    row = DrillRow(drill=request.node.name)
    try:
        yield s, row
    finally:
        row.write()
        for name in s.policies:
            s.custom.delete_cluster_custom_object("podtailor.io", "v1alpha1", "resizepolicies", name)
