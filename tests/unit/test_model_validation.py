"""The model's own guards: a batch or histogram input with a NaN, an infinity or a negative value anywhere is
refused with the reason, whatever its position; clean input passes. The sources filter these before a batch is
built, so reaching the guard means a source bug: it must fail loudly, never fold a NaN into a state."""

from __future__ import annotations

import numpy as np
import pytest

from recommender.model.common import validate_batch
from recommender.model.histogram import VPA_CPU_BUCKETS, DecayingHistogram, Histogram
from recommender.model.types import Samples, UsageBatch

BAD = [(np.nan, "NaN or infinite"), (np.inf, "NaN or infinite"), (-np.inf, "NaN or infinite"),
       (-1e-9, "negative value")]


def _batch(cpu: list[float], times: list[float] | None = None) -> UsageBatch:
    t = np.array(times if times is not None else [1000.0 + 60 * i for i in range(len(cpu))])
    return UsageBatch(cpu_cores=Samples(timestamps_s=t, values=np.array(cpu)), cpu_interval_s=60.0,
                      memory_peak_bytes=Samples.empty(), memory_interval_s=60.0)


@pytest.mark.parametrize("position", [0, 3, 6])
@pytest.mark.parametrize(("bad", "message"), BAD)
def test_a_bad_value_anywhere_in_a_batch_is_refused(position: int, bad: float, message: str) -> None:
    values = [0.5] * 7
    values[position] = bad
    with pytest.raises(ValueError, match=message):
        validate_batch(_batch(values))


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_a_bad_timestamp_is_refused(bad: float) -> None:
    times = [1000.0, 1060.0, 1120.0]
    times[1] = bad
    with pytest.raises(ValueError, match="non-finite timestamp"):
        validate_batch(_batch([0.1, 0.2, 0.3], times))


def test_clean_batches_pass_including_zeros_and_empty() -> None:
    validate_batch(_batch([0.0, 0.0, 3.5]))
    validate_batch(_batch([]))


@pytest.mark.parametrize("position", [0, 2])
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf, -1.0])
def test_histograms_refuse_bad_values_and_weights_and_stay_unchanged(position: int, bad: float) -> None:
    plain, decaying = Histogram(VPA_CPU_BUCKETS), DecayingHistogram(VPA_CPU_BUCKETS, 3600.0)
    plain.add(np.array([0.2]))
    before = plain.weights.copy()
    values = np.array([0.1, 0.2, 0.3])
    values[position] = bad
    with pytest.raises(ValueError, match="values must be finite"):
        plain.add(values)
    with pytest.raises(ValueError, match="values must be finite"):
        decaying.add(values, np.array([1.0, 2.0, 3.0]))
    weights = np.ones(3)
    weights[position] = bad
    with pytest.raises(ValueError, match="weights must be finite"):
        plain.add(np.array([0.1, 0.2, 0.3]), weights)
    np.testing.assert_array_equal(plain.weights, before)
    assert decaying.is_empty()
