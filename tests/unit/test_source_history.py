"""Unit tests of the Prometheus source's pure parts: grid and chunks, owners, samples, batch planning."""

from __future__ import annotations

import itertools
from collections import Counter

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from recommender.model.types import ContainerKey, OomKill, Samples, UsageBatch
from recommender.sources.batching import count_containers, plan_scopes
from recommender.sources.grid import GridRange, aligned_range, chunks, split_grid
from recommender.sources.owners import OwnerIndex, Workload
from recommender.sources.samples import (
    PodUsage,
    Series,
    build_batches,
    drop_invalid,
    from_pass_start,
    oom_increments,
    parse_matrix,
    value_at,
    with_summaries,
)

T0 = 1_700_000_040.0  # a multiple of 60


# ------------------------------------------------------------------------------------------------ grid
def test_aligned_range_is_half_open_on_the_step_grid() -> None:
    grid = aligned_range(T0 + 10, T0 + 200, 60)
    # (T0+10, T0+200] holds the grid times T0+60, T0+120, T0+180.
    assert grid == GridRange(first_s=T0 + 60, last_s=T0 + 180, step_s=60)
    assert grid.points == 3
    assert aligned_range(T0, T0 + 59, 60) is None  # no grid time in (T0, T0+59]


@given(st.floats(0, 1e6), st.floats(0, 1e6), st.floats(0, 1e6), st.sampled_from([1, 15, 60, 300, 3600]))
def test_consecutive_passes_neither_overlap_nor_leave_gaps(a: float, b: float, c: float, step: int) -> None:
    a, b, c = sorted((a, b, c))

    def times(lo: float, hi: float) -> list[float]:
        g = aligned_range(lo, hi, step)
        return [] if g is None else [g.first_s + k * step for k in range(g.points)]

    assert times(a, b) + times(b, c) == times(a, c)


def test_eight_days_at_60s_needs_two_chunks() -> None:
    # Both ends included: 8 * 86400 / 60 + 1 = 11,521 grid times; Prometheus allows 11,000 per series.
    grid = GridRange(first_s=T0, last_s=T0 + 8 * 86400, step_s=60)
    assert grid.points == 11_521
    parts = chunks(grid, 11_000)
    assert [p.points for p in parts] == [11_000, 521]
    assert parts[0].last_s + 60 == parts[1].first_s and parts[1].last_s == grid.last_s
    # The half-open pass over exactly 8 days has 11,520 times; the source chunks at 10,999 (one extra
    # point for the OOM counter's baseline): still two chunks.
    pass_grid = aligned_range(T0, T0 + 8 * 86400, 60)
    assert pass_grid is not None and pass_grid.points == 11_520
    assert [p.points for p in chunks(pass_grid, 10_999)] == [10_999, 521]


@given(st.integers(1, 5000), st.integers(1, 700))
def test_chunks_cover_the_range_once(points: int, max_points: int) -> None:
    grid = GridRange(first_s=T0, last_s=T0 + (points - 1) * 60, step_s=60)
    parts = chunks(grid, max_points)
    assert all(p.points <= max_points for p in parts)
    assert sum(p.points for p in parts) == points
    assert all(x.last_s + 60 == y.first_s for x, y in itertools.pairwise(parts))


def test_split_grid_summarizes_only_what_is_older_than_the_full_resolution_window() -> None:
    grid = aligned_range(T0, T0 + 3 * 86400, 300)
    assert grid is not None
    fine, coarse = split_grid(grid, full_resolution_s=86400.0, summary_step_s=3600.0)
    assert fine is not None and coarse is not None
    assert coarse.step_s == 3600 and fine.step_s == 300
    # Summary times sit one step before whole hours, so each covers the 12 steps of one hour slot...
    assert (coarse.first_s + 300) % 3600 == 0 and (coarse.last_s + 300) % 3600 == 0
    # ... the full-resolution part starts at the next step and reaches back at least the window...
    assert fine.first_s == coarse.last_s + 300 and fine.last_s == grid.last_s
    assert grid.last_s - fine.first_s >= 86400 - 300
    assert grid.last_s - fine.first_s < 86400 + 3600
    # ... and the first summary starts inside the pass: no gap, less than an hour of history before it.
    assert grid.first_s <= coarse.first_s < grid.first_s + 3600


