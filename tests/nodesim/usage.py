"""Per-container CPU and memory usage models on a simulated clock.

This module owns the ``UsageModel`` protocol and its implementations (constant, daily sinusoid with seeded
noise, spikes, step change, trace replay) plus ``parse_model``, the validating factory used for specs read
from pod annotations. Time ``t`` is always an argument (Unix seconds, float); nothing reads the wall clock.
Noise is a pure function of (seed, time bucket) through a splitmix64 hash, so sampling the same ``t`` twice
gives the same value and ``sample`` always equals the matching element of ``sample_many``. This is not a
kubelet component: a real kubelet measures usage through cAdvisor/CRI instead of modelling it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import MISSING, dataclass, fields
from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np

from tests.nodesim import quantity
from tests.nodesim.trace import FloatArray, IntArray, TraceSeries, load_trace_series

__all__ = [
    "MAX_CPU_CORES",
    "MAX_MEMORY_BYTES",
    "Constant",
    "Daily",
    "Spikes",
    "StepChange",
    "TraceReplay",
    "Usage",
    "UsageModel",
    "UsageSeries",
    "parse_model",
]

MAX_CPU_CORES = 4096.0
MAX_MEMORY_BYTES = 2**50
MAX_SECONDS = 10 * 366 * 86400.0
_DAY_S = 86400.0


@dataclass(frozen=True, slots=True, kw_only=True)
class Usage:
    """Instantaneous usage of one container: CPU in cores and memory working set in bytes."""

    cpu_cores: float
    memory_bytes: int

    def __post_init__(self) -> None:
        if not math.isfinite(self.cpu_cores) or self.cpu_cores < 0:
            raise ValueError(f"cpu_cores must be finite and >= 0, got {self.cpu_cores!r}")
        if self.memory_bytes < 0:
            raise ValueError(f"memory_bytes must be >= 0, got {self.memory_bytes!r}")


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class UsageSeries:
    """Usage sampled at many times: float64 cores and int64 bytes, same length as the time array."""

    cpu_cores: FloatArray
    memory_bytes: IntArray


@runtime_checkable
class UsageModel(Protocol):
    """A deterministic usage model: the same ``t`` always yields the same usage."""

    def sample(self, t: float) -> Usage: ...

    def sample_many(self, ts: FloatArray) -> UsageSeries: ...


def _as_times(ts: FloatArray | list[float]) -> FloatArray:
    arr = np.asarray(ts, dtype=np.float64)
    if arr.ndim != 1:
        raise ValueError("ts must be one-dimensional")
    if not np.all(np.isfinite(arr)):
        raise ValueError("ts must be finite")
    return arr


def _series(cpu: FloatArray, memory: FloatArray) -> UsageSeries:
    cpu_clean = np.clip(np.nan_to_num(cpu, nan=0.0, posinf=MAX_CPU_CORES), 0.0, MAX_CPU_CORES)
    mem_clean = np.clip(np.rint(np.nan_to_num(memory, nan=0.0)), 0, MAX_MEMORY_BYTES).astype(np.int64)
    return UsageSeries(cpu_cores=cpu_clean.astype(np.float64), memory_bytes=mem_clean)


class _VectorModel:
    """Mixin: ``sample`` is defined through ``sample_many`` so both always agree exactly."""

    __slots__ = ()

    def sample_many(self, ts: FloatArray) -> UsageSeries:
        raise NotImplementedError

    def sample(self, t: float) -> Usage:
        series = self.sample_many(np.array([t], dtype=np.float64))
        return Usage(cpu_cores=float(series.cpu_cores[0]), memory_bytes=int(series.memory_bytes[0]))


# ---------------------------------------------------------------------------------------------- hashing
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def _splitmix64(x: np.ndarray) -> np.ndarray:
    z = x + _GOLDEN  # uint64 array arithmetic wraps modulo 2**64
    z = (z ^ (z >> np.uint64(30))) * _MIX1
    z = (z ^ (z >> np.uint64(27))) * _MIX2
    return z ^ (z >> np.uint64(31))


def hash_uniform(seed: int, keys: np.ndarray) -> FloatArray:
    """Uniform numbers in [0, 1) that are a pure function of (seed, integer key)."""
    seed_mix = _splitmix64(np.array([seed % 2**64], dtype=np.uint64))
    h = _splitmix64(keys.astype(np.int64).view(np.uint64) ^ seed_mix)
    return (h >> np.uint64(11)).astype(np.float64) / float(2**53)


def _bucket_noise(seed: int, ts: FloatArray, bucket_s: float) -> FloatArray:
    """Noise in [-1, 1), constant within each ``bucket_s`` bucket of simulated time."""
    return 2.0 * hash_uniform(seed, np.floor(ts / bucket_s).astype(np.int64)) - 1.0


# ----------------------------------------------------------------------------------------------- models
@dataclass(frozen=True, slots=True, kw_only=True)
class Constant(_VectorModel):
    """Flat usage."""

    cpu_cores: float
    memory_bytes: int

    def sample_many(self, ts: FloatArray) -> UsageSeries:
        times = _as_times(ts)
        return _series(np.full(times.shape, self.cpu_cores), np.full(times.shape, float(self.memory_bytes)))


@dataclass(frozen=True, slots=True, kw_only=True)
class Daily(_VectorModel):
    """Daily cosine around a mean, peaking at ``peak_hour`` UTC, times (1 + noise * u), u in [-1, 1).

    Amplitudes are absolute (cores, bytes); noise is a relative fraction, redrawn every ``noise_bucket_s``.
    """

    cpu_cores: float
    memory_bytes: int
    cpu_amplitude_cores: float = 0.0
    memory_amplitude_bytes: int = 0
    peak_hour: float = 14.0
    cpu_noise: float = 0.0
    memory_noise: float = 0.0
    noise_bucket_s: float = 60.0
    seed: int = 0

    def sample_many(self, ts: FloatArray) -> UsageSeries:
        times = _as_times(ts)
        hours = np.mod(times, _DAY_S) / 3600.0
        wave = np.cos(2.0 * np.pi * (hours - self.peak_hour) / 24.0)
        cpu = self.cpu_cores + self.cpu_amplitude_cores * wave
        mem = self.memory_bytes + self.memory_amplitude_bytes * wave
        cpu = cpu * (1.0 + self.cpu_noise * _bucket_noise(self.seed, times, self.noise_bucket_s))
        mem = mem * (1.0 + self.memory_noise * _bucket_noise(self.seed ^ 0x5EED, times, self.noise_bucket_s))
        return _series(cpu, mem)


@dataclass(frozen=True, slots=True, kw_only=True)
class Spikes(_VectorModel):
    """Baseline plus spikes of ``spike_*`` height lasting ``duration_s`` once per ``period_s``.

    With ``probability`` 1 and ``random_start`` False the spikes are strictly periodic, starting at
    ``offset_s + k * period_s``. Otherwise each period k has a spike with the given probability, starting at
    a seeded random point of the period; both draws are pure functions of (seed, k).
    """

    cpu_cores: float
    memory_bytes: int
    spike_cpu_cores: float
    period_s: float
    duration_s: float
    spike_memory_bytes: int = 0
    offset_s: float = 0.0
    probability: float = 1.0
    random_start: bool = False
    seed: int = 0

    def __post_init__(self) -> None:
        if not 0 < self.duration_s <= self.period_s:
            raise ValueError("Spikes needs 0 < duration_s <= period_s")

    def active_mask(self, ts: FloatArray) -> np.ndarray:
        rel = _as_times(ts) - self.offset_s
        k = np.floor(rel / self.period_s).astype(np.int64)
        phase = rel - k * self.period_s
        start = np.zeros(phase.shape)
        if self.random_start:
            start = hash_uniform(self.seed ^ 0x57A27, k) * (self.period_s - self.duration_s)
        on = (phase >= start) & (phase < start + self.duration_s)
        if self.probability < 1.0:
            on &= hash_uniform(self.seed, k) < self.probability
        return on

    def sample_many(self, ts: FloatArray) -> UsageSeries:
        on = self.active_mask(ts).astype(np.float64)
        cpu = self.cpu_cores + self.spike_cpu_cores * on
        mem = self.memory_bytes + self.spike_memory_bytes * on
        return _series(cpu, mem)


@dataclass(frozen=True, slots=True, kw_only=True)
class StepChange(_VectorModel):
    """One level before ``change_at_s`` and another from ``change_at_s`` on."""

    cpu_cores_before: float
    memory_bytes_before: int
    cpu_cores_after: float
    memory_bytes_after: int
    change_at_s: float

    def sample_many(self, ts: FloatArray) -> UsageSeries:
        after = _as_times(ts) >= self.change_at_s
        cpu = np.where(after, self.cpu_cores_after, self.cpu_cores_before)
        mem = np.where(after, float(self.memory_bytes_after), float(self.memory_bytes_before))
        return _series(cpu.astype(np.float64), mem.astype(np.float64))


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class TraceReplay(_VectorModel):
    """Replays one trace series, looping it: simulated ``sim_start_s`` maps to the trace's first sample.

    Each trace sample holds until the next one (step function). Simulated times outside the trace span wrap
    around with period ``series.loop_span_s``. Values are multiplied by ``cpu_scale``/``memory_scale``.
    """

    series: TraceSeries
    sim_start_s: float
    cpu_scale: float = 1.0
    memory_scale: float = 1.0

    @classmethod
    def load(
        cls,
        path: Path,
        series_id: str,
        *,
        sim_start_s: float | None = None,
        cpu_scale: float = 1.0,
        memory_scale: float = 1.0,
    ) -> TraceReplay:
        """Load ``series_id`` from a tidy gzip CSV; by default simulated time equals trace time."""
        series = load_trace_series(path, series_id)
        start = series.first_timestamp_s if sim_start_s is None else sim_start_s
        return cls(series=series, sim_start_s=start, cpu_scale=cpu_scale, memory_scale=memory_scale)

    def sample_many(self, ts: FloatArray) -> UsageSeries:
        rel = np.mod(_as_times(ts) - self.sim_start_s, self.series.loop_span_s)
        idx = np.clip(np.searchsorted(self.series.offsets_s, rel, side="right") - 1, 0, None)
        cpu = self.series.cpu_cores[idx] * self.cpu_scale
        mem = self.series.memory_bytes[idx].astype(np.float64) * self.memory_scale
        return _series(cpu, mem)


# ------------------------------------------------------------------------------------------ parse_model
_Coerce = Callable[[str, object], object]
_ID_RE = re.compile(r"[A-Za-z0-9_.:-]{1,128}")
_FILE_RE = re.compile(r"[A-Za-z0-9_.-]{1,128}\.csv\.gz")


def _number(key: str, value: object, low: float, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"usage spec: {key} must be a number, got {type(value).__name__}")
    as_float = float(value)
    if not math.isfinite(as_float) or not low <= as_float <= high:
        raise ValueError(f"usage spec: {key} must be a finite number in [{low:g}, {high:g}], got {value!r}")
    return as_float


def _cores(key: str, value: object) -> float:
    if isinstance(value, str):
        return _number(key, quantity.parse_cpu_millicores(value) / 1000.0, 0.0, MAX_CPU_CORES)
    return _number(key, value, 0.0, MAX_CPU_CORES)


def _bytes(key: str, value: object) -> int:
    if isinstance(value, str):
        return int(_number(key, quantity.parse_memory_bytes(value), 0.0, MAX_MEMORY_BYTES))
    return round(_number(key, value, 0.0, MAX_MEMORY_BYTES))


def _ranged(low: float, high: float) -> _Coerce:
    return lambda key, value: _number(key, value, low, high)


def _seed(key: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**63:
        raise ValueError(f"usage spec: {key} must be an integer in [0, 2**63), got {value!r}")
    return value


def _flag(key: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"usage spec: {key} must be true or false, got {value!r}")
    return value


def _text(pattern: re.Pattern[str]) -> _Coerce:
    def coerce(key: str, value: object) -> str:
        if not isinstance(value, str) or pattern.fullmatch(value) is None:
            raise ValueError(f"usage spec: {key} must match {pattern.pattern}, got {value!r}")
        return value

    return coerce


_SECONDS = _ranged(0.0, MAX_SECONDS)
_FIELDS: dict[str, _Coerce] = {
    "cpu_cores": _cores,
    "memory_bytes": _bytes,
    "cpu_amplitude_cores": _cores,
    "memory_amplitude_bytes": _bytes,
    "peak_hour": _ranged(0.0, 24.0),
    "cpu_noise": _ranged(0.0, 1.0),
    "memory_noise": _ranged(0.0, 1.0),
    "noise_bucket_s": _ranged(1.0, _DAY_S),
    "seed": _seed,
    "spike_cpu_cores": _cores,
    "spike_memory_bytes": _bytes,
    "period_s": _ranged(1.0, MAX_SECONDS),
    "duration_s": _ranged(1.0, MAX_SECONDS),
    "offset_s": _SECONDS,
    "probability": _ranged(0.0, 1.0),
    "random_start": _flag,
    "cpu_cores_before": _cores,
    "memory_bytes_before": _bytes,
    "cpu_cores_after": _cores,
    "memory_bytes_after": _bytes,
    "change_at_s": _ranged(0.0, 1e11),
    "sim_start_s": _ranged(0.0, 1e11),
    "cpu_scale": _ranged(0.0, 1000.0),
    "memory_scale": _ranged(0.0, 1000.0),
    "file": _text(_FILE_RE),
    "series_id": _text(_ID_RE),
}
_ALIASES = {"cpu_amplitude": "cpu_amplitude_cores", "memory_amplitude": "memory_amplitude_bytes"}
_KINDS: dict[str, type] = {
    "constant": Constant,
    "daily": Daily,
    "spikes": Spikes,
    "step": StepChange,
    "trace": TraceReplay,
}
_TRACE_KEYS = frozenset({"file", "series_id", "sim_start_s", "cpu_scale", "memory_scale"})
_MAX_KEYS = 24


def _allowed_keys(kind: str) -> frozenset[str]:
    if kind == "trace":
        return _TRACE_KEYS
    return frozenset(f.name for f in fields(_KINDS[kind]))


def _required_keys(kind: str) -> frozenset[str]:
    if kind == "trace":
        return frozenset({"file", "series_id"})
    kind_fields = fields(_KINDS[kind])
    return frozenset(f.name for f in kind_fields if f.default is MISSING and f.default_factory is MISSING)


def _normalise(spec: Mapping[str, object]) -> tuple[str, dict[str, object]]:
    if not isinstance(spec, Mapping):
        raise ValueError(f"usage spec must be a mapping, got {type(spec).__name__}")
    if len(spec) > _MAX_KEYS:
        raise ValueError(f"usage spec has too many keys ({len(spec)} > {_MAX_KEYS})")
    kind = spec.get("kind")
    if not isinstance(kind, str) or kind not in _KINDS:
        raise ValueError(f"usage spec: kind must be one of {sorted(_KINDS)}, got {kind!r}")
    values: dict[str, object] = {}
    for raw_key, raw_value in spec.items():
        if not isinstance(raw_key, str):
            raise ValueError(f"usage spec: keys must be strings, got {raw_key!r}")
        if raw_key == "kind":
            continue
        key = _ALIASES.get(raw_key, raw_key)
        if key not in _allowed_keys(kind) or key in values:
            raise ValueError(f"usage spec: unknown or duplicate key {raw_key[:64]!r} for kind {kind!r}")
        values[key] = _FIELDS[key](raw_key, raw_value)
    missing = _required_keys(kind) - values.keys()
    if missing:
        raise ValueError(f"usage spec: kind {kind!r} needs {sorted(missing)}")
    return kind, values


def parse_model(spec: Mapping[str, object], *, trace_dir: Path | None = None) -> UsageModel:
    """Build a usage model from a small, untrusted dict such as a pod annotation's JSON.

    Unknown keys, wrong types, NaN/inf, negative or absurdly large values raise ValueError. CPU fields
    accept cores or a CPU quantity string ("500m"); memory fields accept bytes or a quantity ("200Mi").
    ``kind: trace`` reads only a plain file name inside ``trace_dir`` and is refused without one.
    """
    kind, values = _normalise(spec)
    if kind != "trace":
        model: UsageModel = _KINDS[kind](**values)
        return model
    if trace_dir is None:
        raise ValueError("usage spec: kind 'trace' is not enabled (no trace directory configured)")
    path = trace_dir / str(values.pop("file"))
    if not path.is_file():
        raise ValueError(f"usage spec: trace file {path.name!r} not found")
    series_id = str(values.pop("series_id"))
    scales = {k: float(v) for k, v in values.items() if isinstance(v, float)}
    return TraceReplay.load(path, series_id, **scales)
