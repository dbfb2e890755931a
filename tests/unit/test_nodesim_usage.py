"""Unit tests for tests.nodesim.usage and tests.nodesim.trace: models, determinism, parse_model, traces."""

from __future__ import annotations

import gzip
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.nodesim.trace import list_series_ids, load_trace_series
from tests.nodesim.usage import (
    Constant,
    Daily,
    Spikes,
    StepChange,
    TraceReplay,
    Usage,
    UsageModel,
    parse_model,
)

REPO_ROOT = Path(__file__).resolve().parents[2]
BITBRAINS = REPO_ROOT / "tests" / "data" / "traces" / "bitbrains_rnd_2013-08_demo.csv.gz"
DAY = 86400.0


def test_constant() -> None:
    model = Constant(cpu_cores=0.25, memory_bytes=123)
    assert model.sample(0.0) == Usage(cpu_cores=0.25, memory_bytes=123)
    series = model.sample_many(np.array([1.0, 2.0, 3.0]))
    assert series.cpu_cores.tolist() == [0.25] * 3
    assert series.memory_bytes.tolist() == [123] * 3


def test_usage_rejects_negative_and_nan() -> None:
    with pytest.raises(ValueError):
        Usage(cpu_cores=-0.1, memory_bytes=0)
    with pytest.raises(ValueError):
        Usage(cpu_cores=math.nan, memory_bytes=0)
    with pytest.raises(ValueError):
        Usage(cpu_cores=0.0, memory_bytes=-1)


def test_daily_peak_and_trough_without_noise() -> None:
    model = Daily(cpu_cores=1.0, cpu_amplitude_cores=0.5, memory_bytes=1000, memory_amplitude_bytes=200,
                  peak_hour=14.0)
    # 14:00 UTC: cos(0) = 1 -> 1.0 + 0.5 = 1.5 cores, 1000 + 200 = 1200 bytes
    assert model.sample(14 * 3600.0) == Usage(cpu_cores=1.5, memory_bytes=1200)
    # 02:00 UTC the next day: cos(pi) = -1 -> 0.5 cores, 800 bytes
    peak_next = model.sample(DAY + 2 * 3600.0)
    assert peak_next.cpu_cores == pytest.approx(0.5)
    assert peak_next.memory_bytes == 800
    # 20:00 UTC: cos(pi/2) = 0 -> the mean
    assert model.sample(20 * 3600.0).cpu_cores == pytest.approx(1.0)


def test_daily_noise_is_deterministic_and_bounded() -> None:
    model = Daily(cpu_cores=1.0, memory_bytes=10**6, cpu_noise=0.2, seed=7, noise_bucket_s=60.0)
    ts = np.arange(0.0, DAY, 17.0)
    first = model.sample_many(ts).cpu_cores
    second = model.sample_many(ts).cpu_cores
    assert np.array_equal(first, second)
    assert first.min() >= 0.8 and first.max() <= 1.2  # 1.0 * (1 +/- 0.2)
    assert model.sample(1234.5) == model.sample(1234.5)
    # Constant within a 60 s bucket, and the scalar path agrees with the vector path.
    assert model.sample(120.0) == model.sample(179.9)
    assert model.sample(float(ts[100])).cpu_cores == first[100]
    other_seed = Daily(cpu_cores=1.0, memory_bytes=10**6, cpu_noise=0.2, seed=8).sample_many(ts).cpu_cores
    assert not np.array_equal(first, other_seed)


@given(st.floats(min_value=0.0, max_value=4e9, allow_nan=False), st.integers(min_value=0, max_value=2**62))
def test_daily_same_t_same_value(t: float, seed: int) -> None:
    model = Daily(cpu_cores=0.5, cpu_amplitude_cores=0.3, memory_bytes=2 * 10**8, cpu_noise=0.5,
                  memory_noise=0.1, seed=seed)
    a, b = model.sample(t), model.sample(t)
    assert a == b
    assert a.cpu_cores >= 0 and a.memory_bytes >= 0


def test_spikes_periodic() -> None:
    model = Spikes(cpu_cores=0.1, memory_bytes=100, spike_cpu_cores=2.0, spike_memory_bytes=50,
                   period_s=600.0, duration_s=60.0, offset_s=30.0)
    # spike windows: [30, 90), [630, 690), ...
    assert model.sample(29.0).cpu_cores == pytest.approx(0.1)
    assert model.sample(30.0) == Usage(cpu_cores=2.1, memory_bytes=150)  # 0.1 + 2.0, 100 + 50
    assert model.sample(89.9).cpu_cores == pytest.approx(2.1)
    assert model.sample(90.0).cpu_cores == pytest.approx(0.1)
    assert model.sample(650.0).cpu_cores == pytest.approx(2.1)


