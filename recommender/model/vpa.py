"""The ``vpa`` strategy: Kubernetes VPA's recommender, reproduced as the baseline.

Owns VPA's state per container (a decaying CPU histogram fed every sample at a constant weight, a decaying
memory histogram fed one peak per pod and 24h aggregation interval with OOM bumps injected as peaks, and CPU-only
first/last sample times and sample count) and VPA's estimator: percentile x (1 + margin), bounds times the
confidence multipliers with c = min(lifespan days, samples / 1440), i.e. VPA's one-sample-per-minute
assumption kept on purpose (its known flaw with hourly Prometheus history), then the per-pod floors split over
the pod's containers, in VPA's whole millicores and bytes. Numbers and rules follow VPA 1.8.1's source
(pkg/recommender/: model/aggregate_container_state.go ``AddSample``, model/container.go ``addCPUSample``,
``addMemorySample`` and ``RecordOOM``, logic/estimator.go, logic/recommender.go ``GetRecommendedPodResources``),
and tests/integration/test_vpa_baseline.py holds them to the real recommender on the same history: 203 of 204
values equal, the last a few bytes apart; what VPA does that we do not is in docs/vs-vpa.md.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from podtailor.resources import CurrentResources
from recommender.model.common import (
    DAY_S,
    MIB,
    StrategyBase,
    lower_multiplier,
    oom_bump,
    segments,
    upper_multiplier,
    validate_batch,
)
from recommender.model.histogram import VPA_CPU_BUCKETS, VPA_MEMORY_BUCKETS, DecayingHistogram
from recommender.model.peaks import IntervalPeaks, sort_samples, split_at
from recommender.model.policy import MAX_RESOURCE_AMOUNT, Estimate, ResourceEstimate, finalize, no_recommendation
from recommender.model.types import (
    ContainerPolicy,
    ContainerState,
    HistoryPlan,
    OomKill,
    Recommendation,
    UsageBatch,
)

STATE_VERSION = 2
"""v2 adds the per-pod memory windows; a v1 checkpoint (none) restores as a state without them."""
POD_WINDOW_KEEP_INTERVALS = 2.0
"""A pod's memory window is forgotten this many aggregation intervals after its last sample (its peaks stay in
the histogram), as VPA forgets the container state of a pod that is gone."""


@dataclass(frozen=True, slots=True, kw_only=True)
class VpaParams:
    """VPA's defaults (flags in parentheses)."""

    cpu_half_life_s: float = DAY_S
    """CPU histogram decay half-life (--cpu-histogram-decay-half-life 24h)."""
    memory_half_life_s: float = DAY_S
    """Memory histogram decay half-life (--memory-histogram-decay-half-life 24h)."""
    memory_aggregation_interval_s: float = DAY_S
    """One memory peak per this interval (--memory-aggregation-interval 24h)."""
    cpu_sample_weight: float = 0.1
    """Constant weight of every CPU sample (minSampleWeight, PR #7819)."""
    target_percentile: float = 0.9
    lower_bound_percentile: float = 0.5
    upper_bound_percentile: float = 0.95
    margin_fraction: float = 0.15
    """Safety margin added to all three outputs (--recommendation-margin-fraction)."""
    confidence_interval_s: float = DAY_S
    """Unit of the lifespan term of the confidence (--confidence-interval-cpu/memory 24h)."""
    assumed_samples_per_day: float = 1440.0
    """VPA's samples term assumes one sample per minute, whatever the real interval."""
    pod_min_cpu_millicores: float = 25.0
    """Per-pod CPU floor, split over the pod's containers (--pod-recommendation-min-cpu-millicores)."""
    pod_min_memory_mib: float = 250.0
    """Per-pod memory floor in MiB, split over the containers (--pod-recommendation-min-memory-mb x 2^20)."""
    oom_min_bump_bytes: float = 100.0 * MIB
    oom_bump_ratio: float = 1.2
    confidence_full_days: float = 8.0
    """Only for Recommendation.confidence (0..1): VPA's 8-day memory window counts as full history."""


