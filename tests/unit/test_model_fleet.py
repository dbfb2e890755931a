"""The fleet as summable parts (``recommender.model.fleet``): any split of a fleet combines into the whole."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from recommender.model.fleet import FleetSums, combine, exact_sum
from recommender.model.podtailor_state import PodtailorState
from recommender.model.registry import get_strategy
from recommender.model.types import FleetScale, Samples, UsageBatch

NOW = 1_700_000_000.0
sizes = st.lists(st.floats(min_value=0.0, max_value=1e12, allow_nan=False, allow_infinity=False), max_size=40)


def test_sums_and_means_with_the_arithmetic() -> None:
    # CPU: 0.25 + 0.5 + 1.5 = 2.25 over 3 -> 0.75; memory: NaN skipped, (100 + 300) / 2 = 200.
    sums = FleetSums.of([0.25, 0.5, 1.5], [100.0, math.nan, 300.0])
    assert (sums.cpu_count, sums.memory_count) == (3, 2)
    assert sums.memory_bytes_sum == 400
    assert sums.scale() == FleetScale(cpu_cores=0.75, memory_bytes=200.0)
    # 0.1 + 0.2 in floats is 0.30000000000000004; the exact sum of the two doubles is closer to 0.3 than that.
    assert exact_sum([0.1, 0.2]) == Fraction(0.1) + Fraction(0.2)
    assert FleetSums.zero().scale() is None
    assert FleetSums.of([], [5.0]).scale() == FleetScale(cpu_cores=0.0, memory_bytes=5.0)


@given(cpu=sizes, memory=sizes, cuts=st.lists(st.integers(min_value=0, max_value=40), max_size=5))
def test_combining_the_parts_of_any_split_gives_the_whole_exactly(cpu: list[float], memory: list[float],
                                                                    cuts: list[int]) -> None:
    whole = FleetSums.of(cpu, memory)
    bounds = [0, *sorted(cuts), 40]
    parts = [FleetSums.of(cpu[a:b], memory[a:b]) for a, b in itertools.pairwise(bounds)]
    assert combine(reversed(parts)) == whole
    assert combine(reversed(parts)).scale() == whole.scale()  # bit-identical means, not within a tolerance
    if cpu:  # the correctly rounded mean is within an ulp-scale of numpy's (pairwise-summed) one
        assert whole.scale() is not None
        assert whole.scale().cpu_cores == pytest.approx(float(np.mean(cpu)), rel=1e-12, abs=1e-300)


def test_a_float_sum_would_depend_on_the_split_where_the_exact_one_does_not() -> None:
    values = [1e16, 1.0, -0.0, 1.0]
    # In floats 1e16 + 1.0 rounds back to 1e16 (ulp 2 there): the grouping changes the result.
    assert (1e16 + 1.0) + 1.0 != 1e16 + (1.0 + 1.0)
    left, right = FleetSums.of(values[:2], []), FleetSums.of(values[2:], [])
    assert left + right == FleetSums.of(values, []) == right + left
    assert (left + right).cpu_cores_sum == Fraction(10**16 + 2)


@pytest.mark.parametrize("kwargs", [
    {"cpu_cores_sum": Fraction(-1), "cpu_count": 1},
    {"cpu_cores_sum": Fraction(0), "cpu_count": -1},
    {"cpu_cores_sum": Fraction(1), "cpu_count": 0},
])
def test_impossible_sums_are_refused(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError, match="FleetSums"):
        FleetSums(**{"memory_bytes_sum": Fraction(0), "memory_count": 0, **kwargs})  # type: ignore[arg-type]


def _state(cpu_cores: float, memory_bytes: float) -> PodtailorState:
    state = get_strategy("podtailor").new_state()
    assert isinstance(state, PodtailorState)
    times = NOW - 3600.0 + 60.0 * np.arange(60)
    state.add(UsageBatch(cpu_cores=Samples(timestamps_s=times, values=np.full(60, cpu_cores)), cpu_interval_s=60.0,
                         memory_peak_bytes=Samples(timestamps_s=times, values=np.full(60, memory_bytes)),
                         memory_interval_s=60.0))
    return state


def test_the_podtailor_fleet_of_a_split_of_states_is_that_of_all_of_them() -> None:
    strategy = get_strategy("podtailor")
    states = [_state(0.05 * (k + 1), 2.0**20 * (50 + 7 * k)) for k in range(9)]
    whole = strategy.fleet_sums(states, NOW)
    parts = [strategy.fleet_sums(states[k::3], NOW) for k in range(3)]
    assert whole is not None and all(p is not None for p in parts)
    assert combine(p for p in parts if p is not None) == whole
    assert strategy.fleet_scale(states, NOW) == whole.scale()
    assert whole.cpu_count == whole.memory_count == 9
    assert get_strategy("vpa").fleet_sums(states, NOW) is None  # VPA prices nothing by the fleet
