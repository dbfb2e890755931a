"""Per-container resource math of the planner: new requests and limits, QoS class, restarts, change size.

Owns the arithmetic that turns one running container and its VPA target into a ``ContainerChange``, all in
integers (millicores, bytes). Requests: the target, clamped to the VPA min/max (min first, then max), then to
the namespace LimitRange min/max (the LimitRange wins a conflict because LimitRanger admission runs on
``pods/resize`` and would reject anything outside it; VPA lets its own policy win, we cannot), never below 1.
Only ``controlled_resources`` move; a resource an HPA scales on by utilization keeps its request and limit;
a stale target never decreases (the old request is kept). Limits: ``RequestsAndLimits`` keeps the
limit:request ratio (ceil(old limit x new request / old request); no limit stays no limit; an absent request
or request == limit gives limit = request, which keeps Guaranteed), then clamps to the LimitRange max and
``maxLimitRequestRatio`` and never below the request; with the policy's ``keep_limit_ratio`` off, limits stay
(a limit equal to or below the new request becomes the request). ``RequestsOnly`` keeps the limit and caps the request
at it (and raises it to limit / maxLimitRequestRatio when the ratio needs it). Nothing here removes a
request or a limit, adds a limit, or produces 0. The QoS class is computed as Kubernetes does. A plan computes
each distinct (container spec, target, constraints) once (``container_change`` is memoized).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Any

from podtailor.resize.types import (
    RESTART_CONTAINER,
    ContainerChange,
    ContainerTarget,
    ContainerView,
    LimitRangeView,
    QoS,
    ResizeRestart,
)
from podtailor.resources import Resources
from podtailor.vpa import ControlledValues

RESOURCES = ("cpu", "memory")
_NOTHING = Resources()


def get(res: Resources, name: str) -> int | None:
    return res.cpu_millicores if name == "cpu" else res.memory_bytes


def put(res: Resources, name: str, value: int | None) -> Resources:
    if name == "cpu":
        return replace(res, cpu_millicores=value)
    return replace(res, memory_bytes=value)


@dataclass(frozen=True, slots=True, kw_only=True)
class Constraints:
    """What bounds one container's new values beside its target: the namespace LimitRange, the resources an
    HPA scales on, and whether decreases are withheld (stale target)."""

    limit_range: LimitRangeView | None = None
    hpa_resources: frozenset[str] = frozenset()
    no_decrease: bool = False
    keep_limit_ratio: bool = True
    """False (policy ``keep_limit_ratio``): limits stay, except a limit equal to the request follows it (keeps
    Guaranteed) and a limit below the new request is raised to it."""


@dataclass(frozen=True, slots=True, kw_only=True)
class _Amounts:
    request: int | None
    limit: int | None
    notes: tuple[str, ...] = ()


def _clamp(value: int, low: int | None, high: int | None) -> int:
    if low is not None and value < low:
        value = low
    if high is not None and value > high:
        value = high
    return value


def _ratio(lr: LimitRangeView | None, name: str) -> float | None:
    if lr is None:
        return None
    return lr.max_limit_request_ratio_cpu if name == "cpu" else lr.max_limit_request_ratio_memory


def proportional_limit(old_request: int | None, old_limit: int | None, new_request: int) -> int | None:
    """VPA's rule: keep the limit:request ratio, rounding up; no limit stays none; an absent request or
    request == limit gives limit = request (Guaranteed stays Guaranteed). Never below the request."""
    if old_limit is None:
        return None
    if old_request is None or old_request <= 0 or old_request == old_limit:
        return new_request
    return max(new_request, -(-old_limit * new_request // old_request))


def _new_request(name: str, view: ContainerView, target: ContainerTarget, cons: Constraints) -> _Amounts:
    old_req, old_lim = get(view.requests, name), get(view.limits, name)
    want = get(target.target, name)
    assert want is not None
    notes: list[str] = []
    req = _clamp(want, get(target.min_allowed, name), get(target.max_allowed, name))
    if req != want:
        notes.append(f"{name} request clamped to VPA minAllowed/maxAllowed")
    lr = cons.limit_range
    if lr is not None:
        clamped = _clamp(req, get(lr.min, name), get(lr.max, name))
        if clamped != req:
            notes.append(f"{name} request clamped to LimitRange min/max")
        req = clamped
    if cons.no_decrease and old_req is not None and req < old_req:
        req = old_req
        notes.append(f"{name} decrease withheld: stale target")
    return _Amounts(request=max(1, req), limit=old_lim, notes=tuple(notes))


def _requests_only(name: str, amounts: _Amounts, lr: LimitRangeView | None) -> _Amounts:
    req, lim, notes = amounts.request, amounts.limit, list(amounts.notes)
    assert req is not None
    if lim is not None and req > lim:
        req = lim
        notes.append(f"{name} request capped at the limit (RequestsOnly)")
    ratio = _ratio(lr, name)
    if lim is not None and ratio is not None and ratio > 0:
        floor_req = math.ceil(Fraction(lim) / Fraction(ratio))
        if req < floor_req:
            req = min(lim, floor_req)
            notes.append(f"{name} request raised to keep LimitRange maxLimitRequestRatio")
    return _Amounts(request=req, limit=lim, notes=tuple(notes))


def _limits(name: str, old_request: int | None, amounts: _Amounts, lr: LimitRangeView | None) -> _Amounts:
    req, notes = amounts.request, list(amounts.notes)
    assert req is not None
    lim = proportional_limit(old_request, amounts.limit, req)
    if lim is None:
        return _Amounts(request=req, limit=None, notes=tuple(notes))
    lr_max = None if lr is None else get(lr.max, name)
    if lr_max is not None and lim > lr_max:
        lim = lr_max
        notes.append(f"{name} limit clamped to LimitRange max")
    ratio = _ratio(lr, name)
    if ratio is not None and ratio > 0:
        cap = math.floor(Fraction(ratio) * req)
        if lim > cap:
            lim = cap
            notes.append(f"{name} limit clamped to LimitRange maxLimitRequestRatio")
    return _Amounts(request=req, limit=max(lim, req), notes=tuple(notes))


def _fixed_limit(old_request: int | None, amounts: _Amounts) -> _Amounts:
    req, lim = amounts.request, amounts.limit
    assert req is not None
    if lim is None:
        return amounts
    if old_request is None or old_request == lim or req > lim:
        return replace(amounts, limit=req)
    return amounts


def _resource(name: str, view: ContainerView, target: ContainerTarget, cons: Constraints) -> _Amounts:
    old = _Amounts(request=get(view.requests, name), limit=get(view.limits, name))
    if target.mode_off or name not in target.controlled_resources or get(target.target, name) is None:
        return old
    if name in cons.hpa_resources:
        return replace(old, notes=(f"{name} request kept: HPA scales on {name} utilization",))
    amounts = _new_request(name, view, target, cons)
    if target.controlled_values is ControlledValues.REQUESTS_ONLY:
        return _requests_only(name, amounts, cons.limit_range)
    if not cons.keep_limit_ratio:
        return _fixed_limit(old.request, amounts)
    return _limits(name, old.request, amounts, cons.limit_range)


def container_change(view: ContainerView, target: ContainerTarget, cons: Constraints) -> ContainerChange:
    """``compute_change``, memoized on what it reads of the view (name, requests, limits, resizePolicy), the
    target and the constraints, all immutable values: the replicas of one workload share a spec, so a plan of
    many pods computes each distinct container once. The cache is bounded (least recently used go first)."""
    policy = tuple(view.resize_policy.items())
    return _memo_change(view.name, view.requests, view.limits, policy, target, cons)


@functools.lru_cache(maxsize=4096)
def _memo_change(name: str, requests: Resources, limits: Resources, policy: tuple[tuple[str, ResizeRestart], ...],
                 target: ContainerTarget, cons: Constraints) -> ContainerChange:
    view = ContainerView(name=name, requests=requests, limits=limits, resize_policy=dict(policy))
    return compute_change(view, target, cons)


def compute_change(view: ContainerView, target: ContainerTarget, cons: Constraints) -> ContainerChange:
    """The container's new values (equal to the old ones when nothing moves); ``restarts`` is set when a
    changed resource has resizePolicy RestartContainer."""
    cpu, memory = _resource("cpu", view, target, cons), _resource("memory", view, target, cons)
    requests = Resources(cpu_millicores=cpu.request, memory_bytes=memory.request)
    limits = Resources(cpu_millicores=cpu.limit, memory_bytes=memory.limit)
    moved = _moved(view.requests, view.limits, requests, limits)
    return ContainerChange(name=view.name, old_requests=view.requests, old_limits=view.limits, new_requests=requests,
                           new_limits=limits, restarts=_restarting(view, moved), notes=cpu.notes + memory.notes)


def _moved(old_requests: Resources, old_limits: Resources, new_requests: Resources,
           new_limits: Resources) -> frozenset[str]:
    return frozenset(name for name in RESOURCES
                     if get(old_requests, name) != get(new_requests, name)
                     or get(old_limits, name) != get(new_limits, name))


def _restarting(view: ContainerView, moved: frozenset[str]) -> bool:
    """Missing resizePolicy means NotRequired: only RestartContainer restarts."""
    return any(view.resize_policy.get(name) == RESTART_CONTAINER for name in moved)


def is_noop(change: ContainerChange) -> bool:
    return change.old_requests == change.new_requests and change.old_limits == change.new_limits


def relative_change(change: ContainerChange) -> float:
    """Largest |new - old| / old over the container's requests; adding a request counts as infinite."""
    worst = 0.0
    for name in RESOURCES:
        old, new = get(change.old_requests, name), get(change.new_requests, name)
        if old == new:
            continue
        if old is None or old <= 0:
            return math.inf
        worst = max(worst, abs((new or 0) - old) / old)
    return worst


