"""The Prometheus source against the real local Prometheus, with history backfilled from usage models.

One backfill per module (three days at the simulator's 60 s grid) holds every namespace these tests use;
the names carry a random suffix because the Prometheus instance is shared by the whole test session. The
source reads at a 300 s step with a 60 s "scrape interval" (the backfill grid), so the CPU rate window is
max(4 x 60, 300) = 300 s and the memory window 299.999 s: each window holds exactly the grid samples in
(t - 300, t]. Expected values come from the simulator's own integration (``compute_history``), not from
production code.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from prometheus_client import CollectorRegistry

from podtailor.resources import CurrentResources, Resources
from recommender.backtest.cli import run_backtest
from recommender.model.registry import STRATEGIES, get_strategy
from recommender.model.types import ContainerKey, ContainerPolicy, UsageBatch
from recommender.sources import promql
from recommender.sources.errors import QueryTooLargeError, TemporarySourceError
from recommender.sources.grid import GridRange
from recommender.sources.prometheus import PrometheusConfig, PrometheusSource
from tests.harness.prometheus import LocalPrometheus
from tests.nodesim.openmetrics import ExportContainer, compute_history, time_grid, write_openmetrics
from tests.nodesim.usage import Constant, Daily, Spikes, UsageModel

pytestmark = pytest.mark.prometheus

DAYS = 3
GRID_S = 60
STEP_S = 300
MI = 2**20
SUBSTEPS = 6  # write_openmetrics' default


@dataclass(frozen=True)
class World:
    url: str
    now_s: float
    shop: str  # 2 Deployments (web: 2 ReplicaSet generations, api: throttled) + 1 StatefulSet
    solo: str  # 1 Deployment with 1 pod
    oom: str  # 1 Deployment whose memory spikes past its limit
    bad: str  # 1 StatefulSet pod whose working set has NaN, negative and +Inf windows (hand-written)
    containers: tuple[ExportContainer, ...]


def _pod(ns: str, pod: str, model: UsageModel, owner: tuple[str, str], rs_owner: tuple[str, str] = ("", ""), *,
         cpu_limit_millicores: int | None = None, memory_limit_bytes: int | None = None,
         memory_request_bytes: int | None = None) -> ExportContainer:
    return ExportContainer(namespace=ns, pod=pod, container="app", node="n1", model=model, pod_uid=f"uid-{pod}",
                           owner_kind=owner[0], owner_name=owner[1], replicaset_owner_kind=rs_owner[0],
                           replicaset_owner_name=rs_owner[1], cpu_limit_millicores=cpu_limit_millicores,
                           memory_limit_bytes=memory_limit_bytes, memory_request_bytes=memory_request_bytes)


def _containers(shop: str, solo: str, oom: str) -> list[ExportContainer]:
    web = Constant(cpu_cores=0.25, memory_bytes=100 * MI)
    api = Daily(cpu_cores=0.6, memory_bytes=300 * MI, cpu_amplitude_cores=0.4, memory_amplitude_bytes=50 * MI,
                peak_hour=14, cpu_noise=0.2, memory_noise=0.1, seed=7)
    db = Daily(cpu_cores=0.1, memory_bytes=1024 * MI, memory_amplitude_bytes=200 * MI, memory_noise=0.05, seed=3)
    deploy = ("Deployment", "web")
    return [
        _pod(shop, "web-6b8f-a", web, ("ReplicaSet", "web-6b8f"), deploy),
        _pod(shop, "web-6b8f-b", web, ("ReplicaSet", "web-6b8f"), deploy),
        _pod(shop, "web-9c4d-a", web, ("ReplicaSet", "web-9c4d"), deploy),  # the next rollout generation
        *(_pod(shop, f"api-77f5-{s}", api, ("ReplicaSet", "api-77f5"), ("Deployment", "api"),
               cpu_limit_millicores=700) for s in "abc"),
        _pod(shop, "db-0", db, ("StatefulSet", "db")),
        _pod(shop, "db-1", db, ("StatefulSet", "db")),
        _pod(solo, "one-5d6c-a", web, ("ReplicaSet", "one-5d6c"), ("Deployment", "one")),
        _pod(oom, "leak-1a2b-a", Spikes(cpu_cores=0.1, memory_bytes=100 * MI, spike_cpu_cores=0.0,
                                       spike_memory_bytes=200 * MI, period_s=6 * 3600, duration_s=600, offset_s=0),
             ("ReplicaSet", "leak-1a2b"), ("Deployment", "leak"), memory_limit_bytes=256 * MI,
             memory_request_bytes=128 * MI),
    ]


@pytest.fixture(scope="module")
def world(prometheus: LocalPrometheus, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    tag = secrets.token_hex(3)
    shop, solo, oom = f"src-shop-{tag}", f"src-solo-{tag}", f"src-oom-{tag}"
    containers = _containers(shop, solo, oom)
    # A whole hour (a multiple of the grid and the step): the current one, as the recommender reads up to now, or
    # PODTAILOR_TEST_HOURS_BACK hours before it. The daily models (peaks at 14:00 UTC) and the 6-hourly spikes
    # are fixed in UTC, so the hour the history ends at is the phase the tests see: to try every phase,
    # run with PODTAILOR_TEST_HOURS_BACK=0..23.
    hours_back = int(os.environ.get("PODTAILOR_TEST_HOURS_BACK", "0"))
    now_s = float(math.floor(time.time() / 3600) * 3600) - 3600.0 * hours_back
    path = tmp_path_factory.mktemp("source") / "history.om"
    with path.open("w") as out:
        write_openmetrics(out, containers, now_s=now_s, days=DAYS, step_s=GRID_S)
    prometheus.backfill(path)
    bad = f"src-bad-{tag}"
    prometheus.backfill(_write_bad(path.with_name("bad.om"), bad, now_s))
    yield World(url=prometheus.url, now_s=now_s, shop=shop, solo=solo, oom=oom, bad=bad,
                containers=tuple(containers))


BAD_WINDOWS = {2: "NaN", 4: "-1", 6: "+Inf"}
"""Query step index (ending at now - 2 h + 300 * k) -> the raw value written for all 5 grid samples in it."""


def _write_bad(path: Path, namespace: str, now_s: float) -> Path:
    """Two hours of a working set at 1000 bytes, except three whole 300 s windows of NaN, -1 and +Inf."""
    start = now_s - 2 * 3600
    lines = ["# TYPE container_memory_working_set_bytes gauge"]
    labels = f'namespace="{namespace}",pod="bad-0",container="app"'
    for i in range(2 * 60 + 1):
        t = start + i * GRID_S
        value = BAD_WINDOWS.get(math.ceil(i * GRID_S / STEP_S), "1000")  # grid t is in window ceil(t / 300)
        lines.append(f"container_memory_working_set_bytes{{{labels}}} {value} {t:.0f}")
    lines.append("# TYPE kube_pod_owner gauge")
    owner = f'namespace="{namespace}",pod="bad-0",owner_kind="StatefulSet",owner_name="bad",owner_is_controller="true"'
    lines += [f"kube_pod_owner{{{owner}}} 1 {start + i * GRID_S:.0f}" for i in range(2 * 60 + 1)]
    path.write_text("\n".join([*lines, "# EOF"]) + "\n")
    return path


READ_APIS = ("remote-read", "promql")
USAGE_REQUESTS = {"remote-read": 4, "promql": 3}
"""Requests per chunk for the usage itself: remote reads of the CPU, working-set and two CFS counters, or range
queries of CPU, memory peaks and the throttled fraction."""


def _source(url: str, registry: CollectorRegistry | None = None, **options: object) -> PrometheusSource:
    """A source at the module's grid; full-resolution history through remote read unless ``read_api`` says
    otherwise (set, not ``auto``, so that the counts below hold no probe request)."""
    settings: dict[str, object] = {"step_s": STEP_S, "scrape_interval_s": GRID_S, "retries": 0,
                                   "read_api": "remote-read", **options}
    config = PrometheusConfig(url=url, **settings)  # type: ignore[arg-type]
    return PrometheusSource(config, registry=registry or CollectorRegistry())


def _requests(registry: CollectorRegistry, endpoint: str, outcome: str) -> float:
    return registry.get_sample_value("podtailor_source_requests_total",
                                     {"endpoint": endpoint, "outcome": outcome}) or 0.0


def _key(ns: str, kind: str, name: str) -> ContainerKey:
    return ContainerKey(namespace=ns, workload_kind=kind, workload_name=name, container="app")


def _expected(c: ExportContainer, now_s: float, steps: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per query step t: mean CPU over (t-300, t], peak memory over the grid points in (t-300, t], and
    throttled/periods over (t-300, t], from the simulator's cumulative counters at grid points."""
    ts = time_grid(now_s, DAYS, GRID_S)
    h = compute_history(c, ts, SUBSTEPS)
    at = np.searchsorted(ts, steps)
    before = np.searchsorted(ts, steps - STEP_S)
    cpu = (h.cpu_usage_seconds_total[at] - h.cpu_usage_seconds_total[before]) / STEP_S
    memory = np.array([h.memory_working_set_bytes[b + 1:a + 1].max() for a, b in zip(at, before, strict=True)])
    periods = h.cfs_periods_total[at] - h.cfs_periods_total[before]
    throttled = (h.cfs_throttled_periods_total[at] - h.cfs_throttled_periods_total[before]) / periods
    return cpu, memory.astype(np.float64), throttled


