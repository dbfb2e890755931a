"""Kubelet 1.37 in-place resize admission as pure functions: fit, deferral, retry order, restarts, memory checks.

This module owns the resource value types (node allocatable, container and pod resources, QoS class) and
the decisions the allocation manager makes, as the conformance suite (``tests/conformance``) checked them
against kubelet v1.37.2: a resize that does not fit the node's allocatable beside the other pods' allocated
requests is Deferred with the message of ``lifecycle.InsufficientResourceError`` (pods, then cpu, then
memory, first failure wins), also when it exceeds the whole allocatable (since 1.36 the API server refuses
that with a 403 when it knows; the kubelet's old Infeasible capacity check, ``canResizePod``, is gone); the
1.34+ deferred-queue order; atomic retries; restart classification; and the memory-limit-decrease check
with its message. Infeasible in 1.37 comes only from the resize admit handler's rules
(``pkg/kubelet/allocation/handlers.go``: static CPU/Memory Manager with Guaranteed pods, swap, pod-level
resize off, memory-backed volumes); the simulator models the static CPU Manager one (``infeasible_message``).
Differences from kubelet: only cpu and memory exist (no extended resources, pod overhead, pod-level
resources, init containers, static CPU/memory manager, swap or static-pod rules); a pod's request is the
plain sum over its containers (kubelet also takes max with init containers and, for the pod under
evaluation, may use max(desired, actual) per container); ``order_pending`` is a proper total order with
the pod uid as final tie-break, while kubelet's comparator is not strictly transitive for ties.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

__all__ = [
    "ContainerResources",
    "NodeCapacity",
    "PendingResize",
    "PodResources",
    "QOSClass",
    "ResizeDecision",
    "ResizeOutcome",
    "RetryResult",
    "containers_to_restart",
    "decide_resize",
    "infeasible_message",
    "memory_decrease_message",
    "memory_limit_error",
    "order_pending",
    "retry_pending",
]

NOT_REQUIRED = "NotRequired"
RESTART_CONTAINER = "RestartContainer"
_RESTART_POLICIES = frozenset({NOT_REQUIRED, RESTART_CONTAINER})


class QOSClass(enum.StrEnum):
    GUARANTEED = "Guaranteed"
    BURSTABLE = "Burstable"
    BEST_EFFORT = "BestEffort"


_QOS_RANK = {QOSClass.GUARANTEED: 0, QOSClass.BURSTABLE: 1, QOSClass.BEST_EFFORT: 2}


class ResizeOutcome(enum.StrEnum):
    ACCEPT = "Accept"
    DEFERRED = "Deferred"
    INFEASIBLE = "Infeasible"


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeCapacity:
    """The node's allocatable resources (not its raw capacity)."""

    cpu_millicores: int
    memory_bytes: int
    pods: int = 110


@dataclass(frozen=True, slots=True, kw_only=True)
class ContainerResources:
    """Requests and limits of one container as written in the spec (None means unset)."""

    name: str
    cpu_request_millicores: int | None = None
    cpu_limit_millicores: int | None = None
    memory_request_bytes: int | None = None
    memory_limit_bytes: int | None = None

    def __post_init__(self) -> None:
        for value in (self.cpu_request_millicores, self.cpu_limit_millicores,
                      self.memory_request_bytes, self.memory_limit_bytes):
            if value is not None and value < 0:
                raise ValueError(f"container {self.name!r}: resources must not be negative")

    @property
    def effective_cpu_request_millicores(self) -> int:
        """Request as the API server defaults it: the limit when only a limit is set, else 0 when unset."""
        return _defaulted(self.cpu_request_millicores, self.cpu_limit_millicores)

    @property
    def effective_memory_request_bytes(self) -> int:
        return _defaulted(self.memory_request_bytes, self.memory_limit_bytes)


def _defaulted(request: int | None, limit: int | None) -> int:
    if request is not None:
        return request
    return limit if limit is not None else 0


@dataclass(frozen=True, slots=True, kw_only=True)
class PodResources:
    """A pod's identity, priority and regular containers' resources."""

    uid: str
    containers: tuple[ContainerResources, ...]
    priority: int = 0

    @property
    def cpu_request_millicores(self) -> int:
        return sum(c.effective_cpu_request_millicores for c in self.containers)

    @property
    def memory_request_bytes(self) -> int:
        return sum(c.effective_memory_request_bytes for c in self.containers)

    @property
    def qos_class(self) -> QOSClass:
        return qos_class(self.containers)

    def container(self, name: str) -> ContainerResources | None:
        return next((c for c in self.containers if c.name == name), None)


