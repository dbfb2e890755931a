"""The packed form of one container's state in a ``RecommenderCheckpoint`` (format version 2): one string.

Owns ``pack`` and ``unpack``, lossless for any JSON-safe state a strategy's ``to_checkpoint`` returns. Every float
is taken out of the state's JSON into one little-endian float64 array, its bytes transposed (all first bytes,
then all second bytes, ...: a state's weights share their sign and exponent bytes, which then compress), and
each float's place in the JSON is marked with ``FLOAT_MARK``; the layout is ``PACK_FORMAT`` (one byte), the
JSON's length (uint32) and the JSON, then the float bytes, compressed with zlib and base64-encoded. Ints, strings,
nulls and the structure stay JSON. ``unpack`` refuses what ``pack`` cannot have written with a ``ValueError``
that says what is wrong: not base64, not zlib, more than ``MAX_STATE_BYTES`` once decompressed (a zip bomb is
cut off there), lengths that do not add up, a float in the JSON, a non-finite float, or marks and floats
that do not pair up. Pure: no API calls.
"""

from __future__ import annotations

import base64
import binascii
import json
import struct
import zlib
from typing import Any

import numpy as np

PACK_FORMAT = 1
"""The first byte of a packed state: the layout above."""
FLOAT_MARK = "\x00"
"""Where a float stood in the JSON (no state holds a NUL in a string)."""
MAX_STATE_BYTES = 1 << 20
"""The most a packed state may decompress to (1 MiB: an etcd object holds at most 1.5 MiB)."""
MAX_PACKED_CHARS = 1 << 20
"""The longest packed string read (base64 characters; the CRD's maxLength)."""
_HEADER = struct.Struct("<BI")


def pack(state: dict[str, Any]) -> str:
    """``state`` (a strategy's ``to_checkpoint``) as one base64 string."""
    floats: list[float] = []
    skeleton = json.dumps(_take_floats(state, floats), separators=(",", ":"), allow_nan=False).encode()
    values = np.array(floats, dtype="<f8")
    planes = values.view(np.uint8).reshape(-1, 8).T.tobytes()
    raw = _HEADER.pack(PACK_FORMAT, len(skeleton)) + skeleton + planes
    return base64.b64encode(zlib.compress(raw, 9)).decode("ascii")


def unpack(text: object) -> dict[str, Any]:
    """The state ``pack`` packed into ``text``; raises ``ValueError``."""
    raw = _inflate(text)
    if len(raw) < _HEADER.size:
        raise ValueError("packed state: shorter than its header")
    version, size = _HEADER.unpack_from(raw)
    if version != PACK_FORMAT:
        raise ValueError(f"packed state: unknown layout {version}")
    planes = raw[_HEADER.size + size:]
    if _HEADER.size + size > len(raw) or len(planes) % 8:
        raise ValueError("packed state: its lengths do not add up")
    values = np.frombuffer(np.frombuffer(planes, dtype=np.uint8).reshape(8, -1).T.tobytes(), dtype="<f8")
    if not np.all(np.isfinite(values)):
        raise ValueError("packed state: a float is NaN or infinite")
    floats = iter(values.tolist())
    try:
        skeleton = json.loads(raw[_HEADER.size:_HEADER.size + size], parse_float=_no_float,
                              parse_constant=_no_float)
        state = _put_floats(skeleton, floats)
    except RecursionError as err:
        raise ValueError("packed state: nested too deeply") from err
    if next(floats, None) is not None:
        raise ValueError("packed state: more floats than places for them")
    if not isinstance(state, dict):
        raise ValueError("packed state: not an object")
    return state


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


def _take_floats(tree: Any, floats: list[float]) -> Any:
    if isinstance(tree, float):
        floats.append(tree)
        return FLOAT_MARK
    if isinstance(tree, dict):
        return {k: _take_floats(v, floats) for k, v in tree.items()}
    if isinstance(tree, list | tuple):
        return [_take_floats(v, floats) for v in tree]
    if tree == FLOAT_MARK:
        raise ValueError("a state string equal to the float mark cannot be packed")
    return tree


def _put_floats(tree: Any, floats: Any) -> Any:
    if tree == FLOAT_MARK:
        value = next(floats, None)
        if value is None:
            raise ValueError("packed state: fewer floats than places for them")
        return value
    if isinstance(tree, dict):
        return {k: _put_floats(v, floats) for k, v in tree.items()}
    if isinstance(tree, list):
        return [_put_floats(v, floats) for v in tree]
    return tree

