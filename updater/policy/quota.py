"""ResourceQuota in the plan (pure): which resizes and replacements the namespace's quotas admit.

Owns the arithmetic of the API server's quota admission for what the updater does, so that a plan never
asks for what admission would refuse (``k8s.io/apiserver/pkg/admission/plugin/resourcequota/controller.go``
``checkRequest`` and ``pkg/quota/v1/evaluator/core/pods.go``, v1.37.2):

- A quota applies to a pod when every one of its scopes matches (``podMatchesScopeFunc``): Terminating /
  NotTerminating (``activeDeadlineSeconds``), BestEffort / NotBestEffort (QoS), PriorityClass (the
  ``priorityClassName`` against In / NotIn / Exists / DoesNotExist, as a label selector over the one key),
  CrossNamespacePodAffinity.
- A pod's usage is, per container, the larger of its spec and what the kubelet reports (``PodUsageFunc``
  with status resources, i.e. max(spec, allocated, actual)), summed over the regular containers and sidecars,
  or a plain init container's plus the sidecars' when larger; pod-level requests when set. ``cpu`` and
  ``requests.cpu`` count requests, ``limits.cpu`` limits; the same for memory.
- A resize (``pods/resize``: ``Handles``, v1.37.2) is charged max(0, new usage - old usage) and admitted while
  used + charge <= hard for every matching quota. A decrease is charged 0 and frees nothing at admission:
  room comes back only when the kubelet has applied it and the quota controller has counted it again
  (``DefaultUpdateFilter`` replenishes on a change of resources). So decreases are taken first (they always
  pass) but lend no room to increases of the same plan; the next plan sees that room in ``status.used``.
- A replacement pod (the eviction or template fallback) is a create: charged its whole new usage while the
  evicted pod still counts (a terminating pod counts until its grace period ends, ``QuotaV1Pod``), so the
  fallback is taken only where used + the whole new pod fits. Otherwise the ReplicaSet would fail to create
  the replacement again and again.

Increases are admitted in decision order (the planner's), each charged against what the ones before it took.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from podtailor.resize import changes as ch
from podtailor.resize.types import QoS, Reason
from podtailor.resources import Resources
from updater.policy.types import Action, PodDecision, PodView, QuotaView, ScopeRequirement

HELD_ANNOTATION = "podtailor.io/admission-held"
"""Set by the webhook on a pod it left at its own resources because the target would exceed a ResourceQuota
(the value says which); the updater records it as a Warning Event on the pod (the webhook writes nothing)."""
BOOST_REJECTED_ANNOTATION = "podtailor.io/startup-boost-rejected"
"""Set by the webhook when the VPA's startupBoost is invalid (the pod is admitted unboosted); the updater records
an Event from it, as from ``HELD_ANNOTATION``."""
KEYS: Mapping[str, tuple[str, str]] = {
    "cpu": ("requests", "cpu"), "requests.cpu": ("requests", "cpu"), "limits.cpu": ("limits", "cpu"),
    "memory": ("requests", "memory"), "requests.memory": ("requests", "memory"),
    "limits.memory": ("limits", "memory"),
}
"""Quota resource name -> (requests | limits, cpu | memory)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Subject:
    """What a quota's scopes look at in a pod."""

    qos: QoS
    priority_class: str = ""
    terminating: bool = False
    cross_namespace_affinity: bool = False


def subject_of(pod: PodView) -> Subject:
    return Subject(qos=pod.qos, priority_class=pod.priority_class, terminating=pod.terminating,
                   cross_namespace_affinity=pod.cross_namespace_affinity)


def _scope_matches(req: ScopeRequirement, pod: Subject) -> bool:
    if req.scope == "Terminating":
        return pod.terminating
    if req.scope == "NotTerminating":
        return not pod.terminating
    if req.scope == "BestEffort":
        return pod.qos == QoS.BEST_EFFORT
    if req.scope == "NotBestEffort":
        return pod.qos != QoS.BEST_EFFORT
    if req.scope == "CrossNamespacePodAffinity":
        return pod.cross_namespace_affinity
    if req.scope == "PriorityClass":
        has = bool(pod.priority_class)
        return {"Exists": has, "DoesNotExist": not has, "In": has and pod.priority_class in req.values,
                "NotIn": not has or pod.priority_class not in req.values}.get(req.operator, False)
    return False


