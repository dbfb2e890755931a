"""Admission-time resource math: a new pod's containers and its VPA target in, one ``AdmissionDecision`` out.

Owns what the webhook decides for a pod being created, with the same helpers the in-place planner uses
(``podtailor.resize.changes``), so admission and resize agree to the millicore. Order of the checks: no VPA
for the workload; update mode ``Off`` (every other mode, Initial included, mutates at admission); no
recommendation yet; pod-level ``spec.resources`` set (container values are left alone, as the resize path
does); then per container (native sidecars and regular containers; plain init containers never change):
``container_change`` (target clamped to minAllowed/maxAllowed, then to the namespace LimitRange; limits
scaled to keep the ratio under RequestsAndLimits, kept under RequestsOnly; HPA-scaled resources kept).
A result that would change the pod's QoS class is refused: the pod is admitted as it is, with a warning.
So is one that would make the pod exceed a matching ResourceQuota (``updater.policy.quota.exceeded``: used +
the new pod's requests or limits above hard, where the pod's own values use less): mutated, quota admission
would refuse the pod and its controller would fail to create it again and again; as it came it may fit.
CPU startup boost (``boost_change``): where the VPA has a valid ``startupBoost`` the boosted values are tried
first and the pod admitted at the plain target when they would change the QoS class or exceed a quota; an
invalid one is reported (``boost_errors``) and the pod admitted at the target.

Staleness: a Stale VPA's target is applied as it is. It is the last good recommendation, and a new pod
has no history of its own to protect; staleness only withholds in-place decreases of running pods
(``Constraints.no_decrease``), where the pod's current request is evidence. Pure: no client, no clock.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from podtailor.resize.boost import BoostRecord, boosted_cpu
from podtailor.resize.changes import Constraints, container_change, get, is_noop, put, qos_class
from podtailor.resize.types import ContainerChange, ContainerTarget, ContainerView
from podtailor.resources import Resources
from podtailor.units import format_cpu, format_memory
from podtailor.vpa import ADMISSION_MODES
from updater.policy.quota import Subject, exceeded, spec_usage
from updater.policy.types import QuotaView, WorkloadTarget

MAX_SUMMARY_CHARS = 512
"""Bound of the ``podtailor.io/admitted-resources`` annotation (many containers must not bloat the pod)."""


class Outcome(enum.StrEnum):
    """What admission did with a pod; also the ``outcome`` label of the admissions metric (bounded)."""

    MUTATED = "mutated"
    UNCHANGED = "unchanged"
    NO_VPA = "no-vpa"
    MODE_OFF = "mode-off"
    NO_RECOMMENDATION = "no-recommendation"
    POD_LEVEL = "pod-level-resources"
    QOS_WOULD_CHANGE = "qos-would-change"
    QUOTA_EXCEEDED = "quota-exceeded"
    """The target would make the pod exceed a ResourceQuota that its own values fit: admitted as it came."""
    MALFORMED = "malformed"
    IGNORED = "ignored"
    """Not a pod CREATE (the configuration should not send those, but a hand-edited one might)."""
    TOO_LARGE = "too-large"
    ERROR = "error"


@dataclass(frozen=True, slots=True, kw_only=True)
class PodResources:
    """What admission needs of a new pod."""

    containers: tuple[ContainerView, ...]
    """Native sidecars (``sidecar=True``) and regular containers: the ones that may change."""
    init_containers: tuple[tuple[Resources, Resources], ...] = ()
    """(requests, limits) of plain init containers: never changed, but they count for the QoS class."""
    pod_level: bool = False
    """``spec.resources`` has requests or limits (KEP-2837)."""
    priority_class: str = ""
    terminating: bool = False
    cross_namespace_affinity: bool = False
    """What ResourceQuota scopes match on (``spec.priorityClassName``, ``activeDeadlineSeconds``, affinity)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class AdmissionDecision:
    outcome: Outcome
    message: str = ""
    """Why, for the log and (for refusals) the AdmissionReview warning."""
    vpa_name: str = ""
    changes: tuple[ContainerChange, ...] = field(default_factory=tuple)
    """Only the containers whose values change."""
    boosts: Mapping[str, BoostRecord] = field(default_factory=dict)
    """Containers given a CPU startup boost: their boosted request and the target it is taken back to."""
    boost_errors: tuple[str, ...] = ()
    """Why a VPA's startupBoost was not applied (invalid): the pod is admitted at its target all the same."""