@given(st.floats(0, 1e6), st.floats(3600, 20 * 86400), st.floats(600, 5 * 86400), st.sampled_from([60, 300, 900]))
def test_split_grid_covers_every_step_once(start: float, length: float, window: float, step: int) -> None:
    grid = aligned_range(T0 + start, T0 + start + length, step)
    assert grid is not None
    fine, coarse = split_grid(grid, full_resolution_s=window, summary_step_s=3600.0)
    if coarse is None:
        assert fine == grid
        return
    assert fine is not None
    covered = [coarse.first_s - 3600 + step * (k + 1) for k in range(coarse.points * 3600 // step)]
    covered += [fine.first_s + k * step for k in range(fine.points)]
    assert covered == sorted(set(covered))  # each step of the pass once, in order, no gap
    assert covered[-1] == grid.last_s and covered[0] <= grid.first_s and grid.first_s - covered[0] < 3600
    assert fine.last_s - fine.first_s + step >= window


def test_split_grid_keeps_everything_when_the_plan_cannot_summarize() -> None:
    grid = aligned_range(T0, T0 + 3 * 86400, 300)
    assert grid is not None
    assert split_grid(grid, full_resolution_s=float("inf"), summary_step_s=3600.0) == (grid, None)
    assert split_grid(grid, full_resolution_s=86400.0, summary_step_s=1000.0) == (grid, None)  # not whole steps
    assert split_grid(grid, full_resolution_s=86400.0, summary_step_s=300.0) == (grid, None)
    assert split_grid(grid, full_resolution_s=4 * 86400.0, summary_step_s=3600.0) == (grid, None)


def test_with_summaries_attaches_older_history_and_keeps_summary_only_keys() -> None:
    def batch(ts: list[float], interval: float) -> UsageBatch:
        samples = Samples(timestamps_s=np.array(ts), values=np.ones(len(ts)))
        return UsageBatch(cpu_cores=samples, cpu_interval_s=interval, memory_peak_bytes=samples,
                          memory_interval_s=interval)

    a, b = (ContainerKey(namespace="ns", workload_kind="Deployment", workload_name=n, container="c") for n in "ab")
    out = with_summaries({a: batch([T0 + 300], 300)}, {a: batch([T0], 3600), b: batch([T0], 3600)}, step_s=300)
    assert list(out) == [a, b]
    assert out[a].summary is not None and out[a].summary.cpu_interval_s == 3600 and len(out[a].cpu_cores) == 1
    assert out[b].summary is not None and len(out[b].cpu_cores) == 0 and out[b].cpu_interval_s == 300


def _sawtooth_memory(times: np.ndarray) -> np.ndarray:
    """A working set that falls from 1000 to 500 bytes over each UTC day (a step of 5 min is worth ~1.7)."""
    return 1000.0 - 500.0 * ((times % 86400.0) / 86400.0)


def test_a_planned_read_starts_vpas_lifespan_and_memory_intervals_where_a_full_read_does() -> None:
    """A pass over (00:00 day 0, 12:00 day 2] at a 300 s step with 18 h at full resolution: as a full read, VPA's
    first sample is 00:05 and its 24 h memory intervals end at 00:05 each day; the last one, [00:05 day 2,
    12:00], lies in the full-resolution part and peaks at 00:05 (the sawtooth falls all day). The planned read's
    first summary is read at 00:55 (the end of the slot 00:00..00:55); stamped there, it would move the first
    sample and every interval by 50 min, and the last interval's peak to 00:55's, 50/1440 x 500 ~ 17 bytes
    lower. Stamped at the pass's first step, both reads give VPA the same lifespan, the same last interval and
    the same peak in it."""
    from recommender.model.vpa import VpaParams, VpaState

    t0 = 1_790_000_000 // 86400 * 86400.0  # 00:00 UTC
    grid = aligned_range(t0, t0 + 60 * 3600, 300)
    assert grid is not None
    fine, coarse = split_grid(grid, full_resolution_s=18 * 3600.0, summary_step_s=3600.0)
    assert fine is not None and coarse is not None and coarse.first_s == t0 + 3300 and grid.first_s == t0 + 300

    def batch(times: np.ndarray, memory: np.ndarray, interval: float) -> UsageBatch:
        return UsageBatch(cpu_cores=Samples(timestamps_s=times, values=np.full(times.size, 0.1)),
                          cpu_interval_s=interval, memory_peak_bytes=Samples(timestamps_s=times, values=memory),
                          memory_interval_s=interval)

    key = ContainerKey(namespace="ns", workload_kind="Deployment", workload_name="db", container="c")
    steps = grid.first_s + 300.0 * np.arange(grid.points)
    slots = coarse.first_s + 3600.0 * np.arange(coarse.points)
    # What Prometheus answers for each slot: the peak of the 12 steps t - 55 min .. t (the first reaches 00:00).
    slot_peaks = np.array([_sawtooth_memory(t - 300.0 * np.arange(12)).max() for t in slots])
    in_fine = steps >= fine.first_s
    full = batch(steps, _sawtooth_memory(steps), 300.0)
    summaries = from_pass_start({key: batch(slots, slot_peaks, 3600.0)}, coarse, first_s=grid.first_s)
    planned = with_summaries({key: batch(steps[in_fine], _sawtooth_memory(steps[in_fine]), 300.0)}, summaries,
                             step_s=300.0)[key]
    assert planned.summary is not None
    states = [VpaState(VpaParams()) for _ in range(2)]
    states[0].add(full)
    states[1].add(planned)
    assert states[0].first_sample_s == states[1].first_sample_s == t0 + 300
    assert states[0].last_sample_s == states[1].last_sample_s == t0 + 60 * 3600  # the same lifespan
    # 720 steps, and the step at 00:00 that the first slot also holds.
    assert (states[0].total_samples, states[1].total_samples) == (720, 721)
    # The last interval [00:05 day 2, 00:05 day 3) and its peak, at 00:05 day 2: 1000 - 500 x 300 / 86400.
    assert states[0].memory.window_end_s == states[1].memory.window_end_s == t0 + 3 * 86400 + 300
    assert states[0].memory.current_peak == states[1].memory.current_peak == pytest.approx(1000 - 500 * 300 / 86400)
    # Only the first slot moved: the next one is still read and stamped at its end, 01:55.
    assert planned.summary.memory_peak_bytes.timestamps_s[:2].tolist() == [t0 + 300, t0 + 3300 + 3600]


def test_from_pass_start_refuses_a_first_step_outside_the_first_slot() -> None:
    coarse = GridRange(first_s=T0 + 3240, last_s=T0 + 3240 + 7200, step_s=3600)
    assert from_pass_start({}, coarse, first_s=T0 + 3240) == {}  # the first step is the slot's end: unchanged
    for first in (T0 + 3240 - 3600, T0 + 3300):
        with pytest.raises(ValueError, match="first summary slot"):
            from_pass_start({}, coarse, first_s=first)


# ---------------------------------------------------------------------------------------------- owners
def _row(**labels: str) -> dict[str, str]:
    return {"namespace": "shop", **labels}


def test_pods_map_to_top_level_workloads() -> None:
    index = OwnerIndex.from_rows(
        pod_rows=[
            _row(pod="web-aaa-1", owner_kind="ReplicaSet", owner_name="web-aaa"),
            _row(pod="web-bbb-1", owner_kind="ReplicaSet", owner_name="web-bbb"),
            _row(pod="db-0", owner_kind="StatefulSet", owner_name="db"),
            _row(pod="agent-x", owner_kind="DaemonSet", owner_name="agent"),
            _row(pod="backup-28-q", owner_kind="Job", owner_name="backup-28"),
            _row(pod="once-q", owner_kind="Job", owner_name="once"),
            _row(pod="bare", owner_kind="<none>", owner_name="<none>"),
            _row(pod="kube-apiserver-n1", owner_kind="Node", owner_name="n1"),
            _row(pod="orphan-rs-1", owner_kind="ReplicaSet", owner_name="orphan-rs"),
        ],
        replicaset_rows=[
            _row(replicaset="web-aaa", owner_kind="Deployment", owner_name="web"),
            _row(replicaset="web-bbb", owner_kind="Deployment", owner_name="web"),
            _row(replicaset="orphan-rs", owner_kind="<none>", owner_name="<none>"),
        ],
        job_rows=[_row(job_name="backup-28", owner_kind="CronJob", owner_name="backup")],
    )
    expected = {
        "web-aaa-1": Workload(kind="Deployment", name="web"),
        "web-bbb-1": Workload(kind="Deployment", name="web"),  # a new ReplicaSet generation, same workload
        "db-0": Workload(kind="StatefulSet", name="db"),
        "agent-x": Workload(kind="DaemonSet", name="agent"),
        "backup-28-q": Workload(kind="CronJob", name="backup"),
        "once-q": Workload(kind="Job", name="once"),
        "bare": Workload(kind="Pod", name="bare"),
        "kube-apiserver-n1": Workload(kind="Pod", name="kube-apiserver-n1"),
        "orphan-rs-1": Workload(kind="ReplicaSet", name="orphan-rs"),
        "unknown": Workload(kind="Pod", name="unknown"),  # no kube_pod_owner series at all
    }
    assert {pod: index.workload("shop", pod) for pod in expected} == expected
    assert index.workload("other", "db-0") == Workload(kind="Pod", name="db-0")  # namespaces do not mix


# --------------------------------------------------------------------------------------------- samples
def _series(values: list[float], pod: str = "p", start: float = T0, step: float = 60) -> Series:
    return Series(labels={"namespace": "shop", "pod": pod, "container": "app"},
                  timestamps_s=start + step * np.arange(len(values), dtype=np.float64),
                  values=np.array(values, dtype=np.float64))


def _samples(values: list[float], start: float = T0, step: float = 60) -> Samples:
    series = _series(values, start=start, step=step)
    return Samples(timestamps_s=series.timestamps_s, values=series.values)


def test_parse_matrix_reads_prometheus_strings_including_nan_and_inf() -> None:
    result = [{"metric": {"namespace": "shop", "pod": "p", "container": "app"},
               "values": [[T0, "0.5"], [T0 + 60, "NaN"], [T0 + 120, "+Inf"], [T0 + 180, "-Inf"]]}]
    [series] = parse_matrix(result)
    assert series.pod_key == ("shop", "p", "app")
    assert series.values[0] == 0.5 and np.isnan(series.values[1]) and series.values[2] == np.inf
    with pytest.raises(ValueError):
        parse_matrix([{"metric": {}, "values": [["x", "1"]]}])


def test_series_on_the_full_grid_share_one_read_only_array_of_times() -> None:
    grid = GridRange(first_s=T0, last_s=T0 + 120, step_s=60)
    full = [[T0, "1"], [T0 + 60, "2"], [T0 + 120, "NaN"]]
    gap = [[T0, "4"], [T0 + 120, "5"]]  # no sample at T0+60
    a, b, c = parse_matrix([{"metric": {"pod": "a"}, "values": full}, {"metric": {"pod": "b"}, "values": full},
                            {"metric": {"pod": "c"}, "values": gap}], grid)
    assert a.timestamps_s is b.timestamps_s and not a.timestamps_s.flags.writeable
    assert a.timestamps_s.tolist() == [T0, T0 + 60, T0 + 120] and a.values[:2].tolist() == [1, 2]
    assert np.isnan(a.values[2])
    assert c.timestamps_s.tolist() == [T0, T0 + 120] and c.values.tolist() == [4, 5]
    shifted = [[T0 + 60, "1"], [T0 + 120, "2"], [T0 + 180, "3"]]  # right count, other times: converted
    [d] = parse_matrix([{"metric": {}, "values": shifted}], grid)
    assert d.timestamps_s.tolist() == [T0 + 60, T0 + 120, T0 + 180]
    with pytest.raises(ValueError):
        parse_matrix([{"metric": {}, "values": [[T0, "1"], [T0 + 60, None], [T0 + 120, "3"]]}], grid)


def test_drop_invalid_counts_by_reason_and_never_fills_zeros() -> None:
    dropped: Counter[str] = Counter()
    clean = drop_invalid(_series([0.5, float("nan"), float("inf"), -1.0, float("-inf"), 0.0, 2.0]), dropped)
    assert clean.values.tolist() == [0.5, 0.0, 2.0]
    assert clean.timestamps_s.tolist() == [T0, T0 + 300, T0 + 360]
    assert dropped == Counter({"nan": 1, "inf": 2, "negative": 1})


def test_oom_increments() -> None:
    # Baseline 3 at T0 (before the range); +1 at T0+120; reset to 1 at T0+240 (new counter: 1 event).
    counter = _series([3, 3, 4, 4, 1, 1])
    assert oom_increments(counter, baseline_s=T0) == [(T0 + 120, 1), (T0 + 240, 1)]
    # A series that first appears inside the range starts from 0: its first value counts.
    assert oom_increments(_series([2, 2], start=T0 + 120), baseline_s=T0) == [(T0 + 120, 2)]


def test_value_at_takes_the_last_value_at_or_before() -> None:
    s = _series([10, 20, 30])
    assert value_at(s, T0 + 90) == 20 and value_at(s, T0 - 1) is None and value_at(None, T0) is None


def test_build_batches_pools_pods_per_workload_and_skips_empty_keys() -> None:
    owners = OwnerIndex(pods={("shop", "web-a-1"): Workload(kind="ReplicaSet", name="web-a"),
                              ("shop", "web-b-1"): Workload(kind="ReplicaSet", name="web-b")},
                        replicasets={("shop", "web-a"): Workload(kind="Deployment", name="web"),
                                     ("shop", "web-b"): Workload(kind="Deployment", name="web")})
    kill = OomKill(timestamp_s=T0 + 60, memory_limit_bytes=100)
    usage = {
        ("shop", "web-a-1", "app"): PodUsage(cpu=[_samples([0.1, 0.2])], memory=[_samples([5, 6])]),
        ("shop", "web-b-1", "app"): PodUsage(cpu=[_samples([0.3], start=T0 + 30)], ooms=[kill]),
        ("shop", "idle-1", "app"): PodUsage(),
    }
    batches = build_batches(usage, owners, cpu_interval_s=60, memory_interval_s=60)
    assert usage == {}  # taken over: the per-pod series are let go once pooled
    key = ContainerKey(namespace="shop", workload_kind="Deployment", workload_name="web", container="app")
    assert list(batches) == [key]  # the pod without samples yields no batch, not a zero batch
    batch = batches[key]
    assert batch.cpu_cores.timestamps_s.tolist() == [T0, T0 + 30, T0 + 60]  # both pods, time-ordered
    assert batch.cpu_cores.values.tolist() == [0.1, 0.3, 0.2]
    assert batch.memory_peak_bytes.values.tolist() == [5, 6]
    assert batch.oom_kills == (kill,)
    assert len(batch.cpu_throttled_fraction) == 0


def test_build_batches_tells_each_memory_samples_pod_when_asked() -> None:
    """``per_pod_memory`` (the vpa strategy's plan): the pooled memory samples keep their order and each gets
    its pod's index; without it nothing is told (the default)."""
    owners = OwnerIndex(pods={("shop", "web-1"): Workload(kind="StatefulSet", name="web"),
                              ("shop", "web-2"): Workload(kind="StatefulSet", name="web")})

    def usage() -> dict[tuple[str, str, str], PodUsage]:
        return {("shop", "web-1", "app"): PodUsage(memory=[_samples([5, 6])]),
                ("shop", "web-2", "app"): PodUsage(memory=[_samples([7], start=T0 + 30)])}

    key = ContainerKey(namespace="shop", workload_kind="StatefulSet", workload_name="web", container="app")
    told = build_batches(usage(), owners, cpu_interval_s=60, memory_interval_s=60, per_pod_memory=True)[key]
    assert told.memory_peak_bytes.values.tolist() == [5, 7, 6]  # T0, T0 + 30, T0 + 60
    assert told.memory_pods == ("web-1", "web-2") and told.memory_pod_index is not None
    assert told.memory_pod_index.tolist() == [0, 1, 0]
    pooled = build_batches(usage(), owners, cpu_interval_s=60, memory_interval_s=60)[key]
    assert pooled.memory_pod_index is None and pooled.memory_pods == ()


def test_throttling_read_sparsely_stands_beside_each_pods_own_cpu_samples() -> None:
    """Two pods of one workload at the same steps; throttling was read only where it was above zero (one step
    of the first pod). Pooled, each throttled fraction sits at its own pod's CPU sample, 0 elsewhere, so the
    strategies correct each pod's CPU by its own throttling; a workload never throttled has no samples."""
    owners = OwnerIndex(pods={("shop", "web-1"): Workload(kind="StatefulSet", name="web"),
                              ("shop", "web-2"): Workload(kind="StatefulSet", name="web"),
                              ("shop", "db-1"): Workload(kind="StatefulSet", name="db")})
    throttled = Samples(timestamps_s=np.array([T0 + 60]), values=np.array([0.5]))
    usage = {
        ("shop", "web-1", "app"): PodUsage(cpu=[_samples([0.1, 0.7, 0.2])], throttle=[throttled]),
        ("shop", "web-2", "app"): PodUsage(cpu=[_samples([0.3, 0.4, 0.5])]),
        ("shop", "db-1", "app"): PodUsage(cpu=[_samples([0.3, 0.4])], throttle=[_samples([0.0, 0.0])]),
    }
    batches = build_batches(usage, owners, cpu_interval_s=60, memory_interval_s=60)
    web = batches[ContainerKey(namespace="shop", workload_kind="StatefulSet", workload_name="web", container="app")]
    assert web.cpu_cores.values.tolist() == [0.1, 0.3, 0.7, 0.4, 0.2, 0.5]
    assert web.cpu_throttled_fraction.timestamps_s.tolist() == web.cpu_cores.timestamps_s.tolist()
    assert web.cpu_throttled_fraction.values.tolist() == [0.0, 0.0, 0.5, 0.0, 0.0, 0.0]
    db = batches[ContainerKey(namespace="shop", workload_kind="StatefulSet", workload_name="db", container="app")]
    assert len(db.cpu_throttled_fraction) == 0  # zeros only: the same as no throttling read


def test_build_batches_shares_equal_times_read_only_and_never_values() -> None:
    """Containers read over the same grid keep one array of times between them (a report holds every batch
    to its end); times that differ, and every value array, stay their own."""
    owners = OwnerIndex(pods={("shop", f"{n}-1"): Workload(kind="StatefulSet", name=n) for n in ("a", "b", "c")})
    usage = {("shop", "a-1", "app"): PodUsage(cpu=[_samples([0.1, 0.2])], memory=[_samples([5, 6])]),
             ("shop", "b-1", "app"): PodUsage(cpu=[_samples([0.3, 0.4])], memory=[_samples([7, 8])]),
             ("shop", "c-1", "app"): PodUsage(cpu=[_samples([0.5, 0.6], start=T0 + 30)])}
    batches = build_batches(usage, owners, cpu_interval_s=60, memory_interval_s=60)
    a, b, c = (batches[ContainerKey(namespace="shop", workload_kind="StatefulSet", workload_name=n, container="app")]
               for n in ("a", "b", "c"))
    assert b.cpu_cores.timestamps_s is a.cpu_cores.timestamps_s
    assert a.memory_peak_bytes.timestamps_s is a.cpu_cores.timestamps_s  # [T0, T0 + 60] both
    assert c.cpu_cores.timestamps_s.tolist() == [T0 + 30, T0 + 90]  # other times: its own array
    assert b.cpu_cores.values.tolist() == [0.3, 0.4] and a.cpu_cores.values.tolist() == [0.1, 0.2]
    assert not a.cpu_cores.timestamps_s.flags.writeable
    with pytest.raises(ValueError, match="read-only"):
        b.cpu_cores.timestamps_s[0] = 0.0  # one holder cannot change the others' times


# -------------------------------------------------------------------------------------------- planning
def test_plan_scopes_packs_namespaces_and_pages_big_ones() -> None:
    counts = count_containers([
        {"namespace": "a", "pod": "a1", "container": "c", "id": "1"},
        {"namespace": "a", "pod": "a1", "container": "c", "id": "2"},  # same container, another series
        {"namespace": "b", "pod": "b1", "container": "c"},
        {"namespace": "b", "pod": "b1", "container": "d"},
        *({"namespace": "big", "pod": f"p{i}", "container": "c"} for i in range(5)),
    ])
    assert counts == {"a": {"a1": 1}, "b": {"b1": 2}, "big": {f"p{i}": 1 for i in range(5)}}
    scopes = plan_scopes(counts, max_series=3)
    assert [(s.namespaces, s.pods) for s in scopes] == [
        (("big",), ("p0", "p1", "p2")),  # 5 > 3: paged by whole pods
        (("big",), ("p3", "p4")),
        (("a", "b"), ()),  # 1 + 2 containers fit in one query
    ]
    assert len(plan_scopes(counts, max_series=100)) == 1