def applies(quota: QuotaView, pod: Subject) -> bool:
    return all(_scope_matches(s, pod) for s in quota.scopes)


@dataclass(frozen=True, slots=True, kw_only=True)
class Usage:
    """A pod's quota usage: total requests and limits (None: a resource not set on some container)."""

    requests: dict[str, int | None]
    limits: dict[str, int | None]

    def amount(self, key: str) -> int | None:
        kind, name = KEYS[key]
        return (self.requests if kind == "requests" else self.limits)[name]


def _total(values: Iterable[int | None]) -> int | None:
    out = 0
    for v in values:
        if v is None:
            return None
        out += v
    return out


def _pod_total(values: Sequence[int | None], kinds: Sequence[tuple[bool, bool]]) -> int | None:
    """A pod's total from its containers' amounts and (sidecar, init) kinds: the sum of the regular containers and
    sidecars, or a plain init container's amount plus the sidecars' if larger (``PodRequests``/``PodLimits``,
    ``k8s.io/component-helpers/resource/helpers.go``, v0.37.2, upstream adding only the sidecars declared before
    it: an upper bound here). None when a regular container or sidecar leaves it unset; an unset init counts 0."""
    total = _total(v for v, (_, init) in zip(values, kinds, strict=True) if not init)
    if total is None:
        return None
    sidecars = sum(v or 0 for v, (sidecar, init) in zip(values, kinds, strict=True) if sidecar and not init)
    return max([total, *((v or 0) + sidecars for v, (_, init) in zip(values, kinds, strict=True) if init)])


def usage(pod: PodView, decision: PodDecision | None, *, new: bool, with_status: bool) -> Usage:
    """The pod's usage before (``new`` False) or after the decision's changes; ``with_status``: per container
    the larger of that and what the kubelet reports (a running pod), else the spec alone (a new pod)."""
    changed = {c.name: c for c in (decision.changes if decision else ())}
    requests: dict[str, list[int | None]] = {"cpu": [], "memory": []}
    limits: dict[str, list[int | None]] = {"cpu": [], "memory": []}
    for view in pod.containers:
        c = changed.get(view.name)
        req = (c.new_requests if new else c.old_requests) if c else view.requests
        lim = (c.new_limits if new else c.old_limits) if c else view.limits
        for name in ch.RESOURCES:
            r, lm = ch.get(req, name), ch.get(lim, name)
            if with_status:
                actual_r = ch.get(view.actual, name) if view.actual else None
                actual_l = ch.get(view.actual_limits, name) if view.actual_limits else None
                r = max(r or 0, actual_r or 0) if r is not None or actual_r is not None else None
                lm = max(lm, actual_l or 0) if lm is not None else None
            requests[name].append(r)
            limits[name].append(lm)
    kinds = [(view.sidecar, view.init) for view in pod.containers]
    req_totals = {n: _pod_total(v, kinds) for n, v in requests.items()}
    level = (decision.new_pod_level if new and decision and decision.new_pod_level else pod.pod_level)
    if level is not None:
        for name in ch.RESOURCES:
            req_totals[name] = ch.get(level, name) if ch.get(level, name) is not None else req_totals[name]
    return Usage(requests=req_totals, limits={n: _pod_total(v, kinds) for n, v in limits.items()})


def spec_usage(pairs: Iterable[tuple[Resources, Resources]]) -> Usage:
    """The usage of a pod being created from its containers' (requests, limits): spec only (no status yet)."""
    items = list(pairs)
    return Usage(requests={n: _total(ch.get(r, n) for r, _ in items) for n in ch.RESOURCES},
                 limits={n: _total(ch.get(lim, n) for _, lim in items) for n in ch.RESOURCES})


