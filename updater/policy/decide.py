"""The Decide step: one ``PodDecision`` per pod, with an Action, a Reason and a human message.

Owns the order of the checks. First the pod itself: deleting, no target, update mode (Off and Initial are
never acted on; Recreate and Auto are treated like InPlaceOrRecreate, because we resize in place first and
evict only as the fallback; InPlace never falls back), policy coverage (namespaces, excluded namespaces,
``workload_selector`` matched against the pod's labels because workload labels are not in the view; a pod
without labels never matches a non-empty selector), frozen pool, unknown node, a resize in flight (Infeasible,
and Deferred or InProgress past their timeouts, go to the fallback), not Ready, too young, BestEffort (never
gains requests in place; left alone, unlike VPA which evicts them forever, autoscaler#9374). Then the change:
below the threshold (or within bounds; a change that waits for the node to declare a feature is a
``node-feature-not-declared`` skip instead), stale target with only decreases, QoS class change (fallback),
pod-level resources unsupported, a pod-level change on a node that does not declare the feature (skip, waits),
above the node's allocatable (fallback), restartPolicy Never with a restarting change (fallback), restarting
change outside the maintenance window or awaiting approval (skips). Plain init containers' changes the server's
version, their resizePolicy or the node cannot take are left out first (``surfaces.py``), said in the message.
A fallback is taken only when allowed: policy fallback not none, mode not InPlace, the pod has a controller,
the workload has more than one replica (unless allowed) and the pod is not marked do-not-disrupt; otherwise
the pod is skipped, with the reason that blocked it and the fallback it would have taken in the message.

A pod the webhook gave a CPU startup boost (``podtailor.io/startup-boost``, its CPU request still the boosted
value) is held out of all that (reason ``startup-boost``) until it has been Ready for the boost's
``durationSeconds``; then it is resized in place to its target (reason ``unboost``) whatever its update mode
(Off included, as VPA does), the change threshold or its age, honouring resizePolicy and the restart gates, and
never through the fallback: an un-boost that cannot be done in place leaves the pod boosted, said in the message.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from podtailor.resize import changes as ch
from podtailor.resize.boost import ANNOTATION as BOOST_ANNOTATION
from podtailor.resize.boost import BoostRecord, read_annotation
from podtailor.resize.types import ContainerChange, ContainerView, LimitRangeView, PodRestartPolicy, QoS, Reason
from podtailor.resources import Resources, human_amount
from podtailor.vpa import ACTED_MODES, UpdateMode
from updater.answers import PendingReason, ServerFeatures, above_allocatable_answer
from updater.policy.surfaces import (
    Held,
    aggregate,
    hold_init_changes,
    pod_level,
    pod_level_limit_breach,
    pod_level_waits,
)
from updater.policy.types import Action, FallbackMode, NodeView, PodDecision, PodView, RolloutPolicy, WorkloadTarget

WorkloadKey = tuple[str, str, str]
DO_NOT_DISRUPT = (("karpenter.sh/do-not-disrupt", "true"), ("cluster-autoscaler.kubernetes.io/safe-to-evict", "false"))


@dataclass(frozen=True, slots=True, kw_only=True)
class Context:
    """Everything a decision needs besides the pod, indexed once per plan."""

    policy: RolloutPolicy
    now_s: float
    targets: Mapping[WorkloadKey, WorkloadTarget]
    hpa_resources: Mapping[WorkloadKey, frozenset[str]]
    limit_ranges: Mapping[str, LimitRangeView]
    nodes: Mapping[str, NodeView]
    frozen: Mapping[str, str]
    approvals: frozenset[WorkloadKey]
    pod_level_resize_supported: bool
    restart_window_open: bool
    features: ServerFeatures
    """What the server's version answers (how a target above the node's allocatable is refused)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Verdict:
    action: Action
    reason: Reason
    message: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Proposal:
    changes: tuple[ContainerChange, ...]
    """Every container of the pod, unchanged ones included."""
    new_pod_level: Resources | None = None
    held: Held = field(default_factory=Held)
    """Plain init containers' changes left out (``surfaces.py``), with why."""
    active: tuple[ContainerChange, ...] = field(init=False)
    """The changes that move something (derived once: every check reads it)."""
    size: float = field(init=False)
    """The largest relative request change over ``changes`` (derived once)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "active", tuple(c for c in self.changes if not ch.is_noop(c)))
        object.__setattr__(self, "size", max((ch.relative_change(c) for c in self.changes), default=0.0))


def workload_key(pod: PodView) -> WorkloadKey:
    return (pod.namespace, pod.workload_kind, pod.workload_name)


def _skip(reason: Reason, message: str) -> Verdict:
    return Verdict(action=Action.SKIP, reason=reason, message=message)


def _age(since_s: float | None, now_s: float) -> float | None:
    return None if since_s is None else now_s - since_s


def not_covered(pod: PodView, policy: RolloutPolicy) -> str | None:
    if policy.namespaces and pod.namespace not in policy.namespaces:
        return f"namespace {pod.namespace} is not in policy {policy.name}"
    if pod.namespace in policy.excluded_namespaces:
        return f"namespace {pod.namespace} is excluded by policy {policy.name}"
    if any(pod.labels.get(k) != v for k, v in policy.workload_selector.items()):
        return f"pod labels do not match the workload selector of policy {policy.name}"
    return None


def fallback(pod: PodView, target: WorkloadTarget, ctx: Context, reason: Reason, message: str) -> Verdict:
    """FALLBACK when the pod may be replaced, else SKIP with what blocked it."""
    policy = ctx.policy
    if policy.fallback == FallbackMode.NONE:
        return _skip(reason, f"fallback disabled: {message}")
    if target.update_mode is UpdateMode.IN_PLACE:
        return _skip(reason, f"update mode InPlace never falls back: {message}")
    if pod.workload_kind == "Pod":
        return _skip(Reason.NO_CONTROLLER, f"bare pod, replacing it would lose it: {message}")
    if target.replicas <= 1 and not policy.allow_single_replica_eviction:
        return _skip(Reason.SINGLE_REPLICA, f"single replica, not replaced: {message}")
    for key, value in DO_NOT_DISRUPT:
        if pod.annotations.get(key) == value:
            return _skip(Reason.DO_NOT_DISRUPT, f"annotated {key}={value}: {message}")
    return Verdict(action=Action.FALLBACK, reason=reason, message=f"{message} -> {policy.fallback.value}")


def _in_flight(pod: PodView, target: WorkloadTarget, ctx: Context) -> Verdict | None:
    policy, now = ctx.policy, ctx.now_s
    if pod.resize_pending == PendingReason.INFEASIBLE:
        return fallback(pod, target, ctx, Reason.INFEASIBLE, "PodResizePending Infeasible: the node cannot fit it")
    if pod.resize_pending is not None:
        age = _age(pod.resize_pending_since_s, now)
        if pod.resize_pending == PendingReason.DEFERRED and age is not None and age > policy.deferred_timeout_s:
            return fallback(pod, target, ctx, Reason.DEFERRED_TIMEOUT,
                            f"resize Deferred for {age:.0f}s (timeout {policy.deferred_timeout_s:.0f}s)")
        shown = "unknown" if age is None else f"{age:.0f}s"
        return _skip(Reason.RESIZE_IN_FLIGHT, f"resize pending ({pod.resize_pending}) for {shown}")
    if pod.resize_in_progress:
        age = _age(pod.resize_in_progress_since_s, now)
        error = f", error: {pod.resize_error}" if pod.resize_error else ""
        if age is not None and age > policy.in_progress_timeout_s:
            return fallback(pod, target, ctx, Reason.IN_PROGRESS_TIMEOUT,
                            f"resize in progress for {age:.0f}s (timeout {policy.in_progress_timeout_s:.0f}s){error}")
        return _skip(Reason.RESIZE_IN_FLIGHT, f"resize in progress{error}")
    if 0 < pod.observed_generation < pod.generation:
        return _skip(Reason.RESIZE_IN_FLIGHT,
                     f"kubelet observed generation {pod.observed_generation} < {pod.generation}")
    return None


def _pod_checks(pod: PodView, target: WorkloadTarget | None, ctx: Context,
                boosted: Mapping[str, BoostRecord]) -> Verdict | None:
    if pod.deleting:
        return _skip(Reason.DELETING, "pod is being deleted")
    if pod.static:
        return _skip(Reason.STATIC_POD, "static (mirror) pod: the API server refuses its resize and its kubelet "
                                        "recreates it from the manifest; left alone")
    if target is None:
        return _skip(Reason.NO_TARGET, f"no recommendation for {pod.workload_kind}/{pod.workload_name}")
    if target.update_mode not in ACTED_MODES and not boosted:  # a boost is taken back in any mode
        return _skip(Reason.UPDATE_MODE, f"VPA {target.vpa_name} update mode {target.update_mode} is not acted on")
    why = not_covered(pod, ctx.policy)
    if why is not None:
        return _skip(Reason.NOT_COVERED, why)
    if pod.pool in ctx.frozen:
        return _skip(Reason.POOL_FROZEN, f"pool {pod.pool!r} frozen: {ctx.frozen[pod.pool]}")
    if pod.node not in ctx.nodes:
        return _skip(Reason.NODE_UNKNOWN, f"node {pod.node!r} is not in the snapshot")
    if boosted:
        return _boost_held(pod, target, ctx, boosted)
    return _in_flight(pod, target, ctx) or _pod_state(pod, ctx)


# --------------------------------------------------------------------------------------- startup boost
def still_boosted(pod: PodView) -> dict[str, BoostRecord]:
    """The containers whose CPU request is still the boost the webhook gave them (``podtailor.io/startup-boost``):
    once resized to anything else, a container is no longer boosted, whatever the annotation says."""
    records = read_annotation(pod.annotations.get(BOOST_ANNOTATION))
    return {c.name: records[c.name] for c in pod.containers
            if c.name in records and c.requests.cpu_millicores == records[c.name].boosted_millicores
            and records[c.name].boosted_millicores > records[c.name].target_millicores}


def unboost_due_s(pod: PodView, target: WorkloadTarget, names: Mapping[str, BoostRecord]) -> float | None:
    """When the boost is due to be taken back: the pod became Ready plus the longest ``durationSeconds`` of its
    boosted containers' current startupBoost (0 when the VPA no longer has one); None while not Ready. As VPA's
    ``GetExpiredStartupCPUBoostAnnotations`` (``pkg/utils/vpa/api.go``, v1.8.1: the Ready condition's
    lastTransitionTime plus the duration read from the VPA now), which its updater's ``processNextBoostItem``
    (``pkg/updater/logic/updater.go``) acts on; VPA expires each container on its own, we take the pod's boosted
    containers back together (one resize), at the longest duration. A Ready pod whose transition time is
    unknown is due at once."""
    if not pod.ready:
        return None
    duration = max((b.duration_s for name in names if name in target.containers
                    and (b := target.containers[name].startup_boost) is not None), default=0)
    return (pod.ready_since_s or float("-inf")) + duration


def _boost_held(pod: PodView, target: WorkloadTarget, ctx: Context, names: Mapping[str, BoostRecord]) -> Verdict | None:
    """A boosted pod's skip (not yet due, or its un-boost cannot be done in place), or None when it is due. It is
    never 'above target' before then (VPA keeps such pods out of its normal update loop the same way,
    ``updater.go`` ``RunOnce`` with ``PodHasCPUBoostInProgressAnnotation``), and never evicted to take a boost
    back: an Infeasible or timed-out un-boost leaves it boosted, reported in the decision's message."""
    shown = ", ".join(sorted(names))
    flight = _in_flight(pod, target, ctx)
    if flight is not None and flight.action == Action.FALLBACK:
        return _skip(Reason.STARTUP_BOOST, f"left boosted ({shown}), never evicted to take a boost back: "
                                           f"{flight.message}")
    if flight is not None:
        return flight
    due = unboost_due_s(pod, target, names)
    if due is None:
        return _skip(Reason.STARTUP_BOOST, f"boosted ({shown}): taken back once the pod is Ready")
    if ctx.now_s < due:
        return _skip(Reason.STARTUP_BOOST, f"boosted ({shown}): taken back in {due - ctx.now_s:.0f}s")
    return None


