"""The ``krr-simple`` strategy: robusta-dev/krr's default ``simple`` strategy, reproduced as a peer baseline.

Owns KRR's state per container (a windowed, non-decaying CPU histogram with fine buckets, per-day memory
maxima and sample counts, and OOM-time limits) and KRR's arithmetic: CPU request = p95 of the CPU samples of
the last 14 days, no CPU limit; memory request = limit = max memory peak of the last 14 days x 1.15, or with
``use_oomkill_data`` at least the OOM-time limit x 1.25; fewer than 100 points for a resource gives no
recommendation for it; round up to 1m CPU and 1 MiB memory; floors 10m and 100 MiB. Deviations from KRR,
which queries Prometheus afresh each run: (1) KRR takes p95 per pod and then the max across pods, we pool the
pods' samples into one histogram (the pooled p95 can be lower than the worst pod's); (2) the p95 is the upper
edge of a 1%-wide bucket, so it lies in [q, 1.01 q + 1m] for the nearest-rank quantile q, where KRR's
``quantile_over_time`` interpolates; (3) the 14-day window is whole days, so it reaches back up to one extra
day; (4) the memory floor is KRR's current ``--mem-min`` 100 x 2^20 bytes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from podtailor.resources import CurrentResources
from recommender.model.common import DAY_S, MIB, StrategyBase, segments, validate_batch
from recommender.model.histogram import BucketScheme, WindowedHistogram
from recommender.model.peaks import SlotMax, sort_samples, split_at
from recommender.model.policy import (
    Estimate,
    LimitRule,
    ResourceEstimate,
    finalize,
    no_recommendation,
    with_floor,
)
from recommender.model.types import ContainerPolicy, ContainerState, FloatArray, Recommendation, UsageBatch

STATE_VERSION = 1


@dataclass(frozen=True, slots=True, kw_only=True)
class KrrParams:
    """KRR ``simple`` defaults (CLI flags in parentheses)."""

    history_duration_s: float = 14 * DAY_S
    """Window of history used (--history_duration 336h)."""
    cpu_percentile: float = 0.95
    """(--cpu_percentile 95)."""
    memory_buffer_percentage: float = 15.0
    """Memory = max peak x (1 + this/100) (--memory_buffer_percentage)."""
    points_required: int = 100
    """Fewer samples in the window than this: no recommendation for the resource (--points_required)."""
    use_oomkill_data: bool = False
    """(--use_oomkill_data, experimental in KRR)."""
    oom_memory_buffer_percentage: float = 25.0
    """With OOM data, memory >= OOM-time limit x (1 + this/100) (--oom_memory_buffer_percentage)."""
    cpu_min_millicores: float = 10.0
    """(--cpu-min)."""
    memory_min_mib: float = 100.0
    """(--mem-min, multiplied by 2^20 in KRR's runner)."""
    cpu_round_millicores: int = 1
    memory_round_bytes: int = MIB
    cpu_bucket_first_cores: float = 0.001
    """Finer buckets than VPA's so the p95 stays within 1% + 1m of the exact quantile."""
    cpu_bucket_ratio: float = 1.01
    cpu_bucket_max_cores: float = 1000.0
    slot_s: float = DAY_S
    """Granularity of the window (per-day sub-histograms)."""


class KrrState:
    """Windowed CPU histogram, per-day memory maxima and OOM-time limits."""

    def __init__(self, params: KrrParams) -> None:
        scheme = BucketScheme(first_bucket_size=params.cpu_bucket_first_cores, ratio=params.cpu_bucket_ratio,
                              max_value=params.cpu_bucket_max_cores)
        retention = params.history_duration_s + params.slot_s
        self.retention_s = retention
        self.cpu = WindowedHistogram(scheme, slot_s=params.slot_s, retention_s=retention)
        self.memory = SlotMax(slot_s=params.slot_s, retention_s=retention)
        self.oom_limits: list[tuple[float, float]] = []
        self._first_s: float | None = None
        self._last_cpu_s: float | None = None
        self._last_memory_s: float | None = None

    @property
    def first_sample_s(self) -> float | None:
        return self._first_s

    @property
    def last_sample_s(self) -> float | None:
        known = [t for t in (self._last_cpu_s, self._last_memory_s) if t is not None]
        return max(known) if known else None

    def add(self, batch: UsageBatch) -> None:
        validate_batch(batch)
        for part, weight in segments(batch):  # krr-simple plans full resolution; a summary still counts right
            self._add_segment(part, weight)

    def _add_segment(self, batch: UsageBatch, cpu_weight: float) -> None:
        cpu = sort_samples(batch.cpu_cores.timestamps_s, batch.cpu_cores.values)
        if self._last_cpu_s is not None:  # a new batch holds only samples newer than the previous one
            _, cpu = split_at(cpu, self._last_cpu_s)
        mem = sort_samples(batch.memory_peak_bytes.timestamps_s, batch.memory_peak_bytes.values)
        if self._last_memory_s is not None:
            _, mem = split_at(mem, self._last_memory_s)
        self.cpu.add(cpu.values, cpu.timestamps_s, cpu_weight)
        self.memory.add(mem)
        for oom in batch.oom_kills:
            if oom.memory_limit_bytes is not None:
                self.oom_limits.append((oom.timestamp_s, float(oom.memory_limit_bytes)))
        self._note_times(cpu.timestamps_s, mem.timestamps_s)
        if self.oom_limits:
            newest = max(t for t, _ in self.oom_limits)
            self.oom_limits = sorted(o for o in self.oom_limits if o[0] >= newest - self.retention_s)

    def _note_times(self, cpu_ts: FloatArray, mem_ts: FloatArray) -> None:
        firsts = [float(a[0]) for a in (cpu_ts, mem_ts) if a.size]
        if firsts:
            self._first_s = min([*firsts, *([self._first_s] if self._first_s is not None else [])])
        if cpu_ts.size:
            self._last_cpu_s = float(cpu_ts[-1])
        if mem_ts.size:
            self._last_memory_s = float(mem_ts[-1])

    def to_checkpoint(self) -> dict[str, Any]:
        return {"strategy": "krr-simple", "version": STATE_VERSION, "cpu": self.cpu.to_checkpoint(),
                "memory": self.memory.to_checkpoint(), "oom_limits": [list(o) for o in self.oom_limits],
                "first_s": self._first_s, "last_cpu_s": self._last_cpu_s, "last_memory_s": self._last_memory_s}

    def restore_from(self, data: dict[str, Any]) -> None:
        if data.get("strategy") != "krr-simple" or data.get("version") != STATE_VERSION:
            raise ValueError("not a krr-simple v1 checkpoint")
        self.cpu = WindowedHistogram.from_checkpoint(data["cpu"])
        self.memory = SlotMax.from_checkpoint(data["memory"])
        self.oom_limits = [(float(t), float(v)) for t, v in data["oom_limits"]]
        self._first_s = None if data.get("first_s") is None else float(data["first_s"])
        self._last_cpu_s = None if data.get("last_cpu_s") is None else float(data["last_cpu_s"])
        self._last_memory_s = None if data.get("last_memory_s") is None else float(data["last_memory_s"])


class KrrSimpleStrategy(StrategyBase[KrrParams, KrrState]):
    """robusta-dev/krr ``simple``: p95 CPU request, no CPU limit, memory = limit = max peak + 15%."""

    name = "krr-simple"

    state_type = KrrState

    def __init__(self, params: KrrParams | None = None) -> None:
        super().__init__(params or KrrParams())

    def _cpu(self, state: KrrState, now_s: float) -> tuple[ResourceEstimate | None, int]:
        window = state.cpu.window(now_s, self.params.history_duration_s)
        points = round(window.total_weight)
        value = window.percentile(self.params.cpu_percentile)
        if points < self.params.points_required or value is None:
            return None, points
        est = ResourceEstimate(target=value, lower=value, upper=value, limit_rule=LimitRule.NONE)
        return with_floor(est, self.params.cpu_min_millicores / 1000.0), points

    def _memory(self, state: KrrState, now_s: float) -> tuple[ResourceEstimate | None, int]:
        window_s = self.params.history_duration_s
        points = state.memory.count(now_s=now_s, window_s=window_s)
        peak = state.memory.max(now_s=now_s, window_s=window_s)
        if points < self.params.points_required or peak is None:
            return None, points
        value = peak * (1.0 + self.params.memory_buffer_percentage / 100.0)
        if self.params.use_oomkill_data:
            recent = [lim for t, lim in state.oom_limits if now_s - window_s <= t <= now_s]
            if recent:
                value = max(value, max(recent) * (1.0 + self.params.oom_memory_buffer_percentage / 100.0))
        est = ResourceEstimate(target=value, lower=value, upper=value, limit_rule=LimitRule.EQUAL_TO_REQUEST)
        return with_floor(est, self.params.memory_min_mib * MIB), points

    def recommend(self, state: ContainerState, *, now_s: float, policy: ContainerPolicy,
                  current: CurrentResources) -> tuple[Recommendation, ContainerState]:
        if not isinstance(state, KrrState):
            raise TypeError("krr-simple strategy needs a KrrState")
        if state.first_sample_s is None:
            return no_recommendation("no history"), state
        cpu, cpu_points = self._cpu(state, now_s)
        memory, memory_points = self._memory(state, now_s)
        need = self.params.points_required
        reasons = tuple(f"{r}: not enough data ({n} < {need} points)"
                        for r, e, n in (("cpu", cpu, cpu_points), ("memory", memory, memory_points)) if e is None)
        confidence = min(cpu_points, memory_points) / max(need, 1)
        estimate = Estimate(cpu=cpu, memory=memory, confidence=min(confidence, 1.0), reasons=reasons,
                            cpu_step_millicores=self.params.cpu_round_millicores,
                            memory_step_bytes=self.params.memory_round_bytes)
        return finalize(estimate, policy=policy, current=current), state