def _per_pod(batch: UsageBatch, pods: int) -> tuple[np.ndarray, np.ndarray]:
    """Pooled samples of identical pods, one column per pod (samples are time-ordered, pods interleaved)."""
    cpu = batch.cpu_cores.values.reshape(-1, pods)
    memory = batch.memory_peak_bytes.values.reshape(-1, pods)
    return cpu, memory


def test_batches_are_workload_level_and_match_the_model(world: World) -> None:
    start, end = world.now_s - 86400, world.now_s  # the last day: (start, end] at 300 s = 288 steps
    # Throttling at every step (zeros too), so that each step of each pod can be compared with the model.
    batches = _source(world.url, sparse_signals=False).history([world.shop], start, end)
    web, api, db = _key(world.shop, "Deployment", "web"), _key(world.shop, "Deployment", "api"), \
        _key(world.shop, "StatefulSet", "db")
    assert set(batches) == {web, api, db}  # two ReplicaSet generations of web pool into one key
    steps = start + STEP_S * np.arange(1, 289, dtype=np.float64)
    by_pod = {c.pod: c for c in world.containers}
    for key, pod, pods in ((web, "web-6b8f-a", 3), (api, "api-77f5-a", 3), (db, "db-0", 2)):
        batch = batches[key]
        assert batch.cpu_interval_s == STEP_S and batch.memory_interval_s == STEP_S
        assert np.array_equal(batch.cpu_cores.timestamps_s, np.repeat(steps, pods))
        cpu, memory = _per_pod(batch, pods)
        exp_cpu, exp_memory, exp_throttle = _expected(by_pod[pod], world.now_s, steps)
        # rate() over a window whose first and last samples sit exactly on its ends does not extrapolate:
        # it is (C(t) - C(t-300)) / 300. Only float rounding (the counter is ~1e5 s, written with repr) differs.
        np.testing.assert_allclose(cpu, np.repeat(exp_cpu[:, None], pods, axis=1), rtol=1e-9, atol=1e-12)
        # max_over_time of a gauge: exact, and a true peak (the max of 5 grid samples, not the value at t).
        np.testing.assert_array_equal(memory, np.repeat(exp_memory[:, None], pods, axis=1))
        if (exp_throttle > 0).any():
            throttle = batch.cpu_throttled_fraction.values.reshape(-1, pods)
            np.testing.assert_allclose(throttle, np.repeat(exp_throttle[:, None], pods, axis=1), rtol=1e-9)
        else:  # never throttled: no samples, which every reader takes as zeros
            assert len(batch.cpu_throttled_fraction) == 0
    api_throttle = batches[api].cpu_throttled_fraction.values
    assert api_throttle.max() > 0.1  # the api pods hit their 700m limit at the daily peak
    assert batches[web].cpu_cores.values.min() == pytest.approx(0.25, rel=1e-9)  # Constant: no throttling
    # The Daily peak matters: the per-step memory peak is above the instantaneous value at t somewhere.
    db_pod = by_pod["db-0"]
    instantaneous = db_pod.model.sample_many(steps).memory_bytes
    assert (_per_pod(batches[db], 2)[1][:, 0] > instantaneous).any()


