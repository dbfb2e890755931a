"""Online replay of one series under one strategy, and the oracle that knows the next hour.

Owns the simulation rules. Time is cut into steps of ``step_s`` (1 h) aligned to the epoch. At the start of each
step a strategy recommends from the samples strictly before it, and the recommendation becomes the request and
the limit for the whole step (a resource it does not recommend keeps its current values). Before the first
recommendation the container runs on the start values: the limit is the trace's provisioned amount (the VM
size, or twice the warm-up peak when the trace has none) and the request is limit / ``start_*_limit_ratio``
(default CPU 2:1, memory 1:1, i.e. a burstable CPU and a Guaranteed memory setting). What a strategy sees is
what a real container would report: CPU usage above the limit is censored at the limit and that sample gets a
throttled fraction of 1 (the 5-minute average exceeded the quota, so the quota bound in essentially every
period); memory above the limit is censored at the limit and a step with any reading above it reports one
``OomKill`` at the first such reading, with the limit and request of the time (the kill restarts the
container; its replacement runs under the same limit until the next step, so at most one kill per step is
counted). Missing memory samples
(NaN) are not fed. The oracle provisions, for each step, exactly the peak CPU and memory of that step (request
= limit), carrying the previous value over a step without samples.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, replace

import numpy as np

from podtailor.resources import CurrentResources, Resources
from recommender.backtest.trace import Series
from recommender.model.common import fleet_from_samples
from recommender.model.types import (
    ContainerState,
    FleetScale,
    FloatArray,
    OomKill,
    Recommendation,
    Samples,
    Strategy,
    UsageBatch,
)
from recommender.recommend import PlainContainer, recommend_workload

IntArray = np.ndarray


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplayConfig:
    """Simulation settings shared by every strategy of a run."""

    step_s: float = 3600.0
    """A recommendation is made and applied every step (seconds)."""
    warmup_s: float = 86400.0
    """Steps starting before first sample + warm-up are replayed but not scored (same for every strategy)."""
    start_cpu_limit_ratio: float = 2.0
    """Start CPU limit:request ratio (limit = provisioned); VPA's proportional rule keeps it."""
    start_memory_limit_ratio: float = 1.0
    """Start memory limit:request ratio (1 = Guaranteed memory, request = limit = provisioned)."""
    max_gap_steps: float = 2.0
    """A sample stands for the time to the next one, at most this many nominal sampling intervals."""
    fleet: FleetScale | None = None
    """The fleet's reference sizes every replayed container is recommended with (``ContainerPolicy.fleet``);
    the runner sets it from the series' first day (``fleet_of``) when it is None."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Grid:
    """Step edges and, per step, the sample index range [lo[h], lo[h+1])."""

    edges_s: FloatArray
    lo: IntArray
    sample_step: IntArray
    """Step index of every sample."""
    durations_s: FloatArray
    interval_s: float
    first_scored_step: int

    @property
    def steps(self) -> int:
        return int(self.edges_s.size - 1)


def make_grid(series: Series, cfg: ReplayConfig) -> Grid:
    ts = series.timestamps_s
    diffs = np.diff(ts)
    interval = float(np.median(diffs)) if diffs.size else cfg.step_s
    start = math.floor(ts[0] / cfg.step_s) * cfg.step_s
    steps = math.floor((ts[-1] - start) / cfg.step_s) + 1
    edges = start + cfg.step_s * np.arange(steps + 1, dtype=np.float64)
    lo = np.searchsorted(ts, edges, side="left")
    durations = np.minimum(np.append(diffs, interval), cfg.max_gap_steps * interval)
    first_scored = math.ceil((ts[0] + cfg.warmup_s - start) / cfg.step_s)
    return Grid(edges_s=edges, lo=lo, sample_step=np.searchsorted(edges, ts, side="right") - 1,
                durations_s=durations, interval_s=interval, first_scored_step=first_scored)


@dataclass(frozen=True, slots=True, kw_only=True)
class Plan:
    """Applied values per step: cores and bytes (inf = no limit), and whether the step began with a change."""

    cpu_request: FloatArray
    cpu_limit: FloatArray
    memory_request: FloatArray
    memory_limit: FloatArray
    changed: FloatArray


def fleet_of(series: Iterable[Series], cfg: ReplayConfig) -> FleetScale | None:
    """The fleet's reference sizes as a recommender would know them once the warm-up is over
    (``fleet_from_samples`` over each series' samples in its warm-up, at least its first hour), so no series'
    scored steps are seen. Scaling every series by F scales both by F (why a fleet-relative price is
    scale-free). None without any sample."""
    def warm(s: Series) -> tuple[FloatArray, FloatArray | None]:
        w = s.timestamps_s < s.timestamps_s[0] + max(cfg.warmup_s, 3600.0)
        return s.cpu_cores[w], None if s.memory_bytes is None else s.memory_bytes[w]
    return fleet_from_samples(warm(s) for s in series if len(s))


def start_resources(series: Series, grid: Grid, cfg: ReplayConfig) -> CurrentResources:
    """The start values (module docstring): limit = provisioned, request = limit / ratio."""
    warm = series.timestamps_s < series.timestamps_s[0] + cfg.warmup_s

    def size(prov: FloatArray | None, usage: FloatArray | None) -> float | None:
        if prov is not None and np.isfinite(prov[0]):
            return float(prov[0])
        if usage is None or not np.any(np.isfinite(usage[warm])):
            return None
        return 2.0 * float(np.nanmax(usage[warm]))

    cpu = size(series.cpu_provisioned_cores, series.cpu_cores)
    mem = size(series.memory_provisioned_bytes, series.memory_bytes)
    cpu_lim = None if cpu is None else max(math.ceil(cpu * 1000.0), 1)
    mem_lim = None if mem is None else max(math.ceil(mem), 1)
    return CurrentResources(
        requests=Resources(cpu_millicores=None if cpu_lim is None else max(
                               math.ceil(cpu_lim / cfg.start_cpu_limit_ratio), 1),
                           memory_bytes=None if mem_lim is None else max(
                               math.ceil(mem_lim / cfg.start_memory_limit_ratio), 1)),
        limits=Resources(cpu_millicores=cpu_lim, memory_bytes=mem_lim))


def apply(rec: Recommendation, cur: CurrentResources) -> CurrentResources:
    """The resources after applying ``rec``: recommended resources take target and limit, others stay."""
    req, lim = cur.requests, cur.limits
    cpu, mem = rec.target.cpu_millicores, rec.target.memory_bytes
    return CurrentResources(
        requests=Resources(cpu_millicores=req.cpu_millicores if cpu is None else cpu,
                           memory_bytes=req.memory_bytes if mem is None else mem),
        limits=Resources(cpu_millicores=lim.cpu_millicores if cpu is None else rec.limits.cpu_millicores,
                         memory_bytes=lim.memory_bytes if mem is None else rec.limits.memory_bytes))


def _cores(millicores: int | None) -> float:
    return math.inf if millicores is None else millicores / 1000.0


def _bytes(amount: int | None) -> float:
    return math.inf if amount is None else float(amount)


class _Feed:
    """Builds the censored ``UsageBatch`` of one step."""

    def __init__(self, series: Series, grid: Grid) -> None:
        self.series, self.grid = series, grid
        self.empty = Samples.empty()

    def batch(self, h: int, cur: CurrentResources) -> UsageBatch | None:
        lo, hi = int(self.grid.lo[h]), int(self.grid.lo[h + 1])
        if hi <= lo:
            return None
        s, interval = self.series, self.grid.interval_s
        ts, cpu = s.timestamps_s[lo:hi], s.cpu_cores[lo:hi]
        cpu_lim = _cores(cur.limits.cpu_millicores)
        throttled = (cpu > cpu_lim).astype(np.float64)
        cpu_seen = Samples(timestamps_s=ts, values=np.minimum(cpu, cpu_lim))
        th = Samples(timestamps_s=ts, values=throttled) if cpu_lim < math.inf else self.empty
        mem_seen, kills = self.empty, tuple[OomKill, ...]()
        if s.memory_bytes is not None:
            mem = s.memory_bytes[lo:hi]
            ok = ~np.isnan(mem)
            mts, mem = ts[ok], mem[ok]
            mem_lim = _bytes(cur.limits.memory_bytes)
            over = np.flatnonzero(mem > mem_lim)
            if over.size:
                kills = (OomKill(timestamp_s=float(mts[over[0]]), memory_limit_bytes=cur.limits.memory_bytes,
                                 memory_request_bytes=cur.requests.memory_bytes),)
            mem_seen = Samples(timestamps_s=mts, values=np.minimum(mem, mem_lim))
        return UsageBatch(cpu_cores=cpu_seen, cpu_interval_s=interval, memory_peak_bytes=mem_seen,
                          memory_interval_s=interval, oom_kills=kills, cpu_throttled_fraction=th)


class _Run:
    """One series' replay, step by step (``replay`` runs one alone; ``replay_fleet`` runs many in time order)."""

    def __init__(self, series: Series, strategy: Strategy, cfg: ReplayConfig, grid: Grid | None = None) -> None:
        self.series, self.strategy = series, strategy
        self.grid = grid or make_grid(series, cfg)
        self.out = np.empty((5, self.grid.steps), dtype=np.float64)
        self.cur = start_resources(series, self.grid, cfg)
        self.state: ContainerState = strategy.new_state()
        self.feed = _Feed(series, self.grid)

    def step(self, h: int, fleet: FleetScale | None) -> None:
        """Step ``h``: feed the previous step's samples, recommend with ``fleet``, apply, record."""
        cur, out = self.cur, self.out
        if h > 0:
            batch = self.feed.batch(h - 1, cur)
            if batch is not None:
                self.state.add(batch)
        if self.state.first_sample_s is not None:
            container = PlainContainer(name=self.series.series_id, current=cur)
            done = recommend_workload(self.strategy, [container], {container.name: self.state}, vpa=None,
                                      fleet=fleet, now_s=float(self.grid.edges_s[h]))
            self.state = done.states[container.name]
            new = apply(done.recommendations[container.name], cur)
            out[4, h] = float(new != cur)
            cur = self.cur = new
        else:
            out[4, h] = 0.0
        out[0, h] = _cores(cur.requests.cpu_millicores)
        out[1, h] = _cores(cur.limits.cpu_millicores)
        out[2, h] = _bytes(cur.requests.memory_bytes)
        out[3, h] = _bytes(cur.limits.memory_bytes)

    def plan(self) -> Plan:
        out = self.out
        return Plan(cpu_request=out[0], cpu_limit=out[1], memory_request=out[2], memory_limit=out[3],
                    changed=out[4])


def replay(series: Series, strategy: Strategy, cfg: ReplayConfig, grid: Grid | None = None) -> Plan:
    """Replay ``series`` online under ``strategy`` (module docstring); the applied values per step. Each step
    recommends as the recommender does (``recommend_workload``): one container alone in its pod, no VPA (the
    default container policy), the fleet ``cfg.fleet``."""
    run = _Run(series, strategy, cfg, grid)
    for h in range(run.grid.steps):
        run.step(h, cfg.fleet)
    return run.plan()


def replay_fleet(series: list[Series], strategy: Strategy, cfg: ReplayConfig) -> list[Plan]:
    """Replay every series under ``strategy`` together, in the order of time, as one recommender serves a fleet:
    every step starting at the same (epoch-aligned) instant is recommended with the fleet as it stood at that
    instant: ``cfg.fleet``'s sizes, with the risk budget's fleet margins (``Strategy.fleet_scale``) of the
    containers running then (a series from its first step to the end of its last; one that has ended has left
    the fleet). So a container that starts later begins from the fleet's margin, and a margin pooled over the
    fleet learns from every running container's overruns. One process; one plan per series, as ``replay``
    gives for one."""
    runs = [_Run(s, strategy, cfg) for s in series]
    events = sorted((float(r.grid.edges_s[h]), i, h) for i, r in enumerate(runs) for h in range(r.grid.steps))
    k = 0
    while k < len(events):
        now = events[k][0]
        live = strategy.fleet_scale([r.state for r in runs if r.grid.edges_s[0] <= now <= r.grid.edges_s[-1]], now)
        fleet = cfg.fleet if live is None or cfg.fleet is None else replace(
            cfg.fleet, cpu_log_margin=live.cpu_log_margin, memory_log_margin=live.memory_log_margin,
            memory_excess=live.memory_excess)
        while k < len(events) and events[k][0] == now:
            _, i, h = events[k]
            runs[i].step(h, fleet)
            k += 1
    return [r.plan() for r in runs]


def _step_peaks(values: FloatArray, grid: Grid, start: float) -> FloatArray:
    """Per step the max of the non-NaN values, carried forward over steps without one (``start`` before any)."""
    n = grid.steps
    peaks = np.full(n, np.nan)
    ok = ~np.isnan(values)
    if np.any(ok):
        np.fmax.at(peaks, grid.sample_step[ok], values[ok])
    filled = np.where(np.isnan(peaks), -1, np.arange(n))
    np.maximum.accumulate(filled, out=filled)
    return np.where(filled >= 0, peaks[np.maximum(filled, 0)], start)


def oracle(series: Series, cfg: ReplayConfig, grid: Grid | None = None) -> Plan:
    """The floor: request = limit = the step's own peak, for CPU and memory."""
    grid = grid or make_grid(series, cfg)
    start = start_resources(series, grid, cfg)
    cpu = _step_peaks(series.cpu_cores, grid, _cores(start.requests.cpu_millicores))
    mem = (np.full(grid.steps, math.inf) if series.memory_bytes is None
           else _step_peaks(series.memory_bytes, grid, _bytes(start.requests.memory_bytes)))
    changed = np.concatenate([[0.0], ((cpu[1:] != cpu[:-1]) | (mem[1:] != mem[:-1])).astype(np.float64)])
    return Plan(cpu_request=cpu, cpu_limit=cpu, memory_request=mem, memory_limit=mem, changed=changed)
