"""The simulator's follow mode: usage and metrics for pods that real kubelets run.

Owns, for pods bound to a pool of real kubelets (``tests/harness/kubelets.py``), what ``NodeSimulator`` owns
for the pods of its own nodes, and nothing else:

- each running container's usage, from the same usage models (``pod_usage_model``: the pod's usage
  annotation or the default), pushed to its hollow node's control endpoint, so the kubelet's memory-limit
  check (``validateMemoryResizeAction``) and its CRI stats see it;
- an OOM kill through the hollow node when usage passes the container's memory limit, once per container
  instance (the kubelet then restarts it itself, with its own back-off, ``restartCount`` and ``lastState``);
- the cAdvisor and kube-state-metrics series Prometheus scrapes (``tests/nodesim/cadvisor.py``), with the
  resources the kubelet reports as actuated (``status.containerStatuses[].resources``).

It writes nothing to the API server: pod and node status are the real kubelet's. It runs on the wall clock
(the kubelets do); the fast clock stays with the simulator's own nodes.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from kubernetes import client
from prometheus_client import CollectorRegistry, start_http_server

from tests.nodesim import cadvisor
from tests.nodesim.kubeio import read_json
from tests.nodesim.kubelet import pod_usage_model
from tests.nodesim.podstate import Obj, container_resources
from tests.nodesim.usage import UsageModel

log = logging.getLogger("nodesim.follow")


class KubeletControl(Protocol):
    """What the follower needs of one hollow node (``tests.harness.kubelets.HollowNode``)."""

    def set_usage(self, namespace: str, pod: str, container: str, *, memory_bytes: int,
                  cpu_millicores: int) -> None: ...

    def oom_kill(self, namespace: str, pod: str, container: str) -> None: ...


@dataclass
class _Followed:
    """One container of one pod (keyed by pod UID): its model and its cumulative counters."""

    model: UsageModel
    cpu_seconds_total: float = 0.0
    cfs_periods_total: int = 0
    cfs_throttled_periods_total: int = 0
    oom_events_total: int = 0
    memory_working_set_bytes: int = 0
    killed_id: str = ""
    """The container ID last OOM-killed: one kill per instance, the kubelet restarts it with a new ID."""


class UsageFollower:
    """Feed usage to real kubelets and serve their pods' metrics. ``start()``, then ``stop()``."""

    def __init__(self, api_client: client.ApiClient, nodes: Mapping[str, KubeletControl], *,
                 trace_dir: Path | None = None, interval_s: float = 5.0, metrics_port: int | None = None) -> None:
        self.core: Any = client.CoreV1Api(api_client)  # raw JSON, as NodeSimulator reads it
        self.apps: Any = client.AppsV1Api(api_client)
        self.nodes = dict(nodes)
        self.trace_dir = trace_dir
        self.interval_s = interval_s
        self.metrics_port = metrics_port
        self.followed: dict[tuple[str, str], _Followed] = {}
        self.last: cadvisor.ClusterSnapshot = cadvisor.ClusterSnapshot()
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._loop, name="nodesim-follow", daemon=True)
        self._server: Any = None
        self._last_tick = time.monotonic()

    def start(self) -> UsageFollower:
        self.tick()
        if self.metrics_port is not None:
            registry = CollectorRegistry()
            registry.register(cadvisor.SnapshotCollector(self.snapshot))
            self._server, _ = start_http_server(self.metrics_port, addr="127.0.0.1", registry=registry)
            self.metrics_port = int(self._server.server_port)
        self.thread.start()
        return self

    def stop(self) -> None:
        self.stopping.set()
        if self._server is not None:
            self._server.shutdown()
        if self.thread.is_alive():
            self.thread.join(timeout=10)

    def snapshot(self) -> cadvisor.ClusterSnapshot:
        with self.lock:
            return self.last

    def _loop(self) -> None:
        while not self.stopping.wait(self.interval_s):
            try:
                self.tick()
            except Exception as err:  # API server away: keep the last snapshot, try again next tick
                log.warning("follow tick failed: %s", err)

    def tick(self) -> None:
        """One pass: read the pods on the followed nodes, sample, push usage, OOM-kill, rebuild the snapshot."""
        mono = time.monotonic()
        dt, self._last_tick = max(mono - self._last_tick, 0.0), mono
        pods = [p for p in read_json(self.core.list_pod_for_all_namespaces(_preload_content=False))["items"]
                if (p.get("spec") or {}).get("nodeName") in self.nodes]
        node_objs = read_json(self.core.list_node(_preload_content=False))["items"]
        replicasets = read_json(self.apps.list_replica_set_for_all_namespaces(_preload_content=False))["items"]
        now = time.time()
        containers, pod_snaps, live = [], [], set()
        for pod in pods:
            meta, status = pod["metadata"], pod.get("status") or {}
            if status.get("phase") != "Running" or meta.get("deletionTimestamp"):
                continue
            pod_snaps.append(_pod_snapshot(pod))
            statuses = {s["name"]: s for s in status.get("containerStatuses") or []}
            for spec in pod["spec"]["containers"]:
                key = (meta["uid"], spec["name"])
                live.add(key)
                state = self.followed.get(key)
                if state is None:
                    state = self.followed[key] = _Followed(model=pod_usage_model(pod, spec, self.trace_dir))
                cs = statuses.get(spec["name"]) or {}
                containers.append(self._sample(pod, spec, cs, state, now, dt))
        for key in set(self.followed) - live:
            del self.followed[key]
        snap = cadvisor.ClusterSnapshot(
            containers=tuple(containers), pods=tuple(pod_snaps),
            replicasets=tuple(cadvisor.replicaset_snapshot(rs) for rs in replicasets),
            nodes=tuple(cadvisor.NodeSnapshot(node=n["metadata"]["name"], labels=n["metadata"].get("labels") or {})
                        for n in node_objs if n["metadata"]["name"] in self.nodes))
        with self.lock:
            self.last = snap

    def _sample(self, pod: Obj, spec: Obj, cs: Obj, state: _Followed, now: float,
                dt: float) -> cadvisor.ContainerSnapshot:
        meta = pod["metadata"]
        # The kubelet reports what it actuated in status.containerStatuses[].resources; until then, the spec.
        actual = container_resources({"name": spec["name"], "resources": cs.get("resources") or
                                      spec.get("resources") or {}})
        container_id = str(cs.get("containerID") or "").rpartition("://")[2]
        running = "running" in (cs.get("state") or {})
        node = self.nodes[pod["spec"]["nodeName"]]
        if running:
            usage = state.model.sample(now)
            throttled = cadvisor.throttle(usage.cpu_cores, actual.cpu_limit_millicores, dt)
            state.cpu_seconds_total += throttled.used_cpu_seconds
            if actual.cpu_limit_millicores is not None:
                state.cfs_periods_total += throttled.periods
                state.cfs_throttled_periods_total += throttled.throttled_periods
            state.memory_working_set_bytes = usage.memory_bytes
            ref = (meta["namespace"], meta["name"], spec["name"])
            try:  # one container's trouble (its kubelet restarting, say) does not stop the others' pass
                node.set_usage(*ref, memory_bytes=usage.memory_bytes, cpu_millicores=round(usage.cpu_cores * 1000))
                limit = actual.memory_limit_bytes
                if limit is not None and usage.memory_bytes > limit and container_id != state.killed_id:
                    log.info("OOM-killing a container on its real kubelet: %s/%s %s", *ref)
                    node.oom_kill(*ref)
                    state.killed_id = container_id
                    state.oom_events_total += 1
                    state.memory_working_set_bytes = 0
            except Exception as err:
                log.warning("kubelet control for %s/%s %s failed: %s", *ref, err)
        last = ((cs.get("lastState") or {}).get("terminated") or {}).get("reason")
        return cadvisor.ContainerSnapshot(
            namespace=meta["namespace"], pod=meta["name"], container=spec["name"], node=pod["spec"]["nodeName"],
            pod_uid=meta["uid"], image=spec.get("image", ""), container_id=container_id,
            cpu_usage_seconds_total=state.cpu_seconds_total, memory_working_set_bytes=state.memory_working_set_bytes,
            cfs_periods_total=state.cfs_periods_total, cfs_throttled_periods_total=state.cfs_throttled_periods_total,
            oom_events_total=state.oom_events_total, cpu_request_millicores=actual.cpu_request_millicores,
            cpu_limit_millicores=actual.cpu_limit_millicores, memory_request_bytes=actual.memory_request_bytes,
            memory_limit_bytes=actual.memory_limit_bytes, last_terminated_reason=last)


def _pod_snapshot(pod: Obj) -> cadvisor.PodSnapshot:
    meta, status = pod["metadata"], pod.get("status") or {}
    owner = cadvisor.controller_of(meta)
    return cadvisor.PodSnapshot(namespace=meta["namespace"], pod=meta["name"], uid=meta["uid"],
                                node=pod["spec"]["nodeName"], phase=status.get("phase", "Unknown"),
                                owner_kind=owner.get("kind", "<none>"), owner_name=owner.get("name", "<none>"),
                                host_ip=status.get("hostIP", ""), pod_ip=status.get("podIP", ""),
                                priority_class=pod["spec"].get("priorityClassName", ""))
