"""Streaming reader for the tidy usage-trace CSVs in ``/work/shared/traces`` (gzip, sorted by series, time).

This module owns loading one series into arrays (``load_trace_series``) and listing series ids
(``list_series_ids``). It reads line by line and compares only the line prefix for rows of other series,
and stops as soon as the requested series ends, so a series near the start of the 29 MB file loads in
milliseconds. Zero memory samples (VM reported nothing) are imputed with the previous non-zero value
(leading zeros with the first non-zero one). Nothing here exists in kubelet.
"""

from __future__ import annotations

import csv
import gzip
import io
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

__all__ = ["FloatArray", "IntArray", "TraceSeries", "list_series_ids", "load_trace_series"]

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]
_REQUIRED_COLUMNS = ("series_id", "timestamp_s", "cpu_cores", "memory_bytes")


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class TraceSeries:
    """One series: offsets from its first timestamp, CPU cores, memory bytes (zeros imputed)."""

    series_id: str
    first_timestamp_s: float
    offsets_s: FloatArray
    cpu_cores: FloatArray
    memory_bytes: IntArray
    loop_span_s: float

    @property
    def sample_count(self) -> int:
        return int(self.offsets_s.shape[0])


def _open_lines(path: Path) -> Iterator[str]:
    with gzip.open(path, "rt", encoding="utf-8", newline="") as handle:
        yield from handle


def _column_indexes(header: str) -> dict[str, int]:
    names = next(csv.reader([header]))
    missing = [c for c in _REQUIRED_COLUMNS if c not in names]
    if missing:
        raise ValueError(f"trace header lacks columns {missing}: {header.strip()!r}")
    return {c: names.index(c) for c in _REQUIRED_COLUMNS}


def _split(line: str) -> list[str]:
    if '"' in line:
        return next(csv.reader([line]))
    return line.rstrip("\r\n").split(",")


def _read_rows(path: Path, series_id: str) -> list[list[str]]:
    lines = _open_lines(path)
    header = next(lines, None)
    if header is None:
        raise ValueError(f"trace file {path} is empty")
    cols = _column_indexes(header)
    prefix_plain, prefix_quoted = series_id + ",", f'"{series_id}",'
    rows: list[list[str]] = []
    for line in lines:
        if line.startswith(prefix_plain) or line.startswith(prefix_quoted):
            fields = _split(line)
            rows.append([fields[cols[c]] for c in _REQUIRED_COLUMNS])
        elif rows:
            break  # sorted by series: the requested series has ended
    getattr(lines, "close", lambda: None)()
    return rows


def _impute_zero_memory(memory: IntArray) -> IntArray:
    nonzero = memory > 0
    if not nonzero.any():
        return memory
    idx = np.where(nonzero, np.arange(memory.shape[0]), 0)
    first = int(np.argmax(nonzero))
    idx[:first] = first
    filled: IntArray = memory[np.maximum.accumulate(idx)]
    return filled


def _loop_span(offsets: FloatArray) -> float:
    if offsets.shape[0] < 2:
        return max(float(offsets[-1]), 1.0) if offsets.shape[0] else 1.0
    step = float(np.median(np.diff(offsets)))
    return float(offsets[-1]) + step


def load_trace_series(path: Path, series_id: str) -> TraceSeries:
    """Load one series; raise ValueError if it is absent, malformed, or its timestamps do not increase."""
    rows = _read_rows(Path(path), series_id)
    if not rows:
        raise ValueError(f"series {series_id!r} not found in {path}")
    try:
        data: Any = np.array([[float(r[1]), float(r[2]), float(r[3])] for r in rows], dtype=np.float64)
    except ValueError as exc:
        raise ValueError(f"series {series_id!r} in {path} has a non-numeric value: {exc}") from None
    if not np.all(np.isfinite(data)) or np.any(data[:, 1:] < 0):
        raise ValueError(f"series {series_id!r} in {path} has negative or non-finite values")
    times: FloatArray = data[:, 0]
    if np.any(np.diff(times) <= 0):
        raise ValueError(f"series {series_id!r} in {path}: timestamps must strictly increase")
    offsets: FloatArray = times - times[0]
    return TraceSeries(
        series_id=series_id,
        first_timestamp_s=float(times[0]),
        offsets_s=offsets,
        cpu_cores=data[:, 1].copy(),
        memory_bytes=_impute_zero_memory(np.rint(data[:, 2]).astype(np.int64)),
        loop_span_s=_loop_span(offsets),
    )


def list_series_ids(path: Path) -> list[str]:
    """Series ids in file order; reads only the first field of each line (about 1 s for 29 MB)."""
    ids: list[str] = []
    last = None
    lines = _open_lines(Path(path))
    _column_indexes(next(lines, ""))
    for line in lines:
        head = line[: line.find(",")]
        if head != last:
            last = head
            ids.append(next(csv.reader(io.StringIO(head)))[0] if head.startswith('"') else head)
    return ids
