"""The cluster scenario on real kubelets (hollow nodes): usage set through the kubelets' control endpoint.

``UsageOnKubelets`` is what ``Scenario.pool`` returns for the simulator (``set_usage``), for real kubelets;
``RealUsage`` is the ``Scenario`` mixin that sets a Deployment's constant usage annotation on its pods' real
kubelets once they run. Used by tests/integration/test_updater_kubelets.py and tests/drills/test_drills_kubelets.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kubernetes import client

from podtailor.units import parse_memory_bytes
from tests.builders.cluster import Mi, Scenario
from tests.harness.kubelets import HollowNode
from tests.nodesim.usage import Constant


class UsageOnKubelets:
    """What ``Scenario.pool`` returns for the simulator (``set_usage``), for real kubelets."""

    def __init__(self, core: client.CoreV1Api, nodes: Mapping[str, HollowNode]) -> None:
        self.core, self.nodes = core, nodes

    def set_usage(self, namespace: str, pod: str, container: str, model: Constant) -> None:
        obj = self.core.read_namespaced_pod(pod, namespace)
        node = self.nodes[obj.spec.node_name]
        node.set_usage(namespace, pod, container, memory_bytes=model.memory_bytes,
                       cpu_millicores=round(model.cpu_cores * 1000))
        status = next(s for s in obj.status.container_statuses if s.name == container)
        limit = ((status.resources and status.resources.limits) or {}).get("memory")
        if limit is not None and model.memory_bytes > parse_memory_bytes(limit):
            node.oom_kill(namespace, pod, container)


class RealUsage(Scenario):
    """Mixin: a Deployment's constant usage annotation is set on its pods' real kubelets once they run."""

    hollow: dict[str, HollowNode]

    def deployment(self, name: str, pool: str, replicas: int, **kwargs: Any) -> None:
        super().deployment(name, pool, replicas, **kwargs)
        usage = kwargs.get("usage") or {"kind": "constant", "cpu_cores": 0.1, "memory_bytes": 100 * Mi}
        assert usage["kind"] == "constant", "real kubelets take constant usage only"
        model = Constant(cpu_cores=usage["cpu_cores"], memory_bytes=usage["memory_bytes"])
        for pod in self.running(name):
            UsageOnKubelets(self.core, self.hollow).set_usage(self.ns, pod.metadata.name, "app", model)
