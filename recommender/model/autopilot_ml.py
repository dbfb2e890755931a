"""The ``autopilot-ml`` candidate strategy: Google Autopilot's ML recommender per container, priced scale-free.

Owns the parameters, the per-container state and the arithmetic from state to ``Recommendation``. CPU and
memory each have an ``ArgminEnsemble`` (``argmin_ensemble.py``: a family of half-life x margin models over
geometric bucket levels, each model's level the arg-min of decayed overrun + relative underrun + a change
cost, and per container the model whose recent realised cost is lowest). Every price is per container and
scale-free: underrun is slack as a share of the level, overrun is the share of time over the CPU request or
the share of hours whose memory peak passes the limit (an OOM kill), so a container 10 times larger gets the
same policy relative to its size; only the floors (``pod_min_*``) and the 1-unit rounding are absolute.

Feeding: samples are cut into aligned hours (``chunk_s``); each hour's part of a batch is one chunk. CPU
samples are throttling-corrected as in ``podtailor`` (x (1 + throttled fraction)). A memory chunk with an
OOM kill counts its peak as the limit at the kill x ``oom_bump_ratio`` (the censored reading understates the
need), and the memory target is floored at that bump for ``oom_window_s``. Requests: the chosen models'
recommendations; limits keep the current limit:request ratio (VPA's proportional rule). Resizes: a resource
moves when its target leaves [1 - ``resize_down_fraction``, 1 + ``resize_up_fraction``] x its request; when
one moves, both take their fresh targets (one pod update), else both keep the current values. Bounds are
the lowest and highest of the models' recommendations.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from podtailor.resources import CurrentResources
from recommender.model.argmin_ensemble import HOUR_S, ArgminEnsemble, Chunk, EnsembleParams, chunk_costs
from recommender.model.common import DAY_S, MIB, StrategyBase, oom_bump, segments, validate_batch
from recommender.model.histogram import BucketScheme
from recommender.model.observed import Observed, SeenSpan, throttle_corrected
from recommender.model.peaks import SortedSamples, sort_samples, split_at
from recommender.model.policy import Estimate, LimitRule, ResourceEstimate, finalize, no_recommendation, with_floor
from recommender.model.types import ContainerPolicy, ContainerState, OomKill, Recommendation, UsageBatch

STATE_VERSION = 1


@dataclass(frozen=True, slots=True, kw_only=True)
class AutopilotMlParams:
    """autopilot-ml's tunables. Prices are in units of relative slack (a share of the level), so none depends on
    a container's size."""

    cpu_half_lives_s: tuple[float, ...] = (6 * HOUR_S, 24 * HOUR_S, 72 * HOUR_S)
    """CPU model family's decay (Autopilot's moving window uses 12 h for CPU). With 2 h / 12 h / 48 h the
    container changed about twice as often on the Bitbrains months for the same time over the request."""
    memory_half_lives_s: tuple[float, ...] = (12 * HOUR_S, 48 * HOUR_S, 8 * DAY_S)
    """Memory model family's decay (Autopilot's moving window uses 48 h for memory)."""
    margins: tuple[float, ...] = (0.0, 0.1, 0.25)
    """Safety margins tried with every half-life (Autopilot: 10-15%)."""
    cpu_overrun_cost: float = 5.0
    """Price of the share of time over the CPU request, in relative slack: leaving 1% more of the time over
    the request must save more than 5% of the request. Bitbrains months, 20 series: 2 gave 40+ CPU minutes
    over the request a day (VPA 13-16), 8 about VPA's minutes with 50-60% more CPU slack than VPA."""
    memory_overrun_cost: float = 30.0
    """Price of the share of hours whose peak passes the memory limit (each an OOM kill)."""
    change_cost: float = 0.05
    """w_dL: a model changes its level only to save more than this much mean hourly cost."""
    switch_cost: float = 0.01
    """w_dm: a container changes model only for one cheaper by more than this (mean hourly realised cost)."""
    selection_half_life_s: float = 48 * HOUR_S
    """Decay of the models' realised costs: what "recent" means for the choice of model."""
    default_model: int = 4
    """Index (half-life-major) of the model used before any has a realised cost: the middle one."""
    chunk_s: float = HOUR_S
    """Samples are folded in per aligned slot of this length (the memory overrun is per slot: an OOM hour)."""
    bucket_ratio: float = 10.0 ** (1.0 / 116.0)
    """Levels 2.005% apart, 116 per decade, so that x10 (or x0.1) moves every level by exactly 116 buckets. With
    1.02 it moved them by 116.3, and where two levels' costs nearly tie that shift alone flipped the choice
    (a target 11% off its x10 image, ``test_model_autopilot_ml``)."""
    cpu_bucket_first_cores: float = 1e-7
    memory_bucket_first_bytes: float = 1.0
    """First buckets far below any container, so that the levels are geometric (scale-free) where it matters."""
    throttle_correction: bool = True
    oom_bump_ratio: float = 1.2
    oom_min_bump_bytes: float = 0.0
    """An absolute minimum bump (``podtailor``'s is 100 MiB); 0 keeps the rule scale-free."""
    oom_window_s: float = DAY_S
    resize_up_fraction: float = 0.1
    """A target less than 10% above the request does not resize by itself (the limit's headroom serves it)."""
    resize_down_fraction: float = 0.3
    """A decrease waits until the target is 30% below the request: with 0.1 the Bitbrains months changed
    about 2 times a day (VPA 0.7)."""
    pod_min_cpu_millicores: float = 10.0
    pod_min_memory_mib: float = 64.0
    confidence_full_days: float = 7.0

    def __post_init__(self) -> None:
        for name in ("cpu_overrun_cost", "memory_overrun_cost", "change_cost", "switch_cost"):
            if not 0 <= getattr(self, name) < math.inf:
                raise ValueError(f"{name} must be finite and >= 0")
        if not (self.resize_up_fraction >= 0 and 0 <= self.resize_down_fraction < 1):
            raise ValueError("resize_up_fraction must be >= 0 and resize_down_fraction in [0, 1)")
        if not (self.chunk_s > 0 and self.selection_half_life_s > 0 and self.bucket_ratio > 1):
            raise ValueError("chunk_s and selection_half_life_s must be positive, bucket_ratio above 1")

    def ensemble(self, resource: str) -> EnsembleParams:
        cpu = resource == "cpu"
        return EnsembleParams(half_lives_s=tuple(self.cpu_half_lives_s if cpu else self.memory_half_lives_s),
                              margins=tuple(self.margins),
                              overrun_cost=self.cpu_overrun_cost if cpu else self.memory_overrun_cost,
                              change_cost=self.change_cost, switch_cost=self.switch_cost,
                              selection_half_life_s=self.selection_half_life_s, default_model=self.default_model,
                              peak_overrun=not cpu)


