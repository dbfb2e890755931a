"""VerticalPodAutoscaler objects as plain values: parsed once from the API dict, validated, never raw.

Owns reading a VPA's spec into ``VpaSpec`` (target reference, recommender name, update mode, container
policies turned into the core's ``ContainerPolicy``) and building the status dict the sink writes.
Bad content (unknown kinds, malformed quantities, min above max) raises ``VpaConfigError`` with a message
that ends up in the VPA's ``ConfigUnsupported`` condition; nothing is guessed. The one exception is the
``podtailor.io/risk`` annotation (podtailor's risk setting for this VPA, ``risk_annotation``): a value that
cannot be used does not stop the VPA from being served. It is kept as ``VpaSpec.risk_problem``, the VPA is
served at the recommender's own risk setting, and the engine says why in a warning Event and log line, since
a typo in a tuning knob should not take a workload's recommendations away.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from podtailor.resources import Resources, ResourcesError, parse_resources
from recommender.model.podtailor_params import RISK_MAX, RISK_MIN, check_risk
from recommender.model.types import ContainerPolicy, ControlledValues

GROUP, VERSION, PLURAL = "autoscaling.k8s.io", "v1", "verticalpodautoscalers"
SUPPORTED_KINDS = frozenset({"Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job", "CronJob"})
UPDATE_MODES = frozenset({"Off", "Initial", "Recreate", "InPlaceOrRecreate", "InPlace", "Auto"})
RISK_ANNOTATION = "podtailor.io/risk"
_DECIMAL = re.compile(r"(?:[0-9]{1,6}(?:\.[0-9]{0,12})?|\.[0-9]{1,12})")


class VpaConfigError(ValueError):
    """The VPA's spec cannot be served as written."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TargetRef:
    kind: str
    name: str
    api_version: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class VpaSpec:
    namespace: str
    name: str
    uid: str
    generation: int
    target: TargetRef
    recommender: str | None
    """The single name in ``spec.recommenders``, or None when the list is empty (the default recommender's)."""
    update_mode: str
    policies: Mapping[str, ContainerPolicy]
    """Per container name; the key ``*`` holds the default policy."""
    risk: float | None = None
    """podtailor's risk setting from the ``podtailor.io/risk`` annotation (None: absent or unusable)."""
    risk_problem: str | None = None
    """Why the annotation's value cannot be used (None: absent or usable); the VPA is served all the same."""

    def policy_for(self, container: str, containers_in_pod: int) -> ContainerPolicy:
        base = self.policies.get(container) or self.policies.get("*") or ContainerPolicy()
        return ContainerPolicy(min_allowed=base.min_allowed, max_allowed=base.max_allowed,
                               controlled_resources=base.controlled_resources,
                               controlled_values=base.controlled_values, mode_off=base.mode_off,
                               containers_in_pod=containers_in_pod)


def risk_annotation(annotations: Any) -> tuple[float | None, str | None]:
    """The ``podtailor.io/risk`` annotation as (risk, None), (None, why it cannot be used), or (None, None) when
    absent. Only a plain decimal number ("2", "0.5", ".25") within [RISK_MIN, RISK_MAX] is used: no sign,
    exponent, underscores, "nan" or "inf" (Python's ``float`` would take several of them)."""
    if not isinstance(annotations, Mapping) or RISK_ANNOTATION not in annotations:
        return None, None
    raw = annotations[RISK_ANNOTATION]
    shown = repr(raw)[:40] + ("..." if len(repr(raw)) > 40 else "")
    wanted = f"a decimal number in [{RISK_MIN:g}, {RISK_MAX:g}]"
    if not isinstance(raw, str) or not _DECIMAL.fullmatch(raw.strip()):
        return None, f"annotation {RISK_ANNOTATION}={shown} is not {wanted}"
    try:
        return check_risk(float(raw.strip())), None
    except ValueError:
        return None, f"annotation {RISK_ANNOTATION}={shown} is outside [{RISK_MIN:g}, {RISK_MAX:g}]"


