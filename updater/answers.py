"""What the API server and the kubelet answer to a resize, by version, as typed values (pure).

Owns the kinds of answer the updater acts on differently, so that no other module reads an error string:
``Refusal`` (why the API server refused a write: above the node's allocatable, exceeded quota, a disruption
budget, "not now"), ``InfeasibleCause`` (why the kubelet marked a resize ``PodResizePending``/``Infeasible``)
and ``ServerFeatures`` (what the server's version gives). The adapters classify once, at the edge
(``updater/kube/refusals.py`` for refusals, ``updater/kube/pods.py`` for the kubelet's conditions), with the
functions here; the state machine and the planner read only the kinds. Upstream, v1.37.2:

- ``PodResizeValidator`` (``plugin/pkg/admission/podresize/admission.go``, ``resizeValidationError``), from
  1.36: a 403 whose ``details.causes[]`` type (``reason`` on the wire) is ``NodeCapacity`` ("node didn't have
  enough allocatable resources: ...") or ``UnsupportedPlatform``. Absent up to 1.35, where the kubelet answers
  Infeasible ("Node didn't have enough capacity", ``canResizePod``).
- ResourceQuota admission (``k8s.io/apiserver/pkg/admission/plugin/resourcequota/controller.go``,
  ``checkRequest``): a 403 "exceeded quota: <name>, requested: ..., used: ..., limited: ..."; also "must
  specify ..." (``pkg/quota/v1/evaluator/core/pods.go``, ``Constraints``) and "status unknown for quota".
  admission.NewForbidden gives these no cause type, so their message prefix is the only mark.
- The Eviction API (``pkg/registry/core/pod/storage/eviction.go``, ``checkAndDecrement`` and
  ``createTooManyRequestsError``): a budget that allows no disruption answers 429 "Cannot evict pod as it would
  violate the pod's disruption budget." with a cause of type ``DisruptionBudget`` whose message names the
  budget ("The disruption budget web needs 2 healthy pods and has 2 currently"); a budget whose status is not
  usable answers 403 with the same cause type. API Priority and Fairness answers 429 without it.
- The kubelet's resize admit handler (``pkg/kubelet/allocation/handlers.go``, ``Admit``) in 1.37 is the only
  source of Infeasible: the feature off or the platform unsupported, swap, pod-level resize disabled,
  memory-backed emptyDir volumes, and Guaranteed pods beside the static CPU or Memory Manager. A request
  that does not fit the kubelet's own view is Deferred from 1.36 (``SetPodResizePendingCondition``,
  ``pkg/kubelet/status/status_manager.go``), never Infeasible. Static pods never get that far: the API
  server refuses their resize ("static pods cannot be resized", ``validation.go``), and the planner skips
  mirror pods.
- ``NodeDeclaredFeatureValidator`` (``plugin/pkg/admission/nodedeclaredfeatures/admission.go``,
  ``validatePodUpdate``), on by default from 1.36 (beta; GA and locked on in 1.37): a 403 "pod update requires
  features <names> which are not available on node \"<node>\"" (``admission.NewForbidden``, no cause type) when
  a resize changes a plain init container's or the pod-level resources and the pod's node does not list the
  feature in ``node.status.declaredFeatures``. The names are ``NodeFeature``'s (the ``Name()`` of
  ``nonSidecarInitContainerResizeFeature`` and ``podLevelResourcesResizeFeature``,
  ``k8s.io/component-helpers/nodedeclaredfeatures/features/inplacepodresize``, v0.37.2).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass


class ResizeCondition(enum.StrEnum):
    """The pod conditions a resize is answered with (``k8s.io/api/core/v1`` types.go, v1.37.2)."""

    PENDING = "PodResizePending"
    IN_PROGRESS = "PodResizeInProgress"


class PendingReason(enum.StrEnum):
    """The reason of a PodResizePending condition (``PodReasonDeferred``, ``PodReasonInfeasible``)."""

    DEFERRED = "Deferred"
    """Not now: the node may fit it later (waited for, bounded by the Deferred timeout)."""
    INFEASIBLE = "Infeasible"
    """Never on this node (``InfeasibleCause`` says why): left for the fallback."""


class InProgressReason(enum.StrEnum):
    """The reason of a PodResizeInProgress condition that is more than "in progress" (``PodReasonError``)."""

    ERROR = "Error"
    """The runtime failed to actuate the resize; the condition's message says how."""


