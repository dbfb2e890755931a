"""Benchmark: the updater at scale (plan time, API writes per resized pod, resize rate, convergence time).

Two parts. (1) ``plan()`` alone, in memory: 10,000 synthetic pods in 10 pools from 500 workloads, every one
with a VPA target that asks for a change; median of 3 runs (wall, CPU). (2) Against a real local control plane started
in a temporary folder, with the node simulator as its own process (``python -m tests.nodesim``): 1,000 pods
from 20 Deployments in 4 pools, a VPA per Deployment whose CPU target halves the request, and a ResizePolicy
with the ladder 0 (one pod) / 0.25 / 1.0, each step baking ``--bake`` seconds. The same Executor the ``run``
command drives runs passes back to back until every pool's rollout is Completed, reading as ``run`` does
(``--reads watch``: from the watch-fed caches, started by ``run``'s own ``watch``) or listing every kind and
the journal every pass as before the caches (``--reads list``); with both, they alternate per bake length.
Every API call the executor makes goes through counting, timing wrappers (snapshot listing, journal
list/writes, pods/resize, Events), so the table says where the time goes besides the bakes. Goals (from the
issue): at most 2 API writes per resized pod besides reads; convergence within 10% of the sum of the bake
times along the ladder.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes import client, config

from podtailor.resize.types import NOT_REQUIRED, ContainerTarget, ContainerView, PodRestartPolicy, QoS
from podtailor.resources import Resources
from podtailor.vpa import UpdateMode
from tests.benchmarks.results import machine_facts, write_section
from tests.harness.cluster import REPO_ROOT, LocalCluster
from tests.harness.process import wait_until
from updater.__main__ import pause_after_pass, watch
from updater.kube.informer import Informer
from updater.kube.snapshot import FRESH_AT_BAKE_END, ClusterReader, ServerVersion, Snapshot
from updater.kube.writes import EventRecorder, PodResizer, RolloutStore
from updater.policy.planner import plan
from updater.policy.types import Action, NodeView, Plan, PodView, RolloutPolicy, WorkloadTarget
from updater.rollout.act.executor import Executor
from updater.rollout.act.grouping import group_by_policy
from updater.rollout.machine.journal import ContainerValues, EntryState, Phase, Rollout, to_status

POOL_KEY = "podtailor.io/node-pool"
NAMESPACE = "bench-updater"
MI, GI = 2**20, 2**30
WRITE_GOAL = 2.0
READS = {"watch": "reads from the watch caches", "list": "reads by listing every pass"}
OVERHEAD_GOAL = 0.10


def _met(ok: bool) -> str:
    return "met" if ok else "**not met**"


# ============================================================================================ plan time
def synthetic_inputs(pods: int, pools: int, workloads: int) -> tuple[list[PodView], list[WorkloadTarget],
                                                                      list[NodeView]]:
    """``pods`` Running pods spread over ``workloads`` Deployments in ``pools`` pools (10 nodes of 16 cores per
    40 pods), each 500m/256Mi requests, 1/512Mi limits; every target asks for 250m CPU (a 50% decrease)."""
    now = time.time()
    per_workload = max(1, pods // workloads)
    nodes_per_pool = max(1, math.ceil(pods / pools / 40))
    nodes = [NodeView(name=f"node-{p}-{n}", pool=f"pool{p}", ready=True,
                      allocatable=Resources(cpu_millicores=16000, memory_bytes=64 * GI))
             for p in range(pools) for n in range(nodes_per_pool)]
    targets: list[WorkloadTarget] = []
    views: list[PodView] = []
    for w in range(workloads):
        ns, name, pool = f"ns{w % 25}", f"app{w}", w % pools
        targets.append(WorkloadTarget(
            namespace=ns, workload_kind="Deployment", workload_name=name, vpa_name=name,
            update_mode=UpdateMode.IN_PLACE_OR_RECREATE, replicas=per_workload,
            containers={"app": ContainerTarget(
                name="app", target=Resources(cpu_millicores=250, memory_bytes=256 * MI),
                lower_bound=Resources(cpu_millicores=250, memory_bytes=256 * MI),
                upper_bound=Resources(cpu_millicores=250, memory_bytes=256 * MI))}))
        for i in range(per_workload):
            if len(views) >= pods:
                break
            requests = Resources(cpu_millicores=500, memory_bytes=256 * MI)
            limits = Resources(cpu_millicores=1000, memory_bytes=512 * MI)
            views.append(PodView(
                namespace=ns, name=f"{name}-{i}", uid=f"uid-{w}-{i}", resource_version=str(w * 1000 + i),
                generation=1, observed_generation=1, node=f"node-{pool}-{(w + i) % nodes_per_pool}",
                pool=f"pool{pool}", workload_kind="Deployment", workload_name=name, priority=0, qos=QoS.BURSTABLE,
                created_s=now - 3600 - i, restart_policy=PodRestartPolicy.ALWAYS, ready=True, labels={"app": name},
                containers=(ContainerView(name="app", requests=requests, limits=limits, actual=requests,
                                          actual_limits=limits,
                                          resize_policy={"cpu": NOT_REQUIRED, "memory": NOT_REQUIRED}),)))
    return views, targets, nodes


@dataclass(frozen=True, slots=True)
class PlanTiming:
    pods: int
    pools: int
    workloads: int
    runs: tuple[float, ...]
    cpu_runs: tuple[float, ...]
    """The same runs' CPU seconds (``time.process_time``): what the load on a shared machine does not inflate."""
    actionable: int
    batches: int

    @property
    def median_s(self) -> float:
        return statistics.median(self.runs)

    @property
    def median_cpu_s(self) -> float:
        return statistics.median(self.cpu_runs)


