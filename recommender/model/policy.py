"""Shared post-processing from a strategy's raw estimate to a ``Recommendation``.

Owns what every strategy does the same way on the way out, in this order: drop resources outside
``controlled_resources`` and everything under ``mode: Off``; keep lower <= target <= upper; round UP once to
whole millicores / bytes (or a coarser step the strategy asks for); cap at VPA's MaxResourceAmount (1e14);
record the rounded target as ``uncapped_target``; clamp target and bounds into [minAllowed, maxAllowed]
(min first, then max, so maxAllowed wins a conflict as in VPA's capping processor); never below 1 unit;
then limits. Limits follow the strategy's ``LimitRule``: PROPORTIONAL keeps the current limit:request ratio
(ceil of limit x new request / request in integers, never below the request; a missing request or
request == limit gives limit = request, which keeps Guaranteed QoS; no current limit, no limit), EXPLICIT
uses the strategy's own number under the same QoS rules, NONE recommends no limit and EQUAL sets the limit
to the request. ``RequestsOnly`` always leaves limits None. Inputs are floats in cores and bytes; NaN never
leaves this module (a NaN estimate raises).
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, replace

from podtailor.resources import CurrentResources, Resources
from podtailor.vpa import ControlledValues
from recommender.model.types import ContainerPolicy, Recommendation

MAX_RESOURCE_AMOUNT = 10**14
"""VPA's ceiling for any amount, in millicores or bytes (why no-history upper bounds read 100G / 100T)."""


class LimitRule(enum.Enum):
    PROPORTIONAL = "proportional"
    EXPLICIT = "explicit"
    NONE = "none"
    EQUAL_TO_REQUEST = "equal-to-request"


@dataclass(frozen=True, slots=True, kw_only=True)
class ResourceEstimate:
    """A strategy's numbers for one resource, in cores (CPU) or bytes (memory), before capping."""

    target: float
    lower: float
    upper: float
    limit_rule: LimitRule = LimitRule.PROPORTIONAL
    limit: float | None = None
    """The strategy's own limit, used with ``LimitRule.EXPLICIT``."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Estimate:
    """What a strategy hands to ``finalize``: None for a resource means no recommendation for it."""

    cpu: ResourceEstimate | None
    memory: ResourceEstimate | None
    confidence: float
    reasons: tuple[str, ...] = ()
    cpu_step_millicores: int = 1
    memory_step_bytes: int = 1


def no_recommendation(reason: str, confidence: float = 0.0) -> Recommendation:
    empty = Resources()
    return Recommendation(target=empty, lower_bound=empty, upper_bound=empty, uncapped_target=empty,
                          limits=empty, confidence=confidence, reasons=(reason,))


def round_up(value: float, scale: float, step: int) -> int:
    """ceil(value x scale) to a multiple of ``step``, at least one step, at most MAX_RESOURCE_AMOUNT.
    Rounding to 6 decimals first keeps float noise (0.1 x 1000 = 100.00000000000001) from adding a unit."""
    if math.isnan(value):
        raise ValueError("NaN estimate")
    if math.isinf(value) or value * scale >= MAX_RESOURCE_AMOUNT:
        return MAX_RESOURCE_AMOUNT
    units = max(math.ceil(round(value * scale, 6)), 1)
    return min(-(-units // step) * step, MAX_RESOURCE_AMOUNT)


@dataclass(frozen=True, slots=True, kw_only=True)
class _Finished:
    target: int
    lower: int
    upper: int
    uncapped: int
    limit: int | None
    reasons: tuple[str, ...]


def _clamp(value: int, low: int | None, high: int | None) -> int:
    if low is not None:
        value = max(value, low)
    if high is not None:
        value = min(value, high)
    return max(value, 1)


def scaled_limit(*, new_request: int, current_request: int | None, current_limit: int | None,
                 explicit: int | None = None) -> int | None:
    """A limit for ``new_request`` under the QoS-preserving rules above (``explicit`` replaces scaling)."""
    if current_limit is None:
        return None
    if current_request is None or current_request <= 0 or current_request == current_limit:
        return new_request
    if explicit is not None:
        return max(explicit, new_request)
    return max(-(-current_limit * new_request // current_request), new_request)


def _finish(name: str, est: ResourceEstimate, *, scale: float, step: int, policy: ContainerPolicy,
            current: CurrentResources, controlled_values: ControlledValues) -> _Finished:
    lo_allowed = getattr(policy.min_allowed, name)
    hi_allowed = getattr(policy.max_allowed, name)
    target = round_up(est.target, scale, step)
    lower = min(round_up(est.lower, scale, step), target)
    upper = max(round_up(est.upper, scale, step), target)
    reasons: list[str] = []
    label = name.split("_")[0]
    if hi_allowed is not None and target > hi_allowed:
        reasons.append(f"{label}: capped by maxAllowed")
    elif lo_allowed is not None and target < lo_allowed:
        reasons.append(f"{label}: raised to minAllowed")
    capped = _clamp(target, lo_allowed, hi_allowed)
    limit = None
    if controlled_values is ControlledValues.REQUESTS_AND_LIMITS:
        limit = _limit(name, est, capped, scale=scale, step=step, current=current)
    return _Finished(target=capped, lower=_clamp(lower, lo_allowed, hi_allowed),
                     upper=_clamp(upper, lo_allowed, hi_allowed), uncapped=target, limit=limit,
                     reasons=tuple(reasons))


def _limit(name: str, est: ResourceEstimate, request: int, *, scale: float, step: int,
           current: CurrentResources) -> int | None:
    if est.limit_rule is LimitRule.NONE:
        return None
    if est.limit_rule is LimitRule.EQUAL_TO_REQUEST:
        return request
    explicit = None
    if est.limit_rule is LimitRule.EXPLICIT and est.limit is not None:
        explicit = round_up(est.limit, scale, step)
    return scaled_limit(new_request=request, current_request=getattr(current.requests, name),
                        current_limit=getattr(current.limits, name), explicit=explicit)


def finalize(estimate: Estimate, *, policy: ContainerPolicy, current: CurrentResources) -> Recommendation:
    """Apply the shared post-processing (see the module docstring) to a strategy's estimate."""
    if policy.mode_off:
        return no_recommendation("mode Off", estimate.confidence)
    done: dict[str, _Finished] = {}
    parts = (("cpu", "cpu_millicores", estimate.cpu, 1000.0, estimate.cpu_step_millicores),
             ("memory", "memory_bytes", estimate.memory, 1.0, estimate.memory_step_bytes))
    for resource, field_name, est, scale, step in parts:
        if est is not None and resource in policy.controlled_resources:
            done[field_name] = _finish(field_name, est, scale=scale, step=step, policy=policy, current=current,
                                       controlled_values=policy.controlled_values)
    reasons = list(estimate.reasons)
    for fin in done.values():
        reasons.extend(fin.reasons)
    if not done:
        reasons.append("no controlled resource recommended")

    def pick(attr: str) -> Resources:
        return Resources(**{k: getattr(v, attr) for k, v in done.items()})

    return Recommendation(target=pick("target"), lower_bound=pick("lower"), upper_bound=pick("upper"),
                          uncapped_target=pick("uncapped"), limits=pick("limit"),
                          confidence=min(max(estimate.confidence, 0.0), 1.0), reasons=tuple(reasons))


def with_floor(est: ResourceEstimate, floor: float) -> ResourceEstimate:
    """Raise target and both bounds to at least ``floor`` (a strategy's minimum resource)."""
    return replace(est, target=max(est.target, floor), lower=max(est.lower, floor), upper=max(est.upper, floor))