def pending_reason(reason: object) -> PendingReason:
    """The reason of a PodResizePending condition; a condition without one is Deferred. Raises ValueError, naming
    the value, on a reason the kubelet does not write."""
    if reason is None or reason == "":
        return PendingReason.DEFERRED
    try:
        return PendingReason(str(reason))
    except ValueError:
        raise ValueError(f"PodResizePending reason {reason!r} is neither Deferred nor Infeasible") from None


class Refusal(enum.StrEnum):
    """Why the API server refused a write; NONE when it did not (or nothing more is known)."""

    NONE = ""
    ABOVE_ALLOCATABLE = "above-allocatable"
    """403 from PodResizeValidator (1.36+): the target is above the node's allocatable. Goes to the fallback."""
    QUOTA = "quota"
    """403 from ResourceQuota admission. Never goes to the fallback: the replacement would be refused too."""
    NOT_NOW = "not-now"
    """429 with no budget as its cause (API Priority and Fairness): the write waits, retried after a back-off."""
    NODE_FEATURE = "node-feature"
    """403 from NodeDeclaredFeatureValidator (1.36+): the pod's node does not declare the feature the change
    needs (a plain init container's or the pod-level resources), e.g. a kubelet not yet upgraded. Never goes to
    the fallback: the pod waits, unchanged, until its node declares it (the planner reads the node's
    ``declaredFeatures`` each pass and writes nothing before then)."""
    DISRUPTION_BUDGET = "disruption-budget"
    """The Eviction API's refusal by the pod's PodDisruptionBudget (cause type ``DisruptionBudget``; a 429, or a
    403 while the budget's status is unusable): that pod's outcome for now, never its batch's. It stays at its
    size and is retried after a back-off; the other pods go on (``updater.rollout.machine.effects.answered``)."""
    OTHER = "other"


class NodeFeature(enum.StrEnum):
    """The ``node.status.declaredFeatures`` names a resize may need (component-helpers
    ``nodedeclaredfeatures/features/inplacepodresize``, v0.37.2: each feature's ``Name()`` is its feature gate)."""

    INIT_CONTAINER_RESIZE = "InPlacePodVerticalScalingInitContainers"
    """Needed to change a plain (non-sidecar) init container's resources (``nonsidecar_initcontainers_resize.go``)."""
    POD_LEVEL_RESIZE = "InPlacePodLevelResourcesVerticalScaling"
    """Needed to change the pod-level ``spec.resources`` (``pod_level_resource_resize.go``)."""


class InfeasibleCause(enum.StrEnum):
    """Why the kubelet marked a resize Infeasible (from its condition message)."""

    NODE_CAPACITY = "node-capacity"
    """Up to 1.35: the pod's requests exceed the node's allocatable (``canResizePod``)."""
    NOT_SUPPORTED = "not-supported"
    """In-place resize is off or unsupported on that node (feature gate, platform)."""
    SWAP = "swap"
    POD_LEVEL = "pod-level-not-allowed"
    MEMORY_VOLUME = "memory-backed-volume"
    STATIC_POLICY = "static-cpu-or-memory-manager"
    UNKNOWN = "unknown"


_INFEASIBLE_TEXTS: tuple[tuple[str, InfeasibleCause], ...] = (
    ("didn't have enough capacity", InfeasibleCause.NODE_CAPACITY),
    ("with swap is not supported", InfeasibleCause.SWAP),
    ("inplacepodlevelresourcesverticalscaling is disabled", InfeasibleCause.POD_LEVEL),
    ("pod-level resources resize is not supported", InfeasibleCause.POD_LEVEL),
    ("memory-backed emptydir volume resize", InfeasibleCause.MEMORY_VOLUME),
    ("guaranteed pods alongside", InfeasibleCause.STATIC_POLICY),
    ("inplacepodverticalscaling is disabled", InfeasibleCause.NOT_SUPPORTED),
    ("in-place pod resize is not supported", InfeasibleCause.NOT_SUPPORTED),
)
"""Lower-cased fragments of the kubelet's messages (handlers.go, features_*.go, v1.37.2; kubelet 1.35's
``canResizePod`` for NODE_CAPACITY)."""

_QUOTA_PREFIXES = ("exceeded quota:", "must specify ", "status unknown for quota:")
_NODE_FEATURE_PREFIX, _NODE_FEATURE_SUFFIX = "pod update requires features ", " which are not available on node "
"""NodeDeclaredFeatureValidator's refusal, ``validatePodUpdate`` (admission.go, v1.37.2): "pod update requires
features %s which are not available on node %q"."""


