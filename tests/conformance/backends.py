"""The two kinds of node a conformance scenario runs on, behind one small interface.

Owns ``NodeBackend``: a single node of 4 CPU / 8 GiB reserved for one test, either a real kubelet from the
session's hollow-node pool (``tests/harness/kubelets.py``) or a node of a simulator started for the test
(``tests/nodesim``), with the same three controls: set a container's usage, change the node's allocatable
as the kubelet sees it, OOM-kill a container. Scenario code sees only this interface, so both kinds run
the same steps and the same assertions. A third kind, the real node (``tests/harness/realnode.py``: the
host's size, real containers), runs the scenarios that need none of the controls: its pods get the local
busybox image, and a control skips the scenario there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from tests.harness.kubelets import HOLLOW_TOLERATION, HollowNode
from tests.harness.realnode import REAL_TOLERATION, WORKLOAD_IMAGE
from tests.nodesim.kubelet import NodeSimulator
from tests.nodesim.usage import Constant

CPU_MILLICORES = 4000
MEMORY_BYTES = 8 * 2**30


class NodeBackend(Protocol):
    kind: str
    node: str

    def set_usage(self, namespace: str, pod: str, container: str, *, memory_bytes: int,
                  cpu_millicores: int) -> None: ...

    def set_allocatable(self, *, cpu_millicores: int, memory_bytes: int) -> None: ...

    def oom_kill(self, namespace: str, pod: str, container: str) -> None: ...


@dataclass
class KubeletBackend:
    hollow: HollowNode
    kind: str = "kubelet"

    @property
    def node(self) -> str:
        return self.hollow.name

    def set_usage(self, namespace: str, pod: str, container: str, *, memory_bytes: int,
                  cpu_millicores: int) -> None:
        self.hollow.set_usage(namespace, pod, container, memory_bytes=memory_bytes, cpu_millicores=cpu_millicores)

    def set_allocatable(self, *, cpu_millicores: int, memory_bytes: int) -> None:
        self.hollow.set_allocatable(cpu_millicores=cpu_millicores, memory_bytes=memory_bytes)

    def oom_kill(self, namespace: str, pod: str, container: str) -> None:
        self.hollow.oom_kill(namespace, pod, container)


@dataclass
class SimBackend:
    sim: NodeSimulator
    kind: str = "sim"

    @property
    def node(self) -> str:
        return self.sim.node_names()[0]

    def set_usage(self, namespace: str, pod: str, container: str, *, memory_bytes: int,
                  cpu_millicores: int) -> None:
        self.sim.set_usage(namespace, pod, container, Constant(cpu_cores=cpu_millicores / 1000,
                                                               memory_bytes=memory_bytes))

    def set_allocatable(self, *, cpu_millicores: int, memory_bytes: int) -> None:
        self.sim.set_allocatable(self.node, cpu_millicores=cpu_millicores, memory_bytes=memory_bytes)

    def oom_kill(self, namespace: str, pod: str, container: str) -> None:
        self.sim.oom_kill(namespace, pod, container)


@dataclass
class RealBackend:
    """The real node: its usage is what its processes use, its allocatable the host's, its OOM kills the
    kernel's, so none of the three controls can be set from outside (``test_real_node*.py`` do those for real); the
    scenarios that need one are not collected for it (``conftest.NOT_ON_THE_REAL_NODE``)."""

    node: str
    kind: str = "real"

    def set_usage(self, namespace: str, pod: str, container: str, *, memory_bytes: int,
                  cpu_millicores: int) -> None:
        raise AssertionError("a real node's container usage is its processes', not set from outside: "
                             "list the scenario in conftest.NOT_ON_THE_REAL_NODE")

    def set_allocatable(self, *, cpu_millicores: int, memory_bytes: int) -> None:
        raise AssertionError("a real node's allocatable is the host's, not set from outside: "
                             "list the scenario in conftest.NOT_ON_THE_REAL_NODE")

    def oom_kill(self, namespace: str, pod: str, container: str) -> None:
        raise AssertionError("a real node's OOM kills are the kernel's (test_real_node_oom.py): "
                             "list the scenario in conftest.NOT_ON_THE_REAL_NODE")


def _runnable(c: dict[str, Any]) -> dict[str, Any]:
    """A container the real node can run: the local busybox image, sleeping."""
    return {**c, "image": WORKLOAD_IMAGE, "imagePullPolicy": "Never",
            "command": ["/bin/sh", "-c", "while :; do sleep 1; done"]}


def pod_manifest(name: str, backend: NodeBackend, *containers: dict[str, Any],
                 restart_policy: str | None = None, priority_class: str | None = None,
                 pod_resources: dict[str, Any] | None = None) -> dict[str, Any]:
    real = backend.kind == "real"
    spec: dict[str, Any] = {"nodeName": backend.node,
                            "containers": [_runnable(c) for c in containers] if real else list(containers),
                            "tolerations": [REAL_TOLERATION if real else HOLLOW_TOLERATION],
                            "terminationGracePeriodSeconds": 1}
    if restart_policy:
        spec["restartPolicy"] = restart_policy
    if priority_class:
        spec["priorityClassName"] = priority_class
    if pod_resources:
        spec["resources"] = pod_resources
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def container(name: str, requests: dict[str, str], limits: dict[str, str] | None = None, *,
              memory_policy: str | None = None, cpu_policy: str | None = None) -> dict[str, Any]:
    c: dict[str, Any] = {"name": name, "image": f"registry.invalid/{name}:1",
                         "resources": {"requests": requests, "limits": limits or {}}}
    policy = [{"resourceName": r, "restartPolicy": p} for r, p in (("cpu", cpu_policy), ("memory", memory_policy)) if p]
    if policy:
        c["resizePolicy"] = policy
    return c