class AutopilotMlState(SeenSpan):
    """Per container: the CPU and memory ensembles, the OOM bumps, the real observed history."""

    def __init__(self, params: AutopilotMlParams) -> None:
        self.params = params
        self.cpu = ArgminEnsemble(BucketScheme(first_bucket_size=params.cpu_bucket_first_cores,
                                               ratio=params.bucket_ratio, max_value=1000.0), params.ensemble("cpu"))
        self.memory = ArgminEnsemble(BucketScheme(first_bucket_size=params.memory_bucket_first_bytes,
                                                  ratio=params.bucket_ratio, max_value=1e13),
                                     params.ensemble("memory"))
        self.oom_bumps: list[tuple[float, float]] = []
        self.cpu_seen = Observed()
        self.memory_seen = Observed()

    def add(self, batch: UsageBatch) -> None:
        validate_batch(batch)
        for part, weight in segments(batch):
            self._add_cpu(part, weight)
            self._add_memory(part, part.oom_kills)

    def _add_cpu(self, batch: UsageBatch, weight: float) -> None:
        values = batch.cpu_cores.values
        if self.params.throttle_correction:
            values = throttle_corrected(batch.cpu_cores, batch.cpu_throttled_fraction)
        cpu = _newer(sort_samples(batch.cpu_cores.timestamps_s, values), self.cpu_seen.last_s)
        for ts, vals in _slots(cpu, self.params.chunk_s):
            over, under = chunk_costs(self.cpu.scheme, vals)
            self.cpu.add(Chunk(overrun=over, underrun=under, end_s=float(ts[-1]),
                               hours=vals.size * batch.cpu_interval_s * weight / HOUR_S))
        self.cpu_seen.note(cpu.timestamps_s, batch.cpu_interval_s)

    def _add_memory(self, batch: UsageBatch, ooms: tuple[OomKill, ...]) -> None:
        mem = _newer(sort_samples(batch.memory_peak_bytes.timestamps_s, batch.memory_peak_bytes.values),
                     self.memory_seen.last_s)
        bumps = [(o.timestamp_s, self._record_oom(o)) for o in ooms]
        for ts, vals in _slots(mem, self.params.chunk_s):
            slot = math.floor(ts[0] / self.params.chunk_s)
            need = max((b for t, b in bumps if math.floor(t / self.params.chunk_s) == slot), default=None)
            over, under = chunk_costs(self.memory.scheme, vals, peak=need, peak_overrun=True)
            self.memory.add(Chunk(overrun=over, underrun=under, end_s=float(ts[-1]),
                                  hours=vals.size * batch.memory_interval_s / HOUR_S))
        self.memory_seen.note(mem.timestamps_s, batch.memory_interval_s)

    def _record_oom(self, oom: OomKill) -> float:
        """The bump for a kill at the limit (the request when no limit is known), kept for ``oom_window_s``."""
        used = max(float(oom.memory_limit_bytes or 0), float(oom.memory_request_bytes or 0))
        bump = oom_bump(used, min_bump_bytes=self.params.oom_min_bump_bytes, ratio=self.params.oom_bump_ratio)
        self.oom_bumps.append((oom.timestamp_s, bump))
        newest = max(t for t, _ in self.oom_bumps)
        self.oom_bumps = sorted(b for b in self.oom_bumps if b[0] >= newest - self.params.oom_window_s)
        return bump

    def oom_floor(self, now_s: float) -> float | None:
        recent = [b for t, b in self.oom_bumps if now_s - self.params.oom_window_s <= t <= now_s]
        return max(recent) if recent else None

    def to_checkpoint(self) -> dict[str, Any]:
        return {"strategy": "autopilot-ml", "version": STATE_VERSION, "cpu": self.cpu.to_checkpoint(),
                "memory": self.memory.to_checkpoint(), "oom_bumps": [list(b) for b in self.oom_bumps],
                "cpu_seen": [self.cpu_seen.first_s, self.cpu_seen.last_s, self.cpu_seen.seconds],
                "memory_seen": [self.memory_seen.first_s, self.memory_seen.last_s, self.memory_seen.seconds]}

    def restore_from(self, data: dict[str, Any]) -> None:
        if data.get("strategy") != "autopilot-ml" or data.get("version") != STATE_VERSION:
            raise ValueError("not an autopilot-ml v1 checkpoint")
        self.cpu.restore_from(data["cpu"])
        self.memory.restore_from(data["memory"])
        self.oom_bumps = [(float(t), float(b)) for t, b in data["oom_bumps"]]
        self.cpu_seen = _observed(data["cpu_seen"])
        self.memory_seen = _observed(data["memory_seen"])