@pytest.mark.parametrize("read_api", READ_APIS)
def test_requests_do_not_grow_with_workloads(world: World, read_api: str) -> None:
    start, end = world.now_s - 2 * 86400, world.now_s
    registry = CollectorRegistry()
    one, three, both = (_source(world.url, registry, read_api=read_api), _source(world.url, read_api=read_api),
                        _source(world.url, read_api=read_api))
    assert len(one.history([world.solo], start, end)) == 1  # 1 workload, 1 pod
    assert len(three.history([world.shop], start, end)) == 3  # 3 workloads, 8 pods
    assert len(both.history([world.shop, world.solo], start, end)) == 4  # both namespaces in one batch
    # 1 series listing + 3 owner queries + 1 for containers with OOM kills (none here) + 4 remote reads or 3
    # range queries (one chunk of 576 points) = 9 or 8, whatever the count.
    usage = USAGE_REQUESTS[read_api]
    assert one.request_count == three.request_count == both.request_count == 5 + usage
    assert _requests(registry, "series", "ok") == 1
    assert _requests(registry, "query", "ok") == 4
    assert _requests(registry, "read" if read_api == "remote-read" else "query_range", "ok") == usage


def test_remote_read_gives_what_the_range_queries_give(world: World) -> None:
    """Every namespace (rollout generations, throttling, OOM kills, NaN, -1 and +Inf windows) read both ways:
    remote read's stored samples turned into rates and peaks client-side (``raw_grid``) equal Prometheus's own
    range answers at every step, to the last bits of a float, and invalid samples are dropped and counted
    alike. ``auto`` picks remote read on Prometheus, with one probe request."""
    start, end = world.now_s - 2 * 86400, world.now_s
    namespaces = [world.shop, world.solo, world.oom, world.bad]
    registries = {api: CollectorRegistry() for api in ("auto", "promql")}
    auto = _source(world.url, registries["auto"], read_api="auto")
    promql_source = _source(world.url, registries["promql"], read_api="promql")
    raw, ranged = auto.history(namespaces, start, end), promql_source.history(namespaces, start, end)
    assert auto.request_count == promql_source.request_count + 2  # the probe, and one more CFS counter
    # The probe and four reads; the OOM counter of the one container that has one, and for the chunk with kills
    # its memory limits and requests, are range queries either way.
    assert _requests(registries["auto"], "read", "ok") == 5 and _requests(registries["auto"], "query_range", "ok") == 3
    assert set(raw) == set(ranged) and len(raw) == 6
    throttled = 0
    for key, batch in ranged.items():
        for name in ("cpu_cores", "memory_peak_bytes", "cpu_throttled_fraction"):
            a, b = getattr(batch, name), getattr(raw[key], name)
            assert np.array_equal(a.timestamps_s, b.timestamps_s), (key, name)
            np.testing.assert_allclose(b.values, a.values, rtol=1e-12, atol=0, err_msg=f"{key} {name}")
        throttled += len(batch.cpu_throttled_fraction) > 0
        assert raw[key].oom_kills == batch.oom_kills
    assert throttled == 1 and sum(len(b.oom_kills) for b in raw.values()) == 8
    for reason in ("nan", "inf", "negative"):
        counted = [r.get_sample_value("podtailor_source_samples_dropped_total", {"reason": reason})
                   for r in registries.values()]
        assert counted[0] == counted[1] and counted[0], reason