def _pairs(pod: PodResources, changes: Iterable[ContainerChange] = ()) -> list[tuple[Resources, Resources]]:
    new = {c.name: (c.new_requests, c.new_limits) for c in changes}
    return [new.get(v.name, (v.requests, v.limits)) for v in pod.containers] + list(pod.init_containers)


def _guaranteed(requests: Resources, limits: Resources) -> bool:
    return all(get(limits, n) is not None and get(requests, n) in (None, get(limits, n)) for n in ("cpu", "memory"))


def boost_change(view: ContainerView, target: ContainerTarget, change: ContainerChange,
                 constraints: Constraints) -> tuple[ContainerChange, BoostRecord] | None:
    """The container's change with its CPU startup boost, and what to record; None when there is nothing to boost
    (no valid boost, CPU not controlled or kept for an HPA, or every cap leaves the request at the target).
    The boosted request goes through ``container_change`` as a target would, so it is capped by maxAllowed, the
    LimitRange max (and limit:request ratio) and, under RequestsOnly, the limit; the limit follows the request
    in proportion under RequestsAndLimits. A boost that would make the container Guaranteed (or no longer) is
    dropped: it must not change the pod's QoS class (VPA keeps the request 1m below the limit for the same
    reason, ``capStartupBoostToContainerLimit`` in ``resource_updates.go``)."""
    boost, base = target.startup_boost, get(change.new_requests, "cpu")
    if (boost is None or target.mode_off or "cpu" not in target.controlled_resources or base is None
            or get(target.target, "cpu") is None or "cpu" in constraints.hpa_resources):
        return None
    boosted_target = replace(target, target=put(target.target, "cpu", boosted_cpu(base, boost)))
    boosted = container_change(view, boosted_target, replace(constraints, no_decrease=False))
    cpu = get(boosted.new_requests, "cpu")
    if cpu is None or cpu <= base:
        return None
    if _guaranteed(boosted.new_requests, boosted.new_limits) != _guaranteed(change.new_requests, change.new_limits):
        return None
    return boosted, BoostRecord(boosted_millicores=cpu, target_millicores=base)


def _refusal(pod: PodResources, name: str, changes: Sequence[ContainerChange],
             quotas: Sequence[QuotaView]) -> AdmissionDecision | None:
    """QOS_WOULD_CHANGE or QUOTA_EXCEEDED when ``changes`` may not be applied, else None."""
    before, after = qos_class(_pairs(pod)), qos_class(_pairs(pod, changes))
    if before != after:
        return AdmissionDecision(outcome=Outcome.QOS_WOULD_CHANGE, vpa_name=name,
                                 message=f"podtailor: VPA {name} target would change the QoS class from {before} "
                                         f"to {after}; pod admitted with its own resources")
    subject = Subject(qos=before, priority_class=pod.priority_class, terminating=pod.terminating,
                      cross_namespace_affinity=pod.cross_namespace_affinity)
    count = len(pod.containers)  # plain init containers run before, not beside: left out of the sum
    why = exceeded(quotas, subject, spec_usage(_pairs(pod)[:count]), spec_usage(_pairs(pod, changes)[:count]))
    if why:
        return AdmissionDecision(outcome=Outcome.QUOTA_EXCEEDED, vpa_name=name,
                                 message=f"podtailor: VPA {name} target would exceed {why}; pod admitted with its "
                                         "own resources")
    return None


