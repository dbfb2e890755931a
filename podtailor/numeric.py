"""The checks every parser makes of a number it was handed: "an integer, not a bool" and "a finite number".

Owns the three predicates that the readers of checkpoints, price files, ResizePolicies, analyses, API
objects and discovered Services use before they trust a value from JSON or YAML. ``bool`` is an ``int`` to
Python, so ``isinstance(True, int)`` holds: each predicate refuses bools first. The checks are by type
(``isinstance``), as the readers made them: ``numpy.float64`` is a ``float`` and passes, ``numpy.int64``,
``numpy.float32`` and ``numpy.bool_`` are neither and are refused. Each caller keeps its own error type and
message; these only decide. Pure: no I/O, math only.
"""

from __future__ import annotations

import math
from typing import TypeGuard


def is_int(value: object) -> TypeGuard[int]:
    """True for an ``int`` (or subclass) that is not a ``bool``."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: object) -> TypeGuard[int | float]:
    """True for an ``int`` or ``float`` that is not a ``bool``; NaN and infinities included (a caller that
    checks a range, ``low <= value <= high``, refuses them there)."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def is_finite_number(value: object) -> TypeGuard[int | float]:
    """True for a number (as ``is_number``) that is neither NaN nor infinite, and that ``float()`` can hold:
    an ``int`` beyond about 1.8e308 (JSON integers are unbounded) is refused, where ``math.isfinite`` raises
    ``OverflowError``, so each caller refuses it with its own message."""
    if not is_number(value):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:
        return False