def infeasible_cause(message: str) -> InfeasibleCause:
    """The cause of a PodResizePending/Infeasible condition, from its message."""
    text = message.lower()
    return next((cause for fragment, cause in _INFEASIBLE_TEXTS if fragment in text), InfeasibleCause.UNKNOWN)


_BUDGET_MESSAGE = "Cannot evict pod as it would violate the pod's disruption budget"
BUDGET_CAUSE = "DisruptionBudget"
"""The ``details.causes[]`` type (``reason`` on the wire) of the Eviction API's refusals by a PodDisruptionBudget
(policy/v1 ``DisruptionBudgetCause``)."""


def too_many_requests_refusal(message: str, cause_types: Iterable[str] = ()) -> Refusal:
    """The kind of a 429: a PodDisruptionBudget's refusal of an eviction (its cause type, or its message when a
    proxy lost the cause), or "not now" (API Priority and Fairness)."""
    if BUDGET_CAUSE in set(cause_types) or message.startswith(_BUDGET_MESSAGE):
        return Refusal.DISRUPTION_BUDGET
    return Refusal.NOT_NOW


def forbidden_refusal(message: str, cause_types: Iterable[str] = ()) -> Refusal:
    """The kind of a 403 on ``pods/resize``, a pod create or an eviction. ``message`` is the Status message (the
    API server prefixes it with 'pods "name" is forbidden: '); ``cause_types`` its causes' types."""
    causes = set(cause_types)
    if "NodeCapacity" in causes:
        return Refusal.ABOVE_ALLOCATABLE
    if BUDGET_CAUSE in causes:
        return Refusal.DISRUPTION_BUDGET
    _, _, reason = message.partition("is forbidden: ")
    reason = (reason or message).strip()
    if reason.startswith(_QUOTA_PREFIXES):
        return Refusal.QUOTA
    if reason.startswith("node didn't have enough allocatable resources"):
        return Refusal.ABOVE_ALLOCATABLE  # a 1.36+ server that lost the cause type on the way (a proxy)
    if reason.startswith(_NODE_FEATURE_PREFIX) and _NODE_FEATURE_SUFFIX in reason:
        return Refusal.NODE_FEATURE
    return Refusal.OTHER


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerFeatures:
    """What the API server's version gives the updater (``features_for``)."""

    resize_subresource: bool
    """``pods/resize`` exists (1.32+)."""
    resize_validator: bool
    """PodResizeValidator refuses a target above the node's allocatable with a 403 (1.36+); before, the kubelet
    marks it Infeasible. Either way it goes to the fallback; the planner's message says which answer to expect."""
    pod_level_resize: bool
    """KEP-5419 in-place pod-level resize, beta and on by default (1.36+)."""
    init_container_resize: bool = False
    """Plain (non-sidecar) init containers are resizable in place (``InPlacePodVerticalScalingInitContainers``:
    beta and on by default in 1.36, GA in 1.37). Up to 1.35 the API server refuses any change to them
    ("resources for non-sidecar init containers are immutable", ``ValidatePodResize``)."""
    node_declared_features: bool = False
    """NodeDeclaredFeatureValidator refuses an init-container or pod-level resize on a node that does not declare
    the feature (1.36+: both resize features depend on the ``NodeDeclaredFeatures`` gate, beta and on by default
    in 1.36, GA in 1.37; the admission plugin is on by default, ``pkg/kubeapiserver/options/plugins.go``)."""
    deferred_above_allocatable: bool
    """A resize that passed the API server but does not fit the kubelet's view is Deferred, never Infeasible
    (1.36+): it is waited for, bounded by the Deferred timeout, then handed to the fallback."""


def features_for(major: int, minor: int) -> ServerFeatures:
    version = (major, minor)
    since_136 = version >= (1, 36)
    return ServerFeatures(resize_subresource=version >= (1, 32), resize_validator=since_136,
                          pod_level_resize=since_136, deferred_above_allocatable=since_136,
                          init_container_resize=since_136, node_declared_features=since_136)


def above_allocatable_answer(features: ServerFeatures) -> str:
    """How the server answers a resize above the node's allocatable, for the planner's message."""
    if features.resize_validator:
        return "the API server refuses it (403, PodResizeValidator, 1.36+)"
    return "the kubelet marks it Infeasible (up to 1.35)"