def _unboost(pod: PodView, target: WorkloadTarget, ctx: Context, proposal: Proposal) -> Verdict:
    """A due boost is taken back in place to the target whatever the change threshold and the pod's age; it
    honours resizePolicy (a restarting un-boost waits for the restart gates) and never falls back."""
    if not proposal.active:
        return judge(pod, target, ctx, proposal)
    blocked = _feasibility(pod, target, ctx, proposal)
    if blocked is not None:
        return _skip(Reason.STARTUP_BOOST, f"left boosted, not taken back in place: {blocked.message}")
    restarting = [c.name for c in proposal.active if c.restarts]
    if restarting:
        gated = _restart_gates(pod, ctx, restarting)
        return gated if gated.action == Action.SKIP else Verdict(action=Action.RESIZE_RESTART, reason=Reason.UNBOOST,
                                                                 message=f"startup boost taken back: {gated.message}")
    return Verdict(action=Action.RESIZE_ONLINE, reason=Reason.UNBOOST,
                   message=f"startup boost taken back in place, largest request change {proposal.size:.0%}")


def _pod_state(pod: PodView, ctx: Context) -> Verdict | None:
    if not pod.ready:
        return _skip(Reason.NOT_READY, "pod is not Ready")
    age = ctx.now_s - pod.created_s
    if age < ctx.policy.min_pod_age_s:
        return _skip(Reason.TOO_YOUNG, f"pod is {age:.0f}s old (minimum {ctx.policy.min_pod_age_s:.0f}s)")
    pairs = ((c.requests, c.limits) for c in pod.containers)
    if pod.qos == QoS.BEST_EFFORT or ch.qos_class(pairs) == QoS.BEST_EFFORT:
        return _skip(Reason.BEST_EFFORT, "BestEffort pods cannot gain requests in place; left alone")
    return None


