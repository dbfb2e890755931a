"""Unit tests for tests.nodesim.quantity: exact parsing, rounding up, formatting, round trips."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.nodesim.quantity import (
    INT64_MAX,
    format_cpu_millicores,
    format_memory_bytes,
    parse_cpu_millicores,
    parse_memory_bytes,
)


@pytest.mark.parametrize(
    ("text", "millicores"),
    [
        ("250m", 250),
        ("2", 2000),
        ("0.5", 500),
        ("1.5", 1500),
        ("1e3", 1_000_000),  # 1000 cores * 1000
        ("0.0001", 1),  # 0.1m rounds up to 1m
        ("1m", 1),
        (".5", 500),
        ("5.", 5000),
        ("+1", 1000),
        ("-0", 0),
        ("100k", 100_000_000),  # 1e5 cores
        ("1E-3", 1),  # exponent form, 1m
    ],
)
def test_parse_cpu(text: str, millicores: int) -> None:
    assert parse_cpu_millicores(text) == millicores


@pytest.mark.parametrize(
    ("text", "memory_bytes"),
    [
        ("1.5Gi", 1_610_612_736),  # 1.5 * 2**30
        ("100Ki", 102_400),  # 100 * 1024
        ("512Mi", 536_870_912),  # 512 * 2**20
        ("1M", 1_000_000),
        ("12e6", 12_000_000),
        ("1e3", 1000),
        ("2", 2),
        ("0.5", 1),  # 0.5 byte rounds up
        ("250m", 1),  # 0.25 byte rounds up
        ("1G", 10**9),
        ("1E", 10**18),  # exa, not an exponent
        ("7Ei", 7 * 2**60),
    ],
)
def test_parse_memory(text: str, memory_bytes: int) -> None:
    assert parse_memory_bytes(text) == memory_bytes


@pytest.mark.parametrize(
    "text",
    ["", " 1", "1 ", "1Gb", "1gi", "abc", "1e", "1.2.3", "--1", "-1", "-250m", "1Kii", "e3", "0x10", "1_000",
     "1e999", "9" * 70, "NaN", "inf", "1,5", "\uff11"],
)
def test_parse_rejects_garbage(text: str) -> None:
    with pytest.raises(ValueError, match="invalid quantity"):
        parse_memory_bytes(text)


def test_parse_rejects_too_large() -> None:
    with pytest.raises(ValueError, match="too large"):
        parse_memory_bytes("8Ei")  # 2**63 > int64 max
    with pytest.raises(ValueError, match="too large"):
        parse_cpu_millicores("1E")  # 10**18 cores = 10**21 millicores


def test_format() -> None:
    assert format_cpu_millicores(250) == "250m"
    assert format_cpu_millicores(2000) == "2"
    assert format_cpu_millicores(0) == "0"
    assert format_memory_bytes(512 * 2**20) == "512Mi"
    assert format_memory_bytes(3 * 2**30) == "3Gi"
    assert format_memory_bytes(1536 * 2**20) == "1536Mi"  # 1.5Gi is not an integer count of Gi
    assert format_memory_bytes(1000) == "1000"  # not a multiple of 1024
    assert format_memory_bytes(0) == "0"
    with pytest.raises(ValueError, match="negative"):
        format_memory_bytes(-1)


@given(st.integers(min_value=0, max_value=INT64_MAX // 1000))
def test_cpu_round_trip(millicores: int) -> None:
    assert parse_cpu_millicores(format_cpu_millicores(millicores)) == millicores


@given(st.integers(min_value=0, max_value=INT64_MAX))
def test_memory_round_trip(memory_bytes: int) -> None:
    assert parse_memory_bytes(format_memory_bytes(memory_bytes)) == memory_bytes


_SUFFIXES = ["", "m", "k", "M", "G", "T", "Ki", "Mi", "Gi", "Ti", "e3", "E2", "e-2"]


@given(st.integers(min_value=0, max_value=10**6), st.integers(min_value=0, max_value=999), st.sampled_from(_SUFFIXES))
def test_parse_matches_exact_arithmetic(whole: int, frac: int, suffix: str) -> None:
    text = f"{whole}.{frac:03d}{suffix}"
    from fractions import Fraction

    # Exact multipliers: 10**-3 is a float (0.001000000000000000020816...) and would make "exact" inexact.
    multipliers = {"": Fraction(1), "m": Fraction(1, 1000), "k": Fraction(10**3), "M": Fraction(10**6),
                   "G": Fraction(10**9), "T": Fraction(10**12), "Ki": Fraction(2**10), "Mi": Fraction(2**20),
                   "Gi": Fraction(2**30), "Ti": Fraction(2**40), "e3": Fraction(10**3), "E2": Fraction(10**2),
                   "e-2": Fraction(1, 100)}

    exact = (Fraction(whole) + Fraction(frac, 1000)) * Fraction(multipliers[suffix])
    assert parse_memory_bytes(text) == -(-exact.numerator // exact.denominator)  # ceil


_ALPHABET = "0123456789.eEmkKMGTPi+- xa_"


@given(st.text(alphabet=_ALPHABET, max_size=12))
def test_parse_never_accepts_garbage(text: str) -> None:
    """Anything accepted must be a well-formed, non-negative quantity; anything else is a ValueError."""
    import re

    well_formed = re.fullmatch(
        # A negative zero is a quantity too, with or without a suffix ("-0E" is 0 to the API server as well).
        r"(\+?([0-9]+(\.[0-9]*)?|\.[0-9]+)|-(0+(\.0*)?|\.0+))(Ki|Mi|Gi|Ti|Pi|Ei|[eE][+-]?[0-9]+|m|k|M|G|T|P|E)?", text
    )
    try:
        value = parse_memory_bytes(text)
    except ValueError:
        return
    assert well_formed is not None, text
    assert 0 <= value <= INT64_MAX
