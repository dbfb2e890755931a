"""The ``podtailor`` estimator's parameters: small parts composed, the risk setting, and their flat view.

Owns ``PodtailorParams``, the composition of the CPU parts (``podtailor_cpu_parts``), the memory parts
(``podtailor_memory_parts``), the risk budget (``podtailor_budget``) and the parts of the decision to resize
defined here (``ResizeBands``, ``DecreaseDwell``, ``MinResources``, ``Confidence``), each a frozen dataclass
with its own few settings, as VPA composes its estimator from small ones (``logic/estimator.go``: percentile,
margin, confidence multiplier, min resources). It also owns the risk setting's bounds (``check_risk``) and
the flat view every caller that sets parameters by name uses: ``parameters_of`` gives ``{"part.field":
value}`` (enums as their strings, for reports and JSON) and ``with_overrides`` applies such names (``--set
podtailor.cpu_price.mode=container``; a whole part or ``risk`` by its own name), rejecting unknown names
and values with ``ValueError``.
"""

from __future__ import annotations

import dataclasses
import enum
import math
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from podtailor.numeric import is_number
from recommender.model.podtailor_budget import RiskBudget
from recommender.model.podtailor_cpu_parts import CpuLevel, CpuLimit, CpuPrice
from recommender.model.podtailor_memory_parts import MemoryLevel, MemoryMargin, MemoryPrice, OomHandling

RISK_MIN, RISK_MAX = 0.05, 20.0
"""Bounds of ``PodtailorParams.risk``: prices 20 times cheaper or dearer than set are outside what the prices
were fitted for (and far outside what a sweep of the shared traces has looked at)."""


def check_risk(risk: float) -> float:
    """``risk`` itself when it is a usable risk setting; else ``ValueError`` saying what is allowed."""
    if not is_number(risk) or not RISK_MIN <= risk <= RISK_MAX:
        raise ValueError(f"risk must be a number in [{RISK_MIN:g}, {RISK_MAX:g}], got {risk!r}"[:120])
    return float(risk)


@dataclass(frozen=True, slots=True, kw_only=True)
class ResizeBands:
    """Hysteresis: a resource "moves" when its target leaves [1 - ``down_fraction``, 1 + up] x its current
    request, so noise does not resize (declines are followed late and in larger steps than growth)."""

    memory_up_fraction: float = 0.0
    """Memory is resized up when its target exceeds the request by more than this (0: any growth is followed
    at once; memory growth risks OOM kills)."""
    cpu_up_fraction: float = 0.1
    """CPU growth under 10% does not resize the pod by itself (it is served from the limit's headroom, not
    killed); the resizes this saves pay for the decrease dwell."""
    down_fraction: float = 0.2
    """Both resources are resized down only when the target is below the request by more than this."""
    coordinate: bool = True
    """A resize is one pod update whatever it changes, so when one resource moves the other takes its fresh
    target in the same update: fewer updates, and the passenger sheds slack (or gains headroom) for free."""

    def __post_init__(self) -> None:
        if not (self.memory_up_fraction >= 0 and self.cpu_up_fraction >= 0 and 0 <= self.down_fraction < 1):
            raise ValueError("resize: the up fractions must be >= 0 and down_fraction in [0, 1)")


@dataclass(frozen=True, slots=True, kw_only=True)
class DecreaseDwell:
    """A decrease waits after the last observed change of the applied values (increases never wait), the
    deeper the less: a target that just rose is not lowered by the next quiet hour, the slack a decrease sheds
    is worth a pod update sooner the larger it is, and small decreases, which a later rise often undoes, wait
    (RESULTS.md, "Decreases wait by their depth")."""

    decrease_s: float = 20 * 3600.0
    """How long a decrease just past the band (a drop of ``ResizeBands.down_fraction``) waits. 0 disables."""
    power: float = 1.0
    """A drop d waits ``decrease_s`` x (down_fraction / d) ^ this: with 1 and 20 h, a 20% drop 20 h, 40% 10 h,
    80% 5 h; 0: every decrease waits ``decrease_s``."""

    def __post_init__(self) -> None:
        if not self.decrease_s >= 0:
            raise ValueError("dwell: decrease_s must be >= 0")
        if not (self.power >= 0 and math.isfinite(self.power)):
            raise ValueError("dwell: power must be finite and >= 0")

    def wait_s(self, ratio: float, down_fraction: float) -> float:
        """How long after the last change a decrease to ``ratio`` x the current request waits."""
        drop = 1.0 - ratio
        if self.power <= 0 or drop <= 0:
            return self.decrease_s
        share: float = (down_fraction / drop) ** self.power
        return self.decrease_s * min(share, 1.0)


