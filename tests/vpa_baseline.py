"""The shapes of the VPA baseline (tests/integration/test_vpa_baseline.py) and the arithmetic of comparing it.

Owns the workloads whose history both recommenders read (``shapes``: 36 containers in 30 workloads, of
constant, daily, spiky, stepped, trace-replayed, young, multi-replica and two-container shapes), the
OpenMetrics backfill of that history with the pods' labels (VPA's history provider matches pods to VPAs by
them), the cluster objects (one Deployment per workload with no replicas, VPA's VPA and our twin), the replay of
the exact queries VPA's recommender sent Prometheus (read back from Prometheus' query log) into our ``vpa``
strategy, and the bucket distance between two recommendations.
"""

from __future__ import annotations

import json
import math
import urllib.parse
import urllib.request
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from kubernetes import client

from podtailor.resources import CurrentResources
from recommender.model.histogram import VPA_CPU_BUCKETS, VPA_MEMORY_BUCKETS, BucketScheme
from recommender.model.types import ContainerPolicy, PodIndex, Recommendation, Samples, UsageBatch
from recommender.model.vpa import VpaStrategy
from tests.nodesim.openmetrics import ExportContainer, write_openmetrics
from tests.nodesim.usage import Constant, Daily, Spikes, StepChange, TraceReplay, UsageModel

Mi = 2**20
Gi = 2**30
DAY = 86400.0
TRACE = Path(__file__).resolve().parent / "data" / "traces" / "bitbrains_rnd_2013-08_demo.csv.gz"


@dataclass(frozen=True, slots=True, kw_only=True)
class Shape:
    """One workload: its containers' usage models (one per replica when ``per_replica``) and history length."""

    name: str
    containers: Mapping[str, UsageModel | Sequence[UsageModel]]
    replicas: int = 1
    days: float = 8.0
    why: str = ""

    def model(self, container: str, replica: int) -> UsageModel:
        m = self.containers[container]
        return m if not isinstance(m, Sequence) else m[replica]


def _trace(series: int, cpu: float, memory: float, start_s: float) -> TraceReplay:
    return TraceReplay.load(TRACE, f"bb-rnd-2013-08-{series}", sim_start_s=start_s, cpu_scale=cpu, memory_scale=memory)


