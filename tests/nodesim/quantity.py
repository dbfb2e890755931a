"""Exact parsing and formatting of Kubernetes resource quantities for CPU and memory.

This module owns the quantity grammar (``<signed number><suffix>`` with binary-SI suffixes Ki..Ei,
decimal-SI suffixes m, k, M..E, or a decimal exponent ``e<int>``). It parses with ``fractions.Fraction``
(never floats) and converts to integer millicores for CPU and integer bytes for memory, rounding up like
``resource.Quantity.MilliValue()``/``Value()`` do. It differs from apimachinery in that it rejects
negative values (CPU and memory requests and limits can never be negative), strings longer than 64
characters, exponents beyond +/-40 and results that do not fit an int64, instead of clamping them; and it
formats to a canonical short form of its own ("250m", "2", "512Mi", else plain bytes), not Kubernetes'
canonical form.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction

__all__ = [
    "INT64_MAX",
    "format_cpu_millicores",
    "format_memory_bytes",
    "parse_cpu_millicores",
    "parse_memory_bytes",
    "parse_quantity",
]

INT64_MAX = 2**63 - 1
_MAX_LENGTH = 64
_MAX_ABS_EXPONENT = 40

_QUANTITY_RE = re.compile(
    r"(?P<sign>[+-]?)(?P<number>[0-9]+(?:\.[0-9]*)?|\.[0-9]+)"
    r"(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[eE][+-]?[0-9]+|m|k|M|G|T|P|E|)"
)

_BINARY_SUFFIXES: dict[str, int] = {
    "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
}
_DECIMAL_SUFFIXES: dict[str, Fraction] = {
    "m": Fraction(1, 1000),
    "": Fraction(1),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
}
# Largest first, so that formatting picks the shortest exact binary form.
_FORMAT_SUFFIXES: tuple[tuple[str, int], ...] = tuple(sorted(_BINARY_SUFFIXES.items(), key=lambda kv: -kv[1]))


def _suffix_multiplier(suffix: str, text: str) -> Fraction:
    if suffix in _BINARY_SUFFIXES:
        return Fraction(_BINARY_SUFFIXES[suffix])
    if suffix in _DECIMAL_SUFFIXES:
        return _DECIMAL_SUFFIXES[suffix]
    exponent = int(suffix[1:])
    if abs(exponent) > _MAX_ABS_EXPONENT:
        raise ValueError(f"invalid quantity {text!r}: exponent {exponent} is out of range")
    return Fraction(10) ** exponent


def parse_quantity(text: str) -> Fraction:
    """Parse a Kubernetes quantity string exactly; raise ValueError if it is malformed or negative."""
    if not isinstance(text, str):
        raise ValueError(f"invalid quantity {text!r}: expected a string")
    if len(text) > _MAX_LENGTH:
        raise ValueError(f"invalid quantity: longer than {_MAX_LENGTH} characters")
    match = _QUANTITY_RE.fullmatch(text)
    if match is None:
        raise ValueError(
            f"invalid quantity {text!r}: expected a number with an optional suffix "
            "(m, k, M, G, T, P, E, Ki, Mi, Gi, Ti, Pi, Ei or e<exponent>)"
        )
    value = Fraction(match["number"]) * _suffix_multiplier(match["suffix"], text)
    if match["sign"] == "-" and value != 0:
        raise ValueError(f"invalid quantity {text!r}: must not be negative")
    return value


def _checked_int64(value: int, text: str) -> int:
    if value > INT64_MAX:
        raise ValueError(f"invalid quantity {text!r}: too large")
    return value


def parse_cpu_millicores(text: str) -> int:
    """Parse a CPU quantity into integer millicores, rounding up to 1m ("0.0001" -> 1, "1.5" -> 1500)."""
    return _checked_int64(math.ceil(parse_quantity(text) * 1000), text)


def parse_memory_bytes(text: str) -> int:
    """Parse a memory quantity into integer bytes, rounding up ("1.5Gi" -> 1610612736, "0.5" -> 1)."""
    return _checked_int64(math.ceil(parse_quantity(text)), text)


def _check_non_negative_int(value: int, what: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{what} must be an int, got {value!r}")
    if value < 0:
        raise ValueError(f"{what} must not be negative, got {value}")


def format_cpu_millicores(millicores: int) -> str:
    """Format millicores as whole cores where exact ("2"), else with the m suffix ("250m")."""
    _check_non_negative_int(millicores, "millicores")
    if millicores % 1000 == 0:
        return str(millicores // 1000)
    return f"{millicores}m"


def format_memory_bytes(memory_bytes: int) -> str:
    """Format bytes with the largest exact binary suffix ("512Mi", "1Gi"), else as plain bytes."""
    _check_non_negative_int(memory_bytes, "memory_bytes")
    if memory_bytes == 0:
        return "0"
    for suffix, multiplier in _FORMAT_SUFFIXES:
        if memory_bytes % multiplier == 0:
            return f"{memory_bytes // multiplier}{suffix}"
    return str(memory_bytes)
