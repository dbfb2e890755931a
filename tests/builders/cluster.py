"""The integration tests' cluster scenario: node pools on the simulator, Deployments, VPAs with a status,
ResizePolicies, and the updater's Executor run in-process pass by pass until its rollouts settle.

Used by the updater, fallback, quota, drain and webhook tests in tests/integration and by the drills (whose
``scenario`` fixtures build it on their own control plane); the real-kubelet variants subclass it.
``run_deployment`` puts a Deployment on the real node's pool (the real-node tests' ``real_scenario``).
"""

from __future__ import annotations

import json
import time
from typing import Any

from kubernetes import client

from tests.builders.realpods import pod_spec
from tests.conftest import SimFactory
from tests.nodesim.nodes import POOL_LABEL_KEYS, NodePool
from tests.waiting import eventually
from updater.kube.snapshot import FRESH_AT_BAKE_END, ClusterReader
from updater.kube.writes import EventRecorder, Evictor, PodResizer, RolloutStore, TemplatePatcher
from updater.policy.planner import plan
from updater.rollout.act.executor import Executor
from updater.rollout.act.grouping import group_by_policy
from updater.rollout.machine.journal import Phase, Rollout

Mi = 2**20
POOL_KEY = POOL_LABEL_KEYS["podtailor"]


