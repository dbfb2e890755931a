"""CPU and memory amounts as both halves hold them, and their quantity maps.

Owns ``Resources`` (millicores and bytes, None where unset), ``CurrentResources`` (a container's requests
and limits) and the conversion of a ``Resources`` to and from the ``{"cpu": "250m", "memory": "1Gi"}`` maps
the Kubernetes API carries: ``parse_resources`` (the one reader: exact, rounded up once, cached because a
cluster repeats the same few strings thousands of times) and ``quantities`` (the one writer). ``human_quantities``
and ``human`` are the same as a command's text output shows them to a person ("574m / 1.2Gi"). Parsing and
formatting of a single quantity live in ``podtailor.units``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache

from podtailor.units import (
    QuantityError,
    format_cpu,
    format_memory,
    human_memory,
    parse_cpu_millicores,
    parse_memory_bytes,
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Resources:
    """CPU and memory amounts; None means unset (no request or no limit)."""

    cpu_millicores: int | None = None
    memory_bytes: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class CurrentResources:
    """What the container's pod template asks for today."""

    requests: Resources = field(default_factory=Resources)
    limits: Resources = field(default_factory=Resources)


def quantities(res: Resources) -> dict[str, str]:
    out = {}
    if res.cpu_millicores is not None:
        out["cpu"] = format_cpu(res.cpu_millicores)
    if res.memory_bytes is not None:
        out["memory"] = format_memory(res.memory_bytes)
    return out


def human_quantities(res: Resources) -> dict[str, str]:
    """``quantities`` as a command's text output shows them to a person: CPU exact, as kubectl prints it,
    memory rounded by ``human_memory`` ("1.2Gi"). Machine-readable outputs and API writes use ``quantities``."""
    out = {}
    if res.cpu_millicores is not None:
        out["cpu"] = format_cpu(res.cpu_millicores)
    if res.memory_bytes is not None:
        out["memory"] = human_memory(res.memory_bytes)
    return out


def human_amount(name: str, amount: int) -> str:
    """One amount of ``name`` ("cpu": millicores, "memory": bytes) as ``human_quantities`` shows it."""
    return format_cpu(amount) if name == "cpu" else human_memory(amount)


def human(res: Resources) -> str:
    """CPU and memory for a person, "574m / 1.2Gi", with "-" where unset."""
    q = human_quantities(res)
    return " / ".join(q.get(k, "-") for k in ("cpu", "memory"))


class ResourcesError(ValueError):
    """A resource list, or one of its cpu and memory quantities, that cannot be read; the message names the
    field (``where``, then the resource)."""


@lru_cache(maxsize=8192)
def _cpu(text: str) -> int:
    return parse_cpu_millicores(text)


@lru_cache(maxsize=8192)
def _memory(text: str) -> int:
    return parse_memory_bytes(text)


def parse_amount(name: str, raw: object, *, where: str) -> int:
    """One quantity of resource ``name`` ("cpu": millicores, anything else: bytes); raises ResourcesError
    ("<where>.<name>: <why>")."""
    try:
        if name == "cpu":
            return _cpu(raw) if isinstance(raw, str) else parse_cpu_millicores(raw)  # type: ignore[arg-type]
        return _memory(raw) if isinstance(raw, str) else parse_memory_bytes(raw)  # type: ignore[arg-type]
    except (QuantityError, TypeError) as err:
        raise ResourcesError(f"{where}.{name}: {err}") from None


def parse_resources(raw: object, *, where: str, lenient: bool = False) -> Resources:
    """A ``{"cpu": "250m", "memory": "1Gi"}`` map as Resources: other resources (GPUs, storage) are ignored,
    an absent map or amount (None) is unset. Anything but a map, or an unreadable quantity, raises
    ResourcesError naming ``where``; with ``lenient`` it makes the whole map unset instead (for readers of
    what the API server already validated, where unreadable means unsupported, never zero)."""
    try:
        if raw is None:
            return Resources()
        if not isinstance(raw, Mapping):
            raise ResourcesError(f"{where}: not a resource list")
        cpu, memory = raw.get("cpu"), raw.get("memory")
        return Resources(cpu_millicores=None if cpu is None else parse_amount("cpu", cpu, where=where),
                         memory_bytes=None if memory is None else parse_amount("memory", memory, where=where))
    except ResourcesError:
        if lenient:
            return Resources()
        raise
