"""A pod's pod-level ``spec.resources`` against its containers' requests, as the API server counts them (pure).

Owns the rules both halves follow for pod-level resources: the pod's aggregate requests (plain init containers
run before the others and do not add up), the pod-level requests derived from a change of the containers'
requests (podtailor has no pod-level recommendation: each pod-level request is scaled with the aggregate, never
below it), and why a change would be refused under the pod-level limits, which are left alone. The updater's
planner (``updater/policy/surfaces.py``, ``decide.py``) and the report's patches (``recommender/report``) call the
same functions, so a workload patched with the report's values leaves the updater nothing to derive.
"""

from __future__ import annotations

from collections.abc import Iterable

from podtailor.resize import changes as ch
from podtailor.resize.types import ContainerChange, ContainerView
from podtailor.resources import Resources


def pod_level_limit_breach(limits: Resources | None, new_pod_level: Resources | None,
                           changes: Iterable[ContainerChange]) -> str | None:
    """Why the API server would refuse the change against the pod-level limits it leaves alone, or None: a
    pod-level request above its limit (``validatePodResourceRequirements``) or a container limit above the
    pod-level one ("must be less than or equal to pod limits", ``validatePodResourceConsistency``)."""
    if limits is None:
        return None
    for name in ch.RESOURCES:
        limit = ch.get(limits, name)
        if limit is None:
            continue
        request = ch.get(new_pod_level, name) if new_pod_level is not None else None
        if request is not None and request > limit:
            return (f"pod-level {name} request would be {request} above the pod-level limit {limit}: the API server "
                    "refuses it, so the pod is left alone (raise the pod-level limit)")
        over = [c.name for c in changes if (ch.get(c.new_limits, name) or 0) > limit]
        if over:
            return (f"{name} limit of {', '.join(over)} would be above the pod-level limit {limit}: the API server "
                    "refuses it, so the pod is left alone")
    return None


def aggregate_requests(items: Iterable[tuple[Resources, bool, bool]]) -> Resources:
    """The pod's aggregate requests from (requests, sidecar, init) per container, as the API server counts them
    (``AggregateContainerRequests``, ``k8s.io/component-helpers/resource/helpers.go``, v0.37.2): the sum of the
    regular containers and sidecars, or, if larger, a plain init container's request plus the sidecars'. Upstream
    adds only the sidecars declared before that init container; this adds all of them (an upper bound: the
    views do not keep the order of init containers and sidecars). A resource no container requests is None."""
    rows = list(items)
    return Resources(cpu_millicores=_aggregate([(r.cpu_millicores, init, sidecar) for r, sidecar, init in rows]),
                     memory_bytes=_aggregate([(r.memory_bytes, init, sidecar) for r, sidecar, init in rows]))


def _aggregate(amounts: list[tuple[int | None, bool, bool]]) -> int | None:
    """``aggregate_requests`` for one resource, from (amount, init, sidecar) per container."""
    if all(a is None for a, _, _ in amounts):
        return None
    running = sum(a or 0 for a, init, _ in amounts if not init)
    sidecars = sum(a or 0 for a, init, sidecar in amounts if sidecar and not init)
    inits = [(a or 0) + sidecars for a, init, _ in amounts if init]
    return max([running, *inits])


def aggregate(changes: tuple[ContainerChange, ...], views: tuple[ContainerView, ...], *, new: bool) -> Resources:
    """The pod's aggregate requests before or after ``changes`` (one per view), as the API server counts them."""
    return aggregate_requests((c.new_requests if new else c.old_requests, v.sidecar, v.init)
                              for c, v in zip(changes, views, strict=True))


def pod_level(old: Resources | None, changes: tuple[ContainerChange, ...],
              views: tuple[ContainerView, ...]) -> Resources | None:
    """Scale each pod-level request by (new aggregate container requests) / (old aggregate), rounding up, and
    never below the new aggregate (the API requires pod-level >= the containers' aggregate,
    ``validatePodResourceConsistency``). None: unchanged."""
    if old is None:
        return None
    new = old
    before_all, after_all = aggregate(changes, views, new=False), aggregate(changes, views, new=True)
    for name in ch.RESOURCES:
        amount = ch.get(old, name)
        if amount is None:
            continue
        before, after = ch.get(before_all, name) or 0, ch.get(after_all, name) or 0
        scaled = -(-amount * after // before) if before > 0 else amount
        new = ch.put(new, name, max(1, scaled, after))
    return None if new == old else new
