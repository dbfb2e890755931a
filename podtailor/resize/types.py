"""The vocabulary of an in-place resize, shared by the updater's planner and the report's forecast.

Owns the value types that say what a container is (``ContainerView``), what it is asked to become
(``ContainerTarget``), what the namespace allows (``LimitRangeView``), what would change
(``ContainerChange``), the QoS classes and the reasons a resize is not made. Nothing here imports a
client, a logger or the clock.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field

from podtailor.resize.boost import CpuBoost
from podtailor.resources import Resources
from podtailor.vpa import ControlledValues

DEFAULT_CHANGE_THRESHOLD = 0.10
"""A resize is skipped unless some controlled request changes by at least this fraction (the updater's
policy default; the report forecasts with the same figure)."""



class ResizeRestart(enum.StrEnum):
    """A container's ``resizePolicy[].restartPolicy`` for one resource (``ResourceResizeRestartPolicy``,
    ``k8s.io/api/core/v1`` types.go): whether resizing that resource restarts the container. A resource the
    policy does not name is NotRequired."""

    NOT_REQUIRED = "NotRequired"
    RESTART_CONTAINER = "RestartContainer"
    PREFER_NO_RESTART = "PreferNoRestart"
    """KEP-1287's name for NotRequired; read as not restarting, like NotRequired."""


NOT_REQUIRED, RESTART_CONTAINER = ResizeRestart.NOT_REQUIRED, ResizeRestart.RESTART_CONTAINER


def resize_restart_policies(raw: object, where: str) -> dict[str, ResizeRestart]:
    """A container's ``resizePolicy`` list as resource -> policy (an entry without ``restartPolicy`` is
    NotRequired). Raises ValueError, naming ``where``, on a list that is not one or a policy the API does not
    define."""
    if raw is None:
        return {}
    if not isinstance(raw, list) or not all(isinstance(p, Mapping) for p in raw):
        raise ValueError(f"{where}.resizePolicy: not a list of objects")
    out = {}
    for p in raw:
        value = p.get("restartPolicy", NOT_REQUIRED)
        try:
            out[str(p.get("resourceName"))] = ResizeRestart(value)
        except ValueError:
            raise ValueError(f"{where}.resizePolicy: restartPolicy {value!r} is not NotRequired or "
                             "RestartContainer") from None
    return out


class PodRestartPolicy(enum.StrEnum):
    """A pod's ``spec.restartPolicy`` (``k8s.io/api/core/v1`` ``RestartPolicy``); unset means Always."""

    ALWAYS = "Always"
    ON_FAILURE = "OnFailure"
    NEVER = "Never"
    """A container restart is impossible: a resize that restarts a container cannot be made in place."""


class QoS(enum.StrEnum):
    GUARANTEED = "Guaranteed"
    BURSTABLE = "Burstable"
    BEST_EFFORT = "BestEffort"


@dataclass(frozen=True, slots=True, kw_only=True)
class ContainerView:
    name: str
    requests: Resources
    limits: Resources
    resize_policy: Mapping[str, ResizeRestart] = field(default_factory=dict)
    """resource ("cpu"/"memory") -> its resize restart policy; missing means NotRequired."""
    sidecar: bool = False
    """A restartable init container (resizable like a regular container)."""
    init: bool = False
    """A plain (non-sidecar) init container: resizable in place only where the server allows it (1.36+), never
    restarted by a resize; it does not add to the pod's sum of requests (it runs before the others)."""
    restart_count: int = 0
    actual: Resources | None = None
    """``status.containerStatuses[].resources.requests`` as the kubelet reports them (None: not reported)."""
    actual_limits: Resources | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ContainerTarget:
    name: str
    target: Resources
    lower_bound: Resources
    upper_bound: Resources
    controlled_resources: frozenset[str] = frozenset({"cpu", "memory"})
    controlled_values: ControlledValues = ControlledValues.REQUESTS_AND_LIMITS
    """RequestsAndLimits (limits scaled to keep the ratio) or RequestsOnly (limits untouched)."""
    min_allowed: Resources = field(default_factory=Resources)
    max_allowed: Resources = field(default_factory=Resources)
    mode_off: bool = False
    startup_boost: CpuBoost | None = None
    """The VPA's ``spec.startupBoost`` (or the container policy's, which wins): applied at admission only."""
    boost_error: str = ""
    """Why the VPA's startupBoost for this container is not applied (the pod is admitted at its target)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class LimitRangeView:
    """The container constraints of a namespace's LimitRanges, merged (the tightest wins)."""

    namespace: str
    min: Resources = field(default_factory=Resources)
    max: Resources = field(default_factory=Resources)
    max_limit_request_ratio_cpu: float | None = None
    max_limit_request_ratio_memory: float | None = None


class Reason(enum.StrEnum):
    """Why a pod got its action; every skip and fallback says why."""

    CHANGE = "change"
    NO_TARGET = "no-target"
    UPDATE_MODE = "update-mode-not-in-place"
    WITHIN_BOUNDS = "within-bounds"
    BELOW_THRESHOLD = "below-threshold"
    TOO_YOUNG = "pod-too-young"
    NOT_READY = "pod-not-ready"
    RESIZE_IN_FLIGHT = "resize-in-flight"
    STALE_TARGET = "stale-target-no-decrease"
    QOS_WOULD_CHANGE = "qos-would-change"
    BEST_EFFORT = "best-effort"
    NEVER_RESTART = "restart-policy-never-needs-restart"
    INFEASIBLE = "infeasible"
    DEFERRED_TIMEOUT = "deferred-timeout"
    ABOVE_NODE = "above-node-allocatable"
    POOL_FROZEN = "pool-frozen"
    NOT_COVERED = "not-covered-by-policy"
    DELETING = "pod-deleting"
    OUTSIDE_WINDOW = "outside-maintenance-window"
    AWAITING_APPROVAL = "awaiting-restart-approval"
    SINGLE_REPLICA = "single-replica-not-evicted"
    DO_NOT_DISRUPT = "do-not-disrupt"
    TEMPLATE_REVERTED = "template-reverted-by-another-manager"
    DISRUPTION_BUDGET = "disruption-budget"
    """Its eviction was refused by its PodDisruptionBudget: held until the back-off ends, then tried again."""
    NO_CONTROLLER = "no-controller-not-evicted"
    IN_PROGRESS_TIMEOUT = "in-progress-timeout"
    POD_LEVEL_UNSUPPORTED = "pod-level-resize-unsupported"
    POD_LEVEL_LIMIT = "above-pod-level-limit"
    """The change would put a request or a container limit above the pod-level limit, which it leaves alone."""
    NODE_FEATURE = "node-feature-not-declared"
    """The change needs a feature the pod's node does not declare (``node.status.declaredFeatures``): the pod waits,
    unchanged, re-planned every pass, until its kubelet declares it; never handed to the fallback."""
    NODE_UNKNOWN = "node-unknown"
    QUOTA = "quota"
    STATIC_POD = "static-pod"
    STARTUP_BOOST = "startup-boost"
    """Boosted at admission and not yet due to be taken back (or its un-boost cannot be done in place)."""
    UNBOOST = "unboost"
    """The startup boost is taken back in place."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ContainerChange:
    name: str
    old_requests: Resources
    old_limits: Resources
    new_requests: Resources
    new_limits: Resources
    restarts: bool
    """Some changed resource has RestartContainer."""
    notes: tuple[str, ...] = ()
    """e.g. "cpu request kept: HPA scales on cpu utilization", "clamped to LimitRange max"."""
