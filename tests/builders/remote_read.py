"""The test side of Prometheus's remote-read protocol: reading a request and writing an answer.

The product only writes requests and reads answers (``recommender.sources.remote_read``); the drills' proxy
and the unit tests need the other two directions, written here from the protocol (``prompb/remote.proto``,
``prompb/types.proto``) with no code shared with the product: a ``ReadRequest`` decoded into its queries, a
``ReadResponse`` encoded from series as Prometheus's gogoproto code writes it (labels, then samples, a value of
zero left out), snappy block compression both ways.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Iterable, Sequence

import cramjam

Labels = dict[str, str]
Sample = tuple[int, float]
"""(time in ms, value)."""
Query = tuple[list[tuple[int, str, str]], int, int]
"""(matchers as (type, name, value), start ms, end ms)."""
_OPS = {0: "=", 1: "!=", 2: "=~", 3: "!~"}


def _varint(n: int) -> bytes:
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        low = n & 0x7F
        n >>= 7
        if n:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)


def _bytes_field(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _sample(t_ms: int, value: float) -> bytes:
    out = b""
    if value != 0 or math.copysign(1.0, value) < 0 or math.isnan(value):  # proto3 leaves out 0.0 only
        out += bytes([1 << 3 | 1]) + struct.pack("<d", value)
    if t_ms:
        out += _varint(2 << 3) + _varint(t_ms)
    return out


def encode_response(results: Sequence[Iterable[tuple[Labels, Sequence[Sample]]]]) -> bytes:
    """A snappy-compressed ``ReadResponse``: one ``QueryResult`` per item of ``results``, its series in order."""
    body = b""
    for result in results:
        series_bytes = b""
        for labels, samples in result:
            ts = b"".join(_bytes_field(1, _bytes_field(1, k.encode()) + (_bytes_field(2, v.encode()) if v else b""))
                          for k, v in sorted(labels.items()))
            ts += b"".join(_bytes_field(2, _sample(t, v)) for t, v in samples)
            series_bytes += _bytes_field(1, ts)
        body += _bytes_field(1, series_bytes)
    return bytes(cramjam.snappy.compress_raw(body))


def _read_varint(buf: bytes, i: int) -> tuple[int, int]:
    n = shift = 0
    while True:
        b = buf[i]
        i += 1
        n |= (b & 0x7F) << shift
        if b < 0x80:
            return n, i
        shift += 7


def _message(buf: bytes) -> list[tuple[int, int | bytes]]:
    """(field number, varint value or bytes) of each field; only the wire types a ReadRequest uses."""
    out: list[tuple[int, int | bytes]] = []
    i = 0
    while i < len(buf):
        key, i = _read_varint(buf, i)
        if key & 7 == 0:
            value, i = _read_varint(buf, i)
            out.append((key >> 3, value))
        elif key & 7 == 2:
            size, i = _read_varint(buf, i)
            out.append((key >> 3, buf[i:i + size]))
            i += size
        else:
            raise ValueError(f"unexpected wire type {key & 7}")
    return out


def decode_request(body: bytes) -> list[Query]:
    """The queries of a snappy-compressed ``ReadRequest``."""
    queries: list[Query] = []
    for number, query in _message(bytes(cramjam.snappy.decompress_raw(body))):
        if number != 1 or not isinstance(query, bytes):
            continue
        matchers, start, end = [], 0, 0
        for n, v in _message(query):
            if n == 1 and isinstance(v, int):
                start = v
            elif n == 2 and isinstance(v, int):
                end = v
            elif n == 3 and isinstance(v, bytes):
                fields = dict(_message(v))
                name, value = fields.get(2, b""), fields.get(3, b"")
                kind = fields.get(1, 0)
                assert isinstance(name, bytes) and isinstance(value, bytes) and isinstance(kind, int)
                matchers.append((kind, name.decode(), value.decode()))
        queries.append((matchers, start, end))
    return queries


def selector_text(matchers: Sequence[tuple[int, str, str]]) -> str:
    """The matchers as a PromQL selector, for logs and for tests that look for ``namespace="x"``."""
    name = next((v for k, n, v in matchers if n == "__name__" and k == 0), "")
    rest = [f'{n}{_OPS[k]}"{v}"' for k, n, v in matchers if not (n == "__name__" and k == 0)]
    return name + "{" + ",".join(rest) + "}"
