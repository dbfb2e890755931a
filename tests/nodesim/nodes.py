"""Simulated Nodes: pools, labels, capacity, conditions and Lease heartbeats.

Owns what a kubelet does for its Node object: register it (labels for the node pool, instance type,
zone, OS and architecture; capacity and allocatable; nodeInfo reporting kubelet v1.37), renew its Lease in
``kube-node-lease`` every ``lease_renew_s`` (kubelet: 10 s) so the node-lifecycle controller keeps it
Ready and untainted, and report conditions (Ready, MemoryPressure, DiskPressure, PIDPressure) on change
and every ``status_report_s``. Tests flip a node NotReady, put it under MemoryPressure, or make it "lost"
(heartbeats stop, as when a kubelet dies). Differences from kubelet: no images, volumes or addresses that
anything connects to (node addresses are loopback ones, so nothing ever leaves the machine).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from podtailor.nodepool import PoolLabel
from tests.nodesim.quantity import format_cpu_millicores, format_memory_bytes
from tests.nodesim.resize import NodeCapacity

KUBELET_VERSION = "v1.37.2"

# Node-pool label keys (``podtailor.nodepool``, the list the report and the updater read) by the style a
# test names; a pool is labelled with every key asked for.
POOL_LABEL_KEYS = {
    "podtailor": PoolLabel.PODTAILOR.value,
    "gke": PoolLabel.GKE.value,
    "eks": PoolLabel.EKS.value,
    "aks": PoolLabel.AKS.value,
    "karpenter": PoolLabel.KARPENTER.value,
}


@dataclass(frozen=True, slots=True, kw_only=True)
class NodePool:
    """A group of identical simulated nodes."""

    name: str
    count: int
    cpu_millicores: int = 4000
    """Allocatable CPU per node (capacity is the same; no system reservation is simulated)."""
    memory_bytes: int = 16 * 2**30
    """Allocatable memory per node."""
    max_pods: int = 110
    instance_type: str = "sim.large"
    zone: str = "sim-zone-a"
    label_keys: tuple[str, ...] = (POOL_LABEL_KEYS["podtailor"],)
    """Which node-pool label keys to set (see POOL_LABEL_KEYS)."""
    extra_labels: dict[str, str] = field(default_factory=dict)
    cpu_manager_policy: str = "none"
    """The kubelet's CPU Manager policy: ``static`` makes a Guaranteed pod's CPU resize Infeasible."""

    def __post_init__(self) -> None:
        if self.count < 0 or self.cpu_millicores <= 0 or self.memory_bytes <= 0 or self.max_pods <= 0:
            raise ValueError(f"node pool {self.name!r}: count, cpu, memory and pods must be positive")
        if self.cpu_manager_policy not in ("none", "static"):
            raise ValueError(f"node pool {self.name!r}: cpu_manager_policy must be none or static")


def now_rfc3339() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def now_micro() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass
class SimNode:
    """Mutable state of one simulated node (owned by the simulator's loop)."""

    name: str
    pool: NodePool
    index: int
    ready: bool = True
    memory_pressure: bool = False
    heartbeat: bool = True
    transitions: dict[str, str] = field(default_factory=dict)
    next_pod_ip: int = 1
    allocatable: NodeCapacity | None = None
    """The kubelet's configured allocatable; starts as the pool's size (see ``capacity``)."""
    reported: NodeCapacity | None = None
    """What the node status last told the API server; lags ``allocatable`` when a change is not reported."""
    retry_due_at: float | None = None
    """Monotonic time of this node's next periodic retry of deferred resizes; None until the loop starts."""

    @property
    def capacity(self) -> NodeCapacity:
        if self.allocatable is None:
            self.allocatable = NodeCapacity(cpu_millicores=self.pool.cpu_millicores,
                                            memory_bytes=self.pool.memory_bytes, pods=self.pool.max_pods)
        return self.allocatable

    @property
    def enforced(self) -> NodeCapacity:
        """What admission and resizes are decided against: the allocatable last published in the Node status
        (kubelet 1.37 admits against its informer's Node object), else the configured one."""
        return self.reported if self.reported is not None else self.capacity

    @property
    def address(self) -> str:
        return f"127.1.{self.index // 250}.{self.index % 250 + 1}"

    def allocate_pod_ip(self) -> str:
        ip = f"10.{2 + self.index // 256}.{self.index % 256}.{self.next_pod_ip}"
        self.next_pod_ip = self.next_pod_ip % 254 + 1
        return ip

    def labels(self) -> dict[str, str]:
        labels = {
            "kubernetes.io/hostname": self.name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            "node.kubernetes.io/instance-type": self.pool.instance_type,
            "topology.kubernetes.io/zone": self.pool.zone,
            "type": "nodesim",
        }
        labels.update({key: self.pool.name for key in self.pool.label_keys})
        labels.update(self.pool.extra_labels)
        return labels

    def object(self) -> dict[str, Any]:
        return {"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": self.name, "labels": self.labels(),
                             "annotations": {"nodesim.podtailor.io/simulated": "true"}}}

    def _condition(self, ctype: str, status: bool, reason: str, message: str, now: str) -> dict[str, str]:
        value = "True" if status else "False"
        key = f"{ctype}={value}"
        if not self.transitions.get(ctype, "").startswith(key):
            self.transitions[ctype] = f"{key}@{now}"
        return {"type": ctype, "status": value, "reason": reason, "message": message,
                "lastHeartbeatTime": now, "lastTransitionTime": self.transitions[ctype].split("@", 1)[1]}

    def status(self, *, report_allocatable: bool = True) -> dict[str, Any]:
        """The node status patch; ``report_allocatable`` also publishes the kubelet's current allocatable."""
        if report_allocatable:
            self.reported = self.capacity
        now = now_rfc3339()
        if self.reported is None:
            self.reported = self.capacity
        res = {"cpu": format_cpu_millicores(self.reported.cpu_millicores),
               "memory": format_memory_bytes(self.reported.memory_bytes), "pods": str(self.reported.pods),
               "ephemeral-storage": "100Gi"}
        ready = (self._condition("Ready", True, "KubeletReady", "kubelet is posting ready status", now)
                 if self.ready else
                 self._condition("Ready", False, "KubeletNotReady", "simulated: node marked not ready", now))
        conditions = [
            self._condition("MemoryPressure", self.memory_pressure,
                            "KubeletHasInsufficientMemory" if self.memory_pressure else "KubeletHasSufficientMemory",
                            "simulated memory pressure" if self.memory_pressure
                            else "kubelet has sufficient memory available", now),
            self._condition("DiskPressure", False, "KubeletHasNoDiskPressure", "kubelet has no disk pressure", now),
            self._condition("PIDPressure", False, "KubeletHasSufficientPID", "kubelet has sufficient PID available",
                            now),
            ready,
        ]
        return {"status": {
            "capacity": res, "allocatable": res, "conditions": conditions,
            "addresses": [{"type": "InternalIP", "address": self.address}, {"type": "Hostname", "address": self.name}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 0}},
            "nodeInfo": {"machineID": self.name, "systemUUID": self.name, "bootID": self.name,
                         "kernelVersion": "6.1.0-nodesim", "osImage": "podtailor nodesim",
                         "containerRuntimeVersion": "nodesim://1.0", "kubeletVersion": KUBELET_VERSION,
                         "kubeProxyVersion": KUBELET_VERSION, "operatingSystem": "linux", "architecture": "amd64"},
        }}

    def lease(self) -> dict[str, Any]:
        return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": self.name, "namespace": "kube-node-lease"},
                "spec": {"holderIdentity": self.name, "leaseDurationSeconds": 40, "renewTime": now_micro()}}
