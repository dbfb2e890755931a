"""The shared number checks: bools refused, NaN and infinities refused where finiteness is asked, numpy
scalars decided by type as the parsers that use these checks decide them."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from podtailor.numeric import is_finite_number, is_int, is_number

_NOT_NUMBERS: list[object] = [None, "1", "1.5", b"1", [1], {"a": 1}, (1,), Fraction(1, 2), 1j]
_BOOLS: list[object] = [True, False, np.bool_(True), np.bool_(False)]


@pytest.mark.parametrize("value", [0, 1, -1, 2**63, -(2**80), 10**400])
def test_integers_are_ints_numbers_and_finite(value: int) -> None:
    assert is_int(value)
    assert is_number(value)
    assert is_finite_number(value) is (abs(value) < 2**1000)  # 10**400: no float holds it


@pytest.mark.parametrize("value", [*_BOOLS, *_NOT_NUMBERS])
def test_bools_and_non_numbers_are_refused_by_all_three(value: object) -> None:
    assert not is_int(value)
    assert not is_number(value)
    assert not is_finite_number(value)


@pytest.mark.parametrize("value", [0.0, -0.0, 1.5, -2.0, 1e308, 5e-324])
def test_finite_floats_are_numbers_but_not_ints(value: float) -> None:
    assert not is_int(value)  # 2.0 is a float from JSON ("2.0"): not a whole-number field's value
    assert is_number(value)
    assert is_finite_number(value)


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, float("nan"), 1e309])
def test_nan_and_infinities_are_numbers_but_not_finite(value: float) -> None:
    assert is_number(value)  # the range checks of the callers of is_number refuse them
    assert not is_finite_number(value)
    assert not is_int(value)


def test_numpy_float64_is_a_float_and_its_nan_is_refused() -> None:
    assert is_number(np.float64(2.5)) and is_finite_number(np.float64(2.5))
    assert not is_finite_number(np.float64("nan"))
    assert not is_finite_number(np.float64("-inf"))
    assert not is_int(np.float64(3.0))


@pytest.mark.parametrize("value", [np.int64(3), np.int32(-1), np.uint8(7), np.float32(0.5), np.float16(1.0)])
def test_other_numpy_scalars_are_refused_as_the_parsers_refuse_them(value: object) -> None:
    # None of these is an int or a float to isinstance: a parser of JSON never sees them, and the callers
    # refused them before these checks were shared.
    assert not is_int(value)
    assert not is_number(value)
    assert not is_finite_number(value)


def test_an_int_too_large_for_a_float_is_not_a_finite_number() -> None:
    """``math.isfinite(10**400)`` raises OverflowError; the check refuses it, so a caller's own error names it."""
    with pytest.raises(OverflowError):
        math.isfinite(10**400)
    assert not is_finite_number(10**400) and not is_finite_number(-(10**400))
    assert is_finite_number(2**1000)


@given(st.floats(allow_nan=True, allow_infinity=True))
def test_finite_number_agrees_with_math_isfinite_on_every_float(value: float) -> None:
    assert is_finite_number(value) is math.isfinite(value)
    assert is_number(value)


@given(st.integers(min_value=-(2**1000), max_value=2**1000))
def test_every_int_in_float_range_is_int_and_finite(value: int) -> None:
    assert is_int(value) and is_finite_number(value)