@dataclass(frozen=True, slots=True, kw_only=True)
class MinResources:
    """Per-pod floors, split over the pod's containers (smaller than VPA's 25m/250MiB: sidecars are small)."""

    pod_cpu_millicores: float = 10.0
    """The pod's minimum CPU."""
    pod_memory_mib: float = 64.0
    """The pod's minimum memory."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Confidence:
    """How much real history (c days, min(span, samples x interval) per resource) the numbers rest on."""

    full_days: float = 7.0
    """Recommendation.confidence = min(1, c / this)."""
    thin_history_days: float = 1.0
    """Below this much real history a resource's request is not lowered below the current one."""
    no_decrease_on_thin_history: bool = True
    """Whether that rule is on."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PodtailorParams:
    """podtailor's parameters: one part per concern, and the risk setting across both prices."""

    cpu: CpuLevel = field(default_factory=CpuLevel)
    """The CPU request's level: histograms, percentiles, margin, throttling correction."""
    cpu_price: CpuPrice = field(default_factory=CpuPrice)
    """The price of time over the request, which chooses the slow histogram's level."""
    cpu_limit: CpuLimit = field(default_factory=CpuLimit)
    """The CPU limit's rule."""
    memory: MemoryLevel = field(default_factory=MemoryLevel)
    """The memory level: the statistic of the peaks, its histogram and window."""
    memory_price: MemoryPrice = field(default_factory=MemoryPrice)
    """The price of an OOM kill, which chooses the "cost" statistic's level."""
    memory_margin: MemoryMargin = field(default_factory=MemoryMargin)
    """The safety margin on memory, per container or fixed."""
    oom: OomHandling = field(default_factory=OomHandling)
    """The bump after an OOM kill and how long it floors the target."""
    resize: ResizeBands = field(default_factory=ResizeBands)
    """The bands a target must leave to resize, and whether both resources move together."""
    dwell: DecreaseDwell = field(default_factory=DecreaseDwell)
    """How long a decrease waits after the last change."""
    floors: MinResources = field(default_factory=MinResources)
    """The pod's minimum resources."""
    confidence: Confidence = field(default_factory=Confidence)
    """The confidence reported, and no decrease on thin history."""
    budget: RiskBudget = field(default_factory=RiskBudget)
    """The risk each container is held to by its own calibrated margin (``podtailor_budget``; off by default):
    ``run --risk-budget`` sets it for the recommender and the ``podtailor.io/risk-budget`` annotation per VPA."""
    risk: float = 1.0
    """A dimensionless multiplier that divides both overrun prices (``cpu_price``, ``memory_price``): 1 is the
    prices as set, 2 halves them (less slack, more time over the request and more OOM kills), 0.5 doubles them.
    It moves only the priced levels: the fast CPU histogram's percentile, the bounds, margins, floors and OOM
    bumps do not change, and a price of 0 stays 0. Within [``RISK_MIN``, ``RISK_MAX``]; ``backtest --sweep``
    replays a range of it, ``run --risk`` sets it for the recommender and the ``podtailor.io/risk`` annotation
    per VPA."""

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            if f.name != "risk" and not isinstance(getattr(self, f.name), _PARTS[f.name]):
                raise ValueError(f"{f.name} must be a {_PARTS[f.name].__name__}")
        check_risk(self.risk)
        if self.memory_margin.jump_lookback_s < self.memory.slot_s:
            raise ValueError("memory_margin.jump_lookback_s must be at least one slot (memory.slot_s)")


_PARTS: dict[str, type[object]] = {f.name: typing.get_type_hints(PodtailorParams)[f.name]
                                for f in dataclasses.fields(PodtailorParams) if f.name != "risk"}


def parameters_of(params: PodtailorParams) -> dict[str, float | str]:
    """The flat view: ``{"part.field": value}`` for every setting of every part, and ``risk``; enums as their
    strings, so the result is JSON and each name is what ``with_overrides`` takes."""
    out: dict[str, float | str] = {}
    for name in _PARTS:
        part = getattr(params, name)
        for f in dataclasses.fields(part):
            value = getattr(part, f.name)
            out[f"{name}.{f.name}"] = value.value if isinstance(value, enum.Enum) else value
    out["risk"] = params.risk
    return out


def with_overrides(params: PodtailorParams, overrides: Mapping[str, object]) -> PodtailorParams:
    """``params`` with ``overrides`` applied: ``"part.field"`` names (an enum's value may be its string), whole
    parts or ``risk`` by name. Unknown names or bad values raise ``ValueError``; nothing is changed then."""
    # untyped: the values are the caller's (from --set, as Python literals); the parts' checks refuse bad ones
    top: dict[str, Any] = {k: v for k, v in overrides.items() if "." not in k}
    unknown = sorted(k for k in top if k != "risk" and k not in _PARTS)
    nested: dict[str, dict[str, object]] = {}
    for key, value in overrides.items():
        if "." in key:
            part, _, name = key.partition(".")
            nested.setdefault(part, {})[name] = value
    for part, values in nested.items():
        if part not in _PARTS:
            unknown += [f"{part}.{n}" for n in values]
            continue
        hints = typing.get_type_hints(_PARTS[part])
        unknown += [f"{part}.{n}" for n in values if n not in hints]
    if unknown:
        raise ValueError(f"unknown parameter(s) for podtailor: {', '.join(sorted(unknown))}")
    for part, values in nested.items():
        hints = typing.get_type_hints(_PARTS[part])
        top[part] = dataclasses.replace(top.get(part, getattr(params, part)),
                                        **{n: _coerced(f"{part}.{n}", hints[n], v) for n, v in values.items()})
    return dataclasses.replace(params, **top)


def _coerced(name: str, hint: object, value: object) -> object:
    """An enum field's value from its string (as ``--set`` gives it); others as given."""
    if isinstance(hint, type) and issubclass(hint, enum.Enum) and not isinstance(value, hint):
        allowed = [m.value for m in hint]
        if value not in allowed:
            raise ValueError(f"{name} must be one of {', '.join(allowed)}, got {value!r}"[:160])
        return hint(value)
    return value