def qos_class(containers: Iterable[ContainerResources]) -> QOSClass:
    """Kubernetes GetPodQOS for cpu and memory: zero values count as unset, requests are defaulted."""
    requests = {"cpu": 0, "memory": 0}
    limits = {"cpu": 0, "memory": 0}
    guaranteed = True
    for c in containers:
        requests["cpu"] += c.effective_cpu_request_millicores
        requests["memory"] += c.effective_memory_request_bytes
        limits["cpu"] += c.cpu_limit_millicores or 0
        limits["memory"] += c.memory_limit_bytes or 0
        if not c.cpu_limit_millicores or not c.memory_limit_bytes:
            guaranteed = False
    if not any(requests.values()) and not any(limits.values()):
        return QOSClass.BEST_EFFORT
    if guaranteed and all(requests[r] in (0, limits[r]) for r in requests):
        return QOSClass.GUARANTEED
    return QOSClass.BURSTABLE


@dataclass(frozen=True, slots=True, kw_only=True)
class ResizeDecision:
    """Outcome plus the PodResizePending reason and message kubelet would write ("" when accepted)."""

    outcome: ResizeOutcome
    message: str = ""

    @property
    def reason(self) -> str:
        return "" if self.outcome is ResizeOutcome.ACCEPT else self.outcome.value


def _resources_equal(a: PodResources, b: PodResources) -> bool:
    return sorted(a.containers, key=lambda c: c.name) == sorted(b.containers, key=lambda c: c.name)


def _insufficient(resource: str, requested: int, used: int, capacity: int) -> str:
    return (f"Node didn't have enough resource: {resource}, requested: {requested}, "
            f"used: {used}, capacity: {capacity}")


def _fit_message(node: NodeCapacity, pod: PodResources, others: Sequence[PodResources]) -> str | None:
    if len(others) + 1 > node.pods:
        return _insufficient("pods", 1, len(others), node.pods)
    cpu, memory = pod.cpu_request_millicores, pod.memory_request_bytes
    used_cpu = sum(p.cpu_request_millicores for p in others)
    used_memory = sum(p.memory_request_bytes for p in others)
    if cpu > 0 and cpu > node.cpu_millicores - used_cpu:
        return _insufficient("cpu", cpu, used_cpu, node.cpu_millicores)
    if memory > 0 and memory > node.memory_bytes - used_memory:
        return _insufficient("memory", memory, used_memory, node.memory_bytes)
    return None


def decide_resize(
    node: NodeCapacity,
    pod_desired: PodResources,
    pod_allocated: PodResources,
    others_allocated: Sequence[PodResources],
) -> ResizeDecision:
    """Decide one resize atomically. ``others_allocated`` must not contain the pod itself (it is dropped)."""
    if _resources_equal(pod_desired, pod_allocated):
        return ResizeDecision(outcome=ResizeOutcome.ACCEPT)
    others = [p for p in others_allocated if p.uid != pod_desired.uid]
    deferred = _fit_message(node, pod_desired, others)
    if deferred is not None:
        return ResizeDecision(outcome=ResizeOutcome.DEFERRED, message=deferred)
    return ResizeDecision(outcome=ResizeOutcome.ACCEPT)


def infeasible_message(cpu_manager_policy: str, desired: PodResources, allocated: PodResources) -> str | None:
    """The resize admit handler's Infeasible rule the simulator models (``pkg/kubelet/allocation/handlers.go``
    Admit, with InPlacePodVerticalScalingExclusiveCPUs off as by default in 1.37): a Guaranteed pod whose CPU
    requests change on a node with the static CPU Manager policy."""
    if cpu_manager_policy != "static" or desired.qos_class is not QOSClass.GUARANTEED:
        return None
    before = {c.name: c.effective_cpu_request_millicores for c in allocated.containers}
    if all(before.get(c.name) == c.effective_cpu_request_millicores for c in desired.containers):
        return None
    return 'Resize is infeasible for Guaranteed Pods alongside CPU Manager policy "static"'


@dataclass(frozen=True, slots=True, kw_only=True)
class PendingResize:
    """A resize kubelet has not allocated yet. ``pending_since_s`` is the PodResizePending condition's
    lastTransitionTime (None sorts last, as in kubelet)."""

    desired: PodResources
    allocated: PodResources
    pending_since_s: float | None = None

    @property
    def uid(self) -> str:
        return self.desired.uid

    @property
    def increases_requests(self) -> bool:
        return (self.desired.cpu_request_millicores > self.allocated.cpu_request_millicores
                or self.desired.memory_request_bytes > self.allocated.memory_request_bytes)


def _pending_key(p: PendingResize) -> tuple[bool, int, int, bool, float, str]:
    since = p.pending_since_s
    return (p.increases_requests, -p.desired.priority, _QOS_RANK[p.desired.qos_class],
            since is None, since if since is not None else 0.0, p.uid)


def order_pending(pending: Iterable[PendingResize]) -> list[PendingResize]:
    """Kubelet's deferred-resize order: non-increasing resizes first, then higher priority, then
    Guaranteed before Burstable before BestEffort, then longest pending; uid breaks remaining ties."""
    return sorted(pending, key=_pending_key)