@pytest.mark.parametrize("read_api", READ_APIS)
def test_chunked_and_incremental_passes_equal_one_pass(world: World, read_api: str) -> None:
    start, mid, end = world.now_s - 86400, world.now_s - 86400 + 7 * 3600 + 17, world.now_s
    whole = _source(world.url, read_api=read_api).history([world.shop], start, end)
    # 288 points in chunks of 99: range queries by their per-series cap, remote reads (5 samples a step) by the
    # budget of the biggest scope, 8 containers x 99 steps x 5 samples.
    chunked_source = _source(world.url, max_points_per_series=100, max_points_per_query=8 * 99 * 5, read_api=read_api)
    chunked = chunked_source.history([world.shop], start, end)
    assert chunked_source.request_count == 1 + 4 + USAGE_REQUESTS[read_api] * 3
    first = _source(world.url, read_api=read_api).history([world.shop], start, mid)
    second = _source(world.url, read_api=read_api).history([world.shop], mid, end)
    assert set(whole) == set(chunked) == set(first) == set(second) and len(whole) == 3
    for key, batch in whole.items():
        # Chunking in time changes the requests, not the data.
        for field_name in ("cpu_cores", "memory_peak_bytes", "cpu_throttled_fraction"):
            a, b = getattr(batch, field_name), getattr(chunked[key], field_name)
            assert np.array_equal(a.timestamps_s, b.timestamps_s) and np.array_equal(a.values, b.values)
        # Incremental: the second pass has only steps after mid; together they are the whole, once.
        assert first[key].cpu_cores.timestamps_s.max() <= mid < second[key].cpu_cores.timestamps_s.min()
        for field_name in ("cpu_cores", "memory_peak_bytes"):
            parts = [getattr(first[key], field_name), getattr(second[key], field_name)]
            whole_samples = getattr(batch, field_name)
            assert np.array_equal(np.concatenate([p.timestamps_s for p in parts]), whole_samples.timestamps_s)
            np.testing.assert_allclose(np.concatenate([p.values for p in parts]), whole_samples.values, rtol=1e-12)


def test_oom_kills_carry_the_memory_limit_and_request(world: World) -> None:
    start, end = world.now_s - 86400, world.now_s
    source = _source(world.url)
    batches = source.history([world.oom], start, end)
    batch = batches[_key(world.oom, "Deployment", "leak")]
    # Spikes every 6 h from the epoch (offset 0) lift memory from 100 Mi to 300 Mi > the 256 Mi limit: the
    # simulator counts one event at the first grid point of each spike, a multiple of 6 h, hence of 300 s.
    expected = [t for t in np.arange(start + 3600, end + 1, 3600) if t % (6 * 3600) == 0]
    assert [k.timestamp_s for k in batch.oom_kills] == expected
    assert {(k.memory_limit_bytes, k.memory_request_bytes) for k in batch.oom_kills} == {(256 * MI, 128 * MI)}
    # The OOM counter is read only for the container that has one above zero, and the chunk with OOM kills
    # also reads limits and requests.
    assert source.request_count == 1 + 4 + USAGE_REQUESTS["remote-read"] + 1 + 2