def propose(pod: PodView, target: WorkloadTarget, ctx: Context, *, no_decrease: bool) -> Proposal:
    key = workload_key(pod)
    cons = ch.Constraints(limit_range=ctx.limit_ranges.get(pod.namespace),
                          hpa_resources=ctx.hpa_resources.get(key, frozenset()), no_decrease=no_decrease,
                          keep_limit_ratio=ctx.policy.keep_limit_ratio)
    out = []
    for view in pod.containers:
        spec = target.containers.get(view.name)
        if spec is None:
            out.append(ContainerChange(name=view.name, old_requests=view.requests, old_limits=view.limits,
                                       new_requests=view.requests, new_limits=view.limits, restarts=False))
        else:
            out.append(ch.container_change(view, spec, cons))
    kept, held = hold_init_changes(pod.containers, out, ctx.nodes.get(pod.node), ctx.features)
    return Proposal(changes=kept, new_pod_level=pod_level(pod.pod_level, kept, pod.containers), held=held)


def _inside_bounds(pod: PodView, target: WorkloadTarget) -> bool:
    return all(ch.inside_bounds(view, target.containers[view.name])
               for view in pod.containers if view.name in target.containers)


def _significance(pod: PodView, target: WorkloadTarget, ctx: Context, proposal: Proposal) -> Verdict | None:
    threshold = ctx.policy.change_threshold
    if proposal.active and proposal.size >= threshold:
        return None
    held = proposal.held
    if held.node_wait and max((ch.relative_change(c) for c in held.changes), default=0.0) >= threshold:
        return _skip(Reason.NODE_FEATURE, "; ".join(held.reasons))  # only what waits for the node is worth doing
    if target.stale:
        raw = propose(pod, target, ctx, no_decrease=False)
        if raw.active and raw.size >= threshold:
            return _skip(Reason.STALE_TARGET, f"target is stale: decrease of {raw.size:.0%} not applied")
    if _inside_bounds(pod, target):
        return _skip(Reason.WITHIN_BOUNDS, f"requests within bounds, change {proposal.size:.0%} < {threshold:.0%}")
    return _skip(Reason.BELOW_THRESHOLD, f"change {proposal.size:.0%} < threshold {threshold:.0%}")


