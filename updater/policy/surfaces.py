"""Which of a pod's resizable surfaces a resize may touch, by server version and node (pure). Owns the rules for the
surfaces beyond regular containers and native sidecars: plain (non-sidecar) init containers and pod-level
``spec.resources``. A plain init container's change is held back (kept at its values, with the reason in the
decision's message) when the server is older than 1.36 (the API server refuses any change to it), when its
``resizePolicy`` says ``RestartContainer`` (refused since 1.36, ``ValidatePodResize``: "non-sidecar init
containers with a resize policy of RestartContainer cannot be resized"), or when the pod's node does not declare
``InPlacePodVerticalScalingInitContainers`` (NodeDeclaredFeatureValidator, 1.36+); the pod's other containers go
ahead. A pod-level change on a node that does not declare ``InPlacePodLevelResourcesVerticalScaling`` holds the
whole pod (its containers cannot grow past the pod-level value it keeps). Nothing waiting for a node is written
or retried: the planner reads the node's ``declaredFeatures`` every pass and plans the change once the node
declares it. Also the pod's aggregate requests, as the API server counts them (plain init containers run before
the others and do not add up), the pod-level requests derived from the containers' change (podtailor has no
pod-level recommendation), and the pod-level limits a change must stay under (the updater leaves them alone). The
updater acts only on Ready pods, whose plain init containers have all completed: changing one changes what the
kubelet has allocated to the pod (scheduling, quota), not a running cgroup, and never restarts it (the kubelet
resizes a plain init container's cgroup only while it runs, ``computePodActions`` in
``pkg/kubelet/kuberuntime/kuberuntime_container.go``, v1.37.2).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from podtailor.resize import changes as ch
from podtailor.resize.types import RESTART_CONTAINER, ContainerChange, ContainerView
from podtailor.resources import Resources
from updater.answers import NodeFeature, ServerFeatures
from updater.policy.types import NodeView


@dataclass(frozen=True, slots=True, kw_only=True)
class Held:
    """The plain init containers' changes a resize leaves out, and why."""

    changes: tuple[ContainerChange, ...] = ()
    """The changes as proposed (not made)."""
    reasons: tuple[str, ...] = ()
    """One per held container: what keeps it (and what happens next)."""
    node_wait: bool = False
    """Some change waits for the node to declare a feature (the others are refused by the server's version or the
    container's own resizePolicy)."""


def _why_held(view: ContainerView, node: NodeView | None, features: ServerFeatures) -> tuple[str, bool] | None:
    """Why a plain init container's change cannot be made now (and whether it waits for the node), or None."""
    if not features.init_container_resize:
        return (f"init container {view.name} kept: plain init containers are resizable in place from 1.36 "
                "(before, the API server refuses any change to them)", False)
    if RESTART_CONTAINER in view.resize_policy.values():
        return (f"init container {view.name} kept: its resizePolicy RestartContainer makes the API server refuse "
                "its resize (1.36+)", False)
    if features.node_declared_features and (node is None or
                                            NodeFeature.INIT_CONTAINER_RESIZE not in node.declared_features):
        where = node.name if node is not None else "?"
        return (f"init container {view.name} waits for node {where} to declare "
                f"{NodeFeature.INIT_CONTAINER_RESIZE.value} (re-planned every pass, nothing written before)", True)
    return None


def hold_init_changes(views: Sequence[ContainerView], changes: Sequence[ContainerChange], node: NodeView | None,
                      features: ServerFeatures) -> tuple[tuple[ContainerChange, ...], Held]:
    """``changes`` (one per view, in order) with each plain init container's change that cannot be made put back
    to its current values, and what was held."""
    out, held, reasons, node_wait = [], [], [], False
    for view, change in zip(views, changes, strict=True):
        why = _why_held(view, node, features) if view.init and not ch.is_noop(change) else None
        if why is None:
            out.append(change)
            continue
        out.append(ContainerChange(name=view.name, old_requests=view.requests, old_limits=view.limits,
                                   new_requests=view.requests, new_limits=view.limits, restarts=False))
        held.append(change)
        reasons.append(why[0])
        node_wait = node_wait or why[1]
    return tuple(out), Held(changes=tuple(held), reasons=tuple(reasons), node_wait=node_wait)


def pod_level_waits(node: NodeView | None, features: ServerFeatures) -> str | None:
    """Why a pod-level change waits for the pod's node (it does not declare the feature), or None."""
    if not features.node_declared_features or (node is not None and
                                               NodeFeature.POD_LEVEL_RESIZE in node.declared_features):
        return None
    where = node.name if node is not None else "?"
    return (f"pod-level resources wait for node {where} to declare {NodeFeature.POD_LEVEL_RESIZE.value} "
            "(re-planned every pass, nothing written before)")


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
    out = Resources()
    for name in ch.RESOURCES:
        amounts = [(ch.get(r, name), init, sidecar) for r, sidecar, init in rows]
        if all(a is None for a, _, _ in amounts):
            continue
        running = sum(a or 0 for a, init, _ in amounts if not init)
        sidecars = sum(a or 0 for a, init, sidecar in amounts if sidecar and not init)
        inits = [(a or 0) + sidecars for a, init, _ in amounts if init]
        out = ch.put(out, name, max([running, *inits]))
    return out


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