def test_sparse_signals_change_no_recommendation(world: World) -> None:
    """The same history read at full resolution (every container's OOM counter and throttled fraction at every
    step) and sparsely (OOM counters of containers that have one above zero, throttling where it is above
    zero): the same CPU, memory and OOM kills, the throttling that is not zero, and the same recommendation of
    every strategy for every container."""
    start, end = world.now_s - 2 * 86400, world.now_s
    namespaces = [world.shop, world.solo, world.oom]
    dense_source = _source(world.url, sparse_signals=False)
    sparse_source = _source(world.url, max_points_per_series=200)  # three chunks
    dense, sparse = dense_source.history(namespaces, start, end), sparse_source.history(namespaces, start, end)
    assert set(dense) == set(sparse) and len(dense) == 5
    assert sum(len(b.oom_kills) for b in sparse.values()) == 8  # two days of 6-hourly kills
    for key, full in dense.items():
        got = sparse[key]
        # Throttling read only where it is above zero comes back at every CPU sample, 0 where none was read.
        for name in ("cpu_cores", "memory_peak_bytes", "cpu_throttled_fraction"):
            a, b = getattr(full, name), getattr(got, name)
            assert np.array_equal(a.timestamps_s, b.timestamps_s) and np.array_equal(a.values, b.values), name
        assert got.oom_kills == full.oom_kills
    api = sparse[_key(world.shop, "Deployment", "api")].cpu_throttled_fraction.values
    assert (api > 0).any() and (api == 0).any()
    current = CurrentResources(requests=Resources(cpu_millicores=500, memory_bytes=256 * MI),
                               limits=Resources(cpu_millicores=700, memory_bytes=512 * MI))
    for name in STRATEGIES:
        strategy = get_strategy(name)
        for key in dense:
            recs = []
            for batches in (dense, sparse):
                state = strategy.new_state()
                state.add(batches[key])
                recs.append(strategy.recommend(state, now_s=end, policy=ContainerPolicy(), current=current)[0])
            assert recs[0] == recs[1], (name, key)


def _within_a_bucket(a: int | None, b: int | None, ratio: float, unit: int) -> bool:
    """``a`` and ``b`` no further apart than one bucket of a histogram whose buckets grow by ``ratio`` (and one
    unit of rounding)."""
    if a is None or b is None:
        return a == b
    return abs(a - b) <= max(a, b) * (ratio - 1.0) + unit


def _stamped(t: float, fine_first: float, step: float) -> float:
    """Where a planned read puts a kill seen at ``t``: at ``t`` in its full-resolution part (from ``fine_first``),
    before that at the end of the hourly summary slot holding ``t`` (one step before the next whole hour)."""
    return t if t >= fine_first else math.ceil((t + step) / 3600.0) * 3600.0 - step


def _summarized_share(batch: UsageBatch, end_s: float, half_life_s: float) -> float:
    """The share of a planned read's CPU weight in its summaries, for a histogram decaying with ``half_life_s``:
    a sample at t weighs 2^((t - end) / half-life) times the steps it stands for (12 for an hourly summary)."""
    assert batch.summary is not None
    steps = batch.summary.cpu_interval_s / batch.cpu_interval_s
    old = steps * float(np.exp2((batch.summary.cpu_cores.timestamps_s - end_s) / half_life_s).sum())
    new = float(np.exp2((batch.cpu_cores.timestamps_s - end_s) / half_life_s).sum())
    return old / (old + new)


