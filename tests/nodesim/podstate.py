"""One simulated pod: parsed from the API object, advanced by the simulator, rendered back as status.

Owns the per-pod and per-container state a kubelet keeps (allocated and actuated resources, restart
counts, container states, the resize conditions, usage counters) and the status patch that reports it:
phase, IPs, ``observedGeneration``, the kubelet-owned conditions (PodReadyToStartContainers, Initialized,
ContainersReady, Ready, PodResizePending, PodResizeInProgress) and container statuses with ``resources``
and ``allocatedResources``. Patches are strategic-merge: conditions merge by type, so conditions written by
others (PodScheduled, DisruptionTarget) are kept, and ours are removed with ``$patch: delete``.
Differences from kubelet: no probes (a running container is ready), no images or volumes.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from tests.nodesim.quantity import (
    format_cpu_millicores,
    format_memory_bytes,
    parse_cpu_millicores,
    parse_memory_bytes,
)
from tests.nodesim.resize import ContainerResources, PodResources
from tests.nodesim.usage import UsageModel

Obj = dict[str, Any]
KUBELET_CONDITIONS = ("PodReadyToStartContainers", "Initialized", "ContainersReady", "Ready")


def container_resources(spec: Obj) -> ContainerResources:
    res = spec.get("resources") or {}
    req, lim = res.get("requests") or {}, res.get("limits") or {}

    def cpu(d: Obj) -> int | None:
        return parse_cpu_millicores(str(d["cpu"])) if "cpu" in d else None

    def mem(d: Obj) -> int | None:
        return parse_memory_bytes(str(d["memory"])) if "memory" in d else None

    return ContainerResources(name=spec["name"], cpu_request_millicores=cpu(req), cpu_limit_millicores=cpu(lim),
                              memory_request_bytes=mem(req), memory_limit_bytes=mem(lim))


def render_resources(c: ContainerResources) -> Obj:
    """Status ``resources``: what is actuated. Requests default to limits as the API server defaults them."""
    requests: Obj = {}
    limits: Obj = {}
    if c.cpu_request_millicores is not None or c.cpu_limit_millicores is not None:
        requests["cpu"] = format_cpu_millicores(c.effective_cpu_request_millicores)
    if c.memory_request_bytes is not None or c.memory_limit_bytes is not None:
        requests["memory"] = format_memory_bytes(c.effective_memory_request_bytes)
    if c.cpu_limit_millicores is not None:
        limits["cpu"] = format_cpu_millicores(c.cpu_limit_millicores)
    if c.memory_limit_bytes is not None:
        limits["memory"] = format_memory_bytes(c.memory_limit_bytes)
    out: Obj = {}
    if requests:
        out["requests"] = requests
    if limits:
        out["limits"] = limits
    return out


@dataclass
class SimContainer:
    name: str
    image: str
    sidecar: bool
    policy: dict[str, str]
    allocated: ContainerResources
    actual: ContainerResources
    model: UsageModel
    started_at: str
    restart_count: int = 0
    running: bool = True
    waiting_reason: str = ""
    terminated: Obj | None = None
    last_state: Obj | None = None
    backoff_until: float = 0.0
    crashes: int = 0
    cpu_seconds_total: float = 0.0
    memory_working_set_bytes: int = 0
    cfs_periods_total: int = 0
    cfs_throttled_periods_total: int = 0
    oom_events_total: int = 0
    cgroup: ContainerResources | None = None
    """What the runtime really applied, when it differs from ``actual`` (``SimConfig.unapplied_cgroups``)."""

    def container_id(self, pod_uid: str) -> str:
        return hashlib.sha256(f"{pod_uid}/{self.name}/{self.restart_count}".encode()).hexdigest()[:32]

    def restart(self, now: str, reason: str, exit_code: int) -> None:
        """The container ended (``reason``) and starts again at once."""
        self.last_state = {"terminated": {"exitCode": exit_code, "reason": reason, "startedAt": self.started_at,
                                          "finishedAt": now}}
        self.restart_count += 1
        self.started_at = now
        self.running, self.waiting_reason, self.terminated = True, "", None

    def status(self, pod_uid: str) -> Obj:
        if self.running:
            state: Obj = {"running": {"startedAt": self.started_at}, "waiting": None, "terminated": None}
        elif self.terminated is not None:
            state = {"terminated": self.terminated, "running": None, "waiting": None}
        else:
            state = {"waiting": {"reason": self.waiting_reason}, "running": None, "terminated": None}
        alloc = {"cpu": format_cpu_millicores(self.allocated.effective_cpu_request_millicores),
                 "memory": format_memory_bytes(self.allocated.effective_memory_request_bytes)}
        return {
            "name": self.name, "image": self.image, "imageID": f"{self.image}@sha256:{'0' * 64}",
            "containerID": f"containerd://{self.container_id(pod_uid)}", "ready": self.running,
            "started": self.running, "restartCount": self.restart_count, "state": state,
            "lastState": self.last_state or {}, "resources": render_resources(self.actual),
            "allocatedResources": alloc,
        }


@dataclass
class ResizeCondition:
    reason: str
    message: str
    generation: int
    since: str
    since_s: float


@dataclass
class SimPod:
    namespace: str
    name: str
    uid: str
    node: str
    generation: int
    priority: int
    restart_policy: str
    owner_kind: str
    owner_name: str
    created_at: str
    pod_ip: str
    containers: dict[str, SimContainer]
    init_completed: list[Obj] = field(default_factory=list)
    desired: PodResources | None = None
    observed_generation: int = 0
    phase: str = "Running"
    start_time: str = ""
    pending: ResizeCondition | None = None
    in_progress: ResizeCondition | None = None
    actuate_at: float | None = None
    deleting: bool = False
    delete_at: float = 0.0
    resize_trigger: str = ""
    gates: dict[str, bool] = field(default_factory=dict)
    """``spec.readinessGates`` condition types -> whether that condition is True in the API now (absent: False)."""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def allocated(self) -> PodResources:
        return PodResources(uid=self.uid, priority=self.priority,
                            containers=tuple(c.allocated for c in self.containers.values()))

    def containers_ready(self) -> bool:
        return self.phase == "Running" and all(c.running for c in self.containers.values())

    def ready(self) -> bool:
        """Like kubelet's ``GeneratePodReadyCondition`` (pkg/kubelet/status/generate.go): containers ready and
        every readiness gate's condition True."""
        return self.containers_ready() and all(self.gates.values())

    def status_patch(self, host_ip: str) -> Obj:
        now = self.start_time
        ready = "True" if self.ready() else "False"
        conditions: list[Obj] = [
            {"type": "PodReadyToStartContainers", "status": "True", "lastTransitionTime": now},
            {"type": "Initialized", "status": "True", "lastTransitionTime": now},
            {"type": "ContainersReady", "status": "True" if self.containers_ready() else "False",
             "lastTransitionTime": now},
            {"type": "Ready", "status": ready, "lastTransitionTime": now},
        ]
        for ctype, cond in (("PodResizePending", self.pending), ("PodResizeInProgress", self.in_progress)):
            if cond is None:
                conditions.append({"type": ctype, "$patch": "delete"})
            else:
                conditions.append({"type": ctype, "status": "True", "reason": cond.reason or None,
                                   "message": cond.message or None, "observedGeneration": cond.generation,
                                   "lastProbeTime": None, "lastTransitionTime": cond.since})
        regular = [c.status(self.uid) for c in self.containers.values() if not c.sidecar]
        init = list(self.init_completed) + [c.status(self.uid) for c in self.containers.values() if c.sidecar]
        status: Obj = {
            "phase": self.phase, "hostIP": host_ip, "hostIPs": [{"ip": host_ip}], "podIP": self.pod_ip,
            "podIPs": [{"ip": self.pod_ip}], "startTime": self.start_time,
            "observedGeneration": self.observed_generation, "conditions": conditions,
            "containerStatuses": regular,
        }
        if init:
            status["initContainerStatuses"] = init
        return {"status": status}