def _observed(raw: list[Any]) -> Observed:
    first, last, seconds = raw
    return Observed(None if first is None else float(first), None if last is None else float(last), float(seconds))


def _newer(samples: SortedSamples, last_s: float | None) -> SortedSamples:
    """Only the samples after ``last_s`` (a new batch never rewrites folded history)."""
    return samples if last_s is None else split_at(samples, last_s)[1]


def _slots(samples: SortedSamples, slot_s: float) -> list[tuple[np.ndarray, np.ndarray]]:
    """Time-sorted samples cut at whole multiples of ``slot_s``."""
    if samples.values.size == 0:
        return []
    slots = np.floor(samples.timestamps_s / slot_s)
    cuts = np.flatnonzero(slots[1:] != slots[:-1]) + 1
    return list(zip(np.split(samples.timestamps_s, cuts), np.split(samples.values, cuts), strict=True))


class AutopilotMlStrategy(StrategyBase[AutopilotMlParams, AutopilotMlState]):
    """Per container, the cheapest of a family of arg-min models (Autopilot's ML recommender), scale-free."""

    name = "autopilot-ml"

    state_type = AutopilotMlState

    def __init__(self, params: AutopilotMlParams | None = None) -> None:
        super().__init__(params or AutopilotMlParams())

    @staticmethod
    def _estimate(ensemble: ArgminEnsemble, floor: float, bump: float | None = None) -> ResourceEstimate | None:
        target, spread = ensemble.recommendation(), ensemble.spread()
        if target is None or spread is None:
            if bump is None:
                return None
            target, spread = bump, (bump, bump)
        if bump is not None:
            target = max(target, bump)
        est = ResourceEstimate(target=target, lower=min(spread[0], target), upper=max(spread[1], target),
                               limit_rule=LimitRule.PROPORTIONAL)
        return with_floor(est, floor)

    def _moves(self, est: ResourceEstimate | None, request: float | None) -> bool:
        if est is None:
            return False
        if request is None or request <= 0:
            return True
        ratio = est.target / request
        return ratio > 1.0 + self.params.resize_up_fraction or ratio < 1.0 - self.params.resize_down_fraction

    def recommend(self, state: ContainerState, *, now_s: float, policy: ContainerPolicy,
                  current: CurrentResources) -> tuple[Recommendation, ContainerState]:
        if not isinstance(state, AutopilotMlState):
            raise TypeError("autopilot-ml strategy needs an AutopilotMlState")
        if state.first_sample_s is None and not state.oom_bumps:
            return no_recommendation("no history"), state
        prm, n = self.params, max(policy.containers_in_pod, 1)
        cpu = self._estimate(state.cpu, prm.pod_min_cpu_millicores / 1000.0 / n)
        memory = self._estimate(state.memory, prm.pod_min_memory_mib * MIB / n, state.oom_floor(now_s))
        req = current.requests
        cur_cpu = None if req.cpu_millicores is None else req.cpu_millicores / 1000.0
        cur_mem = None if req.memory_bytes is None else float(req.memory_bytes)
        reasons: tuple[str, ...] = ()
        if not (self._moves(cpu, cur_cpu) or self._moves(memory, cur_mem)):
            cpu, memory = _held(cpu, cur_cpu), _held(memory, cur_mem)
            reasons = ("kept: both targets within the resize band",)
        missing = tuple(f"no {r} history" for r, e in (("cpu", cpu), ("memory", memory)) if e is None)
        known = [c for c, e in ((state.cpu_seen.days(), cpu), (state.memory_seen.days(), memory)) if e is not None]
        confidence = min(min(known, default=0.0) / prm.confidence_full_days, 1.0)
        return finalize(Estimate(cpu=cpu, memory=memory, confidence=confidence, reasons=reasons + missing),
                        policy=policy, current=current), state


def _held(est: ResourceEstimate | None, request: float | None) -> ResourceEstimate | None:
    """The estimate with the current request kept (the proportional rule then keeps the current limit)."""
    if est is None or request is None or request <= 0:
        return est
    return replace(est, target=request, lower=min(est.lower, request), upper=max(est.upper, request))