def test_planned_history_changes_no_target_beyond_a_bucket(world: World) -> None:
    """The same history read at full resolution and as each strategy's ``HistoryPlan`` asks (hourly summaries
    beyond six CPU half-lives; half-lives of 3 h here so that most of 2.5 days is summarized): the hour
    maxima of memory are the same, the planned read returns about a third of the points, no strategy's memory
    target or bound moves by more than one histogram bucket for any container, and each CPU percentile moves
    no further than the summarized share of the CPU weight (under 2^-6 and a little: see below) lets it.

    Memory: VPA's 24 h intervals begin at the first sample, which a planned read puts where a full read has
    it (``samples.from_pass_start``), so the intervals are the same and only the one step at each interval's
    edge in the summarized part may change sides. CPU: the summaries hold under 2^-6 of the weight (six
    half-lives), and stamped at their slot's end, 27.5 min after the mean of its 12 steps, a little more
    (2^(27.5/180) x 2^-6 ~ 0.017). So at any level x the share of weight at or under x differs between the
    reads by at most that share w, and the planned p-percentile lies between the full read's (p - w)- and
    (p + w)-percentiles. Where the distribution is thin (api's daily peak, 18 h back when the history ends at
    08:00 UTC) those are more than a bucket apart: there VPA's p90 of api is 0.584 cores full and 0.623
    planned, the full read's p(0.9 + 0.017) exactly, and a one-bucket tolerance failed at some hours of the
    day and passed at others. krr-simple reads everything at full resolution: its
    targets are compared as they are."""
    start, end = world.now_s - 2.5 * 86400, world.now_s
    namespaces = [world.shop, world.solo, world.oom]
    full = _source(world.url).history(namespaces, start, end)
    current = CurrentResources(requests=Resources(cpu_millicores=500, memory_bytes=256 * MI),
                               limits=Resources(cpu_millicores=700, memory_bytes=512 * MI))
    strategies = {"podtailor": (get_strategy("podtailor", **{"cpu.half_life_s": 3 * 3600.0}), 1.02),
                  "vpa": (get_strategy("vpa", cpu_half_life_s=3 * 3600.0), 1.05),
                  "krr-simple": (get_strategy("krr-simple"), 1.01)}
    for name, (strategy, ratio) in strategies.items():
        plan = strategy.history_plan()
        source = PrometheusSource(_source(world.url).config, registry=CollectorRegistry(), plan=plan)
        planned = source.history(namespaces, start, end)
        assert set(planned) == set(full) and len(full) == 5
        if plan.full:  # krr-simple weighs its 14 days alike: all of it at full resolution
            assert name == "krr-simple" and all(b.summary is None for b in planned.values())
        points = sum(len(b.cpu_cores) + len(b.summary.cpu_cores if b.summary else ()) for b in planned.values())
        for key, dense in full.items():
            got = planned[key]
            if not plan.full:
                assert got.summary is not None and got.summary.cpu_interval_s == 3600.0
                assert got.cpu_cores.timestamps_s[0] > end - plan.full_resolution_s - 3600.0
                # The same OOM kills, each in the summary slot that holds it: a summary sits one step before a
                # whole hour and covers the hour before it, so a kill at t before the full-resolution part is
                # stamped at the end of its slot, up to an hour later. Compared beyond the first hour, whose
                # summary also covers the step before the pass's range (a kill there is in the planned read only).
                # The spikes come every 6 h from the epoch; comparing stamped times, not counts past a cut, keeps
                # this true whatever the hour the test runs at (a kill at start + 1 h is stamped start + 1 h 55 m).
                step, fine_first = float(_source(world.url).config.step_s), float(got.cpu_cores.timestamps_s[0])
                want = sorted(t for k in dense.oom_kills
                              if (t := _stamped(k.timestamp_s, fine_first, step)) > start + 3600.0)
                have = sorted(k.timestamp_s for b in (got, got.summary) for k in b.oom_kills
                              if k.timestamp_s > start + 3600.0)
                assert have == want and (bool(want) or key.namespace != world.oom)
            states = [strategy.new_state() for _ in range(2)]
            states[0].add(dense)
            states[1].add(got)
            if name == "podtailor":  # one peak per hour, both ways (the first hour may reach before the start)
                maxima = [dict(sorted(s.memory_max.maxima.items())[1:]) for s in states]  # type: ignore[attr-defined]
                assert maxima[0] == maxima[1], key
            recs = [strategy.recommend(s, now_s=end, policy=ContainerPolicy(), current=current)[0] for s in states]
            for field_name in ("uncapped_target", "lower_bound", "upper_bound"):
                a, b = getattr(recs[0], field_name), getattr(recs[1], field_name)
                if plan.full:
                    assert _within_a_bucket(a.cpu_millicores, b.cpu_millicores, ratio, 1), (name, key, field_name)
                assert _within_a_bucket(a.memory_bytes, b.memory_bytes, ratio, MI), (name, key, field_name, a, b)
            if not plan.full:  # the CPU histograms (VPA's, podtailor's slow one: both decay with the 3 h half-life)
                w = _summarized_share(got, end, 3 * 3600.0)
                # At least six half-lives at full resolution (up to an hour more when the end is not a whole hour)
                assert 0.0 < w < 2.0**-6 * 1.12, (name, key, w)
                full_cpu, planned_cpu = (s.cpu for s in states)  # type: ignore[attr-defined]
                for p in (0.5, 0.9, 0.95):
                    band = (full_cpu.percentile(max(p - w, 0.0)), full_cpu.percentile(min(p + w, 1.0)))
                    assert band[0] <= planned_cpu.percentile(p) <= band[1], (name, key, p, w, band)
        if not plan.full:
            assert points < 0.4 * sum(len(b.cpu_cores) for b in full.values()), (name, points)