def _above_node(node: NodeView, proposal: Proposal, views: tuple[ContainerView, ...]) -> str | None:
    totals = proposal.new_pod_level or aggregate(proposal.changes, views, new=True)
    for name in ch.RESOURCES:
        want, have = ch.get(totals, name), ch.get(node.allocatable, name)
        if want is not None and have is not None and want > have:
            return (f"{name} requests {human_amount(name, want)} > node {node.name} allocatable "
                    f"{human_amount(name, have)}")
    return None


def _feasibility(pod: PodView, target: WorkloadTarget, ctx: Context, proposal: Proposal) -> Verdict | None:
    before = ch.qos_class((c.old_requests, c.old_limits) for c in proposal.changes)
    after = ch.qos_class((c.new_requests, c.new_limits) for c in proposal.changes)
    if before != after:
        return fallback(pod, target, ctx, Reason.QOS_WOULD_CHANGE, f"QoS class would change {before} -> {after}")
    if pod.pod_level is not None and not ctx.pod_level_resize_supported:
        return _skip(Reason.POD_LEVEL_UNSUPPORTED, "pod-level resources cannot be resized on this cluster")
    waits = pod_level_waits(ctx.nodes.get(pod.node), ctx.features) if proposal.new_pod_level is not None else None
    if waits is not None:
        return _skip(Reason.NODE_FEATURE, waits)
    if (breach := pod_level_limit_breach(pod.pod_level_limits, proposal.new_pod_level, proposal.active)) is not None:
        return _skip(Reason.POD_LEVEL_LIMIT, breach)
    why = _above_node(ctx.nodes[pod.node], proposal, pod.containers)
    if why is not None:
        return fallback(pod, target, ctx, Reason.ABOVE_NODE, f"{why}: {above_allocatable_answer(ctx.features)}")
    restarting = [c.name for c in proposal.active if c.restarts]
    if restarting and pod.restart_policy == PodRestartPolicy.NEVER:
        return fallback(pod, target, ctx, Reason.NEVER_RESTART,
                        f"restartPolicy Never but RestartContainer on changed resources of {', '.join(restarting)}")
    return None