def bench_plan(pods: int = 10_000, pools: int = 10, workloads: int = 500, repeats: int = 3) -> PlanTiming:
    views, targets, nodes = synthetic_inputs(pods, pools, workloads)
    policy = RolloutPolicy(name="bench", min_pod_age_s=0.0, change_threshold=0.05, max_concurrent=10_000,
                           max_concurrent_per_pool=10_000)
    runs, cpu_runs, result = [], [], None
    for _ in range(repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        result = plan(pods=views, targets=targets, hpas=(), limit_ranges=(), nodes=nodes, policy=policy,
                      now_s=time.time())
        runs.append(time.perf_counter() - t0)
        cpu_runs.append(time.process_time() - c0)
    assert result is not None
    actionable = sum(1 for d in result.decisions if d.action in (Action.RESIZE_ONLINE, Action.RESIZE_RESTART))
    if actionable != len(views):
        reasons = {d.reason.value for d in result.decisions}
        raise RuntimeError(f"synthetic pods were not all actionable ({actionable}/{len(views)}): {reasons}")
    return PlanTiming(pods=len(views), pools=pools, workloads=workloads, runs=tuple(runs), cpu_runs=tuple(cpu_runs),
                      actionable=actionable, batches=len(result.batches))


# ====================================================================================== instrumentation
@dataclass
class Meter:
    """Wall time and call counts per phase, for the whole run and for the current pass (thread-safe: the
    executor performs the rollouts of a pass on threads of their own)."""

    total: dict[str, float] = field(default_factory=dict)
    calls: dict[str, int] = field(default_factory=dict)
    this_pass: dict[str, float] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, phase: str, seconds: float, calls: int = 1) -> None:
        with self.lock:
            self.total[phase] = self.total.get(phase, 0.0) + seconds
            self.calls[phase] = self.calls.get(phase, 0) + calls
            self.this_pass[phase] = self.this_pass.get(phase, 0.0) + seconds

    def timed(self, phase: str, fn: Callable[[], Any]) -> Any:
        t0 = time.perf_counter()
        try:
            return fn()
        finally:
            self.add(phase, time.perf_counter() - t0)


class TimedReader(ClusterReader):
    """The real ClusterReader; the API part (``/version`` and the listings, read a few at a time) is timed
    apart from conversion: its wall time, from the start of a read to the end of its last request (0 when
    everything came from the watch-fed caches)."""

    def __init__(self, api_client: client.ApiClient, meter: Meter) -> None:
        super().__init__(api_client)
        self.meter = meter
        self.lock = threading.Lock()
        self.requests = 0
        self.last_end = 0.0

    def _done(self) -> None:
        with self.lock:
            self.requests += 1
            self.last_end = max(self.last_end, time.perf_counter())

    def _fetch(self, kind: str, namespace: str | None, **kwargs: Any) -> list[Any]:
        try:
            return super()._fetch(kind, namespace, **kwargs)
        finally:
            self._done()

    def server_version(self) -> ServerVersion:
        try:
            return super().server_version()
        finally:
            self._done()

    def read(self, policy_pool_label: str | None = None, namespaces: Sequence[str] = (),
             fresh: Sequence[str] = ()) -> Snapshot:
        t0 = self.last_end = time.perf_counter()
        self.requests = 0
        snap = super().read(policy_pool_label, namespaces, fresh)
        self.meter.add("snapshot: API listings", self.last_end - t0, calls=self.requests)
        return snap


class CountingStore:
    """RolloutStore with every call counted and timed; keeps the newest version of each rollout it saw."""

    def __init__(self, inner: RolloutStore, meter: Meter) -> None:
        self.inner, self.meter = inner, meter
        self.writes = 0
        self.status_bytes = 0
        self.latest: dict[str, Rollout] = {}
        self.log: list[JournalWrite] = []

    def list(self) -> list[Rollout]:
        out: list[Rollout] = self.meter.timed("journal: list", self.inner.list)
        self.latest.update({r.name: r for r in out})
        return out

    def create(self, r: Rollout) -> Rollout:
        size = len(json.dumps(to_status(r)))
        start = time.time()
        out: Rollout = self.meter.timed("journal: writes", lambda: self.inner.create(r))
        with self.meter.lock:
            self.log.append(JournalWrite(name=r.name, start=start, end=time.time()))
            self.writes += 2  # POST the object, then PUT its status (RolloutStore.create)
            self.status_bytes += size
            self.meter.calls["journal: writes"] += 1
            self.latest[out.name] = out
        return out

    def save(self, r: Rollout) -> Rollout:
        size = len(json.dumps(to_status(r)))
        start = time.time()
        out: Rollout = self.meter.timed("journal: writes", lambda: self.inner.save(r))
        with self.meter.lock:
            self.log.append(JournalWrite(name=r.name, start=start, end=time.time()))
            self.writes += 1
            self.status_bytes += size
            self.latest[out.name] = out
        return out

    def retry_requested(self, name: str) -> bool:
        return bool(self.meter.timed("journal: list", lambda: self.inner.retry_requested(name)))

    def start_watching(self, watch_client: client.ApiClient | None = None) -> None:
        self.inner.start_watching(watch_client)

    @property
    def informer(self) -> Informer | None:
        return self.inner.informer

    def stop_watching(self) -> None:
        self.inner.stop_watching()


@dataclass(frozen=True, slots=True)
class JournalWrite:
    name: str
    start: float
    end: float


@dataclass(frozen=True, slots=True)
class ResizeCall:
    key: str
    start: float
    end: float


class CountingResizer:
    def __init__(self, inner: PodResizer, meter: Meter) -> None:
        self.inner, self.meter = inner, meter
        self.calls: list[ResizeCall] = []

    def resize(self, namespace: str, pod: str, uid: str, resource_version: str,
               values: Sequence[ContainerValues], pod_level: Resources | None = None) -> int:
        start = time.time()
        try:
            generation: int = self.meter.timed("pods/resize", lambda: self.inner.resize(
                namespace, pod, uid, resource_version, values, pod_level))
        finally:
            with self.meter.lock:
                self.calls.append(ResizeCall(key=f"{namespace}/{pod}", start=start, end=time.time()))
        return generation


class CountingRecorder:
    def __init__(self, inner: EventRecorder, meter: Meter) -> None:
        self.inner, self.meter = inner, meter
        self.events = 0
        self.by_reason: dict[str, int] = {}

    def record(self, *, namespace: str, kind: str, name: str, uid: str, reason: str, message: str,
               warning: bool = False) -> None:
        with self.meter.lock:
            self.events += 1
            self.by_reason[reason] = self.by_reason.get(reason, 0) + 1
        self.meter.timed("events", lambda: self.inner.record(namespace=namespace, kind=kind, name=name, uid=uid,
                                                             reason=reason, message=message, warning=warning))


