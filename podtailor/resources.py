"""CPU and memory amounts as both halves hold them, and their quantity maps.

Owns ``Resources`` (millicores and bytes, None where unset), ``CurrentResources`` (a container's requests
and limits) and the conversion of a ``Resources`` to and from the ``{"cpu": "250m", "memory": "1Gi"}`` maps
the Kubernetes API carries. Parsing and formatting of a single quantity live in ``podtailor.units``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from podtailor.units import format_cpu, format_memory


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


