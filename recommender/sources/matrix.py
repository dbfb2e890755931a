"""A range answer's series decoded into numpy arrays without the JSON decoder's objects for every point.

Owns ``decode_series``: given the text of a ``query_range`` answer and the index of one item of its result
array, it reads the item's label object as JSON (small) and its ``values`` (``[[t, "v"], ...]``, the bulk of
the body) by splitting the values' bytes at their quotes: the values become one float array at once, and the
times stay text until asked for. A series on the query's full grid (the common case) then takes the grid's
shared array of times, and only its first and last time are parsed. A JSON decoder makes a list, a float and a
string of every point first. Only the plain shape Prometheus writes (``{"metric": {...}, "values": [...]}``:
web/api/v1/api.go encodes a matrix that way, keys in that order) takes this path. Anything else (native
histograms, other key orders, a sample that is not two numbers) returns None, and the caller decodes that item
as JSON, with its strict checks. The two paths give the same arrays (tests/unit/test_source_matrix.py compares
them on generated answers). Pure: no I/O.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from recommender.model.types import FloatArray

_ITEM = re.compile(r'[ \t\n\r]*\{[ \t\n\r]*"metric"[ \t\n\r]*:[ \t\n\r]*')
_VALUES = re.compile(r'[ \t\n\r]*,[ \t\n\r]*"values"[ \t\n\r]*:[ \t\n\r]*\[[ \t\n\r]*')
_CLOSE = re.compile(r"[ \t\n\r]*\}")
_END = re.compile(r"\][ \t\n\r]*\]")
_SAMPLE_BYTES = b'0123456789.eE+-NaInf[]", \t\n\r'
"""What a values array may hold: numbers, the quoted numbers of the values ("NaN", "+Inf"...), brackets,
commas and space. Anything else (a nested object, a letter) sends the item to the JSON path."""
_BRACKETS = bytes.maketrans(b"[],", b"   ")
_DECODER = json.JSONDecoder()


@dataclass(frozen=True, slots=True)
class DecodedSeries:
    """One matrix item: its label object as decoded JSON, its values as an array, and its times as text until
    asked for (``timestamps``): a series on the query's full grid takes the grid's shared array instead."""

    metric: Any
    values: FloatArray
    _times: list[bytes]

    def timestamps(self, grid_first_s: float | None = None, grid_last_s: float | None = None,
                   grid_points: int | None = None) -> FloatArray | None:
        """None when the series holds exactly the grid's points (first and last time as asked: a range query
        evaluates at start + k x step only, so such a series has every grid time); else its own times. Raises
        ValueError for a time that is not a number."""
        times = self._times
        if (grid_points is not None and len(times) == grid_points and times
                and float(times[0]) == grid_first_s and float(times[-1]) == grid_last_s):
            return None
        return np.fromiter(map(float, times), dtype=np.float64, count=len(times))


def decode_series(text: str, i: int) -> tuple[DecodedSeries, int] | None:
    """The matrix item starting at ``text[i]`` (after any space) and the index just after it, or None when it
    is not of the plain shape (the caller then decodes it as JSON from ``i``)."""
    head = _ITEM.match(text, i)
    if head is None:
        return None
    try:
        metric, j = _DECODER.raw_decode(text, head.end())
    except ValueError:
        return None
    opening = _VALUES.match(text, j)
    if opening is None:
        return None
    start = opening.end()
    if text.startswith("]", start):  # "values": []
        end, after = start, start + 1
    else:
        found = _END.search(text, start)  # the first "]]" closes the last pair and the array: no label text here
        if found is None:
            return None
        end, after = found.start() + 1, found.end()
    closing = _CLOSE.match(text, after)
    if closing is None:
        return None
    parts = _pairs(text, start, end)
    if parts is None:
        return None
    try:
        values = np.fromiter(map(float, parts[1::2]), dtype=np.float64, count=len(parts) // 2)
    except ValueError:
        return None
    return DecodedSeries(metric=metric, values=values, _times=parts[0:-1:2]), closing.end()


def _pairs(text: str, start: int, end: int) -> list[bytes] | None:
    """``text[start:end]`` (pairs ``[t,"v"]`` joined by commas) split at its quotes: times at even places (with
    one trailing blank), values at odd ones; None unless the counts of brackets, quotes and commas are those of
    exactly that many pairs and nothing but number characters is left."""
    try:
        segment = text[start:end].encode("ascii")
    except UnicodeEncodeError:
        return None
    if segment.translate(None, _SAMPLE_BYTES):
        return None
    pairs = segment.count(b"[")
    if (segment.count(b"]") != pairs or segment.count(b'"') != 2 * pairs
            or segment.count(b",") != max(0, 2 * pairs - 1)):
        return None
    if pairs == 0:
        return [b""] if not segment.strip() else None
    return segment.translate(_BRACKETS).split(b'"')
