"""What the updater observes of a pod after deciding: the values verification and the gates read.

Owns ``PodObservation``: spec and status resources per container, restart counts, the last termination
(OOMKilled and when), readiness, generation and observedGeneration, and the resize conditions. The
adapter builds one from each Pod; the rollout state machine compares it with the journal.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from recommender.model.types import Resources


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
    resize_pending: str | None = None
    """PodResizePending reason: Deferred | Infeasible."""
    resize_pending_message: str = ""
    resize_pending_since_s: float | None = None
    resize_in_progress: bool = False
    resize_error: str | None = None
    """PodResizeInProgress with reason Error: its message."""
    deleting: bool = False
    phase: str = "Running"

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"