def shapes(now_s: float) -> list[Shape]:
    """The baseline's workloads; trace replays start 8 days before ``now_s``."""
    t0 = now_s - 8 * DAY
    return [
        Shape(name="tiny", containers={"app": Constant(cpu_cores=0.004, memory_bytes=20 * Mi)},
              why="below both per-pod floors (25m, 250Mi)"),
        Shape(name="flat", containers={"app": Constant(cpu_cores=0.25, memory_bytes=300 * Mi)}),
        Shape(name="big", containers={"app": Constant(cpu_cores=3.0, memory_bytes=6 * Gi)}),
        Shape(name="daily-a", containers={"app": Daily(cpu_cores=0.5, memory_bytes=400 * Mi, cpu_amplitude_cores=0.3,
                                                       memory_amplitude_bytes=100 * Mi, cpu_noise=0.1,
                                                       memory_noise=0.05, seed=1)}),
        Shape(name="daily-b", containers={"app": Daily(cpu_cores=1.5, memory_bytes=2 * Gi, cpu_amplitude_cores=1.0,
                                                       memory_amplitude_bytes=500 * Mi, peak_hour=3, cpu_noise=0.3,
                                                       memory_noise=0.1, seed=2)}),
        Shape(name="noisy", containers={"app": Daily(cpu_cores=0.3, memory_bytes=700 * Mi, cpu_amplitude_cores=0.05,
                                                     cpu_noise=0.9, memory_noise=0.4, noise_bucket_s=600, seed=3)}),
        Shape(name="hourly-spikes", containers={"app": Spikes(cpu_cores=0.2, memory_bytes=200 * Mi,
                                                              spike_cpu_cores=1.0, spike_memory_bytes=100 * Mi,
                                                              period_s=3600, duration_s=1200)}),
        Shape(name="short-spikes", containers={"app": Spikes(cpu_cores=0.1, memory_bytes=150 * Mi,
                                                             spike_cpu_cores=1.5, spike_memory_bytes=300 * Mi,
                                                             period_s=600, duration_s=60, offset_s=1800)},
              why="one-minute spikes every ten minutes: an hourly rate and an hourly point both smooth them"),
        Shape(name="rare-spikes", containers={"app": Spikes(cpu_cores=0.1, memory_bytes=250 * Mi,
                                                            spike_cpu_cores=2.0, spike_memory_bytes=500 * Mi,
                                                            period_s=DAY, duration_s=1800, random_start=True,
                                                            seed=4)}),
        Shape(name="step-up", containers={"app": StepChange(cpu_cores_before=0.2, memory_bytes_before=200 * Mi,
                                                            cpu_cores_after=0.8, memory_bytes_after=500 * Mi,
                                                            change_at_s=now_s - 3 * DAY)}),
        Shape(name="step-down", containers={"app": StepChange(cpu_cores_before=0.8, memory_bytes_before=900 * Mi,
                                                              cpu_cores_after=0.2, memory_bytes_after=300 * Mi,
                                                              change_at_s=now_s - 2 * DAY)}),
        Shape(name="mem-growth", containers={"app": StepChange(cpu_cores_before=0.4, memory_bytes_before=1 * Gi,
                                                               cpu_cores_after=0.4, memory_bytes_after=3 * Gi,
                                                               change_at_s=now_s - 1 * DAY)}),
        Shape(name="one-day", days=1.0, why="a day of history: low confidence",
              containers={"app": Daily(cpu_cores=0.6, memory_bytes=500 * Mi, cpu_amplitude_cores=0.2, seed=5)}),
        Shape(name="three-hours", days=0.125, why="three hours of history: very low confidence",
              containers={"app": Constant(cpu_cores=0.7, memory_bytes=800 * Mi)}),
        Shape(name="replicas", replicas=3, containers={"app": Daily(cpu_cores=0.4, memory_bytes=600 * Mi,
                                                                    cpu_amplitude_cores=0.2, cpu_noise=0.2, seed=6)},
              why="three identical replicas"),
        # Replicas at different levels: their memory peaks weigh the same, so with n of them a percentile p
        # falls exactly on a boundary between two pods' buckets when p x n is whole (p50 of 2 or 4 pods), and
        # float rounding of the running total weight decides which, in VPA's code as in ours. Three and five
        # replicas never tie at p50, p90 or p95.
        Shape(name="uneven", replicas=3, why="three replicas at different levels",
              containers={"app": [Constant(cpu_cores=0.1, memory_bytes=200 * Mi),
                                  Constant(cpu_cores=0.25, memory_bytes=500 * Mi),
                                  Constant(cpu_cores=0.4, memory_bytes=800 * Mi)]}),
        Shape(name="uneven-five", replicas=5, why="five replicas at five levels",
              containers={"app": [Constant(cpu_cores=0.1 * (k + 1), memory_bytes=(k + 1) * 300 * Mi)
                                  for k in range(5)]}),
        Shape(name="sidecar", why="two containers: the per-pod floors are split in two",
              containers={"app": Daily(cpu_cores=0.8, memory_bytes=1 * Gi, cpu_amplitude_cores=0.4, seed=7),
                          "proxy": Constant(cpu_cores=0.01, memory_bytes=40 * Mi)}),
        Shape(name="pair", containers={"web": Spikes(cpu_cores=0.3, memory_bytes=300 * Mi, spike_cpu_cores=0.6,
                                                     period_s=7200, duration_s=3600),
                                       "worker": Daily(cpu_cores=1.2, memory_bytes=1500 * Mi, cpu_amplitude_cores=0.5,
                                                       memory_amplitude_bytes=200 * Mi, seed=8)}),
        Shape(name="trio", replicas=2, containers={"a": Constant(cpu_cores=0.05, memory_bytes=100 * Mi),
                                                   "b": Constant(cpu_cores=0.15, memory_bytes=60 * Mi),
                                                   "c": Daily(cpu_cores=0.2, memory_bytes=300 * Mi,
                                                              cpu_amplitude_cores=0.1, seed=9)}),
        *(Shape(name=f"trace-{series}", containers={"app": _trace(series, cpu, memory, t0)},
                why="a production VM of the Bitbrains trace (tests/data/traces)")
          for series, cpu, memory in ((1, 1.0, 0.2), (3, 4.0, 0.5), (8, 4.0, 0.2), (9, 1.0, 0.5),
                                      (28, 1.0, 0.2), (33, 1.0, 0.2), (41, 0.25, 0.1))),
        Shape(name="trace-41-short", days=2.0, containers={"app": _trace(41, 2.0, 0.3, t0)}),
        Shape(name="idle", containers={"app": Spikes(cpu_cores=0.0, memory_bytes=50 * Mi, spike_cpu_cores=0.05,
                                                     period_s=DAY, duration_s=600)}),
        Shape(name="giant", containers={"app": Daily(cpu_cores=12.0, memory_bytes=40 * Gi, cpu_amplitude_cores=4.0,
                                                     memory_amplitude_bytes=8 * Gi, seed=10)}),
    ]