# =============================================================================== cluster: the workload
def _deployment(name: str, pool: str, replicas: int) -> dict[str, Any]:
    labels = {"app": name}
    container = {"name": "app", "image": "registry.invalid/app:1",
                 "resources": {"requests": {"cpu": "500m", "memory": "256Mi"},
                               "limits": {"cpu": "1", "memory": "512Mi"}},
                 "resizePolicy": [{"resourceName": "cpu", "restartPolicy": "NotRequired"},
                                  {"resourceName": "memory", "restartPolicy": "NotRequired"}]}
    usage = json.dumps({"kind": "constant", "cpu_cores": 0.1, "memory_bytes": 100 * MI})
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
            "spec": {"replicas": replicas, "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels, "annotations": {"nodesim.podtailor.io/usage": usage}},
                                  "spec": {"nodeSelector": {POOL_KEY: pool}, "terminationGracePeriodSeconds": 1,
                                           "containers": [container]}}}}


def _vpa(custom: Any, name: str, cpu_target: str) -> None:
    custom.create_namespaced_custom_object("autoscaling.k8s.io", "v1", NAMESPACE, "verticalpodautoscalers", {
        "apiVersion": "autoscaling.k8s.io/v1", "kind": "VerticalPodAutoscaler", "metadata": {"name": name},
        "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
                 "updatePolicy": {"updateMode": "InPlaceOrRecreate"}, "recommenders": [{"name": "podtailor"}]}})
    obj = custom.get_namespaced_custom_object("autoscaling.k8s.io", "v1", NAMESPACE, "verticalpodautoscalers", name)
    target = {"cpu": cpu_target, "memory": "256Mi"}
    obj["status"] = {"recommendation": {"containerRecommendations": [{
        "containerName": "app", "target": target, "lowerBound": target, "upperBound": target,
        "uncappedTarget": target}]},
        "conditions": [{"type": "RecommendationProvided", "status": "True",
                        "lastTransitionTime": "2026-01-01T00:00:00Z"}]}
    custom.replace_namespaced_custom_object_status("autoscaling.k8s.io", "v1", NAMESPACE, "verticalpodautoscalers",
                                                   name, obj)


def _install_crds(api: client.ApiClient) -> None:
    import yaml

    ext: Any = client.ApiextensionsV1Api(api)
    names = []
    for path in sorted((REPO_ROOT / "manifests" / "crds").glob("*.yaml")):
        body = yaml.safe_load(path.read_text())
        ext.create_custom_resource_definition(body)
        names.append(body["metadata"]["name"])
    for name in names:
        wait_until(f"CRD {name} Established", lambda n=name: any(  # type: ignore[misc]
            c.type == "Established" and c.status == "True"
            for c in ext.read_custom_resource_definition(n).status.conditions or []), timeout_s=60)


def _ready_pods(core: Any) -> int:
    items = json.loads(core.list_namespaced_pod(NAMESPACE, _preload_content=False).data)["items"]
    return sum(1 for p in items if p["status"].get("phase") == "Running" and not p["metadata"].get(
        "deletionTimestamp") and all(c.get("ready") for c in p["status"].get("containerStatuses") or [{}]))


def _all_cpu(core: Any) -> dict[str, int]:
    """Pod cpu request as the kubelet reports it, in the count of each value ("250m": n)."""
    items = json.loads(core.list_namespaced_pod(NAMESPACE, _preload_content=False).data)["items"]
    out: dict[str, int] = {}
    for p in items:
        st = (p["status"].get("containerStatuses") or [{}])[0]
        cpu = str(st.get("resources", {}).get("requests", {}).get("cpu"))
        out[cpu] = out.get(cpu, 0) + 1
    return out


# ======================================================================================= cluster: run
@dataclass(frozen=True, slots=True)
class PassRecord:
    start: float
    end: float
    resized: int
    writes: int
    phases: dict[str, float]
    phase_of: dict[str, str]
    """rollout name -> phase after the pass."""
    verified: int
    """Entries Verified across all rollouts after the pass."""
    newly_verified: frozenset[str] = frozenset()
    """Pod keys first seen Verified after this pass."""


@dataclass
class ClusterRun:
    pods: int
    pools: int
    bake_s: float
    steps: int
    nodes_per_pool: int
    cores_per_node: int
    setup_s: float = 0.0
    start: float = 0.0
    passes: list[PassRecord] = field(default_factory=list)
    meter: Meter = field(default_factory=Meter)
    rollouts: dict[str, Rollout] = field(default_factory=dict)
    resizes: list[ResizeCall] = field(default_factory=list)
    journal_writes: list[JournalWrite] = field(default_factory=list)
    resized: int = 0
    executor_writes: int = 0
    store_writes: int = 0
    status_bytes: int = 0
    events: int = 0
    events_by_reason: dict[str, int] = field(default_factory=dict)
    final_cpu: dict[str, int] = field(default_factory=dict)
    sim_cpu_s: float = 0.0
    load: tuple[tuple[float, float, float], tuple[float, float, float]] = ((0.0, 0.0, 0.0), (0.0, 0.0, 0.0))
    """Load average when the passes started and when they ended."""
    parallelism: int = 0
    """The executor's client threads for resizes (shared by the pools)."""
    api_writes: dict[str, int] = field(default_factory=dict)
    """Write requests the API server served during the passes, by resource (its apiserver_request_total)."""
    api_write_s: dict[str, float] = field(default_factory=dict)
    """Seconds the API server spent serving those writes, by resource (apiserver_request_duration_seconds_sum)."""
    error: str = ""
    reads: str = "watch"
    """"watch": from the watch-fed caches, as ``run`` reads; "list": every kind and the journal listed per pass."""
    loop: str = "back-to-back"
    """"back-to-back" (or every ``--interval``), or "run": paced as ``run`` paces its passes."""
    interval_s: float = 0.0

    @property
    def pacing(self) -> str:
        if self.loop == "run":
            return f"passes paced as `run` paces them (--interval {self.interval_s:g} s)"
        return f"passes every {self.interval_s:g} s" if self.interval_s > 0 else "passes back to back"
    fallbacks: int = 0
    """Reads of a kind that listed because its cache was not (yet) current (``reads`` "watch")."""

    @property
    def converged_s(self) -> float:
        return self.passes[-1].end - self.start if self.passes else math.nan


WRITE_VERBS = ("POST", "PUT", "PATCH", "DELETE", "APPLY")