def has_decrease(change: ContainerChange) -> bool:
    for name in RESOURCES:
        old, new = get(change.old_requests, name), get(change.new_requests, name)
        if old is not None and new is not None and new < old:
            return True
    return False


def inside_bounds(view: ContainerView, target: ContainerTarget) -> bool:
    """Every controlled request with a recommendation lies in [lowerBound, upperBound] (bounds that are unset
    do not constrain; a missing request is outside)."""
    if target.mode_off:
        return True
    for name in RESOURCES:
        if name not in target.controlled_resources or get(target.target, name) is None:
            continue
        req = get(view.requests, name)
        low, high = get(target.lower_bound, name), get(target.upper_bound, name)
        if req is None or (low is not None and req < low) or (high is not None and req > high):
            return False
    return True


def qos_class(containers: Iterable[tuple[Resources, Resources]]) -> QoS:
    """Kubernetes' rule over (requests, limits) of every container: BestEffort when nothing is set anywhere;
    Guaranteed when every container has cpu and memory limits and requests equal to them (an unset request
    defaults to the limit); else Burstable."""
    pairs = list(containers)
    if all(r == _NOTHING and lim == _NOTHING for r, lim in pairs):
        return QoS.BEST_EFFORT
    for req, lim in pairs:
        for request, limit in ((req.cpu_millicores, lim.cpu_millicores), (req.memory_bytes, lim.memory_bytes)):
            if limit is None or (request is not None and request != limit):
                return QoS.BURSTABLE
    return QoS.GUARANTEED


