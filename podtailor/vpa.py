"""The VerticalPodAutoscaler object, the contract between the recommender and the updater: its one typed home.

Owns reading a VPA API object (a raw dict) into frozen values, once, at the edge, and the one part of it
podtailor writes. ``parse_vpa`` reads the metadata and spec into a ``Vpa``: the target reference, the
recommenders named, the ``UpdateMode``, the container policies (``ContainerResourcePolicy``: min/maxAllowed,
controlled resources, ``ControlledValues``, mode Off, the CPU startup boost) and the annotations.
``parse_status`` reads ``status``: the per-container recommendation (``RecommendedContainerResources``,
which ``to_status`` writes back the way the recommender stores it) and our recommender's ``Stale``
condition. Names, defaults and the "*" default policy follow VPA's API (``pkg/apis/autoscaling.k8s.io/v1/
types.go`` and ``GetContainerResourcePolicy`` in ``pkg/utils/vpa/api.go``, v1.8.1); the update mode defaults
to Recreate as before. Bad content raises ``VpaConfigError`` naming the field, and only that; nothing is
guessed. An invalid startup boost is not an error: it is kept as ``boost_error`` and not applied. Which
target kinds and recommenders a half serves is that half's own rule. Pure: no client, no clock.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from podtailor.resize.boost import BoostError, CpuBoost, parse_boost
from podtailor.resources import Resources, ResourcesError, parse_resources, quantities

GROUP, VERSION, PLURAL = "autoscaling.k8s.io", "v1", "verticalpodautoscalers"
RESOURCE_NAMES = frozenset({"cpu", "memory"})
STALE_CONDITION = "Stale"
"""The condition our recommender sets True when it keeps the last recommendation without fresh usage."""


class UpdateMode(enum.StrEnum):
    """``spec.updatePolicy.updateMode`` (VPA's ``UpdateMode``); absent means Recreate."""

    OFF = "Off"
    INITIAL = "Initial"
    RECREATE = "Recreate"
    IN_PLACE_OR_RECREATE = "InPlaceOrRecreate"
    IN_PLACE = "InPlace"
    AUTO = "Auto"


ACTED_MODES: frozenset[UpdateMode] = frozenset({UpdateMode.IN_PLACE_OR_RECREATE, UpdateMode.IN_PLACE,
                                                UpdateMode.AUTO, UpdateMode.RECREATE})
"""The modes under which the updater changes running pods."""
ADMISSION_MODES: frozenset[UpdateMode] = frozenset(UpdateMode) - {UpdateMode.OFF}
"""The modes under which the webhook sets a new pod's resources (all but Off)."""


class ControlledValues(enum.StrEnum):
    """``controlledValues``: limits scaled with the request to keep their ratio, or left as they are."""

    REQUESTS_AND_LIMITS = "RequestsAndLimits"
    REQUESTS_ONLY = "RequestsOnly"


class VpaConfigError(ValueError):
    """The VPA's content cannot be used as written; the message names the field."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TargetRef:
    kind: str
    name: str
    api_version: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class ContainerResourcePolicy:
    """One entry of ``spec.resourcePolicy.containerPolicies`` (or the default when none applies)."""

    min_allowed: Resources = field(default_factory=Resources)
    max_allowed: Resources = field(default_factory=Resources)
    controlled_resources: frozenset[str] = RESOURCE_NAMES
    controlled_values: ControlledValues = ControlledValues.REQUESTS_AND_LIMITS
    mode_off: bool = False
    """``mode: Off``: no recommendation and no change for this container."""
    boost_set: bool = False
    """The policy names its own ``startupBoost`` (which then wins over the VPA's)."""
    startup_boost: CpuBoost | None = None
    boost_error: str = ""
    """Why the policy's ``startupBoost`` is not applied ("" when valid or absent)."""

    def __post_init__(self) -> None:
        if not self.controlled_resources <= RESOURCE_NAMES:
            raise VpaConfigError("controlledResources may hold only cpu and memory")
        for low, high in ((self.min_allowed.cpu_millicores, self.max_allowed.cpu_millicores),
                          (self.min_allowed.memory_bytes, self.max_allowed.memory_bytes)):
            if low is not None and high is not None and low > high:
                raise VpaConfigError("minAllowed is above maxAllowed")


@dataclass(frozen=True, slots=True, kw_only=True)
class Vpa:
    """A VPA's metadata and spec as values."""

    namespace: str
    name: str
    uid: str
    generation: int
    target: TargetRef
    recommenders: tuple[str, ...] = ()
    """The names in ``spec.recommenders`` (empty: the default recommender's)."""
    update_mode: UpdateMode = UpdateMode.RECREATE
    policies: Mapping[str, ContainerResourcePolicy] = field(default_factory=dict)
    """Per container name; the key ``*`` holds the default policy."""
    startup_boost: CpuBoost | None = None
    """``spec.startupBoost`` (a container policy's own one wins for its container)."""
    boost_error: str = ""
    annotations: Mapping[str, object] = field(default_factory=dict)

    def policy_for(self, container: str) -> ContainerResourcePolicy:
        """The container's own policy, else the ``*`` one, else the defaults (VPA's
        ``GetContainerResourcePolicy``)."""
        return self.policies.get(container) or self.policies.get("*") or ContainerResourcePolicy()

    def boost_for(self, container: str) -> tuple[CpuBoost | None, str]:
        """(boost, why not applied) for the container: its policy's when the policy names one, else the VPA's
        (VPA's ``getContainerStartupBoostPolicy``, ``pkg/admission-controller/resource/pod/patch/
        resource_updates.go``, v1.8.1)."""
        policy = self.policy_for(container)
        if policy.boost_set:
            return policy.startup_boost, policy.boost_error
        return self.startup_boost, self.boost_error


@dataclass(frozen=True, slots=True, kw_only=True)
class RecommendedContainerResources:
    """One ``status.recommendation.containerRecommendations`` entry; a bound is None when absent."""

    container_name: str
    target: Resources
    lower_bound: Resources | None = None
    upper_bound: Resources | None = None
    uncapped_target: Resources | None = None

    def to_status(self) -> dict[str, Any]:
        """The entry as the API carries it; an absent or empty bound is left out."""
        entry: dict[str, Any] = {"containerName": self.container_name, "target": quantities(self.target)}
        for key, res in (("lowerBound", self.lower_bound), ("upperBound", self.upper_bound),
                         ("uncappedTarget", self.uncapped_target)):
            if res is not None and (q := quantities(res)):
                entry[key] = q
        return entry


@dataclass(frozen=True, slots=True, kw_only=True)
class VpaStatus:
    recommendations: Mapping[str, RecommendedContainerResources] = field(default_factory=dict)
    """Per container name, in the order written."""
    stale: bool = False
    """Our recommender's ``Stale`` condition is True: the recommendation is the last good one."""


def _resources(raw: object, where: str) -> Resources:
    if raw is not None and not isinstance(raw, Mapping):
        raise VpaConfigError(f"{where} must be a map of resources")
    try:
        return parse_resources(raw, where=where)
    except ResourcesError as err:
        raise VpaConfigError(str(err)) from None


def _boost(raw: object, where: str) -> tuple[CpuBoost | None, str]:
    try:
        return parse_boost(raw, where), ""
    except BoostError as err:
        return None, str(err)[:300]


def _policy(raw: Mapping[str, Any], where: str) -> tuple[str, ContainerResourcePolicy]:
    name = raw.get("containerName")
    if not isinstance(name, str) or not name:
        raise VpaConfigError(f"{where}.containerName is required")
    controlled = raw.get("controlledResources", ["cpu", "memory"])
    if not isinstance(controlled, list) or not all(isinstance(r, str) for r in controlled):
        raise VpaConfigError(f"{where}.controlledResources may hold only cpu and memory")
    try:
        values = ControlledValues(raw.get("controlledValues", ControlledValues.REQUESTS_AND_LIMITS))
    except ValueError:
        raise VpaConfigError(f"{where}.controlledValues must be RequestsAndLimits or RequestsOnly") from None
    boost = _boost(raw.get("startupBoost"), f"{where}.startupBoost")
    try:
        return name, ContainerResourcePolicy(
            min_allowed=_resources(raw.get("minAllowed"), f"{where}.minAllowed"),
            max_allowed=_resources(raw.get("maxAllowed"), f"{where}.maxAllowed"),
            controlled_resources=frozenset(controlled), controlled_values=values, mode_off=raw.get("mode") == "Off",
            boost_set=raw.get("startupBoost") is not None, startup_boost=boost[0], boost_error=boost[1])
    except VpaConfigError as err:
        raise VpaConfigError(f"{where}: {err}") from None


_SHAPE_ERRORS = (TypeError, ValueError, AttributeError, KeyError, IndexError)
"""What reading an odd shape raises (a list where a map belongs, a missing key); reported as VpaConfigError."""


def parse_vpa(obj: Mapping[str, Any]) -> Vpa:
    """A VPA API object's metadata and spec as a ``Vpa``; raises VpaConfigError, and only that, when they
    cannot be used (the schema should keep odd shapes out, but one bad object must never stop the others)."""
    try:
        return _parse_vpa(obj)
    except VpaConfigError:
        raise
    except _SHAPE_ERRORS as err:
        raise VpaConfigError(f"malformed VPA object: {type(err).__name__}: {str(err)[:200]}") from None


def _parse_vpa(obj: Mapping[str, Any]) -> Vpa:
    meta, spec = obj.get("metadata") or {}, obj.get("spec") or {}
    ref = spec.get("targetRef") or {}
    kind, name = ref.get("kind"), ref.get("name")
    if not isinstance(kind, str) or not isinstance(name, str) or not kind or not name:
        raise VpaConfigError("spec.targetRef needs kind and name")
    mode = (spec.get("updatePolicy") or {}).get("updateMode", UpdateMode.RECREATE)
    try:
        update_mode = UpdateMode(mode)
    except ValueError:
        raise VpaConfigError(f"spec.updatePolicy.updateMode {mode!r} is not a VPA update mode") from None
    raw_policies = (spec.get("resourcePolicy") or {}).get("containerPolicies") or []
    where = "spec.resourcePolicy.containerPolicies"
    policies = dict(_policy(p, f"{where}[{i}]") for i, p in enumerate(raw_policies))
    boost, boost_error = _boost(spec.get("startupBoost"), "spec.startupBoost")
    annotations = meta.get("annotations")
    return Vpa(namespace=str(meta.get("namespace", "")), name=str(meta.get("name", "")),
               uid=str(meta.get("uid", "")), generation=int(meta.get("generation", 0)),
               target=TargetRef(kind=kind, name=name, api_version=str(ref.get("apiVersion", ""))),
               recommenders=tuple(str(r["name"]) for r in spec.get("recommenders") or ()),
               update_mode=update_mode, policies=policies, startup_boost=boost, boost_error=boost_error,
               annotations=dict(annotations) if isinstance(annotations, Mapping) else {})


def target_key(obj: Mapping[str, Any]) -> tuple[str, str, str]:
    """(namespace, kind, name) of the VPA's target workload, read leniently ("" parts when absent or unreadable),
    so that even a VPA that cannot be parsed is known by the workload it targets."""
    meta, spec = obj.get("metadata"), obj.get("spec")
    ref = spec.get("targetRef") if isinstance(spec, Mapping) else None
    ref = ref if isinstance(ref, Mapping) else {}
    return (str(meta.get("namespace", "")) if isinstance(meta, Mapping) else "", str(ref.get("kind", "")),
            str(ref.get("name", "")))


def parse_recommendation(raw: object, where: str) -> RecommendedContainerResources:
    """One ``containerRecommendations`` entry; raises VpaConfigError naming ``where``."""
    name = raw.get("containerName") if isinstance(raw, Mapping) else None
    if not isinstance(raw, Mapping) or not isinstance(name, str):
        raise VpaConfigError(f"{where}: a container recommendation without containerName")
    where = f"{where} container {name}"

    def bound(key: str) -> Resources | None:
        return _resources(raw[key], f"{where}.{key}") if key in raw else None

    return RecommendedContainerResources(container_name=name, target=_resources(raw.get("target"), f"{where}.target"),
                                         lower_bound=bound("lowerBound"), upper_bound=bound("upperBound"),
                                         uncapped_target=bound("uncappedTarget"))


def parse_status(obj: Mapping[str, Any]) -> VpaStatus:
    """A VPA API object's ``status`` as a ``VpaStatus``; raises VpaConfigError, and only that, on content it
    cannot read."""
    try:
        return _parse_status(obj)
    except VpaConfigError:
        raise
    except _SHAPE_ERRORS as err:
        raise VpaConfigError(f"malformed VPA status: {type(err).__name__}: {str(err)[:200]}") from None


def _parse_status(obj: Mapping[str, Any]) -> VpaStatus:
    status = obj.get("status") or {}
    where = "status.recommendation"
    entries = (status.get("recommendation") or {}).get("containerRecommendations") or ()
    recs = (parse_recommendation(raw, where) for raw in entries)
    stale = any(isinstance(c, Mapping) and c.get("type") == STALE_CONDITION and c.get("status") == "True"
                for c in status.get("conditions") or ())
    return VpaStatus(recommendations={r.container_name: r for r in recs}, stale=stale)
