"""Prometheus JSON results to numpy arrays, invalid-sample dropping, OOM counting and pooling into batches.

Owns the conversion from the ``data.result`` of query and query_range responses to plain arrays, the
rule for bad values (NaN, +-Inf and negative samples are dropped and counted by reason, never replaced
by zeros), the client-side counting of OOM events from a counter sampled at each step, and the pooling
of per-pod series into one ``UsageBatch`` per workload container (all pods of a workload, across
ReplicaSet generations, under one ``ContainerKey``). A key with no sample at all gets no batch; pooled
times equal to ones already pooled in the same call are shared, read-only (``_SharedTimes``). Pure.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace

import numpy as np

from recommender.model.types import ContainerKey, FloatArray, OomKill, PodIndex, Samples, UsageBatch
from recommender.sources.grid import GridRange
from recommender.sources.matrix import DecodedSeries
from recommender.sources.owners import OwnerIndex

PodKey = tuple[str, str, str]
"""(namespace, pod, container): the grouping of every usage query."""
DROP_REASONS = ("nan", "inf", "negative")


@dataclass(frozen=True, slots=True, kw_only=True)
class Series:
    labels: dict[str, str]
    timestamps_s: FloatArray
    values: FloatArray

    @property
    def pod_key(self) -> PodKey:
        return (self.labels.get("namespace", ""), self.labels.get("pod", ""), self.labels.get("container", ""))


def _labels(item: object) -> dict[str, str]:
    if not isinstance(item, dict) or not isinstance(item.get("metric"), dict):
        raise ValueError("result item without a metric object")
    return {str(k): str(v) for k, v in item["metric"].items()}


def grid_times(grid: GridRange) -> FloatArray:
    """The evaluation times of ``grid`` as one read-only array, to be shared by every series on the full grid."""
    times = grid.first_s + grid.step_s * np.arange(grid.points, dtype=np.float64)
    times.flags.writeable = False
    return times


def parse_matrix(result: object, grid: GridRange | None = None) -> list[Series]:
    """``data.result`` of a query_range (resultType matrix), a list or an iterator of its items (each item is
    converted before the next is taken); ValueError if it is not that shape.

    With the request's ``grid``, a series with a sample at every grid time (first and last times and count
    as asked: a range query evaluates at start + k x step only) shares one read-only array of those times
    instead of converting its own: half the conversions, and half the memory of the per-pod series. Any
    other series has its times converted one by one."""
    if not isinstance(result, list | Iterator):
        raise ValueError("result is not a list")
    full = None if grid is None else grid_times(grid)
    out = []
    for item in result:
        if isinstance(item, DecodedSeries):
            out.append(_decoded(item, grid, full))
            continue
        labels = _labels(item)
        pairs = item.get("values")
        if not isinstance(pairs, list):
            raise ValueError("matrix item without values")
        try:
            if (full is not None and grid is not None and len(pairs) == len(full)
                    and float(pairs[0][0]) == grid.first_s and float(pairs[-1][0]) == grid.last_s):
                ts = full
            else:
                ts = np.array([float(p[0]) for p in pairs], dtype=np.float64)
            values = np.array([float(p[1]) for p in pairs], dtype=np.float64)
        except (TypeError, ValueError, IndexError) as err:
            raise ValueError(f"malformed sample: {err}") from err
        out.append(Series(labels=labels, timestamps_s=ts, values=values))
    return out


def _decoded(item: DecodedSeries, grid: GridRange | None, full: FloatArray | None) -> Series:
    """A series the fast path decoded, its times replaced by the shared grid array when they are the grid."""
    labels = _labels({"metric": item.metric})
    try:
        own = item.timestamps(grid.first_s, grid.last_s, grid.points) if grid is not None else item.timestamps()
    except ValueError as err:
        raise ValueError(f"malformed sample: {err}") from err
    if own is None:  # on the full grid: the grid's shared array (computed whenever a grid is given)
        if full is None:
            raise ValueError("a series on the grid without the grid's times")
        own = full
    return Series(labels=labels, timestamps_s=own, values=item.values)


def parse_vector_labels(result: object) -> list[dict[str, str]]:
    """Label sets of a ``query`` result (resultType vector), e.g. owner rows."""
    if not isinstance(result, list):
        raise ValueError("result is not a list")
    return [_labels(item) for item in result]


def drop_invalid(series: Series, dropped: Counter[str]) -> Series:
    """``series`` without NaN, +-Inf or negative values; adds what was dropped to ``dropped`` by reason."""
    v = series.values
    nan = np.isnan(v)
    inf = np.isinf(v)
    negative = ~nan & ~inf & (v < 0)
    keep = ~(nan | inf | negative)
    if keep.all():
        return series
    dropped["nan"] += int(nan.sum())
    dropped["inf"] += int(inf.sum())
    dropped["negative"] += int(negative.sum())
    return Series(labels=series.labels, timestamps_s=series.timestamps_s[keep], values=v[keep])


def oom_increments(series: Series, baseline_s: float) -> list[tuple[float, int]]:
    """(time, events) where the OOM counter rose. The point at ``baseline_s`` (one step before the range)
    is only a baseline; a series that first appears later starts from 0 (a new container's counter). A
    drop is a counter reset: the new value counts."""
    out: list[tuple[float, int]] = []
    previous: float | None = None
    for t, value in zip(series.timestamps_s.tolist(), series.values.tolist(), strict=True):
        if previous is None and t <= baseline_s:
            previous = value
            continue
        base = 0.0 if previous is None else previous
        rise = value if value < base else value - base
        if rise >= 1:
            out.append((t, int(rise)))
        previous = value
    return out


def value_at(series: Series | None, t: float) -> float | None:
    """The series' last value at or before ``t`` (None when there is none)."""
    if series is None or len(series.timestamps_s) == 0:
        return None
    i = int(np.searchsorted(series.timestamps_s, t, side="right")) - 1
    return None if i < 0 else float(series.values[i])


@dataclass(slots=True, kw_only=True)
class PodUsage:
    """Accumulator for one (namespace, pod, container) over the chunks of a pass."""

    cpu: list[Samples] = field(default_factory=list)
    memory: list[Samples] = field(default_factory=list)
    throttle: list[Samples] = field(default_factory=list)
    ooms: list[OomKill] = field(default_factory=list)


def _pool(parts: list[Samples]) -> Samples:
    if not parts:
        return Samples.empty()
    ts = np.concatenate([p.timestamps_s for p in parts])
    values = np.concatenate([p.values for p in parts])
    order = np.argsort(ts, kind="stable")
    return Samples(timestamps_s=ts[order], values=values[order])


def _throttle_at_cpu_steps(pod: PodUsage) -> Samples:
    """The pod's throttled fraction at each of its CPU samples (0 where none was read): the source reads
    throttling only where it is above zero (``sparse_signals``), and aligned like this the pooled fractions
    stand at the same positions as the pooled CPU samples, so each pod's CPU is corrected by its own
    throttling (``throttle_corrected``), however many pods share a step."""
    cpu = _pool(pod.cpu)
    values = np.zeros(len(cpu))
    throttle = _pool(pod.throttle)
    if len(throttle) and len(cpu):
        at = np.clip(np.searchsorted(throttle.timestamps_s, cpu.timestamps_s), 0, len(throttle) - 1)
        hit = throttle.timestamps_s[at] == cpu.timestamps_s
        values[hit] = throttle.values[at[hit]]
    return Samples(timestamps_s=cpu.timestamps_s, values=values)


def _pool_by_pod(parts: list[tuple[int, Samples]]) -> tuple[Samples, PodIndex]:
    """``_pool`` that also tells, for each pooled sample, the index of the pod it came from."""
    if not parts:
        return Samples.empty(), np.empty(0, dtype=np.int32)
    ts = np.concatenate([p.timestamps_s for _, p in parts])
    values = np.concatenate([p.values for _, p in parts])
    index = np.concatenate([np.full(len(p), i, dtype=np.int32) for i, p in parts])
    order = np.argsort(ts, kind="stable")
    return Samples(timestamps_s=ts[order], values=values[order]), index[order]


class _SharedTimes:
    """Pooled sample times, each distinct array kept once: containers read over the same grid have equal
    times, and a report keeps every batch until its end, so sharing them halves what a full-resolution history
    holds (krr-simple's 8 days at the step, #40). A shared array is made read-only, so that no holder can
    change another's times; values are never shared."""

    CANDIDATES = 4
    """Arrays kept per (length, first, last) time: a bound on the comparisons per pooled array."""

    def __init__(self) -> None:
        self._seen: dict[tuple[int, float, float], list[FloatArray]] = {}

    def __call__(self, samples: Samples) -> Samples:
        times = samples.timestamps_s
        if not times.size:
            return samples
        known = self._seen.setdefault((times.size, float(times[0]), float(times[-1])), [])
        for same in known:
            if np.array_equal(same, times):
                return Samples(timestamps_s=same, values=samples.values)
        if len(known) < self.CANDIDATES:
            times.setflags(write=False)
            known.append(times)
        return samples


def build_batches(usage: dict[PodKey, PodUsage], owners: OwnerIndex, *, cpu_interval_s: float,
                  memory_interval_s: float, per_pod_memory: bool = False,
                  pools: Mapping[tuple[str, str], str] | None = None) -> dict[ContainerKey, UsageBatch]:
    """One batch per workload container that has at least one sample or OOM kill; pods pooled (with
    ``per_pod_memory``, each memory sample's pod told too). A DaemonSet pod named in ``pools`` ((namespace,
    pod) -> node pool) also counts under its pool's key (``ContainerKey.pool``).

    Takes ``usage`` over and leaves it empty: each key's pod series are let go as soon as they are pooled,
    so a pass never holds the whole history twice (per pod and pooled); equal pooled times are one array."""
    grouped: dict[ContainerKey, list[tuple[str, PodUsage]]] = {}
    for (namespace, pod, container), pod_usage in sorted(usage.items()):
        workload = owners.workload(namespace, pod)
        key = ContainerKey(namespace=namespace, workload_kind=workload.kind, workload_name=workload.name,
                           container=container)
        grouped.setdefault(key, []).append((pod, pod_usage))
        pool = (pools or {}).get((namespace, pod)) if workload.kind == "DaemonSet" else None
        if pool:
            grouped.setdefault(replace(key, pool=pool), []).append((pod, pod_usage))
    usage.clear()
    shared = _SharedTimes()
    out: dict[ContainerKey, UsageBatch] = {}
    for key in list(grouped):
        named = grouped.pop(key)
        names, pods = tuple(n for n, _ in named), [p for _, p in named]
        del named
        cpu = shared(_pool([s for p in pods for s in p.cpu]))
        pod_index: PodIndex | None = None
        if per_pod_memory:
            memory, pod_index = _pool_by_pod([(i, s) for i, p in enumerate(pods) for s in p.memory])
        else:
            memory = shared(_pool([s for p in pods for s in p.memory]))
        throttled = any(bool((s.values > 0).any()) for p in pods for s in p.throttle)  # all zeros: no news
        throttle = shared(_pool([_throttle_at_cpu_steps(p) for p in pods])) if throttled else Samples.empty()
        ooms = tuple(sorted((o for p in pods for o in p.ooms), key=lambda o: o.timestamp_s))
        del pods
        if len(cpu) == 0 and len(memory) == 0 and len(throttle) == 0 and not ooms:
            continue
        out[key] = UsageBatch(cpu_cores=cpu, cpu_interval_s=cpu_interval_s, memory_peak_bytes=memory,
                              memory_interval_s=memory_interval_s, oom_kills=ooms, cpu_throttled_fraction=throttle,
                              memory_pods=names if per_pod_memory else (), memory_pod_index=pod_index)
    return out


def with_summaries(batches: dict[ContainerKey, UsageBatch], summaries: dict[ContainerKey, UsageBatch], *,
                   step_s: float) -> dict[ContainerKey, UsageBatch]:
    """Each key's full-resolution batch with its older history as ``summary`` (a key seen only in the summaries
    gets an empty full-resolution batch at ``step_s``)."""
    out = dict(batches)
    for key, summary in summaries.items():
        batch = out.get(key) or UsageBatch(cpu_cores=Samples.empty(), cpu_interval_s=step_s,
                                           memory_peak_bytes=Samples.empty(), memory_interval_s=step_s)
        out[key] = replace(batch, summary=summary)
    return dict(sorted(out.items()))


def from_pass_start(summaries: dict[ContainerKey, UsageBatch], coarse: GridRange, *,
                    first_s: float) -> dict[ContainerKey, UsageBatch]:
    """The summaries with their samples of the pass's first hour slot, read at the slot's end
    (``coarse.first_s``), stamped at the pass's first step ``first_s`` (in the same slot, ``grid.split_grid``)
    instead: where a full-resolution read of the pass has its first sample. A strategy that starts something at
    the first sample then starts it at the same time either way: VPA's lifespan, and its memory aggregation
    intervals, which begin at the first sample (model/container.go ``addMemorySample``) and would otherwise all
    move by up to an hour less a step with a planned read. Later slots and OOM kills keep their stamps. Raises
    ValueError when ``first_s`` is not in that slot."""
    slot_end = coarse.first_s
    if not slot_end - coarse.step_s < first_s <= slot_end:
        raise ValueError("the pass's first step must lie in its first summary slot")

    def moved(samples: Samples) -> Samples:
        times = np.where(samples.timestamps_s == slot_end, first_s, samples.timestamps_s)
        return Samples(timestamps_s=times, values=samples.values)

    return {key: replace(b, cpu_cores=moved(b.cpu_cores), memory_peak_bytes=moved(b.memory_peak_bytes),
                         cpu_throttled_fraction=moved(b.cpu_throttled_fraction))
            for key, b in summaries.items()}