@dataclass(frozen=True, slots=True, kw_only=True)
class RetryResult:
    """Accepted resizes in acceptance order, the ones still pending with their new decision, and the
    allocation map after the accepted ones were applied."""

    accepted: tuple[PendingResize, ...]
    still_pending: tuple[tuple[PendingResize, ResizeDecision], ...]
    allocated: Mapping[str, PodResources]


def retry_pending(
    node: NodeCapacity,
    pending: Iterable[PendingResize],
    allocated_map: Mapping[str, PodResources],
) -> RetryResult:
    """Retry every pending resize in ``order_pending`` order; an accepted one frees or takes capacity
    before the next is tried, and a deferred head does not block the rest. ``allocated_map`` holds the
    allocated resources of every pod on the node by uid (pending pods included); it is not mutated."""
    allocated = dict(allocated_map)
    accepted: list[PendingResize] = []
    still: list[tuple[PendingResize, ResizeDecision]] = []
    for item in order_pending(pending):
        current = allocated.get(item.uid, item.allocated)
        others = [p for uid, p in allocated.items() if uid != item.uid]
        decision = decide_resize(node, item.desired, current, others)
        if decision.outcome is ResizeOutcome.ACCEPT:
            allocated[item.uid] = item.desired
            accepted.append(replace(item, allocated=item.desired))
        else:
            still.append((item, decision))
    return RetryResult(accepted=tuple(accepted), still_pending=tuple(still), allocated=allocated)


def _policy(resize_policy: Mapping[str, Mapping[str, str]], container: str, resource: str) -> str:
    value = resize_policy.get(container, {}).get(resource, NOT_REQUIRED)
    if value not in _RESTART_POLICIES:
        raise ValueError(f"container {container!r}: unknown resize restartPolicy {value!r} for {resource}")
    return value


def _changed(old: ContainerResources, new: ContainerResources, resource: str) -> bool:
    if resource == "cpu":
        return (old.effective_cpu_request_millicores != new.effective_cpu_request_millicores
                or old.cpu_limit_millicores != new.cpu_limit_millicores)
    return (old.effective_memory_request_bytes != new.effective_memory_request_bytes
            or old.memory_limit_bytes != new.memory_limit_bytes)


def containers_to_restart(
    old: PodResources,
    new: PodResources,
    resize_policy: Mapping[str, Mapping[str, str]],
) -> set[str]:
    """Names of containers whose resize restarts them: a changed resource (request or limit) whose
    policy is RestartContainer. ``resize_policy`` maps container -> {"cpu"|"memory": policy};
    missing entries mean NotRequired."""
    restart: set[str] = set()
    for new_c in new.containers:
        old_c = old.container(new_c.name)
        if old_c is None:
            continue
        for resource in ("cpu", "memory"):
            policy = _policy(resize_policy, new_c.name, resource)
            if policy == RESTART_CONTAINER and _changed(old_c, new_c, resource):
                restart.add(new_c.name)
    return restart


def memory_limit_error(
    container: ContainerResources,
    new_limit_bytes: int | None,
    usage_bytes: int,
    *,
    restart_policy: str = NOT_REQUIRED,
    reported_usage_bytes: int | None = None,
) -> str | None:
    """One container's error when a NotRequired memory-limit decrease is not below its usage, else None.

    ``container`` holds the currently actuated resources. Kubelet v1.37.2 (``validateMemoryResizeAction``,
    ``kuberuntime_manager.go``) only checks decreases (including adding a limit to an unlimited container),
    refuses when the container's usage >= the new limit, and formats ``attempting to set container %q
    memory limit (%d) below current usage (%d)`` with the *pod's* usage (``reported_usage_bytes``; the
    container's when not given), an upstream slip the conformance suite saw on a real kubelet.
    """
    if restart_policy not in _RESTART_POLICIES:
        raise ValueError(f"unknown resize restartPolicy {restart_policy!r}")
    if restart_policy == RESTART_CONTAINER or new_limit_bytes is None:
        return None
    current = container.memory_limit_bytes
    if current is not None and new_limit_bytes >= current:
        return None
    if usage_bytes < new_limit_bytes:
        return None
    shown = usage_bytes if reported_usage_bytes is None else reported_usage_bytes
    return (f'attempting to set container "{container.name}" memory limit ({new_limit_bytes}) '
            f"below current usage ({shown})")


def memory_decrease_message(errors: Sequence[str]) -> str:
    """The PodResizeInProgress/Error message for the errors of one resize: ``cannot decrease memory limits:``
    and one error, or several as Go's ``utilerrors.NewAggregate`` prints them (``[a, b]``)."""
    if not errors:
        raise ValueError("no errors to report")
    body = errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]"
    return f"cannot decrease memory limits: {body}"
