"""The packed form of one container's state in a ``RecommenderCheckpoint`` (format version 2): one string.

Owns ``pack`` and ``unpack``, lossless for any JSON-safe state a strategy's ``to_checkpoint`` returns. Every float
is taken out of the state's JSON into one little-endian float64 array, and every int that fits into an int64
array; each array's bytes are transposed (all first bytes, then all second bytes, ...: a state's weights share
their sign and exponent bytes, and its byte counts their high bytes, which then compress), and each number's
place in the JSON is marked (``FLOAT_MARK``, ``INT_MARK``). The layout is ``PACK_FORMAT`` (one byte), the JSON's
length and the float count (uint32 each), the JSON, the float bytes, then the int bytes, compressed with zlib and
base64-encoded. Strings, nulls, booleans, ints beyond int64 and the structure stay JSON. ``unpack`` refuses
what ``pack`` cannot have written with a ``ValueError`` that says what is wrong: not base64, not zlib, more than
``MAX_STATE_BYTES`` once decompressed (a zip bomb is cut off there), lengths that do not add up, a float in the
JSON, a non-finite float, or marks and numbers that do not pair up. Pure: no API calls.
"""

from __future__ import annotations

import base64
import binascii
import json
import struct
import zlib
from collections.abc import Iterator
from typing import Any

import numpy as np

from podtailor.numeric import is_int

PACK_FORMAT = 1
"""The first byte of a packed state: the layout above."""
FLOAT_MARK = "\x00"
"""Where a float stood in the JSON (no state holds a NUL in a string)."""
INT_MARK = "\x01"
"""Where an int stood in the JSON."""
MAX_STATE_BYTES = 1 << 20
"""The most a packed state may decompress to (1 MiB: an etcd object holds at most 1.5 MiB)."""
MAX_PACKED_CHARS = 1 << 20
"""The longest packed string read (base64 characters; the CRD's maxLength)."""
_HEADER = struct.Struct("<BII")
_INT64 = range(-2**63, 2**63)


def pack(state: dict[str, Any]) -> str:
    """``state`` (a strategy's ``to_checkpoint``) as one base64 string."""
    floats: list[float] = []
    ints: list[int] = []
    skeleton = json.dumps(_take_numbers(state, floats, ints), separators=(",", ":"), allow_nan=False).encode()
    raw = (_HEADER.pack(PACK_FORMAT, len(skeleton), len(floats)) + skeleton + _planes(np.array(floats, "<f8"))
           + _planes(np.array(ints, "<i8")))
    return base64.b64encode(zlib.compress(raw, 9)).decode("ascii")


def unpack(text: object) -> dict[str, Any]:
    """The state ``pack`` packed into ``text``; raises ``ValueError``."""
    raw = _inflate(text)
    if len(raw) < _HEADER.size:
        raise ValueError("packed state: shorter than its header")
    version, size, n_floats = _HEADER.unpack_from(raw)
    if version != PACK_FORMAT:
        raise ValueError(f"packed state: unknown layout {version}")
    numbers_at = _HEADER.size + size
    if numbers_at + 8 * n_floats > len(raw) or (len(raw) - numbers_at) % 8:
        raise ValueError("packed state: its lengths do not add up")
    floats = _unplane(raw[numbers_at:numbers_at + 8 * n_floats], "<f8")
    if not np.all(np.isfinite(floats)):
        raise ValueError("packed state: a float is NaN or infinite")
    ints = _unplane(raw[numbers_at + 8 * n_floats:], "<i8")
    float_iter, int_iter = iter(floats.tolist()), iter(ints.tolist())
    try:
        skeleton = json.loads(raw[_HEADER.size:numbers_at], parse_float=_no_float, parse_constant=_no_float)
        state = _put_numbers(skeleton, float_iter, int_iter)
    except RecursionError as err:
        raise ValueError("packed state: nested too deeply") from err
    if next(float_iter, None) is not None or next(int_iter, None) is not None:
        raise ValueError("packed state: more numbers than places for them")
    if not isinstance(state, dict):
        raise ValueError("packed state: not an object")
    return state


def _planes(values: np.ndarray[Any, Any]) -> bytes:
    return values.view(np.uint8).reshape(-1, 8).T.tobytes()


def _unplane(data: bytes, dtype: str) -> np.ndarray[Any, Any]:
    return np.frombuffer(np.frombuffer(data, dtype=np.uint8).reshape(8, -1).T.tobytes(), dtype=dtype)


def _inflate(text: object) -> bytes:
    if not isinstance(text, str) or len(text) > MAX_PACKED_CHARS:
        raise ValueError(f"packed state: not a string of at most {MAX_PACKED_CHARS} characters")
    try:
        compressed = base64.b64decode(text, validate=True)
        inflater = zlib.decompressobj()
        raw = inflater.decompress(compressed, MAX_STATE_BYTES)
    except binascii.Error as err:
        raise ValueError(f"packed state: not base64 ({err})") from err
    except zlib.error as err:
        raise ValueError(f"packed state: not zlib ({err})") from err
    if inflater.unconsumed_tail:
        raise ValueError(f"packed state: more than {MAX_STATE_BYTES} bytes once decompressed")
    if not inflater.eof or inflater.unused_data:
        raise ValueError("packed state: the zlib stream is cut short or followed by other bytes")
    return raw


def _no_float(token: str) -> float:
    raise ValueError(f"packed state: {token} in the JSON (floats are packed apart)")


def _take_numbers(tree: Any, floats: list[float], ints: list[int]) -> Any:
    if isinstance(tree, float):
        floats.append(tree)
        return FLOAT_MARK
    if is_int(tree) and tree in _INT64:
        ints.append(tree)
        return INT_MARK
    if isinstance(tree, dict):
        return {k: _take_numbers(v, floats, ints) for k, v in tree.items()}
    if isinstance(tree, list | tuple):
        return [_take_numbers(v, floats, ints) for v in tree]
    if tree in (FLOAT_MARK, INT_MARK):
        raise ValueError("a state string equal to a number mark cannot be packed")
    return tree


def _put_numbers(tree: Any, floats: Iterator[float], ints: Iterator[int]) -> Any:
    if isinstance(tree, str) and tree in (FLOAT_MARK, INT_MARK):
        value = next(floats if tree == FLOAT_MARK else ints, None)
        if value is None:
            raise ValueError("packed state: fewer numbers than places for them")
        return value
    if isinstance(tree, dict):
        return {k: _put_numbers(v, floats, ints) for k, v in tree.items()}
    if isinstance(tree, list):
        return [_put_numbers(v, floats, ints) for v in tree]
    return tree
