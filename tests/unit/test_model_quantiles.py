"""``linear_quantiles`` answers what ``np.quantile`` answers, bit for bit, on sorted arrays (its one promise)."""

from __future__ import annotations

import numpy as np
from hypothesis import example, given, settings
from hypothesis import strategies as st

from recommender.model.quantiles import linear_quantiles

_values = st.lists(st.floats(min_value=0.0, max_value=1e12, allow_nan=False), min_size=1, max_size=200)
_qs = st.lists(st.floats(min_value=0.0, max_value=1.0), min_size=1, max_size=6)


@settings(max_examples=300, deadline=None)
@given(values=_values, qs=_qs)
@example(values=[float(i) for i in range(21)], qs=[0.9])  # (n - 1) * q is 18 exactly; n * q + (1 - q) - 1 is not
@example(values=[1.0, 3.0], qs=[0.5, 0.0, 1.0])  # a fraction of exactly 0.5 interpolates from the upper value
@example(values=[7.0], qs=[0.0, 0.3, 1.0])  # one value answers every quantile
def test_equals_numpys_linear_quantile(values: list[float], qs: list[float]) -> None:
    ordered = np.sort(np.array(values))
    q = np.array(qs)
    got = linear_quantiles(ordered, q)
    want = np.quantile(np.array(values), q)
    assert got.dtype == want.dtype
    assert got.tobytes() == want.tobytes()  # the same bits, not merely close


def test_worked_example() -> None:
    # 4 values, q = 0.5: virtual index 3 x 0.5 = 1.5, so from the upper value: 30 - (30 - 20) x 0.5 = 25.
    assert linear_quantiles(np.array([10.0, 20.0, 30.0, 40.0]), np.array([0.5])).tolist() == [25.0]
