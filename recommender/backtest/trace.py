"""Streaming reader of tidy usage-trace CSVs (plain or gzip) into one ``Series`` per series id.

Owns the column mapping (``TraceColumns``) and the unit conversion. A trace has one row per series per sample,
grouped by series (rows of one series contiguous; time order within a series is restored here): a series id
column, a time column in seconds (x ``time_scale``), a CPU column and optionally a memory column and the
provisioned CPU/memory (the machine or VM size). CPU becomes cores and memory bytes: a value is multiplied by
its scale factor and, for a normalized column (name ending in ``_frac``, or ``--cpu-normalized``), also by the
provisioned column of the same row when the file has one. Memory samples that are exactly 0 or missing are
treated as missing (NaN): the Bitbrains trace reports 0 when the hypervisor had no reading (7.7 % of
samples), and a zero would otherwise feed a strategy a false trough. Rows with a non-finite or negative value
are dropped and counted. The file is read line by line; only one series is held at a time.
"""

from __future__ import annotations

import csv
import gzip
import io
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from recommender.model.types import FloatArray

CPU_CANDIDATES = ("cpu_cores", "cpu_frac", "cpu")
MEMORY_CANDIDATES = ("memory_bytes", "mem_frac", "memory_frac", "mem_bytes", "memory")
CPU_PROVISIONED_CANDIDATES = ("cpu_provisioned_cores", "cpu_capacity_cores", "cpu_provisioned")
MEMORY_PROVISIONED_CANDIDATES = ("memory_provisioned_bytes", "memory_capacity_bytes", "memory_provisioned")