def container_count(all_shapes: Iterable[Shape]) -> int:
    return sum(len(s.containers) for s in all_shapes)


def pod_names(shape: Shape) -> list[str]:
    return [f"{shape.name}-7f9c5-{chr(ord('a') + k) * 5}" for k in range(shape.replicas)]


def write_history(directory: Path, ns: str, all_shapes: Sequence[Shape], end_s: float, step_s: float) -> list[Path]:
    """Every shape's pods up to ``end_s``, each for its own number of days, with the label ``app=<name>``: one
    OpenMetrics file per history length (``write_openmetrics`` takes one window for all its containers)."""
    by_days: dict[float, list[ExportContainer]] = {}
    for shape in all_shapes:
        for k, pod in enumerate(pod_names(shape)):
            for container in shape.containers:
                by_days.setdefault(shape.days, []).append(ExportContainer(
                    namespace=ns, pod=pod, container=container, node="n1", model=shape.model(container, k),
                    pod_uid=f"{ns}-{pod}", owner_kind="ReplicaSet", owner_name=f"{shape.name}-7f9c5",
                    replicaset_owner_name=shape.name, cpu_request_millicores=500, memory_request_bytes=512 * Mi,
                    pod_labels={"app": shape.name}))
    paths = []
    for days, rows in sorted(by_days.items()):
        part = directory / f"history-{days:g}d.om"
        with part.open("w") as out:
            write_openmetrics(out, rows, now_s=end_s, days=days, step_s=step_s)
        paths.append(part)
    return paths


def make_objects(api: client.ApiClient, ns: str, all_shapes: Sequence[Shape]) -> None:
    """A Deployment with no replicas per shape, VPA's VPA (naming no recommender) and ours (``pt-<name>``)."""
    apps, custom = client.AppsV1Api(api), client.CustomObjectsApi(api)
    for shape in all_shapes:
        labels = {"app": shape.name}
        containers = [{"name": c, "image": "registry.invalid/app:1",
                       "resources": {"requests": {"cpu": "500m", "memory": "512Mi"}}} for c in shape.containers]
        apps.create_namespaced_deployment(ns, {
            "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": shape.name},
            "spec": {"replicas": 0, "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels}, "spec": {"containers": containers}}}})
        for name, recommenders in ((shape.name, []), (f"pt-{shape.name}", [{"name": "podtailor"}])):
            custom.create_namespaced_custom_object("autoscaling.k8s.io", "v1", ns, "verticalpodautoscalers", {
                "apiVersion": "autoscaling.k8s.io/v1", "kind": "VerticalPodAutoscaler", "metadata": {"name": name},
                "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": shape.name},
                         "updatePolicy": {"updateMode": "Off"}, "recommenders": recommenders}})


# ------------------------------------------------------------------------------------------ the replay
@dataclass(frozen=True, slots=True, kw_only=True)
class RangeQuery:
    query: str
    start: str
    end: str
    step: str


def vpa_range_queries(query_log: Path, ns: str) -> dict[str, RangeQuery]:
    """VPA's history queries (``cpu``, ``memory``) for ``ns`` as Prometheus logged them: exact start, end, step."""
    found: dict[str, RangeQuery] = {}
    for line in query_log.read_text().splitlines():
        entry = json.loads(line)
        params = entry.get("params") or {}
        q = params.get("query", "")
        if f'namespace="{ns}"' not in q or "step" not in params:
            continue
        kind = "cpu" if q.startswith("rate(container_cpu_usage_seconds_total{") else \
            "memory" if q.startswith("container_memory_working_set_bytes{") else None
        if kind is not None:
            found[kind] = RangeQuery(query=q, start=params["start"], end=params["end"], step=str(params["step"]))
    return found


def query_range(url: str, q: RangeQuery) -> list[dict[str, Any]]:
    args = urllib.parse.urlencode({"query": q.query, "start": q.start, "end": q.end, "step": q.step})
    with urllib.request.urlopen(f"{url}/api/v1/query_range?{args}", timeout=60) as resp:
        body = json.loads(resp.read())
    result: list[dict[str, Any]] = body["data"]["result"]
    return result


