"""What the updater observes of a pod after deciding: the values verification and the gates read.

Owns ``PodObservation``: spec and status resources per container, restart counts, the last termination
(OOMKilled and when), readiness, generation and observedGeneration, and the resize conditions. The
adapter builds one from each Pod; the rollout state machine compares it with the journal.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from podtailor.resources import Resources
from updater.answers import InfeasibleCause, PendingReason

SERVING_GATE = "podtailor.io/serving"
"""The readiness gate the webhook adds to opted-in pods: the updater sets it False to take the pod out of its
Services' endpoints before a restarting resize, and True once the restarted containers are ready."""
DRAIN_ANNOTATION = "podtailor.io/drain-before-restart"
"""On a pod template, ``"true"``: the webhook adds ``SERVING_GATE`` to its new pods (opt-in)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ContainerObservation:
    spec_requests: Resources
    spec_limits: Resources
    actual_requests: Resources | None
    """``status.containerStatuses[].resources.requests``: what the kubelet has actuated (None: not reported)."""
    actual_limits: Resources | None
    restart_count: int = 0
    last_termination_reason: str | None = None
    last_termination_s: float | None = None
    """``lastState.terminated.finishedAt`` in Unix seconds."""
    ready: bool = True
    container_id: str = ""
    """``containerID`` without its runtime prefix: how the container's cgroup is found in cAdvisor's series."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PodObservation:
    namespace: str
    name: str
    uid: str
    resource_version: str
    generation: int
    observed_generation: int
    ready: bool
    node: str
    containers: Mapping[str, ContainerObservation] = field(default_factory=dict)
    resize_pending: PendingReason | None = None
    """PodResizePending reason, None when absent."""
    resize_pending_message: str = ""
    infeasible_cause: InfeasibleCause | None = None
    """With PodResizePending Infeasible: why, read from the kubelet's message by the adapter."""
    resize_pending_since_s: float | None = None
    resize_in_progress: bool = False
    resize_error: str | None = None
    """PodResizeInProgress with reason Error: its message."""
    deleting: bool = False
    phase: str = "Running"
    gated: bool = False
    """``spec.readinessGates`` has our ``SERVING_GATE``: its traffic can be drained before a restart."""
    serving: bool | None = None
    """The ``SERVING_GATE`` condition: True, False, or None when absent."""
    containers_ready: bool = True
    """The ContainersReady condition (Ready also needs every readiness gate True)."""
    endpoint_ready: bool | None = None
    """Whether an EndpointSlice lists the pod as a ready endpoint; None when no slice lists it."""
    cgroup_disagreement: str = ""
    """Status says the resize is done but a container's cgroup (the kubelet's cAdvisor series) holds something
    else: the container and field (``updater.cgroups.disagreement``); empty when they agree or were not read."""
    cgroup_disagreement_s: float = 0.0
    """For how long that disagreement has been seen (``updater.cgroups.GRACE_S`` is allowed)."""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"