@pytest.mark.parametrize("read_api", READ_APIS)
def test_queries_too_big_for_the_backend_are_read_in_shorter_chunks(
        world: World, tmp_path: Path, caplog: pytest.LogCaptureFixture, read_api: str) -> None:
    """Range queries: a Prometheus whose --query.max-samples refuses the shop's range queries over two days at
    a 60 s step (5 pods x 2,880 steps; its instant queries load at most one series' 2 days at a time, under the
    limit): the source halves its time chunks until the answers fit and reads exactly what an unlimited
    Prometheus gives for the same history. Under a limit below one series' two days, the instant owner queries
    (which a time split cannot shrink) are refused: the pass fails with the backend's reason, no batches.
    Remote read: --storage.remote.read-sample-limit refuses the reads of the same two days (a 400, "exceeded
    sample limit") until they are cut into pieces under it; under a limit smaller than the smallest piece the
    source makes (64 of them), the pass fails with that reason."""
    path = tmp_path / "shop.om"
    with path.open("w") as out:
        write_openmetrics(out, [c for c in world.containers if c.namespace == world.shop], now_s=world.now_s,
                          days=DAYS, step_s=GRID_S)
    start, end = world.now_s - 2 * 86400, world.now_s
    expected = _source(world.url, step_s=60, read_api=read_api).history([world.shop], start, end)
    flag, limits, refusal = (
        ("--storage.remote.read-sample-limit", (6000, 100), "exceeded sample limit") if read_api == "remote-read"
        else ("--query.max-samples", (6000, 2500), "too many samples"))
    for limit, fits in zip(limits, (True, False), strict=True):
        strict = LocalPrometheus(tmp_path / f"strict-{limit}", extra_flags=[f"{flag}={limit}"])
        strict.backfill(path)
        strict.start()
        try:
            source = _source(strict.url, step_s=60, read_api=read_api)
            if not fits:
                with pytest.raises(QueryTooLargeError, match=refusal):
                    source.history([world.shop], start, end)
                continue
            got = source.history([world.shop], start, end)
        finally:
            strict.stop()
        assert set(got) == set(expected) and len(got) == 3
        for key, batch in expected.items():
            for name in ("cpu_cores", "memory_peak_bytes", "cpu_throttled_fraction"):
                a, b = getattr(batch, name), getattr(got[key], name)
                assert np.array_equal(a.timestamps_s, b.timestamps_s) and np.array_equal(a.values, b.values), name
        splits = [r for r in caplog.records if r.getMessage().startswith("query too big for the backend")]
        assert splits and splits[-1].chunks >= 4  # type: ignore[attr-defined]