def _pooled(series: list[dict[str, Any]], to_amount: Any) -> dict[tuple[str, str], tuple[Samples, tuple[str, ...],
                                                                                     PodIndex]]:
    """Per (pod's workload, container): every pod's samples pooled, each value converted as VPA converts it, and
    for each sample the index of its pod (VPA keeps a memory peak per pod)."""
    out: dict[tuple[str, str], tuple[list[float], list[float], list[str], list[int]]] = {}
    for s in series:
        pod = s["metric"]["pod"]
        ts, vs, pods, index = out.setdefault((pod.rsplit("-", 2)[0], s["metric"]["container"]), ([], [], [], []))
        pods.append(pod)
        for t, v in s["values"]:
            ts.append(float(t))
            vs.append(to_amount(float(v)))
            index.append(len(pods) - 1)
    pooled = {}
    for key, (ts, vs, pods, index) in out.items():
        order = np.argsort(np.array(ts), kind="stable")
        pooled[key] = (Samples(timestamps_s=np.array(ts)[order], values=np.array(vs)[order]), tuple(pods),
                       np.array(index, dtype=np.int32)[order])
    return pooled


@dataclass(frozen=True, slots=True, kw_only=True)
class Replayed:
    recommendation: Recommendation
    confidence_days: float
    """c of VPA's estimator: min(lifespan in days, CPU samples / 1440)."""


def replay(url: str, queries: Mapping[str, RangeQuery], all_shapes: Sequence[Shape],
           now_s: float) -> dict[tuple[str, str], Replayed]:
    """Our ``vpa`` strategy fed exactly the samples VPA's recommender read: its two range queries re-run with
    its own start, end and step. Each value is first made a whole millicore or byte, as VPA's history provider
    does (history_provider.go ``resourceAmountFromValue``: ``model.CPUAmountFromCores`` truncates to int64
    millicores, ``MemoryAmountFromBytes`` to bytes)."""
    step = float(queries["cpu"].step)
    cpu = _pooled(query_range(url, queries["cpu"]), lambda v: math.floor(v * 1000.0) / 1000.0)
    memory = _pooled(query_range(url, queries["memory"]), lambda v: float(math.floor(v)))
    strategy = VpaStrategy()
    n_containers = {s.name: len(s.containers) for s in all_shapes}
    out = {}
    for key in sorted(set(cpu) | set(memory)):
        state = strategy.new_state()
        mem, pods, index = memory.get(key, (Samples.empty(), (), np.empty(0, dtype=np.int32)))
        state.add(UsageBatch(cpu_cores=cpu[key][0] if key in cpu else Samples.empty(), cpu_interval_s=step,
                             memory_peak_bytes=mem, memory_interval_s=step, memory_pods=pods,
                             memory_pod_index=index))
        policy = ContainerPolicy(containers_in_pod=n_containers[key[0]])
        out[key] = Replayed(recommendation=strategy.recommend(state, now_s=now_s, policy=policy,
                                                              current=CurrentResources())[0],
                            confidence_days=state.confidence_days(strategy.params))
    return out


# --------------------------------------------------------------------------------------- the comparison
FIELDS = ("target", "lowerBound", "upperBound")
RESOURCES = ("cpu", "memory")


def bucket_index(scheme: BucketScheme, edge: float) -> int:
    """The bucket whose upper edge is ``edge`` (a percentile's answer): the bucket holding a value just below it.
    A thousandth below absorbs the rounding of the output to whole millicores and bytes."""
    return int(scheme.find_buckets(np.array([edge * (1 - 1e-3)]))[0])


@dataclass(frozen=True, slots=True, kw_only=True)
class Difference:
    workload: str
    container: str
    field: str
    resource: str
    vpa: float
    ours: float
    buckets: int
    """How many buckets apart the two answers are, once each output's factors are divided out."""


@dataclass(slots=True)
class Comparison:
    compared: int = 0
    differences: list[Difference] = field(default_factory=list)


def buckets_apart(resource: str, vpa: float, ours: float, factor: float) -> int:
    """Buckets between the two values' bucket edges: both are edge x ``factor`` (margin and confidence), rounded up
    to a whole unit, unless the per-pod floor applied."""
    scheme = VPA_CPU_BUCKETS if resource == "cpu" else VPA_MEMORY_BUCKETS
    if factor <= 0 or vpa == ours:
        return 0
    return abs(bucket_index(scheme, vpa / factor) - bucket_index(scheme, ours / factor))
