"""Helpers every strategy shares: strict batch validation, VPA's confidence multipliers, OOM bump.

Owns the checks a ``UsageBatch`` must pass before any state changes (finite, non-negative values and
timestamps, positive intervals, throttled fractions in [0, 1]; the source should have filtered already, so a
violation raises ``ValueError`` rather than being silently dropped), the confidence arithmetic of VPA's
estimator (upper x (1 + 1/c), lower x (1 + 0.001/c)^-2, with c in days; c = 0 gives an infinite upper and a
zero lower), and VPA's OOM bump max(used + 100 MiB, used x 1.2).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import asdict
from typing import Any, Generic, Protocol, TypeVar

import numpy as np

from recommender.model.fleet import FleetSums
from recommender.model.types import ContainerState, FleetScale, FloatArray, HistoryPlan, Samples, UsageBatch

DAY_S = 86400.0
MIB = 1024 * 1024
GIB = 1024 * MIB


def _check_samples(name: str, samples: Samples, *, upper: float | None = None) -> None:
    times, values = samples.timestamps_s, samples.values
    if times.size and not (np.isfinite(np.minimum.reduce(times, axis=None))
                           and np.isfinite(np.maximum.reduce(times, axis=None))):  # a NaN reaches both, an inf one
        raise ValueError(f"{name}: non-finite timestamp")
    if values.size == 0:
        return
    low, high = np.minimum.reduce(values, axis=None), np.maximum.reduce(values, axis=None)
    if not np.isfinite(low) or not np.isfinite(high):  # a NaN propagates into both, an inf into one
        raise ValueError(f"{name}: NaN or infinite value")
    if low < 0:
        raise ValueError(f"{name}: negative value")
    if upper is not None and high > upper:
        raise ValueError(f"{name}: value above {upper}")


def validate_batch(batch: UsageBatch) -> None:
    """Raise ValueError if the batch carries anything a source must have filtered."""
    _check_samples("cpu_cores", batch.cpu_cores)
    _check_samples("memory_peak_bytes", batch.memory_peak_bytes)
    _check_samples("cpu_throttled_fraction", batch.cpu_throttled_fraction, upper=1.0)
    for name, interval in (("cpu_interval_s", batch.cpu_interval_s), ("memory_interval_s", batch.memory_interval_s)):
        if not (math.isfinite(interval) and interval > 0):
            raise ValueError(f"{name} must be positive and finite")
    if batch.memory_pod_index is not None:
        index = batch.memory_pod_index
        if index.shape != batch.memory_peak_bytes.values.shape:
            raise ValueError("memory_pod_index must have one entry per memory sample")
        if index.size and (int(index.min()) < 0 or int(index.max()) >= len(batch.memory_pods)):
            raise ValueError("memory_pod_index points outside memory_pods")
    if batch.summary is not None:
        if batch.summary.summary is not None:
            raise ValueError("a summary holds no summary of its own")
        validate_batch(batch.summary)
    for oom in batch.oom_kills:
        if not math.isfinite(oom.timestamp_s):
            raise ValueError("OOM kill with a non-finite timestamp")
        for amount in (oom.memory_limit_bytes, oom.memory_request_bytes):
            if amount is not None and amount < 0:
                raise ValueError("OOM kill with a negative memory amount")


def segments(batch: UsageBatch) -> list[tuple[UsageBatch, float]]:
    """The batch's parts in time order with the weight of each CPU sample: its summary first (a sample weighs
    the steps it stands for), then the batch itself at weight 1."""
    if batch.summary is None:
        return [(batch, 1.0)]
    return [(batch.summary, batch.summary.cpu_interval_s / batch.cpu_interval_s), (batch, 1.0)]


def upper_multiplier(confidence_days: float, multiplier: float = 1.0, exponent: float = 1.0) -> float:
    """VPA's upper-bound confidence factor (1 + multiplier/c)^exponent; infinite at c = 0."""
    if confidence_days <= 0:
        return math.inf
    return float((1.0 + multiplier / confidence_days) ** exponent)


def lower_multiplier(confidence_days: float, multiplier: float = 0.001, exponent: float = -2.0) -> float:
    """VPA's lower-bound confidence factor (1 + multiplier/c)^exponent; zero at c = 0."""
    if confidence_days <= 0:
        return 0.0
    return float((1.0 + multiplier / confidence_days) ** exponent)


def oom_bump(used_bytes: float, *, min_bump_bytes: float = 100 * MIB, ratio: float = 1.2) -> float:
    """Memory to ask for after an OOM: max(used + min bump, used x ratio)."""
    return max(used_bytes + min_bump_bytes, used_bytes * ratio)


def scale_or_none(value: float | None, factor: float) -> float | None:
    return None if value is None else value * factor


class _RestorableState(Protocol):
    def restore_from(self, data: dict[str, Any]) -> None: ...


P = TypeVar("P")
S = TypeVar("S", bound=_RestorableState)


class StrategyBase(Generic[P, S]):
    """What every strategy does the same way: hold its parameters, make and restore its per-container state,
    and report its parameters. Subclasses set ``name`` and ``state_type`` and add ``recommend``."""

    name: str
    state_type: Callable[[P], S]

    def __init__(self, params: P) -> None:
        self.params = params

    def new_state(self) -> S:
        return self.state_type(self.params)

    def restore(self, checkpoint: dict[str, Any]) -> S:
        state = self.new_state()
        state.restore_from(checkpoint)
        return state

    def parameters(self) -> dict[str, Any]:
        values: dict[str, Any] = asdict(self.params)  # type: ignore[call-overload]
        return values

    def history_plan(self) -> HistoryPlan:
        """Everything at full resolution unless the strategy says what it weighs less."""
        return HistoryPlan()

    def fleet_sums(self, states: Iterable[ContainerState], now_s: float) -> FleetSums | None:
        """None: prices nothing relative to the fleet (strategies that do override it)."""
        return None

    def fleet_scale(self, states: Iterable[ContainerState], now_s: float) -> FleetScale | None:
        """The fleet of ``states``: their ``fleet_sums``' means (None: no fleet, or no state with history)."""
        sums = self.fleet_sums(states, now_s)
        return None if sums is None else sums.scale()


def fleet_from_sizes(cpu_cores: Iterable[float], memory_bytes: Iterable[float]) -> FleetScale | None:
    """A ``FleetScale`` from per-container sizes: the mean of the finite ones of each resource (0 for a resource
    with none), through ``FleetSums`` as every fleet is. None when neither has any."""
    return FleetSums.of(cpu_cores, memory_bytes).scale()


def fleet_from_samples(containers: Iterable[tuple[FloatArray, FloatArray | None]]) -> FleetScale | None:
    """A ``FleetScale`` from raw samples, per container (CPU cores, memory bytes or None): the mean over
    containers of the p95 of their CPU samples and of the largest of their memory samples (non-finite ones
    skipped). None without any sample."""
    cpu: list[float] = []
    memory: list[float] = []
    for cores, memory_bytes in containers:
        c = cores[np.isfinite(cores)]
        if c.size:
            cpu.append(float(np.percentile(c, 95)))
        if memory_bytes is not None:
            m = memory_bytes[np.isfinite(memory_bytes)]
            if m.size:
                memory.append(float(m.max()))
    return fleet_from_sizes(cpu, memory)
