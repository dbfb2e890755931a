"""Field readers shared by the adapter's converters: quantities, timestamps and conditions of raw API dicts.

Owns turning the small recurring pieces of Kubernetes objects into values: a ``{cpu, memory}`` resource
list into ``Resources`` (``podtailor.resources.parse_resources``, re-exported here as ``resources``), an
RFC 3339 timestamp into Unix seconds, and a condition list into its entry of one type. Anything malformed
raises ``MalformedObject`` (``podtailor.kube.fields``) with the field's path; converters let it propagate
so the reader skips that one object and counts it.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from podtailor.kube.fields import MalformedObject, Obj, resources
from podtailor.numeric import is_int
from podtailor.resources import Resources, ResourcesError, parse_amount


def _amount(name: str, raw: object, where: str) -> int:
    try:
        return parse_amount(name, raw, where=where)
    except ResourcesError as err:
        raise MalformedObject(str(err)) from None


def cpu_millicores(raw: object, where: str) -> int:
    return _amount("cpu", raw, where)


def memory_bytes(raw: object, where: str) -> int:
    return _amount("memory", raw, where)


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
    if not is_int(raw):
        raise MalformedObject(f"{where}: {raw!r} is not an integer")
    return raw


def string_map(raw: object, where: str) -> dict[str, str]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise MalformedObject(f"{where}: not a map")
    return {str(k): str(v) for k, v in raw.items()}


__all__ = ["MalformedObject", "Obj", "condition", "condition_true", "cpu_millicores", "integer", "memory_bytes",
           "optional_resources", "optional_timestamp_s", "resources", "string_map", "timestamp_s"]