def test_spikes_random_fraction_and_determinism() -> None:
    model = Spikes(cpu_cores=0.0, memory_bytes=0, spike_cpu_cores=1.0, period_s=100.0, duration_s=10.0,
                   probability=0.3, random_start=True, seed=42)
    ts = np.arange(0.0, 100.0 * 5000, 1.0)
    on = model.sample_many(ts).cpu_cores > 0
    # about 30 % of 5000 periods spike, each 10 s of 100 s -> ~3 % of the time
    assert 0.025 < on.mean() < 0.035
    assert np.array_equal(on, model.sample_many(ts).cpu_cores > 0)
    with pytest.raises(ValueError):
        Spikes(cpu_cores=0.0, memory_bytes=0, spike_cpu_cores=1.0, period_s=10.0, duration_s=20.0)


def test_step_change() -> None:
    model = StepChange(cpu_cores_before=0.2, memory_bytes_before=10, cpu_cores_after=1.0,
                       memory_bytes_after=20, change_at_s=1000.0)
    assert model.sample(999.9) == Usage(cpu_cores=0.2, memory_bytes=10)
    assert model.sample(1000.0) == Usage(cpu_cores=1.0, memory_bytes=20)


def test_models_satisfy_protocol() -> None:
    model: UsageModel = Constant(cpu_cores=0.0, memory_bytes=0)
    assert isinstance(model, UsageModel)


def _write_trace(path: Path, rows: list[str]) -> None:
    header = "series_id,timestamp_s,cpu_cores,memory_bytes,cpu_provisioned_cores,memory_provisioned_bytes\n"
    with gzip.open(path, "wt", encoding="utf-8") as handle:
        handle.write(header + "".join(r + "\n" for r in rows))


def test_trace_replay_loops_imputes_and_scales(tmp_path: Path) -> None:
    path = tmp_path / "t.csv.gz"
    _write_trace(path, [
        "a,1000,0.1,0,1,1",
        "s,1000,1.0,0,2,9",  # leading zero memory -> first non-zero (300)
        "s,1300,2.0,300,2,9",
        "s,1600,3.0,0,2,9",  # zero -> previous non-zero (300)
        "s,1900,4.0,500,2,9",
        "z,1000,9.0,9,1,1",
    ])
    assert list_series_ids(path) == ["a", "s", "z"]
    series = load_trace_series(path, "s")
    assert series.memory_bytes.tolist() == [300, 300, 300, 500]
    assert series.loop_span_s == 1200.0  # last offset 900 + median step 300
    model = TraceReplay.load(path, "s", sim_start_s=0.0, cpu_scale=2.0, memory_scale=0.5)
    assert model.sample(0.0) == Usage(cpu_cores=2.0, memory_bytes=150)  # 1.0 * 2, 300 * 0.5
    assert model.sample(299.0).cpu_cores == 2.0  # step hold
    assert model.sample(950.0) == Usage(cpu_cores=8.0, memory_bytes=250)  # 4.0 * 2, 500 * 0.5
    assert model.sample(1200.0 + 310.0).cpu_cores == 4.0  # wraps: offset 310 -> 2.0 * 2
    assert model.sample(-1.0).cpu_cores == 8.0  # before the start wraps to the end
    default_start = TraceReplay.load(path, "s")
    assert default_start.sample(1300.0).cpu_cores == 2.0  # simulated time == trace time by default


def test_trace_errors(tmp_path: Path) -> None:
    path = tmp_path / "t.csv.gz"
    _write_trace(path, ["s,1000,1.0,1,1,1", "s,1000,1.0,1,1,1"])
    with pytest.raises(ValueError, match="strictly increase"):
        load_trace_series(path, "s")
    with pytest.raises(ValueError, match="not found"):
        load_trace_series(path, "nope")


def test_bitbrains_first_sample() -> None:
    model = TraceReplay.load(BITBRAINS, "bb-rnd-2013-08-1")
    assert model.series.first_timestamp_s == 1375308176.0
    assert model.sample(1375308176.0) == Usage(cpu_cores=0.2553, memory_bytes=1340026880)
    assert model.sample(1375308476.0) == Usage(cpu_cores=0.2300, memory_bytes=1185409024)
    assert model.series.sample_count > 8000  # ~30 days at 300 s


