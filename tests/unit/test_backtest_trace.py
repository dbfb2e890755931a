"""Unit tests of the backtest's trace reader: column variants, normalized values, CPU-only, irregular times."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pytest

from recommender.backtest.trace import ReadStats, TraceColumns, TraceError, read_trace

GIB = 1024**3


def write(path: Path, text: str, *, gz: bool = False) -> Path:
    data = text.strip().encode() + b"\n"
    if gz:
        path.write_bytes(gzip.compress(data))
    else:
        path.write_bytes(data)
    return path


def test_absolute_columns_gzip_and_zero_memory_is_missing(tmp_path: Path) -> None:
    f = write(tmp_path / "t.csv.gz", """
series_id,timestamp_s,cpu_cores,memory_bytes,cpu_provisioned_cores,memory_provisioned_bytes
a,600,0.5,0,2,8589934592
a,300,0.25,1073741824,2,8589934592
b,300,1.0,2147483648,4,8589934592
""", gz=True)
    stats = ReadStats()
    got = list(read_trace(f, stats=stats))
    assert [s.series_id for s in got] == ["a", "b"]
    a = got[0]
    np.testing.assert_array_equal(a.timestamps_s, [300.0, 600.0])  # time order restored
    np.testing.assert_array_equal(a.cpu_cores, [0.25, 0.5])
    assert a.memory_bytes is not None and a.memory_bytes[0] == GIB and np.isnan(a.memory_bytes[1])  # 0 -> missing
    assert a.cpu_provisioned_cores is not None and a.cpu_provisioned_cores[0] == 2.0
    assert stats.rows == 3 and stats.series == 2 and stats.columns["cpu"] == "cpu_cores"


def test_normalized_columns_use_the_provisioned_amount_or_the_scale(tmp_path: Path) -> None:
    with_prov = write(tmp_path / "n.csv", """
series_id,timestamp_s,cpu_frac,mem_frac,cpu_provisioned_cores,memory_provisioned_bytes
x,0,0.25,0.5,4,1000
""")
    s = next(read_trace(with_prov))
    assert s.cpu_cores[0] == 1.0  # 0.25 x 4 cores
    assert s.memory_bytes is not None and s.memory_bytes[0] == 500.0  # 0.5 x 1000 bytes
    bare = write(tmp_path / "m.csv", "series_id,timestamp_s,cpu_frac,mem_frac\nx,0,0.25,0.5\n")
    s = next(read_trace(bare, TraceColumns(cpu_scale=8.0, memory_scale=2.0 * GIB)))
    assert s.cpu_cores[0] == 2.0 and s.memory_bytes is not None and s.memory_bytes[0] == GIB  # x8, x2 GiB


def test_cpu_only_and_renamed_columns_with_scales(tmp_path: Path) -> None:
    f = write(tmp_path / "c.csv", "vm,t_ms,mcpu\nv1,1000,250\nv1,301000,500\n")
    cols = TraceColumns(series="vm", time="t_ms", cpu="mcpu", time_scale=0.001, cpu_scale=0.001)
    s = next(read_trace(f, cols))
    assert s.memory_bytes is None and s.cpu_provisioned_cores is None
    np.testing.assert_allclose(s.timestamps_s, [1.0, 301.0])
    np.testing.assert_allclose(s.cpu_cores, [0.25, 0.5])


def test_irregular_times_duplicates_and_bad_rows(tmp_path: Path) -> None:
    f = write(tmp_path / "i.csv", """
series_id,timestamp_s,cpu_cores
s,0,0.1
s,300,0.2
s,300,0.9
s,1500,oops
s,1800,0.3
""")
    stats = ReadStats()
    s = next(read_trace(f, stats=stats))
    np.testing.assert_array_equal(s.timestamps_s, [0.0, 300.0, 1800.0])  # duplicate keeps the first row
    np.testing.assert_array_equal(s.cpu_cores, [0.1, 0.2, 0.3])
    assert stats.dropped_rows == 1


def test_errors_name_the_problem(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="not found"):
        list(read_trace(tmp_path / "missing.csv"))
    f = write(tmp_path / "e.csv", "series_id,timestamp_s,cpu_cores\na,0,1\nb,0,1\na,300,1\n")
    with pytest.raises(TraceError, match="not contiguous"):
        list(read_trace(f))
    with pytest.raises(TraceError, match="'nope' not in the header"):
        list(read_trace(f, TraceColumns(cpu="nope")))


def test_a_normalized_trace_without_sizes_is_refused_before_anything_is_read(tmp_path: Path) -> None:
    bare = write(tmp_path / "m.csv", "series_id,timestamp_s,cpu_frac,mem_frac\nx,0,0.25,0.5\n")
    with pytest.raises(TraceError, match=r"cpu column 'cpu_frac' holds fractions .* give --cpu-scale CORES"):
        next(read_trace(bare))
    with pytest.raises(TraceError, match=r"memory column 'mem_frac' .* give --memory-scale BYTES"):
        next(read_trace(bare, TraceColumns(cpu_scale=32.0)))
    # An explicit "not normalized" reads the fractions as they are, by the user's choice.
    s = next(read_trace(bare, TraceColumns(cpu_normalized=False, memory_normalized=False)))
    assert s.cpu_cores[0] == 0.25


def test_a_series_with_no_usable_row_is_counted(tmp_path: Path) -> None:
    f = write(tmp_path / "u.csv", "series_id,timestamp_s,cpu_cores\na,0,0.5\nb,0,nan\nb,300,-1\nc,0,1\n")
    stats = ReadStats()
    assert [s.series_id for s in read_trace(f, stats=stats)] == ["a", "c"]
    assert (stats.series, stats.unusable_series, stats.dropped_rows) == (2, 1, 2)