class Scenario:
    def __init__(self, api: client.ApiClient, ns: str, make_sim: SimFactory) -> None:
        self.api, self.ns, self.make_sim = api, ns, make_sim
        self.core, self.apps = client.CoreV1Api(api), client.AppsV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.policies: list[str] = []
        self.pools = {}  # type: dict[str, str]
        self.watching: list[ClusterReader | RolloutStore] = []
        self.tolerations: list[dict[str, str]] = []
        """Added to every pod template (real kubelets are tainted; see test_updater_kubelets.py)."""

    def pool(self, short: str, nodes: int = 2, cpu: int = 8000) -> Any:
        name = f"{self.ns[-6:]}-{short}"
        self.pools[short] = name
        return self.make_sim(NodePool(name=name, count=nodes, cpu_millicores=cpu, memory_bytes=32 * 2**30),
                             tick_s=0.2, crash_backoff_s=0.5)

    def deployment(self, name: str, pool: str, replicas: int, *, memory_policy: str = "NotRequired",
                   requests: dict[str, str] | None = None, limits: dict[str, str] | None = None,
                   usage: dict[str, Any] | None = None, annotations: dict[str, str] | None = None) -> None:
        labels = {"app": name}
        pod_annotations = {"nodesim.podtailor.io/usage": json.dumps(
            usage or {"kind": "constant", "cpu_cores": 0.1, "memory_bytes": 100 * Mi})}
        container = {"name": "app", "image": "registry.invalid/app:1",
                     "resources": {"requests": requests or {"cpu": "500m", "memory": "256Mi"},
                                   "limits": limits or {"cpu": "1", "memory": "512Mi"}},
                     "resizePolicy": [{"resourceName": "memory", "restartPolicy": memory_policy}]}
        self.apps.create_namespaced_deployment(self.ns, {
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "annotations": annotations or {}},
            "spec": {"replicas": replicas, "selector": {"matchLabels": labels}, "template": {
                "metadata": {"labels": labels, "annotations": pod_annotations},
                "spec": {"nodeSelector": {POOL_KEY: self.pools[pool]}, "terminationGracePeriodSeconds": 1,
                         "tolerations": self.tolerations, "containers": [container]}}}})
        eventually(f"{name} pods running", lambda: len(self.running(name)) == replicas, timeout_s=60)

    def running(self, app: str) -> list[client.V1Pod]:
        pods = self.core.list_namespaced_pod(self.ns, label_selector=f"app={app}").items
        return [p for p in pods if p.status.phase == "Running" and not p.metadata.deletion_timestamp
                and p.status.container_statuses and all(c.ready for c in p.status.container_statuses)]

    def vpa(self, name: str, target: dict[str, str], lower: dict[str, str] | None = None,
            upper: dict[str, str] | None = None, mode: str = "InPlaceOrRecreate") -> None:
        self.custom.create_namespaced_custom_object("autoscaling.k8s.io", "v1", self.ns, "verticalpodautoscalers", {
            "apiVersion": "autoscaling.k8s.io/v1", "kind": "VerticalPodAutoscaler", "metadata": {"name": name},
            "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
                     "updatePolicy": {"updateMode": mode}, "recommenders": [{"name": "podtailor"}]}})
        obj = self.custom.get_namespaced_custom_object("autoscaling.k8s.io", "v1", self.ns, "verticalpodautoscalers",
                                                       name)
        obj["status"] = {"recommendation": {"containerRecommendations": [{
            "containerName": "app", "target": target, "lowerBound": lower or target, "upperBound": upper or target,
            "uncappedTarget": target}]},
            "conditions": [{"type": "RecommendationProvided", "status": "True",
                            "lastTransitionTime": "2026-01-01T00:00:00Z"}]}
        self.custom.replace_namespaced_custom_object_status("autoscaling.k8s.io", "v1", self.ns,
                                                            "verticalpodautoscalers", name, obj)

    def policy(self, **spec: Any) -> str:
        name = f"{self.ns}-policy"[:63]
        body = {"namespaces": [self.ns], "steps": [{"fraction": 0, "bake": "2s"}, {"fraction": 1, "bake": "1s"}],
                "minPodAge": "0s", "changeThreshold": 0.05}
        body.update(spec)
        self.custom.create_cluster_custom_object("podtailor.io", "v1alpha1", "resizepolicies", {
            "apiVersion": "podtailor.io/v1alpha1", "kind": "ResizePolicy", "metadata": {"name": name}, "spec": body})
        self.policies.append(name)
        return name

    def executor(self, reader: ClusterReader | None = None, watch: bool = False) -> Executor:
        """The Executor as ``plan`` builds it (every read lists), or with ``watch`` as ``run`` does (reads from
        the watch-fed caches; ``stop_watching`` ends them)."""
        reader = reader or ClusterReader(self.api)
        store = RolloutStore(self.api)
        if watch:
            reader.start_watching((self.ns,))
            store.start_watching()
            self.watching += [reader, store]
            assert all(i.wait_synced(30) for i in [*reader.informers.values(), store.informer] if i is not None)
        return Executor(read=lambda: reader.read(policy_pool_label=POOL_KEY, namespaces=(self.ns,)), planner=plan,
                        store=store, resizer=PodResizer(self.api),
                        recorder=EventRecorder(self.api), policy=group_by_policy, evictor=Evictor(self.api),
                        templates=TemplatePatcher(self.api), read_fresh=(lambda: reader.read(
                            policy_pool_label=POOL_KEY, namespaces=(self.ns,), fresh=FRESH_AT_BAKE_END))
                        if watch else None)

    def stop_watching(self) -> None:
        for w in self.watching:
            w.stop_watching()
        self.watching.clear()

    def rollouts(self) -> list[Rollout]:
        return [r for r in RolloutStore(self.api).list() if r.policy in self.policies]

    def run_until(self, executor: Executor, done: Any, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            executor.run_pass(time.time())
            if done():
                return
            time.sleep(0.3)
        raise AssertionError(f"rollouts did not settle: {[(r.name, r.phase, r.message) for r in self.rollouts()]}")

    def settled(self) -> bool:
        rs = self.rollouts()
        return bool(rs) and all(r.phase in (Phase.COMPLETED, Phase.HALTED, Phase.ROLLED_BACK) for r in rs)


def run_deployment(s: Scenario, name: str, *containers: dict[str, Any],
                   init_containers: tuple[dict[str, Any], ...] = ()) -> None:
    """A one-replica Deployment ``name`` on the real node's pool (``s.pools["real"]``), with the real node's
    toleration; waits until its pod runs."""
    labels = {"app": name}
    spec = {**pod_spec("", *containers, init_containers=init_containers), "nodeSelector": {POOL_KEY: s.pools["real"]}}
    del spec["nodeName"]
    s.apps.create_namespaced_deployment(s.ns, {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
        "spec": {"replicas": 1, "selector": {"matchLabels": labels},
                 "template": {"metadata": {"labels": labels}, "spec": spec}}})
    eventually(f"{name} running on the real node", lambda: len(s.running(name)) == 1, timeout_s=90)
