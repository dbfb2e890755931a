"""What the updater would do to a workload's pods to apply a recommendation: the report's disruption column.

Owns ``plan_pod`` and ``plan_workload``, which run the updater's own pure planner math
(``podtailor.resize.changes``: ``container_change`` with its limit, LimitRange and HPA rules, ``qos_class``,
``restarts``) on each running pod's spec, in the order of the updater's ``decide``: a BestEffort pod ->
left alone (the updater never gives one requests in place); nothing changes, or the largest request change
is below the change threshold -> none; the QoS class would change, the new requests exceed the node's
allocatable, or restartPolicy Never meets a RestartContainer resize policy -> replacement (the updater's
fallback; it skips instead when its fallback may not act, e.g. a single replica or a bare pod); a changed
resource with resizePolicy RestartContainer -> in place with a container restart; else in place online.
A workload gets its most disruptive pod's outcome. Plain init containers are not forecast here (the updater
resizes them in place from 1.36, never with a restart). ``pod_level_plan`` gives the pod-level requests the
updater would derive from the planned containers (``podtailor.resize.pod_level``). Pure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from podtailor.resize import changes as ch
from podtailor.resize.pod_level import pod_level, pod_level_limit_breach
from podtailor.resize.types import ContainerChange, ContainerTarget, ContainerView, QoS, Reason
from podtailor.resources import CurrentResources, Resources
from podtailor.vpa import ControlledValues
from recommender.report.types import ContainerSpec, Disruption, NodeInfo, PodInfo, PodLevelPlan, Role

ORDER = (Disruption.NONE, Disruption.LEFT_ALONE, Disruption.IN_PLACE, Disruption.IN_PLACE_RESTART,
         Disruption.REPLACEMENT)


@dataclass(frozen=True, slots=True, kw_only=True)
class Outcome:
    disruption: Disruption
    reason: str
    """The updater's Reason value where there is one (e.g. "qos-would-change"), else a short code."""
    message: str
    pods: int = 1


def target_of(name: str, target: Resources, lower: Resources, upper: Resources, *,
              controlled_values: ControlledValues = ControlledValues.REQUESTS_AND_LIMITS) -> ContainerTarget:
    """An updater target for the resources the recommendation covers (an uncovered resource stays put)."""
    controlled = frozenset(r for r in ch.RESOURCES if ch.get(target, r) is not None)
    return ContainerTarget(name=name, target=target, lower_bound=lower, upper_bound=upper,
                           controlled_resources=controlled, controlled_values=controlled_values)


def view_of(spec: ContainerSpec) -> ContainerView:
    return ContainerView(name=spec.name, requests=spec.current.requests, limits=spec.current.limits,
                         resize_policy=dict(spec.resize_policy), sidecar=spec.role == Role.SIDECAR,
                         init=spec.role == Role.INIT)


def pod_level_plan(specs: Sequence[ContainerSpec], plans: Sequence[CurrentResources],
                   current: CurrentResources | None) -> PodLevelPlan | None:
    """What the updater would make of the pod-level resources ``current`` when the containers ``specs`` take
    their ``plans`` (one per spec): the derived requests and whether the pod-level limits would refuse it."""
    if current is None:
        return None
    views = tuple(view_of(s) for s in specs)
    changes = tuple(ContainerChange(name=s.name, old_requests=s.current.requests, old_limits=s.current.limits,
                                    new_requests=p.requests, new_limits=p.limits, restarts=False)
                    for s, p in zip(specs, plans, strict=True))
    derived = pod_level(current.requests, changes, views)
    refused = pod_level_limit_breach(current.limits, derived, [c for c in changes if not ch.is_noop(c)])
    return PodLevelPlan(current=current, planned_requests=derived or current.requests, refused=refused)


def planned(spec: ContainerSpec, target: ContainerTarget | None, cons: ch.Constraints) -> CurrentResources:
    """The requests and limits the updater would write for this container (unchanged without a target)."""
    if target is None:
        return spec.current
    change = ch.container_change(view_of(spec), target, cons)
    return CurrentResources(requests=change.new_requests, limits=change.new_limits)


