"""What the recommender serves of a VPA: the base's parsed ``Vpa`` under the recommender's own rules.

Owns turning each VPA object the store lists into one of two typed values, so the engine never sees a dict:
``VpaSpec`` (a VPA the recommender can serve: its ``podtailor.vpa.Vpa``, the one recommender it names, and
podtailor's risk setting) or ``UnparsableVpa`` (its identity, the recommenders it names and why it cannot be
served, for the ``ConfigUnsupported`` condition). The spec is parsed by ``podtailor.vpa`` alone; here are only
the recommender's rules on top: the target kinds it resolves (``SUPPORTED_KINDS``), at most one recommender
named, and the ``podtailor.io/risk`` and ``podtailor.io/risk-budget`` annotations (``risk_annotation``,
``budget_annotation``). A risk value (or budget) that cannot be used does not stop the VPA from being served:
it is kept as ``VpaSpec.risk_problem`` (``budget_problem``), the VPA is served at the recommender's own risk
setting, and the engine says why in a warning Event and log line, since a typo in a
tuning knob should not take a workload's recommendations away.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from podtailor.numeric import is_int
from podtailor.vpa import TargetRef, Vpa, VpaConfigError, parse_vpa
from recommender.model.podtailor_budget import RiskBudget, parse_budget
from recommender.model.podtailor_params import RISK_MAX, RISK_MIN, check_risk
from recommender.model.types import ContainerPolicy

SUPPORTED_KINDS = frozenset({"Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job", "CronJob"})
RISK_ANNOTATION = "podtailor.io/risk"
BUDGET_ANNOTATION = "podtailor.io/risk-budget"
_DECIMAL = re.compile(r"(?:[0-9]{1,6}(?:\.[0-9]{0,12})?|\.[0-9]{1,12})")


class VpaIdentity(Protocol):
    """What a status write, a checkpoint and an Event need of a VPA."""

    @property
    def namespace(self) -> str: ...

    @property
    def name(self) -> str: ...

    @property
    def uid(self) -> str: ...

    @property
    def generation(self) -> int: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class UnparsableVpa:
    """A VPA the recommender cannot serve as written; ``error`` says why."""

    namespace: str
    name: str
    uid: str
    generation: int
    recommenders: tuple[str, ...]
    """The names in ``spec.recommenders`` as far as they can be read (so that only ours are reported)."""
    error: str


@dataclass(frozen=True, slots=True, kw_only=True)
class VpaSpec:
    """A VPA the recommender can serve."""

    vpa: Vpa
    risk: float | None = None
    """podtailor's risk setting from the ``podtailor.io/risk`` annotation (None: absent or unusable)."""
    risk_problem: str | None = None
    """Why the annotation's value cannot be used (None: absent or usable); the VPA is served all the same."""
    budget: RiskBudget | None = None
    """podtailor's risk budget from the ``podtailor.io/risk-budget`` annotation (None: absent or unusable)."""
    budget_problem: str | None = None
    """Why that annotation's value cannot be used, as ``risk_problem``."""

    @property
    def namespace(self) -> str:
        return self.vpa.namespace

    @property
    def name(self) -> str:
        return self.vpa.name

    @property
    def uid(self) -> str:
        return self.vpa.uid

    @property
    def generation(self) -> int:
        return self.vpa.generation

    @property
    def target(self) -> TargetRef:
        return self.vpa.target

    @property
    def recommenders(self) -> tuple[str, ...]:
        return self.vpa.recommenders

    @property
    def recommender(self) -> str | None:
        """The single name in ``spec.recommenders``, or None when the list is empty (the default recommender's)."""
        return self.vpa.recommenders[0] if self.vpa.recommenders else None

    def policy_for(self, container: str, containers_in_pod: int) -> ContainerPolicy:
        base = self.vpa.policy_for(container)
        return ContainerPolicy(min_allowed=base.min_allowed, max_allowed=base.max_allowed,
                               controlled_resources=base.controlled_resources,
                               controlled_values=base.controlled_values, mode_off=base.mode_off,
                               containers_in_pod=containers_in_pod)


def risk_annotation(annotations: object) -> tuple[float | None, str | None]:
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


def budget_annotation(annotations: object) -> tuple[RiskBudget | None, str | None]:
    """The ``podtailor.io/risk-budget`` annotation ("cpu=0.01,oom=1", ``podtailor_budget.parse_budget``) as
    (budget, None), (None, why it cannot be used), or (None, None) when absent."""
    if not isinstance(annotations, Mapping) or BUDGET_ANNOTATION not in annotations:
        return None, None
    raw = annotations[BUDGET_ANNOTATION]
    if not isinstance(raw, str):
        return None, f"annotation {BUDGET_ANNOTATION}={repr(raw)[:40]} is not a string like cpu=0.01,oom=1"
    try:
        return parse_budget(raw), None
    except ValueError as err:
        return None, f"annotation {BUDGET_ANNOTATION}: {err}"


def served_spec(vpa: Vpa) -> VpaSpec:
    """The parsed VPA under the recommender's rules; raises VpaConfigError when it cannot be served."""
    if vpa.target.kind not in SUPPORTED_KINDS:
        raise VpaConfigError(f"spec.targetRef.kind {vpa.target.kind!r} is not supported (one of "
                             f"{sorted(SUPPORTED_KINDS)})")
    if len(vpa.recommenders) > 1:
        raise VpaConfigError("spec.recommenders may name at most one recommender")
    risk, risk_problem = risk_annotation(vpa.annotations)
    budget, budget_problem = budget_annotation(vpa.annotations)
    return VpaSpec(vpa=vpa, risk=risk, risk_problem=risk_problem, budget=budget, budget_problem=budget_problem)


def _identity(obj: Mapping[str, Any], recommenders: tuple[str, ...] | None, error: str) -> UnparsableVpa:
    meta, spec = obj.get("metadata"), obj.get("spec")
    meta = meta if isinstance(meta, Mapping) else {}
    generation = meta.get("generation", 0)
    if recommenders is None:
        raw = spec.get("recommenders") if isinstance(spec, Mapping) else None
        recommenders = tuple(str(r.get("name") or "") if isinstance(r, Mapping) else ""
                             for r in (raw if isinstance(raw, list) else ()))
    return UnparsableVpa(namespace=str(meta.get("namespace")), name=str(meta.get("name")), uid=str(meta.get("uid")),
                         generation=generation if is_int(generation) else 0, recommenders=recommenders,
                         error=error)


def read_vpa(obj: Mapping[str, Any]) -> VpaSpec | UnparsableVpa:
    """One listed VPA object as the engine handles it: served, or unparsable with the reason."""
    try:
        vpa = parse_vpa(obj)
    except VpaConfigError as err:
        return _identity(obj, None, str(err))
    try:
        return served_spec(vpa)
    except VpaConfigError as err:
        return _identity(obj, vpa.recommenders, str(err))