class VpaState:
    """VPA's per-container aggregate: two decaying histograms and CPU sample bookkeeping."""

    def __init__(self, params: VpaParams) -> None:
        self.cpu = DecayingHistogram(VPA_CPU_BUCKETS, params.cpu_half_life_s)
        self.memory = IntervalPeaks(DecayingHistogram(VPA_MEMORY_BUCKETS, params.memory_half_life_s),
                                    params.memory_aggregation_interval_s)
        self.cpu_weight = params.cpu_sample_weight
        self.oom_min_bump_bytes = params.oom_min_bump_bytes
        self.oom_bump_ratio = params.oom_bump_ratio
        self.pod_windows: dict[str, IntervalPeaks] = {}
        """With pods told apart (``UsageBatch.memory_pod_index``): each pod's current memory interval, all of them
        feeding ``memory.hist``. ``memory``'s own window takes the samples whose pod is not told."""
        self._first_cpu_s: float | None = None
        self._last_cpu_s: float | None = None
        self.total_samples = 0

    @property
    def first_sample_s(self) -> float | None:
        return self._first_cpu_s

    @property
    def last_sample_s(self) -> float | None:
        return self._last_cpu_s

    def add(self, batch: UsageBatch) -> None:
        validate_batch(batch)
        for part, weight in segments(batch):
            self._add_segment(part, weight)

    def _add_segment(self, batch: UsageBatch, cpu_weight: float) -> None:
        self._add_cpu(batch, cpu_weight)
        if batch.memory_pod_index is not None:
            self._add_memory_by_pod(batch)
            return
        mem = sort_samples(batch.memory_peak_bytes.timestamps_s, batch.memory_peak_bytes.values)
        for oom in sorted(batch.oom_kills, key=lambda o: o.timestamp_s):
            before, mem = split_at(mem, oom.timestamp_s)
            self.memory.add(before)
            self._record_oom(oom, self.memory)
        self.memory.add(mem)

    def _window(self, pod: str) -> IntervalPeaks:
        window = self.pod_windows.get(pod)
        if window is None:
            window = self.pod_windows[pod] = IntervalPeaks(self.memory.hist, self.memory.interval_s)
        return window

    def _add_memory_by_pod(self, batch: UsageBatch) -> None:
        """One memory peak per pod and interval, as VPA keeps one per container of each pod (model/container.go
        ``addMemorySample`` runs on the pod's ``ContainerState``; all of them feed the aggregate's histogram). An
        OOM kill goes to the pod with the highest peak in its interval: our history does not say which pod's
        container it was (VPA's OOM observer does)."""
        assert batch.memory_pod_index is not None
        ts, values = batch.memory_peak_bytes.timestamps_s, batch.memory_peak_bytes.values
        per_pod = {name: sort_samples(ts[batch.memory_pod_index == i], values[batch.memory_pod_index == i])
                   for i, name in enumerate(batch.memory_pods)}
        for oom in sorted(batch.oom_kills, key=lambda o: o.timestamp_s):
            for name, samples in list(per_pod.items()):
                before, per_pod[name] = split_at(samples, oom.timestamp_s)
                self._window(name).add(before)
            busiest = max(per_pod, key=lambda n: self._window(n).current_peak, default=None)
            self._record_oom(oom, self.memory if busiest is None else self._window(busiest))
        for name, samples in per_pod.items():
            self._window(name).add(samples)
        newest = max((w.last_sample_s for w in self.pod_windows.values() if w.last_sample_s is not None),
                     default=None)
        if newest is not None:
            horizon = newest - POD_WINDOW_KEEP_INTERVALS * self.memory.interval_s
            self.pod_windows = {n: w for n, w in self.pod_windows.items()
                                if w.last_sample_s is None or w.last_sample_s >= horizon}

    def _add_cpu(self, batch: UsageBatch, weight: float = 1.0) -> None:
        ts, values = batch.cpu_cores.timestamps_s, batch.cpu_cores.values
        if self._last_cpu_s is not None:  # VPA drops samples not after the last one (dedup across batches)
            keep = ts > self._last_cpu_s
            ts, values = ts[keep], values[keep]
        if ts.size == 0:
            return
        self.cpu.add(values, ts, self.cpu_weight * weight)
        first, last = float(ts.min()), float(ts.max())
        self._first_cpu_s = first if self._first_cpu_s is None else min(self._first_cpu_s, first)
        self._last_cpu_s = last
        self.total_samples += round(ts.size * weight)  # a summary sample counts as the steps it stands for

    def _record_oom(self, oom: OomKill, window: IntervalPeaks) -> None:
        used = max(float(oom.memory_request_bytes or 0), window.usage_peak)
        needed = oom_bump(used, min_bump_bytes=self.oom_min_bump_bytes, ratio=self.oom_bump_ratio)
        window.add_oom(oom.timestamp_s, needed)

    def confidence_days(self, params: VpaParams) -> float:
        if self._first_cpu_s is None or self._last_cpu_s is None:
            return 0.0
        lifespan = (self._last_cpu_s - self._first_cpu_s) / params.confidence_interval_s
        return min(lifespan, self.total_samples / params.assumed_samples_per_day)

    def to_checkpoint(self) -> dict[str, Any]:
        return {"strategy": "vpa", "version": STATE_VERSION, "cpu": self.cpu.to_checkpoint(),
                "memory": self.memory.to_checkpoint(), "first_cpu_s": self._first_cpu_s,
                "last_cpu_s": self._last_cpu_s, "total_samples": self.total_samples,
                "pod_windows": {n: w.window_to_checkpoint() for n, w in sorted(self.pod_windows.items())}}

    def restore_from(self, data: dict[str, Any]) -> None:
        if data.get("strategy") != "vpa" or data.get("version") not in (1, STATE_VERSION):
            raise ValueError("not a vpa v1 or v2 checkpoint")
        self.cpu = DecayingHistogram.from_checkpoint(data["cpu"])
        self.memory = IntervalPeaks.from_checkpoint(data["memory"])
        self.pod_windows = {n: IntervalPeaks.window_from_checkpoint(self.memory.hist, self.memory.interval_s, w)
                            for n, w in (data.get("pod_windows") or {}).items()}
        self._first_cpu_s = None if data["first_cpu_s"] is None else float(data["first_cpu_s"])
        self._last_cpu_s = None if data["last_cpu_s"] is None else float(data["last_cpu_s"])
        self.total_samples = int(data["total_samples"])