def _resources(raw: Any, where: str) -> Resources:
    if raw is None:
        return Resources()
    if not isinstance(raw, Mapping):
        raise VpaConfigError(f"{where} must be a map of resources")
    try:
        return parse_resources(raw, where=where)
    except ResourcesError as err:
        raise VpaConfigError(str(err)) from None


def _policy(raw: Mapping[str, Any], index: int) -> tuple[str, ContainerPolicy]:
    where = f"spec.resourcePolicy.containerPolicies[{index}]"
    name = raw.get("containerName")
    if not isinstance(name, str) or not name:
        raise VpaConfigError(f"{where}.containerName is required")
    low, high = _resources(raw.get("minAllowed"), f"{where}.minAllowed"), _resources(raw.get("maxAllowed"),
                                                                                      f"{where}.maxAllowed")
    for field in ("cpu_millicores", "memory_bytes"):
        lo, hi = getattr(low, field), getattr(high, field)
        if lo is not None and hi is not None and lo > hi:
            raise VpaConfigError(f"{where}: minAllowed is above maxAllowed")
    controlled = raw.get("controlledResources", ["cpu", "memory"])
    if not isinstance(controlled, list) or not set(controlled) <= {"cpu", "memory"}:
        raise VpaConfigError(f"{where}.controlledResources may hold only cpu and memory")
    try:
        values = ControlledValues(raw.get("controlledValues", "RequestsAndLimits"))
    except ValueError:
        raise VpaConfigError(f"{where}.controlledValues must be RequestsAndLimits or RequestsOnly") from None
    return name, ContainerPolicy(min_allowed=low, max_allowed=high, controlled_resources=frozenset(controlled),
                                 controlled_values=values, mode_off=raw.get("mode") == "Off")


def parse_vpa(obj: Mapping[str, Any]) -> VpaSpec:
    """A VPA API object as a VpaSpec; raises VpaConfigError, and only that, when the spec cannot be served
    (the schema should keep odd shapes out, but one bad object must never stop the pass for the others)."""
    try:
        return _parse_vpa(obj)
    except VpaConfigError:
        raise
    except (TypeError, ValueError, AttributeError, KeyError, IndexError) as err:
        raise VpaConfigError(f"malformed VPA object: {type(err).__name__}: {str(err)[:200]}") from None


def _parse_vpa(obj: Mapping[str, Any]) -> VpaSpec:
    meta, spec = obj.get("metadata") or {}, obj.get("spec") or {}
    ref = spec.get("targetRef") or {}
    kind, name = ref.get("kind"), ref.get("name")
    if not isinstance(kind, str) or not isinstance(name, str) or not name:
        raise VpaConfigError("spec.targetRef needs kind and name")
    if kind not in SUPPORTED_KINDS:
        raise VpaConfigError(f"spec.targetRef.kind {kind!r} is not supported (one of {sorted(SUPPORTED_KINDS)})")
    recommenders = spec.get("recommenders") or []
    if len(recommenders) > 1:
        raise VpaConfigError("spec.recommenders may name at most one recommender")
    mode = (spec.get("updatePolicy") or {}).get("updateMode", "Recreate")
    if mode not in UPDATE_MODES:
        raise VpaConfigError(f"spec.updatePolicy.updateMode {mode!r} is not a VPA update mode")
    raw_policies = (spec.get("resourcePolicy") or {}).get("containerPolicies") or []
    policies = dict(_policy(p, i) for i, p in enumerate(raw_policies))
    risk, risk_problem = risk_annotation(meta.get("annotations"))
    return VpaSpec(namespace=str(meta.get("namespace", "")), name=str(meta.get("name", "")),
                   uid=str(meta.get("uid", "")), generation=int(meta.get("generation", 0)),
                   target=TargetRef(kind=kind, name=name, api_version=str(ref.get("apiVersion", ""))),
                   recommender=str(recommenders[0]["name"]) if recommenders else None, update_mode=str(mode),
                   policies=policies, risk=risk, risk_problem=risk_problem)
