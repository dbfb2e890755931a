"""Field readers shared by the adapter's converters: quantities, timestamps and conditions of raw API dicts.

Owns turning the small recurring pieces of Kubernetes objects into values: a ``{cpu, memory}`` resource
list into ``Resources`` (exact, rounded up once, through ``podtailor.units``; cached because a
cluster repeats the same few strings thousands of times), an RFC 3339 timestamp into Unix seconds, and
a condition list into its entry of one type. Anything malformed raises ``MalformedObject`` with the
field's path; converters let it propagate so the reader skips that one object and counts it.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from podtailor.resources import Resources
from podtailor.units import QuantityError, parse_cpu_millicores, parse_memory_bytes

Obj = dict[str, Any]


class MalformedObject(ValueError):
    """An API object with a field that cannot be read; the object is skipped, never guessed."""


@lru_cache(maxsize=8192)
def _cpu(text: str) -> int:
    return parse_cpu_millicores(text)


@lru_cache(maxsize=8192)
def _memory(text: str) -> int:
    return parse_memory_bytes(text)


def cpu_millicores(raw: object, where: str) -> int:
    try:
        return _cpu(raw) if isinstance(raw, str) else parse_cpu_millicores(raw)  # type: ignore[arg-type]
    except (QuantityError, TypeError) as err:
        raise MalformedObject(f"{where}.cpu: {err}") from None


def memory_bytes(raw: object, where: str) -> int:
    try:
        return _memory(raw) if isinstance(raw, str) else parse_memory_bytes(raw)  # type: ignore[arg-type]
    except (QuantityError, TypeError) as err:
        raise MalformedObject(f"{where}.memory: {err}") from None


def resources(raw: object, where: str) -> Resources:
    """A resource list (other resources than cpu and memory are ignored); None or absent -> unset."""
    if raw is None:
        return Resources()
    if not isinstance(raw, Mapping):
        raise MalformedObject(f"{where}: not a resource list")
    cpu, memory = raw.get("cpu"), raw.get("memory")
    return Resources(cpu_millicores=None if cpu is None else cpu_millicores(cpu, where),
                     memory_bytes=None if memory is None else memory_bytes(memory, where))


def optional_resources(raw: object, where: str) -> Resources | None:
    return None if raw is None else resources(raw, where)


@lru_cache(maxsize=65536)
def _timestamp(text: str) -> float:
    return dt.datetime.fromisoformat(text).timestamp()


def timestamp_s(raw: object, where: str) -> float:
    """RFC 3339 ("2026-01-02T03:04:05Z", with or without fractions) -> Unix seconds."""
    if not isinstance(raw, str):
        raise MalformedObject(f"{where}: {raw!r} is not a timestamp")
    try:
        return _timestamp(raw)
    except ValueError:
        raise MalformedObject(f"{where}: {raw!r} is not an RFC 3339 timestamp") from None


def optional_timestamp_s(raw: object, where: str) -> float | None:
    return None if raw is None else timestamp_s(raw, where)


def condition(status: Mapping[str, Any], ctype: str) -> Obj | None:
    """The condition of this type in ``status.conditions``, None when absent."""
    for cond in status.get("conditions") or ():
        if isinstance(cond, dict) and cond.get("type") == ctype:
            return cond
    return None


def condition_true(status: Mapping[str, Any], ctype: str) -> bool:
    cond = condition(status, ctype)
    return cond is not None and cond.get("status") == "True"


def integer(raw: object, where: str, default: int = 0) -> int:
    if raw is None:
        return default
    if isinstance(raw, bool) or not isinstance(raw, int):
        raise MalformedObject(f"{where}: {raw!r} is not an integer")
    return raw


def string_map(raw: object, where: str) -> dict[str, str]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise MalformedObject(f"{where}: not a map")
    return {str(k): str(v) for k, v in raw.items()}