def exceeded(quotas: Iterable[QuotaView], subject: Subject, before: Usage, after: Usage) -> str | None:
    """For a pod being created: the first quota and resource where ``after`` does not fit but ``before`` (the
    pod as it came) uses less, i.e. where our change would be what admission refuses; None when none."""
    for q in quotas:
        if not applies(q, subject):
            continue
        for key in q.hard:
            new, old = after.amount(key) or 0, before.amount(key) or 0
            if new > old and q.used.get(key, 0) + new > q.hard[key]:
                return (f"ResourceQuota {q.name}: {key} used {_show(key, q.used.get(key, 0))} + {_show(key, new)} "
                        f"> hard {_show(key, q.hard[key])}")
    return None


def charge(quota: QuotaView, before: Usage | None, after: Usage) -> dict[str, int]:
    """Per limited resource of the quota, what admission adds to ``used``: after - before, never negative
    (``SubtractWithNonNegativeResult``); with ``before`` None (a create), all of ``after``."""
    out = {}
    for key in quota.hard:
        new = after.amount(key)
        old = before.amount(key) if before is not None else 0
        out[key] = max(0, (new or 0) - (old or 0))
    return out


class Ledger:
    """Room left in each quota of a plan, as admitted changes take it."""

    def __init__(self, quotas: Iterable[QuotaView]) -> None:
        self.by_namespace: dict[str, list[QuotaView]] = {}
        for q in quotas:
            self.by_namespace.setdefault(q.namespace, []).append(q)
        self.taken: dict[tuple[str, str, str], int] = {}

    def quotas(self, namespace: str) -> Sequence[QuotaView]:
        return self.by_namespace.get(namespace, ())

    def admit(self, namespace: str, subject: Subject, before: Usage | None, after: Usage) -> str | None:
        """Take the room for one change in every matching quota, or take nothing and say what it exceeds."""
        wanted: list[tuple[tuple[str, str, str], int]] = []
        for q in self.quotas(namespace):
            if not applies(q, subject):
                continue
            for key, amount in charge(q, before, after).items():
                if amount <= 0:
                    continue
                slot = (namespace, q.name, key)
                used = q.used.get(key, 0) + self.taken.get(slot, 0)
                if used + amount > q.hard[key]:
                    return (f"ResourceQuota {q.name}: {key} used {_show(key, used)} + {_show(key, amount)} "
                            f"> hard {_show(key, q.hard[key])}")
                wanted.append((slot, amount))
        for slot, amount in wanted:
            self.taken[slot] = self.taken.get(slot, 0) + amount
        return None


def _show(key: str, amount: int) -> str:
    return f"{amount}m" if key.endswith("cpu") else f"{amount / 2**20:.0f}Mi"


def _is_decrease(pod: PodView, d: PodDecision) -> bool:
    before, after = usage(pod, d, new=False, with_status=True), usage(pod, d, new=True, with_status=True)
    return all((after.amount(k) or 0) <= (before.amount(k) or 0) for k in KEYS)


def apply_quotas(decisions: Sequence[PodDecision], pods: Mapping[str, PodView],
                 quotas: Iterable[QuotaView]) -> tuple[PodDecision, ...]:
    """The decisions with every resize and fallback that a quota would refuse turned into a skip, reason QUOTA
    (the message names the quota and the resource). Decreases first, then the rest in order."""
    ledger = Ledger(quotas)
    out = list(decisions)
    acting = [i for i, d in enumerate(decisions) if d.action != Action.SKIP and ledger.quotas(d.namespace)
              and d.key in pods]
    acting.sort(key=lambda i: (not _is_decrease(pods[decisions[i].key], decisions[i]), i))
    for i in acting:
        d, pod = decisions[i], pods[decisions[i].key]
        if d.action == Action.FALLBACK:
            why = ledger.admit(d.namespace, subject_of(pod), None, usage(pod, d, new=True, with_status=False))
            if why:
                out[i] = replace(d, action=Action.SKIP, reason=Reason.QUOTA, held=d.action,
                                 message=f"fallback held ({d.reason.value}: {d.message}): its replacement would "
                                         f"exceed {why}")
            continue
        why = ledger.admit(d.namespace, subject_of(pod), usage(pod, d, new=False, with_status=True),
                           usage(pod, d, new=True, with_status=True))
        if why:
            out[i] = replace(d, action=Action.SKIP, reason=Reason.QUOTA, held=d.action,
                             message=f"resize would exceed {why}")
    return tuple(out)