# ------------------------------------------------------------------------------------------ parse_model
def test_parse_model_kinds(tmp_path: Path) -> None:
    daily = parse_model({"kind": "daily", "cpu_cores": 0.5, "cpu_amplitude": 0.3, "memory_bytes": 200e6})
    assert isinstance(daily, Daily)
    assert daily.cpu_amplitude_cores == 0.3 and daily.memory_bytes == 200_000_000
    quantities = parse_model({"kind": "constant", "cpu_cores": "250m", "memory_bytes": "64Mi"})
    assert quantities.sample(0.0) == Usage(cpu_cores=0.25, memory_bytes=64 * 2**20)
    spikes = parse_model({"kind": "spikes", "cpu_cores": 0.1, "memory_bytes": 1, "spike_cpu_cores": 1,
                          "period_s": 600, "duration_s": 60, "random_start": True, "probability": 0.5})
    assert isinstance(spikes, Spikes)
    step = parse_model({"kind": "step", "cpu_cores_before": 0.1, "memory_bytes_before": 1,
                        "cpu_cores_after": 1, "memory_bytes_after": 2, "change_at_s": 1e9})
    assert isinstance(step, StepChange)
    path = tmp_path / "small.csv.gz"
    _write_trace(path, ["s,1000,1.0,10,1,1", "s,1300,2.0,20,1,1"])
    trace = parse_model({"kind": "trace", "file": "small.csv.gz", "series_id": "s", "cpu_scale": 2},
                        trace_dir=tmp_path)
    assert trace.sample(1000.0) == Usage(cpu_cores=2.0, memory_bytes=10)


@pytest.mark.parametrize(
    ("spec", "match"),
    [
        ({"kind": "daily", "cpu_cores": -1, "memory_bytes": 1}, "cpu_cores"),
        ({"kind": "daily", "cpu_cores": math.nan, "memory_bytes": 1}, "cpu_cores"),
        ({"kind": "daily", "cpu_cores": math.inf, "memory_bytes": 1}, "cpu_cores"),
        ({"kind": "daily", "cpu_cores": 1e9, "memory_bytes": 1}, "cpu_cores"),
        ({"kind": "daily", "cpu_cores": 1, "memory_bytes": 1e30}, "memory_bytes"),
        ({"kind": "daily", "cpu_cores": True, "memory_bytes": 1}, "must be a number"),
        ({"kind": "daily", "cpu_cores": "lots", "memory_bytes": 1}, "invalid quantity"),
        ({"kind": "daily", "cpu_cores": 1, "memory_bytes": 1, "evil": 1}, "unknown"),
        ({"kind": "daily", "cpu_cores": 1}, "needs"),
        ({"kind": "daily", "cpu_cores": 1, "memory_bytes": 1, "seed": -1}, "seed"),
        ({"kind": "daily", "cpu_cores": 1, "memory_bytes": 1, "seed": 1.5}, "seed"),
        ({"kind": "daily", "cpu_cores": 1, "memory_bytes": 1, "peak_hour": 25}, "peak_hour"),
        ({"kind": "daily", "cpu_cores": 1, "memory_bytes": 1, "cpu_amplitude": 1,
          "cpu_amplitude_cores": 1}, "duplicate"),
        ({"kind": "spikes", "cpu_cores": 1, "memory_bytes": 1, "spike_cpu_cores": 1, "period_s": 10,
          "duration_s": 20}, "duration_s"),
        ({"kind": "spikes", "cpu_cores": 1, "memory_bytes": 1, "spike_cpu_cores": 1, "period_s": 10,
          "duration_s": 5, "random_start": "yes"}, "true or false"),
        ({"kind": "__import__"}, "kind must be one of"),
        ({"cpu_cores": 1}, "kind must be one of"),
        ({"kind": "trace", "file": "../../etc/passwd", "series_id": "s"}, "file must match"),
        ({"kind": "trace", "file": "x.csv.gz", "series_id": "s"}, "not enabled"),
        ({"kind": "constant", "cpu_cores": 1, "memory_bytes": 1, **{f"k{i}": 1 for i in range(30)}}, "too many"),
    ],
)
def test_parse_model_rejects(spec: dict[str, object], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        parse_model(spec)


def test_parse_model_rejects_non_mapping() -> None:
    with pytest.raises(ValueError, match="mapping"):
        parse_model([("kind", "constant")])  # type: ignore[arg-type]


_JSONISH = st.recursive(
    st.none() | st.booleans() | st.floats() | st.integers() | st.text(max_size=8),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3),
    max_leaves=6,
)


@given(st.dictionaries(st.sampled_from(["kind", "cpu_cores", "memory_bytes", "cpu_amplitude", "seed",
                                        "period_s", "duration_s", "x"]), _JSONISH, max_size=6))
def test_parse_model_only_raises_value_error(spec: dict[str, object]) -> None:
    try:
        model = parse_model(spec)
    except ValueError:
        return
    usage = model.sample(1e9)
    assert math.isfinite(usage.cpu_cores) and usage.cpu_cores >= 0 and usage.memory_bytes >= 0