def _api_writes(api: client.ApiClient) -> tuple[dict[str, int], dict[str, float]]:
    """Write requests served so far by the API server, by resource[/subresource], from its /metrics: their count
    (``apiserver_request_total``) and the seconds it spent serving them (``apiserver_request_duration_seconds``)."""
    rest: Any = api.rest_client
    text = rest.request("GET", f"{api.configuration.host}/metrics", _request_timeout=30).read().decode()
    counts: dict[str, int] = {}
    seconds: dict[str, float] = {}
    for line in text.splitlines():
        for metric in ("apiserver_request_total{", "apiserver_request_duration_seconds_sum{"):
            if not line.startswith(metric):
                continue
            labels_text, value = line[len(metric):].rsplit("} ", 1)
            labels = dict(part.split("=", 1) for part in labels_text.split('",') if "=" in part)
            labels = {k: v.strip('"') for k, v in labels.items()}
            if labels.get("verb") not in WRITE_VERBS:
                continue
            key = labels.get("resource", "") + (f"/{labels['subresource']}" if labels.get("subresource") else "")
            if metric == "apiserver_request_total{":
                counts[key] = counts.get(key, 0) + int(float(value))
            else:
                seconds[key] = seconds.get(key, 0.0) + float(value)
    return counts, seconds


def _proc_cpu_s(pid: int) -> float:
    stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(stat[11]) + int(stat[12])) / 100.0


