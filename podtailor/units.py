"""Kubernetes quantities, parsed once at the edge and formatted once on the way out.

Owns the conversion between Kubernetes quantity strings ("250m", "1.5Gi", "1e3", "128974848") and
integers: CPU in millicores, memory in bytes. Parsing is exact (``fractions.Fraction``, never floats) and
rounds up once; malformed, negative or absurd values raise ``QuantityError`` with the offending text.
Both halves parse and print quantities through this module alone (``podtailor.resources`` builds on it):
``format_cpu``/``format_memory`` write the exact quantity the API carries, and ``human_memory`` the rounded one
a person reads in a command's text output ("1.2Gi" where the API holds ``1323708601``).
"""

from __future__ import annotations

import math
import re
from fractions import Fraction

MAX_CPU_MILLICORES = 10**9 * 1000
"""A million cores: anything above is a mistake, not a container."""
MAX_MEMORY_BYTES = 2**60
"""One exbibyte."""

_QUANTITY = re.compile(r"(?P<num>[+]?(\d+(\.\d*)?|\.\d+))(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?\d{1,3})?",
                       re.ASCII)  # ASCII: \d would also take other scripts' digits ("١٢٣")
_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"n": Fraction(1, 10**9), "u": Fraction(1, 10**6), "m": Fraction(1, 1000), "k": Fraction(10**3),
            "M": Fraction(10**6), "G": Fraction(10**9), "T": Fraction(10**12), "P": Fraction(10**15),
            "E": Fraction(10**18)}


class QuantityError(ValueError):
    """A quantity string that is not a valid, sensible Kubernetes quantity."""


def parse_quantity(text: str | int | float) -> Fraction:
    """Exact value of a quantity. Integers are accepted as they are; floats only if finite."""
    if isinstance(text, bool):
        raise QuantityError(f"not a quantity: {text!r}")
    if isinstance(text, int):
        value = Fraction(text)
    elif isinstance(text, float):
        if not math.isfinite(text):
            raise QuantityError(f"not a finite quantity: {text!r}")
        value = Fraction(text)
    else:
        if not isinstance(text, str) or len(text) > 64:
            raise QuantityError(f"not a quantity: {str(text)[:64]!r}")
        m = _QUANTITY.fullmatch(text.strip())
        if m is None:
            raise QuantityError(f"malformed quantity {text[:64]!r}")
        value = Fraction(m["num"])
        suffix = m["suffix"] or ""
        if suffix in _BINARY:
            value *= _BINARY[suffix]
        elif suffix in _DECIMAL:
            value *= _DECIMAL[suffix]
        elif suffix:
            value *= Fraction(10) ** int(suffix[1:])
    if value < 0:
        raise QuantityError(f"negative quantity {text!r}")
    return value


def _ceil(value: Fraction) -> int:
    return -((-value.numerator) // value.denominator)


def parse_cpu_millicores(text: str | int | float) -> int:
    """CPU in whole millicores, rounded up ("0.1" -> 100, "1.0001" -> 1001, "250m" -> 250)."""
    millis = _ceil(parse_quantity(text) * 1000)
    if millis > MAX_CPU_MILLICORES:
        raise QuantityError(f"CPU quantity {text!r} is absurdly large")
    return millis


def parse_memory_bytes(text: str | int | float) -> int:
    """Memory in whole bytes, rounded up ("1.5Gi" -> 1610612736, "1e3" -> 1000, "100m" -> 1)."""
    value = _ceil(parse_quantity(text))
    if value > MAX_MEMORY_BYTES:
        raise QuantityError(f"memory quantity {text!r} is absurdly large")
    return value


def format_cpu(millicores: int) -> str:
    """"2" for whole cores, else "250m"."""
    if millicores < 0:
        raise QuantityError(f"negative CPU {millicores}")
    return str(millicores // 1000) if millicores % 1000 == 0 else f"{millicores}m"


def format_memory(memory_bytes: int) -> str:
    """The largest binary suffix that is exact ("512Mi"), else plain bytes."""
    if memory_bytes < 0:
        raise QuantityError(f"negative memory {memory_bytes}")
    for suffix in ("Ei", "Pi", "Ti", "Gi", "Mi", "Ki"):
        unit = _BINARY[suffix]
        if memory_bytes and memory_bytes % unit == 0:
            return f"{memory_bytes // unit}{suffix}"
    return str(memory_bytes)


def human_memory(memory_bytes: float) -> str:
    """Memory as a person reads it in a command's text: the largest of Gi, Mi and Ki not above it, whole
    ("512Mi") or to one decimal ("1.2Gi"), and plain bytes below 1Ki ("100"). Never for an API write or a
    machine-readable output: those carry ``format_memory``'s exact quantity."""
    if memory_bytes < 0:
        raise QuantityError(f"negative memory {memory_bytes}")
    for suffix in ("Gi", "Mi", "Ki"):
        unit = _BINARY[suffix]
        if memory_bytes >= unit:
            amount = memory_bytes / unit
            return f"{amount:.0f}{suffix}" if amount == int(amount) else f"{amount:.1f}{suffix}"
    return f"{memory_bytes:.0f}"