def _amount(x: float) -> int:
    """VPA's ``resourceAmountFromFloat`` (pkg/recommender/model/types.go): a whole number of millicores or bytes,
    truncated toward zero, at least 0 and at most MaxResourceAmount (1e14)."""
    if math.isnan(x) or x <= 0:
        return 0
    return MAX_RESOURCE_AMOUNT if x >= MAX_RESOURCE_AMOUNT else int(x)


def _estimate(hist: DecayingHistogram, params: VpaParams, c: float, *, unit: float, pod_min_units: float,
              containers: int) -> ResourceEstimate | None:
    """VPA's estimator chain (pkg/recommender/logic/recommender.go ``CreatePodResourceRecommender``,
    logic/estimator.go) in its own integer arithmetic: the percentile, an upper bucket edge, becomes whole units
    (``CPUAmountFromCores``/``MemoryAmountFromBytes``), the margin is added as ``base + ScaleResource(base,
    margin)``, each bound is ``ScaleResource`` of that by its confidence multiplier, and the per-pod minimum
    (``ScaleResource(min, 1/containers)``) is the floor; every ``ScaleResource`` truncates. ``unit`` turns the
    histogram's values into VPA's units (1000 millicores per core, 1 byte per byte); the answer is back in
    cores or bytes, whole units, which ``finalize`` keeps as they are."""
    percentiles = (hist.percentile(params.target_percentile), hist.percentile(params.lower_bound_percentile),
                   hist.percentile(params.upper_bound_percentile))
    if any(p is None for p in percentiles):
        return None
    target, lower, upper = (_amount(p * unit) for p in percentiles if p is not None)

    def with_margin(base: int) -> int:
        return base + _amount(base * params.margin_fraction)

    floor = _amount(_amount(pod_min_units) * (1.0 / containers))
    lower_units = _amount(with_margin(lower) * lower_multiplier(c))
    upper_units = _amount(with_margin(upper) * upper_multiplier(c))
    return ResourceEstimate(target=max(with_margin(target), floor) / unit, lower=max(lower_units, floor) / unit,
                            upper=max(upper_units, floor) / unit)


class VpaStrategy(StrategyBase[VpaParams, VpaState]):
    """Kubernetes VPA's recommender (the baseline)."""

    name = "vpa"

    state_type = VpaState

    def __init__(self, params: VpaParams | None = None) -> None:
        super().__init__(params or VpaParams())

    def history_plan(self) -> HistoryPlan:
        """Full resolution for six CPU half-lives (6 days at VPA's 24 h; older samples weigh under 1/64 in
        all), hourly summaries before that; memory peaks are daily, so hourly peaks lose nothing there. Each
        memory sample comes with its pod (VPA keeps a peak per pod)."""
        return HistoryPlan(full_resolution_s=6 * self.params.cpu_half_life_s, per_pod_memory=True)

    def parameters(self) -> dict[str, Any]:
        return {**asdict(self.params), "memory_peak_weight": 1.0, "cpu_buckets": VPA_CPU_BUCKETS.to_dict(),
                "memory_buckets": VPA_MEMORY_BUCKETS.to_dict(), "num_buckets": VPA_CPU_BUCKETS.num_buckets}

    def recommend(self, state: ContainerState, *, now_s: float, policy: ContainerPolicy,
                  current: CurrentResources) -> tuple[Recommendation, ContainerState]:
        if not isinstance(state, VpaState):
            raise TypeError("vpa strategy needs a VpaState")
        if state.cpu.is_empty() and state.memory.hist.is_empty():
            return no_recommendation("no history"), state
        c = state.confidence_days(self.params)
        n = max(policy.containers_in_pod, 1)
        cpu = _estimate(state.cpu, self.params, c, unit=1000.0, pod_min_units=self.params.pod_min_cpu_millicores,
                        containers=n)
        memory = _estimate(state.memory.hist, self.params, c, unit=1.0,
                           pod_min_units=self.params.pod_min_memory_mib * MIB, containers=n)
        reasons = tuple(f"no {r} history" for r, e in (("cpu", cpu), ("memory", memory)) if e is None)
        confidence = float(np.clip(c / self.params.confidence_full_days, 0.0, 1.0))
        return finalize(Estimate(cpu=cpu, memory=memory, confidence=confidence, reasons=reasons),
                        policy=policy, current=current), state