def decide(pod: PodResources, target: WorkloadTarget | None, constraints: Constraints,
           quotas: Sequence[QuotaView] = ()) -> AdmissionDecision:
    """The admission decision for one pod (``constraints.no_decrease`` is the caller's to set: False here);
    ``quotas``: the namespace's ResourceQuotas. With a CPU startup boost the boosted values are tried first; if
    they would change the QoS class or exceed a quota, the pod is admitted at the unboosted target."""
    if target is None:
        return AdmissionDecision(outcome=Outcome.NO_VPA)
    name = target.vpa_name
    if target.update_mode not in ADMISSION_MODES:
        return AdmissionDecision(outcome=Outcome.MODE_OFF, vpa_name=name,
                                 message=f"VPA {name} has updateMode {target.update_mode}")
    if not target.containers:
        return AdmissionDecision(outcome=Outcome.NO_RECOMMENDATION, vpa_name=name,
                                 message=f"VPA {name} has no recommendation yet")
    if pod.pod_level:
        return AdmissionDecision(outcome=Outcome.POD_LEVEL, vpa_name=name,
                                 message="pod-level spec.resources is set; container resources left as they are")
    changes, boosted, boosts, errors = [], [], {}, []
    for view in pod.containers:
        container_target = target.containers.get(view.name)
        if container_target is None:
            continue
        change = container_change(view, container_target, constraints)
        if container_target.boost_error:
            errors.append(container_target.boost_error)
        extra = boost_change(view, container_target, change, constraints)
        if extra is not None:
            boosts[view.name] = extra[1]
        if not is_noop(change):
            changes.append(change)
        chosen = change if extra is None else extra[0]
        if not is_noop(chosen):
            boosted.append(chosen)
    if boosts and _refusal(pod, name, boosted, quotas) is None:
        return AdmissionDecision(outcome=Outcome.MUTATED, vpa_name=name, changes=tuple(boosted), boosts=boosts,
                                 boost_errors=tuple(errors))
    if not changes:
        return AdmissionDecision(outcome=Outcome.UNCHANGED, vpa_name=name, boost_errors=tuple(errors))
    refused = _refusal(pod, name, changes, quotas)
    if refused is not None:
        return replace(refused, boost_errors=tuple(errors))
    return AdmissionDecision(outcome=Outcome.MUTATED, vpa_name=name, changes=tuple(changes),
                             boost_errors=tuple(errors))


def _describe(values: Resources) -> str:
    parts = []
    if values.cpu_millicores is not None:
        parts.append(f"cpu {format_cpu(values.cpu_millicores)}")
    if values.memory_bytes is not None:
        parts.append(f"memory {format_memory(values.memory_bytes)}")
    return " ".join(parts)


def summary(decision: AdmissionDecision, max_chars: int = MAX_SUMMARY_CHARS) -> str:
    """``"<vpa>: app cpu 250m memory 256Mi; proxy cpu 50m"``: the new requests, cut at ``max_chars``."""
    text = f"{decision.vpa_name}: " + "; ".join(f"{c.name} {_describe(c.new_requests)}" for c in decision.changes)
    return text if len(text) <= max_chars else text[: max_chars - 3] + "..."


@dataclass(frozen=True, slots=True, kw_only=True)
class Resolution:
    """What the cache knows about a new pod's workload: its VPA target (or why it could not be read) and the
    constraints of its namespace and HPA."""

    workload_kind: str
    workload_name: str
    target: WorkloadTarget | None = None
    error: str = ""
    """Non-empty when the workload's VPA exists but could not be read (malformed quantity, bad policy)."""
    constraints: Constraints = field(default_factory=Constraints)
    quotas: tuple[QuotaView, ...] = ()
    """The namespace's ResourceQuotas with compute limits."""
    node_pools: Mapping[str, str] = field(default_factory=dict)
    """Node -> pool (``podtailor.nodepool``), listed only when the target has per-pool values (a DaemonSet's)."""

    def target_on(self, node: str | None) -> WorkloadTarget | None:
        """The target of a new pod bound for ``node``: its pool's value where the target has one
        (``WorkloadTarget.for_pool``), else the status value (also when the node is not known)."""
        if self.target is None or node is None or node not in self.node_pools:
            return self.target
        return self.target.for_pool(self.node_pools[node])