def _restart_gates(pod: PodView, ctx: Context, restarting: list[str]) -> Verdict:
    names = ", ".join(restarting)
    if not ctx.restart_window_open:
        return _skip(Reason.OUTSIDE_WINDOW, f"restarting change ({names}) waits for a maintenance window")
    if ctx.policy.require_approval_for_restart and workload_key(pod) not in ctx.approvals:
        return _skip(Reason.AWAITING_APPROVAL,
                     f"restarting change ({names}) needs podtailor.io/approve-restart=true on "
                     f"{pod.workload_kind}/{pod.workload_name}")
    drain = "drained first" if pod.gated else "restart without drain"
    return Verdict(action=Action.RESIZE_RESTART, reason=Reason.CHANGE, message=f"resize restarts {names} ({drain})")


def judge(pod: PodView, target: WorkloadTarget, ctx: Context, proposal: Proposal) -> Verdict:
    verdict = _significance(pod, target, ctx, proposal) or _feasibility(pod, target, ctx, proposal)
    if verdict is not None:
        return verdict
    restarting = [c.name for c in proposal.active if c.restarts]
    if restarting:
        return _restart_gates(pod, ctx, restarting)
    return Verdict(action=Action.RESIZE_ONLINE, reason=Reason.CHANGE,
                   message=f"resize in place, largest request change {proposal.size:.0%}")


def _acted_on(pod: PodView, verdict: Verdict, proposal: Proposal | None) -> tuple[ContainerChange, ...]:
    """The changes the decision carries. A replacement never changes a plain init container (the webhook leaves
    them as the template has them, and the template fallback patches ``containers``), so a fallback carries
    none of theirs."""
    if proposal is None:
        return ()
    if verdict.action != Action.FALLBACK:
        return proposal.active
    inits = {c.name for c in pod.containers if c.init}
    return tuple(c for c in proposal.active if c.name not in inits)


def decide(pod: PodView, ctx: Context) -> tuple[PodDecision, Proposal | None]:
    """The pod's decision, and the proposal it was based on (None when the pod was skipped before it)."""
    target = ctx.targets.get(workload_key(pod))
    target = None if target is None else target.for_pool(pod.pool)  # a DaemonSet's pod: its own pool's value
    boosted = still_boosted(pod)  # the boost annotation parsed once per decision
    verdict = _pod_checks(pod, target, ctx, boosted)
    proposal: Proposal | None = None
    if target is not None and verdict is None and boosted:
        proposal = propose(pod, target, ctx, no_decrease=False)
        verdict = _unboost(pod, target, ctx, proposal)
    elif target is not None and (verdict is None or verdict.action == Action.FALLBACK):
        proposal = propose(pod, target, ctx, no_decrease=target.stale)
        verdict = verdict or judge(pod, target, ctx, proposal)
    assert verdict is not None
    if proposal is not None and proposal.held.reasons and verdict.reason != Reason.NODE_FEATURE:
        verdict = Verdict(action=verdict.action, reason=verdict.reason,
                          message=f"{verdict.message}; {'; '.join(proposal.held.reasons)}")
    decision = PodDecision(
        namespace=pod.namespace, pod=pod.name, uid=pod.uid, resource_version=pod.resource_version, pool=pod.pool,
        workload_kind=pod.workload_kind, workload_name=pod.workload_name, action=verdict.action,
        reason=verdict.reason, message=verdict.message, changes=_acted_on(pod, verdict, proposal),
        old_pod_level=pod.pod_level, new_pod_level=None if proposal is None else proposal.new_pod_level)
    return decision, proposal