def test_requests_in_flight_sized_to_the_real_server(world: World) -> None:
    """With requests_in_flight None the source asks Prometheus's runtimeinfo page once (a GET; its GOMAXPROCS
    is this machine's cores) and reads the same batches as with 1 in flight."""
    auto = _source(world.url, requests_in_flight=None)
    start, end = world.now_s - 86400, world.now_s
    got = auto.history([world.shop], start, end)
    expected_in_flight = max(1, min(4, (os.cpu_count() or 1) // 2))
    assert auto._in_flight() == expected_in_flight
    one = _source(world.url)
    want = one.history([world.shop], start, end)
    assert auto.request_count == one.request_count + 1  # the page, asked once
    assert set(got) == set(want)
    for key, batch in want.items():
        assert np.array_equal(got[key].cpu_cores.values, batch.cpu_cores.values)


@pytest.mark.parametrize("read_api", READ_APIS)
def test_invalid_samples_are_dropped_and_counted_never_zeroed(world: World, caplog: pytest.LogCaptureFixture,
                                                            read_api: str) -> None:
    registry = CollectorRegistry()
    start, end = world.now_s - 2 * 3600, world.now_s
    batch = _source(world.url, registry, read_api=read_api).history([world.bad], start, end)[
        _key(world.bad, "StatefulSet", "bad")]
    steps = start + STEP_S * np.arange(1, 25, dtype=np.float64)  # 24 steps in (start, end]
    kept = [t for k, t in enumerate(steps, start=1) if k not in BAD_WINDOWS]
    assert batch.memory_peak_bytes.timestamps_s.tolist() == kept  # three steps missing, none zero-filled
    assert set(batch.memory_peak_bytes.values.tolist()) == {1000.0}
    assert len(batch.cpu_cores) == 0  # no CPU series: empty, not zeros
    for reason in ("nan", "inf", "negative"):
        assert registry.get_sample_value("podtailor_source_samples_dropped_total", {"reason": reason}) == 1
    [record] = [r for r in caplog.records if r.getMessage() == "invalid samples dropped"]
    assert (record.dropped_nan, record.dropped_inf, record.dropped_negative) == (1, 1, 1)  # type: ignore[attr-defined]


def test_hostile_namespace_selects_only_itself(world: World) -> None:
    registry = CollectorRegistry()
    source = _source(world.url, registry, read_api="auto")
    hostile = 'a"}or{__name__=~".+'
    # Had a value escaped its literal (or its regex), the matcher would select every series, the shop's
    # included. Both the single-value (=) and the several-values (=~) forms are tried.
    for namespaces in ([hostile], [hostile, ".*", "src-.*"]):
        assert source.history(namespaces, world.now_s - 86400, world.now_s) == {}
    # The query ran and succeeded (an error would have raised): one series listing per pass, no more (with
    # nothing listed, not even the remote-read probe).
    assert source.request_count == 2 and _requests(registry, "series", "ok") == 2
    # The same values as remote-read matchers (only the regex layer of escaping) select nothing either.
    raw = _source(world.url)
    for namespaces in ([hostile], [hostile, ".*", "src-.*"]):
        scope = promql.Scope(namespaces=tuple(namespaces))
        form = raw._forms.read_form(scope, "container_cpu_usage_seconds_total",
                                    GridRange(first_s=world.now_s - 3600, last_s=world.now_s, step_s=STEP_S), STEP_S)
        assert raw._transport.decode_read(raw._transport.fetch(*form)) == [[]]


def test_stopped_prometheus_raises_temporary_error(world: World, prometheus: LocalPrometheus) -> None:
    source = _source(world.url, retries=2, backoff_base_s=0.01, timeout_s=2.0)
    prometheus.stop()
    try:
        with pytest.raises(TemporarySourceError):
            source.history([world.shop], world.now_s - 3600, world.now_s)
    finally:
        prometheus.start()
    assert source.request_count == 3  # one try and two retries, then the error: never an empty success
    assert _source(world.url).history([world.solo], world.now_s - 3600, world.now_s)  # back up afterwards


def test_backtest_replays_the_clusters_own_history(world: World, tmp_path: Path) -> None:
    """``podtailor-recommender backtest --prometheus``, end to end as a user runs it: workload series from the
    real Prometheus, replayed and scored like a trace's."""
    out = tmp_path / "backtest.json"
    flags = ["--prometheus", "--prometheus-url", world.url, "--history", "3d", "--step", "300s",
             "--scrape-interval", "60s", "--strategies", "vpa,podtailor", "--workers", "1", "--quiet"]
    done = subprocess.run([sys.executable, "-m", "recommender", "backtest", *flags, "-n", world.shop, "-n", world.solo,
                           "--json", str(out)], capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    doc = json.loads(out.read_text())
    assert doc["source"] == "history"
    scored = doc["subsets"]["all"]
    assert set(scored) == {"vpa", "podtailor", "oracle", "oracle-budget"}
    # One series per workload container (web's two ReplicaSet generations are one), not one per pod (9).
    assert {name: m["series"] for name, m in scored.items()} == dict.fromkeys(scored, 4)
    # 3 days read, the first 24 h replayed but not scored: about 2 days a series.
    assert 4 * 1.95 <= scored["oracle"]["series_days"] <= 4 * 2.0

    # The solo workload uses a constant 250m and 100 MiB: the oracle, which provisions each hour's own peak,
    # has no slack; the strategies, with their margins, have some, and nobody is OOM-killed.
    assert run_backtest(_parse_backtest(*flags, "-n", world.solo, "--json", str(out))) == 0
    solo = json.loads(out.read_text())["subsets"]["all"]
    assert solo["oracle"]["series"] == 1
    assert solo["oracle"]["cpu_slack_cores"] == pytest.approx(0.0, abs=1e-6)
    assert solo["oracle"]["memory_slack_gib"] == pytest.approx(0.0, abs=1e-6)
    for name in ("vpa", "podtailor"):
        assert 0.0 < solo[name]["cpu_slack_cores"] < 0.25, (name, solo[name])
        assert solo[name]["ooms_per_series_day"] == 0.0
    # Prometheus unreachable: exit 1, with a reason, and no report written.
    gone = tmp_path / "gone.json"
    unreachable = ["--prometheus-url", "http://127.0.0.1:9", "--prometheus-timeout", "2s"]
    assert run_backtest(_parse_backtest(*flags, *unreachable, "-n", world.solo, "--json", str(gone))) == 1
    assert not gone.exists()


def _parse_backtest(*argv: str) -> argparse.Namespace:
    from recommender.__main__ import build_parser

    return build_parser().parse_args(["backtest", *argv])