def _tighter(a: int | None, b: int | None, pick: Any) -> int | None:
    if a is None:
        return b
    if b is None:
        return a
    return int(pick(a, b))


def _tighter_ratio(a: float | None, b: float | None) -> float | None:
    return b if a is None else a if b is None else min(a, b)


def merge_limit_ranges(a: LimitRangeView, b: LimitRangeView) -> LimitRangeView:
    """The tightest of two LimitRanges of one namespace: highest min, lowest max, lowest ratio."""
    lo, hi = a.min, a.max
    for name in RESOURCES:
        lo = put(lo, name, _tighter(get(lo, name), get(b.min, name), max))
        hi = put(hi, name, _tighter(get(hi, name), get(b.max, name), min))
    return replace(a, min=lo, max=hi,
                   max_limit_request_ratio_cpu=_tighter_ratio(a.max_limit_request_ratio_cpu,
                                                              b.max_limit_request_ratio_cpu),
                   max_limit_request_ratio_memory=_tighter_ratio(a.max_limit_request_ratio_memory,
                                                                 b.max_limit_request_ratio_memory))


def limit_ranges_by_namespace(views: Iterable[LimitRangeView]) -> dict[str, LimitRangeView]:
    """Namespace -> the tightest of its LimitRanges (``merge_limit_ranges``), namespaces in first-seen order."""
    out: dict[str, LimitRangeView] = {}
    for view in views:
        out[view.namespace] = merge_limit_ranges(out[view.namespace], view) if view.namespace in out else view
    return out