def _changes(containers: Sequence[ContainerSpec], targets: Mapping[str, ContainerTarget],
             cons: ch.Constraints) -> list[ContainerChange]:
    out = []
    for spec in containers:
        view, target = view_of(spec), targets.get(spec.name)
        out.append(ch.container_change(view, target, cons) if target is not None else ContainerChange(
            name=spec.name, old_requests=view.requests, old_limits=view.limits, new_requests=view.requests,
            new_limits=view.limits, restarts=False))
    return out


def _above_node(node: NodeInfo | None, changes: Sequence[ContainerChange]) -> str | None:
    if node is None:
        return None
    for name in ch.RESOURCES:
        want = sum(ch.get(c.new_requests, name) or 0 for c in changes)
        have = ch.get(node.allocatable, name)
        if have is not None and want > have:
            return f"{name} requests {want} > node {node.name} allocatable {have}"
    return None


def plan_pod(pod: PodInfo, targets: Mapping[str, ContainerTarget], cons: ch.Constraints, node: NodeInfo | None,
             threshold: float) -> Outcome:
    changes = _changes(pod.containers, targets, cons)
    active = [c for c in changes if not ch.is_noop(c)]
    size = max((ch.relative_change(c) for c in changes), default=0.0)
    before = ch.qos_class((c.old_requests, c.old_limits) for c in changes)
    if before == QoS.BEST_EFFORT:
        return Outcome(disruption=Disruption.LEFT_ALONE, reason=Reason.BEST_EFFORT.value,
                       message="BestEffort pods cannot gain requests in place; left alone")
    if not active:
        return Outcome(disruption=Disruption.NONE, reason="no-change", message="nothing changes")
    if size < threshold:
        return Outcome(disruption=Disruption.NONE, reason=Reason.BELOW_THRESHOLD.value,
                       message=f"change {size:.0%} < threshold {threshold:.0%}")
    after = ch.qos_class((c.new_requests, c.new_limits) for c in changes)
    if after != before:
        return Outcome(disruption=Disruption.REPLACEMENT, reason=Reason.QOS_WOULD_CHANGE.value,
                       message=f"QoS class would change {before} -> {after}")
    why = _above_node(node, changes)
    if why is not None:
        return Outcome(disruption=Disruption.REPLACEMENT, reason=Reason.ABOVE_NODE.value, message=why)
    restarting = [c.name for c in active if c.restarts]
    if restarting and pod.restart_policy == "Never":
        return Outcome(disruption=Disruption.REPLACEMENT, reason=Reason.NEVER_RESTART.value,
                       message=f"restartPolicy Never but RestartContainer on changed resources of "
                               f"{', '.join(restarting)}")
    if restarting:
        return Outcome(disruption=Disruption.IN_PLACE_RESTART, reason=Reason.CHANGE.value,
                       message=f"resize restarts {', '.join(restarting)}")
    return Outcome(disruption=Disruption.IN_PLACE, reason=Reason.CHANGE.value,
                   message=f"resize in place, largest request change {size:.0%}")


def plan_workload(pods: Sequence[PodInfo], targets: Mapping[str, ContainerTarget], cons: ch.Constraints,
                  nodes: Mapping[str, NodeInfo], threshold: float) -> Outcome:
    """The most disruptive outcome over the running pods (ties: the first pod by name)."""
    if not pods:
        return Outcome(disruption=Disruption.NONE, reason="no-running-pods", pods=0,
                       message="no running pods: new pods start with the new values")
    outcomes = [plan_pod(p, targets, cons, nodes.get(p.node), threshold) for p in sorted(pods, key=lambda p: p.name)]
    worst = max(outcomes, key=lambda o: ORDER.index(o.disruption))
    count = sum(1 for o in outcomes if o.disruption == worst.disruption)
    return Outcome(disruption=worst.disruption, reason=worst.reason, pods=count,
                   message=f"{worst.message} ({count} of {len(outcomes)} pods)" if len(outcomes) > 1
                   else worst.message)
