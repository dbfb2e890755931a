"""CPU startup boost (VPA's AEP-7862): more CPU at admission, taken back in place once the pod is Ready.

Owns the ``spec.startupBoost`` value of a VPA (and of a container policy, which wins for its container, as
VPA's ``getContainerStartupBoostPolicy`` in ``pkg/admission-controller/resource/pod/patch/resource_updates.go``
does), its validation, the boost arithmetic and the ``podtailor.io/startup-boost`` pod annotation that records,
per container, the boosted CPU request and the unboosted target it is taken back to. Shape, as VPA's
``GenericStartupBoost`` (``pkg/apis/autoscaling.k8s.io/v1/types.go``, v1.8.1)::

    startupBoost: {cpu: {type: Factor | Quantity, factor: 2, quantity: "500m", durationSeconds: 30}}

``Factor``: boosted = ceil(target x factor) (VPA truncates a float product; we keep it exact and round up once);
``Quantity``: boosted = target + quantity (VPA's ``calculateBoostedCPUValue`` adds the quantity to the base; its
API comment calls it the value itself, its code adds it, and we follow the code). Rejected, as VPA's
``validateVPASpecStartupBoost`` (``pkg/admission-controller/resource/vpa/validation.go``) rejects them, plus
what we think absurd: no or unknown ``type``; a factor below 1 or above ``MAX_FACTOR``; a quantity that is
malformed, negative, zero or above ``MAX_QUANTITY_MILLICORES``; a ``durationSeconds`` that is negative, not an
integer or above ``MAX_DURATION_S``. A rejected boost is not applied: the pod is admitted at its target.
Pure: no client, no clock.
"""

from __future__ import annotations

import enum
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction

from podtailor.numeric import is_int, is_number
from podtailor.units import QuantityError, format_cpu, parse_cpu_millicores

ANNOTATION = "podtailor.io/startup-boost"
"""Set by the webhook on a boosted pod: ``{"<container>": {"boosted": "1", "target": "500m"}, ...}`` (CPU
requests). The updater takes a container's boost back while its spec CPU request still equals ``boosted``."""
MAX_FACTOR = 100
"""A factor above this is a typo, not a boost."""
MAX_QUANTITY_MILLICORES = 256_000
"""256 cores: more extra CPU than any node has."""
MAX_DURATION_S = 86_400
"""A boost held for more than a day after Ready is not a startup boost."""


class BoostError(ValueError):
    """A ``startupBoost`` that is not applied; the message names the field."""


class BoostType(enum.StrEnum):
    FACTOR = "Factor"
    QUANTITY = "Quantity"


@dataclass(frozen=True, slots=True, kw_only=True)
class CpuBoost:
    """One valid CPU startup boost."""

    type: BoostType
    factor: Fraction = Fraction(1)
    """With FACTOR: the multiplier, >= 1."""
    quantity_millicores: int = 0
    """With QUANTITY: the CPU added to the target."""
    duration_s: int = 0
    """How long after the pod became Ready the boost is kept (VPA's default 0: taken back once Ready)."""


def _factor(raw: object, where: str) -> Fraction:
    if not (is_number(raw) or isinstance(raw, str)):
        raise BoostError(f"{where}.factor: {raw!r} is not a number")
    try:
        value = Fraction(raw) if not isinstance(raw, float) or math.isfinite(raw) else None
    except (ValueError, ZeroDivisionError):
        value = None
    if value is None:
        raise BoostError(f"{where}.factor: {raw!r} is not a number")
    if value < 1:
        raise BoostError(f"{where}.factor: {raw!r} is below 1 (a boost never lowers the request)")
    if value > MAX_FACTOR:
        raise BoostError(f"{where}.factor: {raw!r} is above {MAX_FACTOR}")
    return value


def _quantity(raw: object, where: str) -> int:
    try:
        if isinstance(raw, str) and raw.strip().startswith("-"):  # the quantity grammar would call it malformed
            raise QuantityError(f"negative quantity {raw!r}")
        millicores = parse_cpu_millicores(raw)  # type: ignore[arg-type]  # raises on anything but a quantity
    except (QuantityError, TypeError) as err:
        raise BoostError(f"{where}.quantity: {err}") from None
    if millicores <= 0:
        raise BoostError(f"{where}.quantity: {raw!r} adds nothing")
    if millicores > MAX_QUANTITY_MILLICORES:
        raise BoostError(f"{where}.quantity: {raw!r} is above {format_cpu(MAX_QUANTITY_MILLICORES)}")
    return millicores


def _duration(raw: object, where: str) -> int:
    if raw is None:
        return 0
    if not is_int(raw):
        raise BoostError(f"{where}.durationSeconds: {raw!r} is not a whole number of seconds")
    if raw < 0 or raw > MAX_DURATION_S:
        raise BoostError(f"{where}.durationSeconds: {raw} is outside 0..{MAX_DURATION_S}")
    return raw


def parse_boost(raw: object, where: str) -> CpuBoost | None:
    """A ``startupBoost`` map as a CpuBoost; None when it has no ``cpu`` part. Raises BoostError."""
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise BoostError(f"{where}: not a map")
    cpu = raw.get("cpu")
    if cpu is None:
        return None
    where = f"{where}.cpu"
    if not isinstance(cpu, Mapping):
        raise BoostError(f"{where}: not a map")
    try:
        kind = BoostType(str(cpu.get("type")))
    except ValueError:
        raise BoostError(f"{where}.type: {cpu.get('type')!r} is not Factor or Quantity") from None
    duration = _duration(cpu.get("durationSeconds"), where)
    if kind is BoostType.FACTOR:
        return CpuBoost(type=kind, factor=_factor(cpu.get("factor"), where), duration_s=duration)
    return CpuBoost(type=kind, quantity_millicores=_quantity(cpu.get("quantity"), where), duration_s=duration)


def boosted_cpu(target_millicores: int, boost: CpuBoost) -> int:
    """The boosted CPU request before any cap: ceil(target x factor), or target + quantity."""
    if boost.type is BoostType.FACTOR:
        product = boost.factor * target_millicores
        return -((-product.numerator) // product.denominator)
    return target_millicores + boost.quantity_millicores


@dataclass(frozen=True, slots=True, kw_only=True)
class BoostRecord:
    """What the annotation says of one container."""

    boosted_millicores: int
    target_millicores: int


def annotation_value(records: Mapping[str, BoostRecord]) -> str:
    return json.dumps({name: {"boosted": format_cpu(r.boosted_millicores), "target": format_cpu(r.target_millicores)}
                       for name, r in sorted(records.items())}, separators=(",", ":"))


def read_annotation(text: str | None) -> dict[str, BoostRecord]:
    """The annotation's records; {} when absent or unreadable (a hand-edited value boosts nothing)."""
    if not text:
        return {}
    try:
        raw = json.loads(text)
        if not isinstance(raw, dict):
            return {}
        return {str(name): BoostRecord(boosted_millicores=parse_cpu_millicores(v["boosted"]),
                                       target_millicores=parse_cpu_millicores(v["target"]))
                for name, v in raw.items()}
    except (ValueError, TypeError, KeyError, QuantityError):
        return {}
