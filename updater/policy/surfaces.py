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
declares it. The pod's aggregate requests, the pod-level requests derived from the containers' change and the
pod-level limits a change must stay under are the base's (``podtailor.resize.pod_level``, re-exported here), so
the report's patches derive the same values. The updater acts only on Ready pods, whose plain init containers
have all completed: changing one changes what the kubelet has allocated to the pod (scheduling, quota), not a
running cgroup, and never restarts it (the kubelet resizes a plain init container's cgroup only while it runs,
``computePodActions`` in ``pkg/kubelet/kuberuntime/kuberuntime_container.go``, v1.37.2).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from podtailor.resize import changes as ch
from podtailor.resize.pod_level import aggregate as aggregate
from podtailor.resize.pod_level import aggregate_requests as aggregate_requests
from podtailor.resize.pod_level import pod_level as pod_level
from podtailor.resize.pod_level import pod_level_limit_breach as pod_level_limit_breach
from podtailor.resize.types import RESTART_CONTAINER, ContainerChange, ContainerView
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