def run_cluster(pods: int = 1000, pools: int = 4, bake_s: float = 10.0, interval_s: float = 0.0,
                timeout_s: float = 900.0, log: Callable[[str], None] | None = None,
                reads: str = "watch", loop: str = "back-to-back") -> ClusterRun:
    say = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
    pool_names = [f"pool{i}" for i in range(pools)]
    per_pool = pods // pools
    cores = 32
    # 500m per pod with 25% headroom, at most 100 pods a node (the simulated kubelets allow 110).
    nodes_per_pool = max(1, math.ceil(per_pool * 0.5 * 1.25 / cores), math.ceil(per_pool / 100))
    steps = [{"fraction": 0, "bake": f"{bake_s:g}s"}, {"fraction": 0.25, "bake": f"{bake_s:g}s"},
             {"fraction": 1, "bake": f"{bake_s:g}s"}]
    result = ClusterRun(pods=per_pool * pools, pools=pools, bake_s=bake_s, steps=len(steps), reads=reads, loop=loop,
                        interval_s=interval_s,
                        nodes_per_pool=nodes_per_pool, cores_per_node=cores)
    t_setup = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="bench-updater-") as tmp:
        local = LocalCluster(Path(tmp) / "cluster")
        say("starting the local control plane ...")
        state = local.start()
        sim: subprocess.Popen[str] | None = None
        api: client.ApiClient | None = None
        try:
            api = config.new_client_from_config(config_file=state.kubeconfig)  # type: ignore[no-untyped-call]
            core: Any = client.CoreV1Api(api)
            apps: Any = client.AppsV1Api(api)
            custom: Any = client.CustomObjectsApi(api)
            _install_crds(api)
            sim = subprocess.Popen(
                [sys.executable, "-m", "tests.nodesim", "--kubeconfig", state.kubeconfig, "--metrics-port", "0",
                 *[a for p in pool_names for a in ("--pool", f"{p}={nodes_per_pool}:{cores}:256Gi")]],
                cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
            assert sim.stdout is not None
            sim.stdout.readline()  # "simulating N nodes": registration is done
            wait_until("nodes untainted", lambda: sum(1 for n in core.list_node().items if not n.spec.taints)
                       >= pools * nodes_per_pool, timeout_s=300, interval_s=1.0)
            core.create_namespace({"metadata": {"name": NAMESPACE}})
            wait_until("default ServiceAccount", lambda: bool(core.list_namespaced_service_account(
                NAMESPACE).items), timeout_s=60)
            replicas = 50
            workloads_per_pool = max(1, per_pool // replicas)
            names = []
            for p in pool_names:
                for w in range(workloads_per_pool):
                    n = per_pool // workloads_per_pool + (1 if w < per_pool % workloads_per_pool else 0)
                    name = f"{p}-app{w}"
                    apps.create_namespaced_deployment(NAMESPACE, _deployment(name, p, n))
                    names.append(name)
            say(f"{len(names)} Deployments, {result.pods} pods in {pools} pools of {nodes_per_pool} nodes x "
                f"{cores} cores; waiting for them to be Running and Ready ...")
            wait_until(f"{result.pods} pods Ready", lambda: _ready_pods(core) >= result.pods, timeout_s=900,
                       interval_s=2.0)
            for name in names:
                _vpa(custom, name, "250m")
            custom.create_cluster_custom_object("podtailor.io", "v1alpha1", "resizepolicies", {
                "apiVersion": "podtailor.io/v1alpha1", "kind": "ResizePolicy", "metadata": {"name": "bench"},
                "spec": {"namespaces": [NAMESPACE], "steps": steps, "minPodAge": "0s", "changeThreshold": 0.05,
                         "maxConcurrent": max(1000, result.pods), "maxConcurrentPerPool": max(500, per_pool)}})
            result.setup_s = time.monotonic() - t_setup
            sim_cpu0, (writes0, served0), load0 = _proc_cpu_s(sim.pid), _api_writes(api), os.getloadavg()
            say(f"setup done in {result.setup_s:.0f} s; running updater passes (bake {bake_s:g} s, reads: {reads}) ...")
            _converge(api, result, interval_s, timeout_s, say)
            result.sim_cpu_s = _proc_cpu_s(sim.pid) - sim_cpu0
            result.load = (load0, os.getloadavg())
            writes1, served1 = _api_writes(api)
            result.api_writes = {k: n - writes0.get(k, 0) for k, n in writes1.items() if n > writes0.get(k, 0)}
            result.api_write_s = {k: v - served0.get(k, 0.0) for k, v in served1.items() if k in result.api_writes}
            result.final_cpu = _all_cpu(core)
        finally:
            if sim is not None:
                sim.terminate()
                try:
                    sim.wait(timeout=120)
                except subprocess.TimeoutExpired:
                    sim.kill()
                    sim.wait()
            if api is not None:
                api.close()  # type: ignore[no-untyped-call]
            local.stop()
    return result


def _converge(api: client.ApiClient, result: ClusterRun, interval_s: float, timeout_s: float,
              say: Callable[[str], None]) -> None:
    meter = result.meter
    reader = TimedReader(api, meter)
    store = CountingStore(RolloutStore(api), meter)
    resizer = CountingResizer(PodResizer(api), meter)
    recorder = CountingRecorder(EventRecorder(api), meter)

    def read() -> Snapshot:
        snap: Snapshot = meter.timed("snapshot: total", lambda: reader.read(policy_pool_label=POOL_KEY,
                                                                             namespaces=(NAMESPACE,)))
        return snap

    def planner(**kwargs: Any) -> Plan:
        planned: Plan = meter.timed("plan", lambda: plan(**kwargs))
        return planned

    def read_fresh() -> Snapshot:  # as run reads for a pass that ends a bake
        snap: Snapshot = meter.timed("snapshot: total", lambda: reader.read(
            policy_pool_label=POOL_KEY, namespaces=(NAMESPACE,), fresh=FRESH_AT_BAKE_END))
        return snap

    executor = Executor(read=read, planner=planner, store=store, resizer=resizer, recorder=recorder,
                        policy=group_by_policy, read_fresh=read_fresh if result.reads == "watch" else None)
    result.parallelism = executor.parallelism
    pod_changed = threading.Event()
    stop_watching = (watch(store, api, reader, (NAMESPACE,), on_pod_change=pod_changed.set)
                     if result.reads == "watch" else (lambda: None))
    try:
        _passes(executor, store, result, interval_s, timeout_s, say,
                pod_changed if result.reads == "watch" else None)
    finally:
        stop_watching()
    result.fallbacks = reader.fallbacks
    result.rollouts = dict(store.latest)
    result.resizes = list(resizer.calls)
    result.journal_writes = list(store.log)
    result.executor_writes = executor.writes
    result.store_writes = store.writes
    result.status_bytes = store.status_bytes
    result.events = recorder.events
    result.events_by_reason = dict(recorder.by_reason)


def _passes(executor: Executor, store: CountingStore, result: ClusterRun, interval_s: float, timeout_s: float,
            say: Callable[[str], None], pod_changed: threading.Event | None) -> None:
    """Passes until every pool's rollout has ended: back to back (or every ``interval_s``), or with
    ``result.loop`` "run" paced by ``run``'s own ``pause_after_pass`` with ``--interval`` ``interval_s``."""
    meter = result.meter
    never = threading.Event()
    result.start = time.time()
    deadline = result.start + timeout_s
    last_report = result.start
    seen_verified: set[str] = set()
    while True:
        meter.this_pass = {}
        t0, started = time.time(), time.monotonic()
        if pod_changed is not None:
            pod_changed.clear()
        out = executor.run_pass(t0)
        t1 = time.time()
        result.resized += out.resized
        known = executor.as_known(list(store.latest.values()))  # with the progress it has not written (yet)
        phases = {r.name: r.phase.value for r in known}
        now_verified = {e.key for r in known for e in r.entries if e.state == EntryState.VERIFIED}
        verified = len(now_verified)
        result.passes.append(PassRecord(start=t0, end=t1, resized=out.resized, writes=out.writes,
                                        phases=dict(meter.this_pass), phase_of=phases, verified=verified,
                                        newly_verified=frozenset(now_verified - seen_verified)))
        seen_verified |= now_verified
        if t1 - last_report > 5:
            last_report = t1
            say(f"  t={t1 - result.start:5.1f}s pass {len(result.passes)}: {t1 - t0:.2f}s, {verified} verified, "
                f"{sorted(phases.values())}")
        latest = store.latest.values()
        pools = {r.pool for r in latest}
        if len(pools) >= result.pools and all(r.phase in (Phase.COMPLETED, Phase.HALTED, Phase.ROLLED_BACK)
                                              for r in latest):
            bad = [f"{r.name}: {r.phase.value} {r.message}" for r in latest if r.phase != Phase.COMPLETED]
            result.error = "; ".join(bad)
            break
        if t1 > deadline:
            result.error = f"not converged within {timeout_s:.0f} s: {sorted(phases.values())}"
            break
        if result.loop == "run":
            pause_after_pass(out, started, interval_s, never, pod_changed)
        elif interval_s > 0:
            time.sleep(max(0.0, interval_s - (time.time() - t0)))


# ============================================================================================== report
def _batch_timeline(run: ClusterRun) -> list[tuple[int, int, float, float, float, float]]:
    """Per batch index, averaged over pools: (index, pods, start→verified s, bake s, bake end→next start s,
    passes that started after the bake's end but before the one that started the next batch). For the last
    batch the bake-end column is bake end → the end of the pass that saw the rollout Completed."""
    completed_at: dict[str, float] = {}
    for p in run.passes:
        for name, phase in p.phase_of.items():
            if phase == Phase.COMPLETED.value and name not in completed_at:
                completed_at[name] = p.end
    rows = []
    count = max((len(r.batches) for r in run.rollouts.values()), default=0)
    for i in range(count):
        pods, verify, bake, lag, idle = [], [], [], [], []
        for r in run.rollouts.values():
            if i >= len(r.batches):
                continue
            b = r.batches[i]
            if b.started_s is None or b.bake_until_s is None:
                continue
            pods.append(len(r.entries_of(i)))
            verify.append(b.bake_until_s - b.bake_s - b.started_s)
            bake.append(b.bake_s)
            nxt = r.batches[i + 1].started_s if i + 1 < len(r.batches) else completed_at.get(r.name)
            if nxt is not None:
                lag.append(nxt - b.bake_until_s)
                if i + 1 < len(r.batches):
                    until = b.bake_until_s
                    idle.append(sum(1 for p in run.passes if until <= p.start < nxt))
        if pods:
            rows.append((i, round(statistics.mean(pods)), statistics.mean(verify), statistics.mean(bake),
                         statistics.mean(lag) if lag else math.nan, statistics.mean(idle) if idle else math.nan))
    return rows


def _critical_path(run: ClusterRun) -> list[tuple[int, float, float, float, float, float]]:
    """Per batch index, averaged over pools, the steps from the batch's start to its verification:
    (index, start → intent saved, → first resize sent, first → last resize answered, → outcome saved,
    → seen verified), in seconds."""
    writes: dict[str, list[JournalWrite]] = {}
    for w in sorted(run.journal_writes, key=lambda w: w.start):
        writes.setdefault(w.name, []).append(w)
    calls: dict[str, list[ResizeCall]] = {}
    for c in run.resizes:
        calls.setdefault(c.key, []).append(c)
    rows = []
    for i in range(max((len(r.batches) for r in run.rollouts.values()), default=0)):
        parts: list[tuple[float, float, float, float, float]] = []
        for r in run.rollouts.values():
            if i >= len(r.batches) or r.batches[i].started_s is None or r.batches[i].bake_until_s is None:
                continue
            b = r.batches[i]
            start, verified = float(b.started_s or 0.0), float(b.bake_until_s or 0.0) - b.bake_s
            sent = [c for e in r.entries_of(i) for c in calls.get(e.key, []) if start <= c.start <= verified]
            intent = next((w for w in writes.get(r.name, []) if w.start >= start - 0.5), None)
            if not sent or intent is None:
                continue
            first, last = min(c.start for c in sent), max(c.end for c in sent)
            outcome = next((w for w in writes.get(r.name, []) if last <= w.start and w.end <= verified), None)
            saved = outcome.end if outcome is not None else last
            parts.append((intent.end - start, first - intent.end, last - first, saved - last, verified - saved))
        if parts:
            m = [statistics.mean(p[k] for p in parts) for k in range(5)]
            rows.append((i, m[0], m[1], m[2], m[3], m[4]))
    return rows


def _big_batch_rates(run: ClusterRun) -> tuple[int, float, float, float]:
    """The last batch of every pool (the big one): (pods, time inside pods/resize, first→last send,
    first send → end of the pass that saw all of them Verified)."""
    keys: set[str] = set()
    for r in run.rollouts.values():
        if r.batches:
            keys |= {e.key for e in r.entries_of(len(r.batches) - 1)}
    calls = [c for c in run.resizes if c.key in keys]
    if not calls:
        return 0, math.nan, math.nan, math.nan
    first = min(c.start for c in calls)
    inside = sum(c.end - c.start for c in calls)
    span = max(c.end for c in calls) - first
    verified_at = math.nan
    total_verified = sum(1 for r in run.rollouts.values() for e in r.entries if e.state == EntryState.VERIFIED)
    for p in run.passes:
        if p.start > first and p.verified >= total_verified:
            verified_at = p.end
            break
    return len(calls), inside, span, verified_at - first


def _verify_latency(run: ClusterRun) -> list[float]:
    """Per resized pod: end of its pods/resize call → end of the pass that first saw it Verified."""
    seen: dict[str, float] = {}
    for p in run.passes:
        for key in p.newly_verified:
            seen.setdefault(key, p.end)
    sent = {c.key: c.end for c in run.resizes}
    return sorted(seen[k] - t for k, t in sent.items() if k in seen)


def _convergence_row(run: ClusterRun) -> str:
    ideal = run.bake_s * run.steps
    overhead = (run.converged_s - ideal) / ideal if ideal > 0 else math.nan
    load = f"load {run.load[0][0]:.1f} → {run.load[1][0]:.1f}"
    return (f"| convergence: {run.pods:,} pods in {run.pools} pools, ladder 0 / 0.25 / 1.0 x {run.bake_s:g} s bake "
            f"(pools in parallel), {READS[run.reads]}{_paced(run)} | {run.converged_s:.1f} s vs {ideal:g} s of bakes: "
            f"overhead {overhead:+.1%} "
            f"({run.converged_s - ideal:.1f} s; {len(run.passes)} passes; {load}) | overhead < {OVERHEAD_GOAL:.0%} | "
            f"{_met(overhead < OVERHEAD_GOAL)} |")


def _paced(run: ClusterRun) -> str:
    return f", {run.pacing}" if run.loop == "run" else ""


def report(pt: PlanTiming | None, runs: Sequence[ClusterRun], facts: str) -> str:
    lines = [facts, ""]
    rows = ["| measurement | value | goal | |", "|---|---|---|---|"]
    if pt is not None:
        rows.append(f"| `plan()` for {pt.pods:,} pods ({pt.pools} pools, {pt.workloads} workloads, all actionable "
                    f"→ {pt.batches} batches), median of {len(pt.runs)} | {pt.median_s:.2f} s (runs "
                    f"{', '.join(f'{x:.2f}' for x in pt.runs)}; {pt.pods / pt.median_s:,.0f} pods/s); CPU "
                    f"{pt.median_cpu_s:.2f} s (runs {', '.join(f'{x:.2f}' for x in pt.cpu_runs)}) | — | |")
    rows += [_convergence_row(run) for run in runs if run.passes]
    lines += rows
    if len(runs) > 1:
        lines += ["", "Each bake length is its own run on a fresh cluster (same pods, pools and ladder). The time "
                  f"beyond the bakes is mostly fixed (API writes for {runs[0].pods:,} resizes and the simulated "
                  "kubelets' status reports, on 2 shared cores), so the share it takes falls as the bakes grow: the "
                  "short bake shows that fixed cost, the longer one a bake closer to what a canary step waits in "
                  "practice."]
    compared = _reads_compared(runs)
    if compared:
        lines += ["", compared]
    for run in runs:
        if run.passes:
            lines += ["", *_run_details(run, titled=len(runs) > 1)]
    return "\n".join(lines)


def _reads_compared(runs: Sequence[ClusterRun]) -> str:
    """Per bake length run both ways: the time beyond the bakes and the median read, caches vs listing."""
    def read_s(run: ClusterRun) -> float:
        return statistics.median(p.phases.get("snapshot: total", 0.0) for p in run.passes)

    parts = []
    for bake in dict.fromkeys(r.bake_s for r in runs):
        by = {r.reads: r for r in runs if r.bake_s == bake and r.passes}
        if "list" not in by or "watch" not in by:
            continue
        listed, watched = by["list"], by["watch"]
        extra_l, extra_w = listed.converged_s - bake * listed.steps, watched.converged_s - bake * watched.steps
        parts.append(f"{bake:g} s bakes: {extra_w:.1f} s beyond the bakes with the caches vs {extra_l:.1f} s listing "
                     f"({extra_w / extra_l:.2f}x), a pass's read {read_s(watched):.2f} s vs {read_s(listed):.2f} s "
                     f"(median), bake end → next batch {_lag_sum(watched):.1f} s vs {_lag_sum(listed):.1f} s "
                     f"(summed over the batches, averaged over the pools)")
    if not parts:
        return ""
    return ("Read modes side by side (one run each, alternating, each on a fresh cluster; load averages in the "
            "table above): " + "; ".join(parts) + ".")


def _lag_sum(run: ClusterRun) -> float:
    return sum(x[4] for x in _batch_timeline(run) if not math.isnan(x[4]))


def _run_details(run: ClusterRun, titled: bool) -> list[str]:
    lines = [f"### Cluster run, {run.bake_s:g} s bake, {READS[run.reads]}{_paced(run)}", ""] if titled else []
    rows = ["| measurement | value | goal | |", "|---|---|---|---|"]
    resized = max(1, run.resized)
    w_no_events = run.store_writes + len(run.resizes)
    w_events = w_no_events + run.events
    n_big, inside, span, e2e = _big_batch_rates(run)
    rows += [
        f"| API writes per resized pod, without Events ({w_no_events} writes: {len(run.resizes)} pods/resize, "
        f"{run.store_writes} ResizeRollout create/status; / {run.resized} pods resized) | "
        f"{w_no_events / resized:.3f} | ≤ {WRITE_GOAL:g} | {_met(w_no_events / resized <= WRITE_GOAL)} |",
        f"| API writes per resized pod, with Events (+{run.events} Events) | {w_events / resized:.3f} | "
        f"≤ {WRITE_GOAL:g} | {_met(w_events / resized <= WRITE_GOAL)} |",
        f"| resizes accepted by the API server during the big batch ({n_big} pods; time inside "
        f"`pods/resize` calls summed over the client threads: per-call latency, not throughput) | "
        f"{1000 * inside / max(1, n_big):.0f} ms per call ({inside:.1f} s summed) | — | |",
        f"| same, first → last resize sent (the pools at once, sharing the client threads) | "
        f"{n_big / span:.0f}/s ({span:.1f} s) | — | |",
        f"| end to end: first resize of the big batch → all {n_big} verified (kubelet status seen) | "
        f"{n_big / e2e:.0f}/s ({e2e:.1f} s) | — | |",
    ]
    lat = _verify_latency(run)
    if lat:
        rows.append(f"| per pod: its resize accepted → the pass that saw it Verified (median, p90, max of "
                    f"{len(lat)}) | {statistics.median(lat):.2f} s, {lat[int(0.9 * (len(lat) - 1))]:.2f} s, "
                    f"{lat[-1]:.2f} s | — | |")
    if run.api_writes:
        total = sum(run.api_writes.values())
        top = sorted(run.api_writes.items(), key=lambda kv: -kv[1])[:6]
        rows.append(f"| write requests the API server served during the passes, all clients (its "
                    f"`apiserver_request_total`) | {total:,} ({total / run.converged_s:.0f}/s): "
                    f"{', '.join(f'{k} {n:,}' for k, n in top)} | — | |")
        served = [(k, run.api_write_s[k] / n) for k, n in top if run.api_write_s.get(k)]
        rows.append("| the same writes' mean latency inside the API server (`apiserver_request_duration_seconds`) | "
                    f"{', '.join(f'{k} {1000 * v:.0f} ms' for k, v in served)} | — | |")
    lines += rows
    lines += ["", f"Cluster: real control plane and the node simulator (own process, actuation delay 0.3 s) on the "
              f"same machine; {run.pools} pools x {run.nodes_per_pool} nodes x {run.cores_per_node} cores, "
              f"{run.pods // run.pools // 50 or 1} Deployments a pool, 500m/256Mi requests, 1/512Mi limits; VPA "
              f"target 250m CPU; {run.pacing}. Load average {', '.join(f'{x:.2f}' for x in run.load[0])} when "
              f"the passes started, {', '.join(f'{x:.2f}' for x in run.load[1])} when they ended. Setup (cluster, "
              f"nodes, pods Ready) took {run.setup_s:.0f} s. Simulator CPU during the passes: {run.sim_cpu_s:.1f} s. "
              f"Final kubelet-reported CPU requests: {run.final_cpu}." + (
                  f" Reads of a kind that listed because its cache was not yet (or no longer) current: "
                  f"{run.fallbacks}." if run.reads == "watch" else "") + (f" **Error: {run.error}**" if run.error
                                                                          else "")]
    durations = [p.end - p.start for p in run.passes]
    busy = sum(durations)
    phases = ["snapshot: API listings", "snapshot: conversion", "plan", "journal: list", "journal: writes",
              "pods/resize", "events", "advance and bookkeeping (in process)"]
    total_s = dict(run.meter.total)
    total_s["snapshot: conversion"] = total_s.get("snapshot: total", 0.0) - total_s.get("snapshot: API listings", 0.0)
    measured = ("snapshot: total", "plan", "journal: list", "journal: writes", "pods/resize", "events")
    total_s[phases[-1]] = busy - sum(total_s.get(k, 0.0) for k in measured)
    per_pass = {k: [p.phases.get(k, 0.0) for p in run.passes] for k in run.meter.total}
    per_pass[phases[-1]] = [p.end - p.start - sum(p.phases.get(k, 0.0) for k in measured) for p in run.passes]
    per_pass["snapshot: conversion"] = [p.phases.get("snapshot: total", 0.0) - p.phases.get(
        "snapshot: API listings", 0.0) for p in run.passes]
    lines += ["", f"Where the pass time goes ({len(run.passes)} passes, {busy:.1f} s in passes of "
              f"{run.converged_s:.1f} s; pass duration median {statistics.median(durations):.2f} s, "
              f"max {max(durations):.2f} s). A pass performs its rollouts on threads of their own, so the phases "
              f"overlap: their sums can exceed the pass time, and the in-process remainder is pass time minus "
              f"those sums (negative when they overlap):", "",
              "| phase | total s | share of pass time | median per pass s | calls |", "|---|---|---|---|---|"]
    for k in phases:
        med = statistics.median(per_pass[k]) if k in per_pass else math.nan
        calls = run.meter.calls.get(k, run.meter.calls.get("snapshot: total", 0) if k == "snapshot: conversion"
                                    else 0)
        lines.append(f"| {k} | {total_s.get(k, 0.0):.1f} | {total_s.get(k, 0.0) / busy:.0%} | "
                     f"{med:.3f} | {calls if k != phases[-1] else ''} |")
    lines += ["", f"ResizeRollout status written: {run.status_bytes / 2**20:.1f} MiB in {run.store_writes} writes. "
              f"Executor's own write counter: {run.executor_writes} (Events not counted there). Events by reason: "
              f"{dict(sorted(run.events_by_reason.items()))}.", "",
              "Per batch, averaged over the pools (start = when the step that sent the resizes was decided, at a "
              "pass or at a re-read within one; verified = when a read saw them all in the kubelet status; the bake "
              "then runs; lag = bake end → the step that starts the next batch, or sees the rollout Completed):", "",
              "| batch | pods | start → verified s | bake s | bake end → next s | passes after the bake's end that "
              "did not start the next batch |", "|---|---|---|---|---|---|"]
    timeline = _batch_timeline(run)
    for i, pods, verify, bake, lag, idle in timeline:
        lines.append(f"| {i + 1} | {pods} | {verify:.2f} | {bake:g} | {lag:.2f} | "
                     f"{'—' if math.isnan(idle) else f'{idle:.1f}'} |")
    path = _critical_path(run)
    if path:
        lines += ["", "The same batches' start → verified, step by step (averaged over the pools; the intent is "
                  "saved before the resizes are sent; the answers are not written when a resume would work them out "
                  "again from the pods, so the outcome column is 0 unless some resize was refused or retried):", "",
                  "| batch | start → intent saved s | → first resize sent s | first → last resize answered s | "
                  "→ outcome saved s | → seen verified s |", "|---|---|---|---|---|---|"]
        lines += [f"| {i + 1} | {a:.2f} | {b:.2f} | {c:.2f} | {d:.2f} | {e:.2f} |" for i, a, b, c, d, e in path]
    ideal = run.bake_s * run.steps
    if run.converged_s - ideal > OVERHEAD_GOAL * ideal:
        lines += ["", _why_missed(run, timeline)]
    return lines


def _sending_s(run: ClusterRun) -> float:
    """Seconds during which at least one pods/resize call was in flight (the union of the calls' intervals)."""
    total, end = 0.0, -math.inf
    for c in sorted(run.resizes, key=lambda c: c.start):
        if c.start > end:
            total, end = total + c.end - c.start, c.end
        elif c.end > end:
            total, end = total + c.end - end, c.end
    return total


def _why_missed(run: ClusterRun, timeline: Sequence[tuple[int, int, float, float, float, float]]) -> str:
    ideal = run.bake_s * run.steps
    t = run.meter.total
    n = max(1, run.meter.calls.get("pods/resize", 0))
    verify = " + ".join(f"{x[2]:.1f}" for x in timeline)
    lag = " + ".join(f"{x[4]:.1f}" for x in timeline if not math.isnan(x[4]))
    sending = _sending_s(run)
    reads = sorted(p.phases.get("snapshot: total", 0.0) for p in run.passes)
    status = run.api_writes.get("pods/status", 0)
    return (f"Why the convergence goal is missed: {run.converged_s - ideal:.1f} s beyond the bakes, of which the "
            f"batches' start → verified took {verify} s and bake end → next {lag} s (averaged over the pools; the "
            f"slowest pool sets the convergence time). Sending is most of it: resizes were in flight for "
            f"{sending:.1f} s ({len(run.resizes):,} `pods/resize` calls, {1000 * t.get('pods/resize', 0.0) / n:.0f} "
            f"ms each with at most {run.parallelism} in flight), because each is a write through the API server on "
            f"2 shared cores, which meanwhile served the simulated kubelets' {status:,} `pods/status` writes (a batch "
            f"is verified only when the kubelet's status shows the new values). The rest is reading: a batch needs a "
            f"fresh snapshot to start, at least one to be seen verified and one to see its bake end, and a snapshot "
            f"took {statistics.median(reads) if reads else math.nan:.2f} s (median; "
            + (f"mostly the {run.pods:,}-pod listing). " if run.reads == "list" else
               "from the watch caches: converting the cached objects). ") +
            f"The {run.store_writes} journal writes took {t.get('journal: writes', 0.0):.1f} s in all; the intent "
            f"is saved before a batch's resizes are sent, so that write is on the path too.")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--plan-pods", type=int, default=10_000, help="pods for the plan() timing")
    parser.add_argument("--plan-pools", type=int, default=10)
    parser.add_argument("--plan-workloads", type=int, default=500)
    parser.add_argument("--pods", type=int, default=1000, help="pods in the cluster run")
    parser.add_argument("--pools", type=int, default=4, help="node pools in the cluster run")
    parser.add_argument("--bake", type=float, nargs="+", default=[10.0, 60.0],
                        help="bake seconds of each of the 3 ladder steps; one cluster run per value")
    parser.add_argument("--interval", type=float, default=None,
                        help="seconds between pass starts (default: 0, back to back; with --loop run: run's "
                             "--interval, default 10)")
    parser.add_argument("--loop", choices=["back-to-back", "run"], default="back-to-back",
                        help="back to back (or every --interval), or paced as `podtailor-updater run` paces its passes "
                             "(--interval, sooner at a bake's end, and with the caches at a pod change while a batch "
                             "is verified)")
    parser.add_argument("--reads", choices=sorted(READS), nargs="+", default=["watch"],
                        help="how passes read: from the watch caches as `run` does (watch), or listing every pass "
                             "(list); with both, one run of each per bake length, alternating")
    parser.add_argument("--timeout", type=float, default=900.0, help="give up on convergence after this")
    parser.add_argument("--no-cluster", action="store_true", help="only time plan()")
    parser.add_argument("--no-write", action="store_true", help="print the table, leave RESULTS.md alone")
    args = parser.parse_args(argv)
    facts = machine_facts()
    pt = bench_plan(args.plan_pods, args.plan_pools, args.plan_workloads) if args.plan_pods > 0 else None
    interval = args.interval if args.interval is not None else (10.0 if args.loop == "run" else 0.0)
    runs = [] if args.no_cluster else [run_cluster(args.pods, args.pools, bake, interval, args.timeout, reads=reads,
                                                   loop=args.loop) for bake in args.bake for reads in args.reads]
    body = report(pt, runs, facts)
    print(body)
    if not args.no_write:
        write_section("updater", "Updater at scale", body)
    errors = [f"bake {r.bake_s:g} s, reads {r.reads}: {r.error}" for r in runs if r.error]
    if errors:
        raise SystemExit(f"cluster run did not converge cleanly: {'; '.join(errors)}")


if __name__ == "__main__":
    main()