class TraceError(ValueError):
    """The trace cannot be read with the given column mapping (missing file, column, bad value layout)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TraceColumns:
    """Which CSV columns hold what, and how to turn them into cores, bytes and seconds. None = auto-detect."""

    series: str = "series_id"
    time: str = "timestamp_s"
    cpu: str | None = None
    """CPU usage column; auto: the first of cpu_cores, cpu_frac, cpu."""
    memory: str | None = None
    """Memory usage column; auto: the first of memory_bytes, mem_frac, ...; "none" reads a CPU-only trace."""
    cpu_provisioned: str | None = None
    """Provisioned CPU (machine size, cores); auto: cpu_provisioned_cores if present; "none" ignores it."""
    memory_provisioned: str | None = None
    time_scale: float = 1.0
    """Seconds per time unit (0.001 for milliseconds)."""
    cpu_scale: float | None = None
    """Cores per CPU unit (0.001 for millicores); None is 1. Required, as the machine size in cores, for a
    normalized column when the trace has no provisioned column: a fraction read as cores would mislead."""
    memory_scale: float | None = None
    """Bytes per memory unit (1024 for KiB); None is 1. Required, as the machine size in bytes, for a
    normalized column without a provisioned column."""
    cpu_normalized: bool | None = None
    """Values are fractions of the provisioned amount; auto: the column name ends in ``_frac``."""
    memory_normalized: bool | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ResolvedColumns:
    """Column indices after matching ``TraceColumns`` against a header."""

    series: int
    time: int
    cpu: int
    memory: int | None
    cpu_provisioned: int | None
    memory_provisioned: int | None
    names: dict[str, str | None] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class Series:
    """One series, time-sorted: usage and (optionally) provisioned amounts per sample."""

    series_id: str
    timestamps_s: FloatArray
    cpu_cores: FloatArray
    memory_bytes: FloatArray | None
    """NaN marks a missing sample (a zero in the trace); None for a CPU-only trace."""
    cpu_provisioned_cores: FloatArray | None = None
    memory_provisioned_bytes: FloatArray | None = None

    def __len__(self) -> int:
        return int(self.timestamps_s.size)


def _pick(header: list[str], wanted: str | None, candidates: tuple[str, ...], what: str,
          required: bool) -> int | None:
    if wanted is not None and wanted.lower() == "none":
        if required:
            raise TraceError(f"the {what} column cannot be 'none'")
        return None
    if wanted is not None:
        if wanted not in header:
            raise TraceError(f"{what} column {wanted!r} not in the header ({', '.join(header)})")
        return header.index(wanted)
    for name in candidates:
        if name in header:
            return header.index(name)
    if required:
        raise TraceError(f"no {what} column found (tried {', '.join(candidates)}); name it with a flag")
    return None


def resolve(header: list[str], cols: TraceColumns) -> ResolvedColumns:
    """Match the mapping against a header; raise ``TraceError`` naming the missing column."""
    series = _pick(header, cols.series, (), "series", True)
    time = _pick(header, cols.time, (), "time", True)
    cpu = _pick(header, cols.cpu, CPU_CANDIDATES, "CPU", True)
    memory = _pick(header, cols.memory, MEMORY_CANDIDATES, "memory", False)
    cpu_prov = _pick(header, cols.cpu_provisioned, CPU_PROVISIONED_CANDIDATES, "provisioned CPU", False)
    mem_prov = _pick(header, cols.memory_provisioned, MEMORY_PROVISIONED_CANDIDATES, "provisioned memory", False)
    assert series is not None and time is not None and cpu is not None
    names = {k: (None if i is None else header[i]) for k, i in (("series", series), ("time", time), ("cpu", cpu),
             ("memory", memory), ("cpu_provisioned", cpu_prov), ("memory_provisioned", mem_prov))}
    for what, flag in (("cpu", "--cpu-scale CORES"), ("memory", "--memory-scale BYTES")):
        scale = cols.cpu_scale if what == "cpu" else cols.memory_scale
        if names[what] is not None and _normalized(cols, names, what) and names[f"{what}_provisioned"] is None \
                and scale is None:
            raise TraceError(f"the {what} column {names[what]!r} holds fractions of a machine and the trace has no "
                             f"provisioned {what} column: give {flag}, the size of the machine the fractions "
                             "are of (for example --cpu-scale 32 --memory-scale 68719476736 for 32 cores and "
                             "64 GiB); read as they are, they would be scored as tiny containers")
    return ResolvedColumns(series=series, time=time, cpu=cpu, memory=memory, cpu_provisioned=cpu_prov,
                           memory_provisioned=mem_prov, names=names)


def _normalized(cols: TraceColumns, names: dict[str, str | None], what: str) -> bool:
    """Whether the ``what`` ("cpu" or "memory") column holds fractions: the flag, else a ``_frac`` name."""
    flag = cols.cpu_normalized if what == "cpu" else cols.memory_normalized
    return flag if flag is not None else str(names[what]).endswith("_frac")


def _open_text(path: Path) -> io.TextIOBase:
    if not path.is_file():
        raise TraceError(f"trace file not found: {path}")
    with path.open("rb") as raw:
        magic = raw.read(2)
    if magic == b"\x1f\x8b":
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8", newline="")
    return io.TextIOWrapper(path.open("rb"), encoding="utf-8", newline="")


def _float(text: str) -> float:
    try:
        return float(text) if text else math.nan
    except ValueError:
        return math.nan


class _Builder:
    """Rows of one series, converted to a ``Series`` when the series ends."""

    def __init__(self, series_id: str, cols: ResolvedColumns, mapping: TraceColumns) -> None:
        self.series_id, self.cols, self.mapping = series_id, cols, mapping
        self.rows: list[tuple[float, float, float, float, float]] = []
        self.dropped = 0

    def add(self, row: list[str]) -> None:
        c = self.cols
        try:
            vals = (_float(row[c.time]), _float(row[c.cpu]),
                    _float(row[c.memory]) if c.memory is not None else 0.0,
                    _float(row[c.cpu_provisioned]) if c.cpu_provisioned is not None else 0.0,
                    _float(row[c.memory_provisioned]) if c.memory_provisioned is not None else 0.0)
        except IndexError:
            self.dropped += 1
            return
        if not (math.isfinite(vals[0]) and math.isfinite(vals[1]) and vals[1] >= 0):
            self.dropped += 1
            return
        self.rows.append(vals)

    def build(self) -> Series | None:
        if not self.rows:
            return None
        arr = np.asarray(self.rows, dtype=np.float64)
        arr = arr[np.argsort(arr[:, 0], kind="stable")]
        _, first = np.unique(arr[:, 0], return_index=True)  # a repeated timestamp keeps its first row
        arr = arr[first]
        m, c = self.mapping, self.cols
        names = c.names
        cpu_prov = arr[:, 3] if c.cpu_provisioned is not None else None
        mem_prov = arr[:, 4] if c.memory_provisioned is not None else None
        cpu_norm, mem_norm = _normalized(m, names, "cpu"), _normalized(m, names, "memory")
        cpu_scale = 1.0 if m.cpu_scale is None else m.cpu_scale
        cpu = arr[:, 1] * cpu_scale * (cpu_prov if cpu_norm and cpu_prov is not None else 1.0)
        memory = None
        if c.memory is not None:
            memory_scale = 1.0 if m.memory_scale is None else m.memory_scale
            memory = arr[:, 2] * memory_scale * (mem_prov if mem_norm and mem_prov is not None else 1.0)
            memory = np.where(np.isfinite(memory) & (memory > 0), memory, np.nan)
        return Series(series_id=self.series_id, timestamps_s=arr[:, 0] * m.time_scale, cpu_cores=cpu,
                      memory_bytes=memory, cpu_provisioned_cores=_clean_prov(cpu_prov),
                      memory_provisioned_bytes=_clean_prov(mem_prov))


def _clean_prov(values: FloatArray | None) -> FloatArray | None:
    if values is None:
        return None
    good = np.isfinite(values) & (values > 0)
    return None if not np.any(good) else np.where(good, values, np.nan)


@dataclass(slots=True)
class ReadStats:
    """What the reader saw: rows, dropped rows, series, the resolved column names."""

    rows: int = 0
    dropped_rows: int = 0
    series: int = 0
    unusable_series: int = 0
    """Series read whose every row was dropped (no finite, non-negative CPU value): never replayed."""
    columns: dict[str, str | None] = field(default_factory=dict)


def read_trace(path: Path, cols: TraceColumns | None = None, *, stats: ReadStats | None = None,
               only: set[str] | None = None) -> Iterator[Series]:
    """Yield the series of a tidy trace one at a time (``only``: just these ids). Raises ``TraceError``."""
    mapping = cols or TraceColumns()
    stats = stats if stats is not None else ReadStats()
    with _open_text(path) as text:
        reader = csv.reader(text)
        header = next(reader, None)
        if header is None:
            raise TraceError(f"empty trace file: {path}")
        resolved = resolve([h.strip() for h in header], mapping)
        stats.columns = resolved.names
        seen: set[str] = set()
        builder: _Builder | None = None
        for row in reader:
            if not row:
                continue
            stats.rows += 1
            sid = row[resolved.series] if len(row) > resolved.series else ""
            if builder is None or sid != builder.series_id:
                if builder is not None:
                    yield from _finish(builder, stats)
                if sid in seen:
                    raise TraceError(f"rows of series {sid!r} are not contiguous; sort the file by series")
                seen.add(sid)
                builder = _Builder(sid, resolved, mapping) if only is None or sid in only else _Skip(sid)
            builder.add(row)
        if builder is not None:
            yield from _finish(builder, stats)


class _Skip(_Builder):
    def __init__(self, series_id: str) -> None:  # a builder that keeps nothing
        self.series_id, self.rows, self.dropped = series_id, [], 0

    def add(self, row: list[str]) -> None:
        return None


def _finish(builder: _Builder, stats: ReadStats) -> Iterator[Series]:
    stats.dropped_rows += builder.dropped
    if isinstance(builder, _Skip):
        return
    series = builder.build()
    if series is None:
        stats.unusable_series += 1
        return
    stats.series += 1
    yield series
