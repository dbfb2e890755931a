"""The node simulator: a kubelet 1.37 stand-in for many simulated nodes at once.

Owns the live loop: it registers the nodes of each pool (``nodes.py``), watches pods bound to them and runs
them (``podstate.py``), implements in-place resize as kubelet 1.37 does (``resize.py``: generation change ->
Infeasible (a Guaranteed pod's CPU under the static CPU Manager) / Deferred / allocated, decided against the
allocatable last published in the Node status; ``PodResizeInProgress`` for ``actuation_delay_s``; restart
counts for ``RestartContainer``; Error for a memory limit below usage, with nothing of that resize applied;
deferred resizes retried, with their message refreshed, when a pod is resized, removed or terminates, when a
pod's actuated requests go down, and ``deferred_retry_s`` after a node's last retry of any trigger, in
kubelet's priority order, as kubelet 1.37 does), drives usage from per-container models (annotation
``nodesim.podtailor.io/usage``) on a clock that may run faster than real time, OOM-kills a container whose
usage passes its memory limit, throttles CPU at the limit, and serves cAdvisor and kube-state-metrics style
series on ``/metrics``.

Counters on ``/metrics`` are physical: usage sampled at simulated time is integrated over wall time, so
``rate()`` in Prometheus gives the modelled cores. Differences from kubelet: no probes, images, volumes or
networking; kubelet admission checks only pods/cpu/memory; pod-level resources (``spec.resources``) are
not modelled (neither decided nor reported in ``status.resources``/``allocatedResources``; the conformance
suite covers them on real kubelets only); a restart for a resize records ``lastState``
``Completed`` (exit 0); OOM back-off starts at ``crash_backoff_s`` and doubles up to 300 s. The
conformance suite (``tests/conformance``) runs the resize scenarios here and on real kubelets; it found
and fixed Infeasible above allocatable (now Deferred), retries on pod additions and on every completed
resize (kubelet retries on neither), stale Deferred messages and the memory-decrease message.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from kubernetes import client
from prometheus_client import CollectorRegistry, start_http_server

from tests.nodesim import cadvisor
from tests.nodesim.kubeio import PodWatcher, Writer, read_json
from tests.nodesim.nodes import NodePool, SimNode, now_rfc3339
from tests.nodesim.podstate import Obj, ResizeCondition, SimContainer, SimPod, container_resources
from tests.nodesim.resize import (
    NodeCapacity,
    PendingResize,
    PodResources,
    ResizeDecision,
    ResizeOutcome,
    containers_to_restart,
    decide_resize,
    infeasible_message,
    memory_decrease_message,
    memory_limit_error,
    retry_pending,
)
from tests.nodesim.usage import Constant, UsageModel, parse_model

log = logging.getLogger("nodesim")
USAGE_ANNOTATION = "nodesim.podtailor.io/usage"
TERMINAL = ("Succeeded", "Failed")


@dataclass(frozen=True, slots=True, kw_only=True)
class SimConfig:
    """How the simulated kubelets behave. Times are wall seconds unless named ``sim``."""

    pools: tuple[NodePool, ...]
    name_prefix: str = "sim"
    actuation_delay_s: float = 0.3
    """Time a resize stays PodResizeInProgress before it is actuated (kubelet: about a second)."""
    deferred_retry_s: float = 180.0
    """Periodic retry of deferred resizes (kubelet's allocation manager: 3 minutes)."""
    error_retry_s: float = 2.0
    """Retry of a failed actuation (kubelet: every pod sync)."""
    tick_s: float = 1.0
    """Usage sampling interval."""
    clock_speed: float = 1.0
    """Simulated seconds per wall second for the usage models."""
    sim_start_s: float | None = None
    """Simulated time at start; default: the wall clock."""
    lease_renew_s: float = 10.0
    status_report_s: float = 60.0
    termination_s: float = 0.2
    """Longest a deleted pod's containers take to stop (capped by its grace period)."""
    crash_backoff_s: float = 10.0
    metrics_port: int | None = None
    """Serve /metrics on 127.0.0.1:port (0: any free port; None: no server)."""
    trace_dir: Path | None = None
    """Folder whose trace files usage annotations may name (kind: trace)."""
    writers: int = 8
    unapplied_cgroups: bool = False
    """A runtime that acknowledges a resize but does not apply it: status takes the new values, while the
    cgroup (the ``container_spec_*`` series served as cAdvisor's) keeps the values it had before."""


class SimClock:
    def __init__(self, speed: float, start_s: float | None) -> None:
        self.speed = speed
        self.wall0 = time.time()
        self.sim0 = self.wall0 if start_s is None else start_s

    def now(self) -> float:
        return self.sim0 + (time.time() - self.wall0) * self.speed


class NodeSimulator:
    """Run simulated nodes against a real API server. ``start()``, then use, then ``stop()``."""

    def __init__(self, api_client: client.ApiClient, config: SimConfig) -> None:
        self.config = config
        # Raw JSON in and out (_preload_content=False): typed as Any because the client's signatures
        # describe the pydantic models this simulator deliberately does not build.
        self.core: Any = client.CoreV1Api(api_client)
        self.coord: Any = client.CoordinationV1Api(api_client)
        self.apps: Any = client.AppsV1Api(api_client)
        self.clock = SimClock(config.clock_speed, config.sim_start_s)
        self.lock = threading.RLock()
        self.nodes: dict[str, SimNode] = {}
        self.pods: dict[str, SimPod] = {}
        self.by_node: dict[str, set[str]] = {}
        self.usage_overrides: dict[tuple[str, str, str], UsageModel] = {}
        self.replicasets: tuple[cadvisor.ReplicaSetSnapshot, ...] = ()
        self.writer = Writer(config.writers)
        self.watcher = PodWatcher(self.core, self._on_event, on_sync=self._on_sync)
        self.stopping = threading.Event()
        self.ticker = threading.Thread(target=self._tick_loop, name="nodesim-tick", daemon=True)
        self.metrics_port: int | None = None
        self._metrics_server: Any = None
        self.resizes_actuated = 0
        index = 0
        for pool in config.pools:
            for i in range(pool.count):
                name = f"{config.name_prefix}-{pool.name}-{i}"
                self.nodes[name] = SimNode(name=name, pool=pool, index=index)
                self.by_node[name] = set()
                index += 1

    # -- lifecycle -------------------------------------------------------------------------------------
    def start(self, timeout_s: float = 120.0) -> NodeSimulator:
        for node in self.nodes.values():
            self._register(node)
        if not self.writer.wait_idle(timeout_s):
            raise TimeoutError("node registration did not finish")
        self.watcher.start()
        if not self.watcher.synced.wait(timeout_s):
            raise TimeoutError("pod list did not finish")
        self.ticker.start()
        if self.config.metrics_port is not None:
            registry = CollectorRegistry()
            registry.register(cadvisor.SnapshotCollector(self.snapshot))
            self._metrics_server, _ = start_http_server(self.config.metrics_port, addr="127.0.0.1",
                                                        registry=registry)
            self.metrics_port = int(self._metrics_server.server_port)
        return self

    def stop(self, *, delete_nodes: bool = False) -> None:
        self.stopping.set()
        self.watcher.stop()
        if self._metrics_server is not None:
            self._metrics_server.shutdown()
        if self.ticker.is_alive():
            self.ticker.join(timeout=5)
        self.writer.wait_idle(10)
        if delete_nodes:
            for name in self.nodes:
                try:
                    self.core.delete_node(name, _preload_content=False)
                except client.ApiException as err:
                    if err.status != 404:
                        raise
        self.writer.shutdown()

    # -- controls for tests ----------------------------------------------------------------------------
    def node_names(self, pool: str | None = None) -> list[str]:
        return [n for n, node in self.nodes.items() if pool is None or node.pool.name == pool]

    def set_node_ready(self, name: str, ready: bool) -> None:
        with self.lock:
            self.nodes[name].ready = ready
            self._write_node_status(self.nodes[name])

    def set_memory_pressure(self, name: str, pressure: bool) -> None:
        with self.lock:
            self.nodes[name].memory_pressure = pressure
            self._write_node_status(self.nodes[name])

    def set_allocatable(self, name: str, *, cpu_millicores: int, memory_bytes: int, report: bool = True) -> None:
        """Reconfigure the node's allocatable. ``report=False`` delays publishing it, as in the window before
        the kubelet's next node-status update (up to 10 s on a real node); like the kubelet, which admits
        against the Node object from its informer (``lifecycle/predicate.go`` Admit, ``getNodeAnyWayFunc``),
        the simulator keeps deciding with the published value until then."""
        with self.lock:
            node = self.nodes[name]
            node.allocatable = NodeCapacity(cpu_millicores=cpu_millicores, memory_bytes=memory_bytes,
                                            pods=node.capacity.pods)
            if report:
                self._write_node_status(node)

    def set_heartbeat(self, name: str, alive: bool) -> None:
        """False: the node's kubelet is 'lost' (no Lease renewals, no status); True: it is back."""
        with self.lock:
            node = self.nodes[name]
            node.heartbeat = alive
            if alive:
                self._renew_lease(node)
                self._write_node_status(node)
                # A kubelet that is back syncs every pod's status again (the node controller marked them
                # NotReady while it was gone).
                for key in list(self.by_node[name]):
                    self._write(self.pods[key], node)

    def set_usage(self, namespace: str, pod: str, container: str, model: UsageModel) -> None:
        with self.lock:
            self.usage_overrides[(namespace, pod, container)] = model
            sim_pod = self.pods.get(f"{namespace}/{pod}")
            if sim_pod and container in sim_pod.containers:
                sim_pod.containers[container].model = model

    def oom_kill(self, namespace: str, pod: str, container: str) -> None:
        """OOM-kill a running container now, whatever its usage (the hollow node's /oom hook does the same)."""
        with self.lock:
            sim_pod = self.pods.get(f"{namespace}/{pod}")
            if sim_pod is None or container not in sim_pod.containers or not sim_pod.containers[container].running:
                raise KeyError(f"no running container {namespace}/{pod}/{container} on this simulator")
            self._oom_kill(sim_pod, sim_pod.containers[container], time.monotonic(), now_rfc3339())
            self._write(sim_pod, self.nodes[sim_pod.node])

    def pod(self, namespace: str, name: str) -> SimPod | None:
        with self.lock:
            return self.pods.get(f"{namespace}/{name}")

    # -- registration and heartbeats -------------------------------------------------------------------
    def _register(self, node: SimNode) -> None:
        def register() -> None:
            try:
                self.core.create_node(node.object(), _preload_content=False)
            except client.ApiException as err:
                if err.status != 409:
                    raise
                self.core.patch_node(node.name, {"metadata": {"labels": node.labels()}}, _preload_content=False)
            with self.lock:
                status = node.status()
            self.core.patch_node_status(node.name, status, _preload_content=False)
            lease = node.lease()
            try:
                self.coord.create_namespaced_lease("kube-node-lease", lease, _preload_content=False)
            except client.ApiException as err:
                if err.status != 409:
                    raise
                self.coord.patch_namespaced_lease(node.name, "kube-node-lease", {"spec": lease["spec"]},
                                                  _preload_content=False)
        self.writer.submit(f"node/{node.name}", register)

    def _renew_lease(self, node: SimNode) -> None:
        spec = node.lease()["spec"]
        self.writer.submit(f"lease/{node.name}", lambda: self.coord.patch_namespaced_lease(
            node.name, "kube-node-lease", {"spec": spec}, _preload_content=False))

    def _write_node_status(self, node: SimNode) -> None:
        status = node.status()
        self.writer.submit(f"node/{node.name}", lambda: self.core.patch_node_status(
            node.name, status, _preload_content=False))

    # -- pod events ------------------------------------------------------------------------------------
    def _on_sync(self, items: list[Obj]) -> None:
        with self.lock:
            seen = set()
            for obj in items:
                if obj["spec"].get("nodeName") in self.nodes:
                    seen.add(f"{obj['metadata']['namespace']}/{obj['metadata']['name']}")
                    self._on_pod(obj)
            for key in [k for k in self.pods if k not in seen]:
                self._forget(self.pods[key])

    def _on_event(self, kind: str, obj: Obj) -> None:
        if obj["spec"].get("nodeName") not in self.nodes:
            return
        with self.lock:
            if kind == "DELETED":
                key = f"{obj['metadata']['namespace']}/{obj['metadata']['name']}"
                pod = self.pods.get(key)
                if pod is not None and pod.uid == obj["metadata"]["uid"]:
                    self._forget(pod)
                return
            self._on_pod(obj)

    def _on_pod(self, obj: Obj) -> None:
        meta = obj["metadata"]
        key = f"{meta['namespace']}/{meta['name']}"
        pod = self.pods.get(key)
        if pod is not None and pod.uid != meta["uid"]:
            self._forget(pod)
            pod = None
        if pod is None:
            if obj.get("status", {}).get("phase") in TERMINAL:
                if meta.get("deletionTimestamp"):
                    self._finish_delete(meta["namespace"], meta["name"], meta["uid"])
                return
            self._admit(obj)
            return
        if meta.get("deletionTimestamp") and not pod.deleting:
            grace = float(meta.get("deletionGracePeriodSeconds") or 0)
            pod.deleting = True
            pod.delete_at = time.monotonic() + min(grace, self.config.termination_s)
        was_ready, pod.gates = pod.ready(), _gates(obj)
        if int(meta.get("generation", 1)) > pod.observed_generation and not pod.deleting:
            self._on_spec_change(pod, obj)
        elif not pod.deleting and was_ready != pod.ready() and self.nodes[pod.node].heartbeat:
            self._write(pod, self.nodes[pod.node])  # a readiness gate's condition changed: Ready follows
        elif not pod.deleting and self.nodes[pod.node].heartbeat and _api_ready(obj) != pod.ready():
            # Like kubelet's status manager: someone else (the node controller) changed the pod's readiness in
            # the API; the kubelet's own view wins again once it can write.
            self._write(pod, self.nodes[pod.node])

    def _forget(self, pod: SimPod) -> None:
        self.pods.pop(pod.key, None)
        self.by_node[pod.node].discard(pod.key)
        self._retry_deferred(self.nodes[pod.node], "pod removed")

    def _node_pods(self, node: str, exclude: str = "") -> Iterable[SimPod]:
        return (self.pods[k] for k in self.by_node[node] if k != exclude and self.pods[k].phase not in TERMINAL)

    def _usage_model(self, obj: Obj, container: Obj) -> UsageModel:
        meta = obj["metadata"]
        override = self.usage_overrides.get((meta["namespace"], meta["name"], container["name"]))
        return override if override is not None else pod_usage_model(obj, container, self.config.trace_dir)

    def _build_containers(self, obj: Obj, now: str) -> dict[str, SimContainer]:
        spec = obj["spec"]
        sidecars = [c for c in spec.get("initContainers") or [] if c.get("restartPolicy") == "Always"]
        out: dict[str, SimContainer] = {}
        for c, sidecar in [(c, True) for c in sidecars] + [(c, False) for c in spec["containers"]]:
            res = container_resources(c)
            policy = {p["resourceName"]: p["restartPolicy"] for p in c.get("resizePolicy") or []}
            out[c["name"]] = SimContainer(name=c["name"], image=c.get("image", ""), sidecar=sidecar, policy=policy,
                                          allocated=res, actual=res, model=self._usage_model(obj, c),
                                          started_at=now)
        return out

    def _admit(self, obj: Obj) -> None:
        meta, spec = obj["metadata"], obj["spec"]
        node = self.nodes[spec["nodeName"]]
        now = now_rfc3339()
        try:
            containers = self._build_containers(obj, now)
        except ValueError as err:  # an unparsable quantity never reaches a real kubelet; refuse loudly
            log.warning("cannot run pod: %s", err, extra={"namespace": meta["namespace"], "pod": meta["name"]})
            return
        owner: Obj = next((o for o in meta.get("ownerReferences") or [] if o.get("controller")), {})
        pod = SimPod(namespace=meta["namespace"], name=meta["name"], uid=meta["uid"], node=node.name,
                     generation=int(meta.get("generation", 1)), priority=int(spec.get("priority") or 0),
                     restart_policy=spec.get("restartPolicy", "Always"), owner_kind=owner.get("kind", "<none>"),
                     owner_name=owner.get("name", "<none>"), created_at=meta.get("creationTimestamp", now),
                     pod_ip=node.allocate_pod_ip(), containers=containers,
                     observed_generation=int(meta.get("generation", 1)), start_time=now)
        pod.init_completed = [self._completed_init(c, now) for c in spec.get("initContainers") or []
                              if c.get("restartPolicy") != "Always"]
        pod.gates = _gates(obj)
        pod.desired = pod.allocated()
        others = list(self._node_pods(node.name))
        reject = self._admission_error(node, pod, others)
        if reject:
            self._write(pod, node, {"status": {"phase": "Failed", "reason": reject[0], "message": reject[1]}})
            return
        self.pods[pod.key] = pod
        self.by_node[node.name].add(pod.key)
        self._write(pod, node)
        # No retry of deferred resizes here: kubelet 1.37's HandlePodAdditions retries only resizes it
        # backfills at start, not when a new pod is admitted.

    def _admission_error(self, node: SimNode, pod: SimPod, others: list[SimPod]) -> tuple[str, str] | None:
        if len(others) + 1 > node.pool.max_pods:
            return "OutOfpods", "Pod was rejected: Node didn't have enough resource: pods"
        empty = PodResources(uid=pod.uid, containers=())
        decision = decide_resize(node.enforced, pod.allocated(), empty, [p.allocated() for p in others])
        if decision.outcome is ResizeOutcome.ACCEPT:
            return None
        resource = decision.message.split(":", 2)[1].split(",")[0].strip()
        return f"Out{resource}", f"Pod was rejected: {decision.message}"

    @staticmethod
    def _completed_init(c: Obj, now: str) -> Obj:
        return {"name": c["name"], "image": c.get("image", ""), "imageID": "", "ready": False, "restartCount": 0,
                "started": False, "state": {"terminated": {"exitCode": 0, "reason": "Completed",
                                                           "startedAt": now, "finishedAt": now}}}

    # -- in-place resize -------------------------------------------------------------------------------
    def _on_spec_change(self, pod: SimPod, obj: Obj) -> None:
        node = self.nodes[pod.node]
        pod.observed_generation = pod.generation = int(obj["metadata"]["generation"])
        spec = obj["spec"]
        by_name = {c["name"]: c for c in spec["containers"]}
        by_name.update({c["name"]: c for c in spec.get("initContainers") or [] if c.get("restartPolicy") == "Always"})
        try:
            desired = PodResources(uid=pod.uid, priority=pod.priority,
                                   containers=tuple(container_resources(by_name[n]) for n in pod.containers))
        except (ValueError, KeyError) as err:
            log.warning("unreadable resize ignored: %s", err, extra={"pod": pod.key})
            return
        pod.desired = desired
        current = pod.allocated()
        if desired == current:
            pod.pending = None
        else:
            others = [p.allocated() for p in self._node_pods(node.name, exclude=pod.key)]
            infeasible = infeasible_message(node.pool.cpu_manager_policy, desired, current)
            decision = (ResizeDecision(outcome=ResizeOutcome.INFEASIBLE, message=infeasible) if infeasible
                        else decide_resize(node.enforced, desired, current, others))
            if decision.outcome is ResizeOutcome.ACCEPT:
                self._allocate(pod, desired)
            else:
                reason = decision.outcome.value
                keep = pod.pending is not None and pod.pending.reason == reason
                since, since_s = (pod.pending.since, pod.pending.since_s) if keep and pod.pending else (
                    now_rfc3339(), time.time())
                pod.pending = ResizeCondition(reason=reason, message=decision.message, generation=pod.generation,
                                              since=since, since_s=since_s)
        self._write(pod, node)
        self._retry_deferred(node, "pod updated")

    def _allocate(self, pod: SimPod, desired: PodResources) -> None:
        for c in desired.containers:
            pod.containers[c.name].allocated = c
        pod.pending = None
        pod.in_progress = ResizeCondition(reason="", message="", generation=pod.generation, since=now_rfc3339(),
                                          since_s=time.time())
        pod.actuate_at = time.monotonic() + self.config.actuation_delay_s

    def _retry_deferred(self, node: SimNode, trigger: str) -> None:
        # Every retry, whatever its trigger and even with nothing pending, restarts the node's periodic timer:
        # kubelet 1.37 pkg/kubelet/allocation/allocation_manager.go, manager.retryPendingResizes calls
        # m.ticker.Reset(retryDelay) before it looks at the list, and Run's ticker fires only after that.
        node.retry_due_at = time.monotonic() + self.config.deferred_retry_s
        pending = [PendingResize(desired=p.desired, allocated=p.allocated(), pending_since_s=p.pending.since_s)
                   for p in self._node_pods(node.name)
                   if p.pending is not None and p.pending.reason == "Deferred" and p.desired is not None]
        if not pending:
            return
        allocated = {p.uid: p.allocated() for p in self._node_pods(node.name)}
        result = retry_pending(node.enforced, pending, allocated)
        by_uid = {p.uid: p for p in self._node_pods(node.name)}
        for item in result.accepted:
            pod = by_uid[item.uid]
            log.info("deferred resize accepted", extra={"pod": pod.key, "trigger": trigger})
            self._allocate(pod, item.desired)
            self._write(pod, node)
        # The kubelet re-decides every pending resize on a retry and writes the new message (same reason,
        # same lastTransitionTime).
        for item, decision in result.still_pending:
            pod = by_uid[item.uid]
            if pod.pending is not None and pod.pending.message != decision.message:
                pod.pending = replace(pod.pending, message=decision.message)
                self._write(pod, node)

    def _actuate(self, pod: SimPod) -> None:
        node = self.nodes[pod.node]
        old = PodResources(uid=pod.uid, containers=tuple(c.actual for c in pod.containers.values()))
        new = pod.allocated()
        policies = {c.name: c.policy for c in pod.containers.values()}
        restart = containers_to_restart(old, new, policies)
        errors, now = [], now_rfc3339()
        pod_usage = sum(c.memory_working_set_bytes for c in pod.containers.values() if c.running)
        for c in pod.containers.values():
            if c.actual == c.allocated:
                continue
            err = memory_limit_error(c.actual, c.allocated.memory_limit_bytes, c.memory_working_set_bytes,
                                     restart_policy=c.policy.get("memory", "NotRequired"),
                                     reported_usage_bytes=pod_usage)
            if err is not None:
                errors.append(err)
        if not errors:  # kubelet validates the whole resize first (validatePodResizeAction), then applies it
            for c in pod.containers.values():
                if c.actual != c.allocated:
                    if self.config.unapplied_cgroups and c.cgroup is None:
                        c.cgroup = c.actual
                    c.actual = c.allocated
                    if c.name in restart:
                        c.restart(now, "Completed", 0)
        if errors:
            assert pod.in_progress is not None
            pod.in_progress = replace(pod.in_progress, reason="Error", message=memory_decrease_message(errors))
            pod.actuate_at = time.monotonic() + self.config.error_retry_s
        else:
            pod.in_progress, pod.actuate_at = None, None
            self.resizes_actuated += 1
        self._write(pod, node)
        if not errors and (new.cpu_request_millicores < old.cpu_request_millicores
                           or new.memory_request_bytes < old.memory_request_bytes):
            # HandlePodReconcile retries pending resizes when a pod's actuated requests went down
            # (TriggerReasonPodResized), not after every completed resize.
            self._retry_deferred(node, "pod resized down")

    # -- time ------------------------------------------------------------------------------------------
    def _tick_loop(self) -> None:
        """The simulated kubelets' clock. Like a kubelet through an API outage, it never dies: a failing step
        is logged and retried on the next tick."""
        while not self.stopping.is_set():
            try:
                self._ticks()
            except Exception as err:  # the one broad catch: keep the simulated kubelets alive
                log.warning("tick failed; continuing: %s", err)
                self.stopping.wait(0.5)

    def _ticks(self) -> None:
        last_tick = last_lease = last_status = last_rs = time.monotonic()
        for node in self.nodes.values():
            node.retry_due_at = last_tick + self.config.deferred_retry_s
        while not self.stopping.wait(0.05):
            mono = time.monotonic()
            with self.lock:
                for pod in list(self.pods.values()):
                    if pod.actuate_at is not None and mono >= pod.actuate_at and not pod.deleting:
                        self._actuate(pod)
                    if pod.deleting and mono >= pod.delete_at and pod.phase not in TERMINAL:
                        self._terminate(pod)
                if mono - last_tick >= self.config.tick_s:
                    self._sample_usage(mono - last_tick)
                    last_tick = mono
                for node in self.nodes.values():
                    if node.retry_due_at is None:  # a node registered after the loop started
                        node.retry_due_at = mono + self.config.deferred_retry_s
                    elif mono >= node.retry_due_at:
                        self._retry_deferred(node, "periodic")
                beat = mono - last_lease >= self.config.lease_renew_s
                report = mono - last_status >= self.config.status_report_s
                for node in self.nodes.values():
                    if node.heartbeat and beat:
                        self._renew_lease(node)
                    if node.heartbeat and report:
                        self._write_node_status(node)
                last_lease = mono if beat else last_lease
                last_status = mono if report else last_status
            if mono - last_rs >= 15.0:
                self._refresh_replicasets()
                last_rs = mono

    def _terminate(self, pod: SimPod) -> None:
        now = now_rfc3339()
        for c in pod.containers.values():
            c.running = False
            c.terminated = {"exitCode": 0, "reason": "Completed", "startedAt": c.started_at, "finishedAt": now}
        pod.phase = "Succeeded"
        node = self.nodes[pod.node]
        body = pod.status_patch(node.address)
        self._finish_delete(pod.namespace, pod.name, pod.uid, body)
        self._retry_deferred(node, "pod terminated")

    def _finish_delete(self, namespace: str, name: str, uid: str, status: Obj | None = None) -> None:
        def finish() -> None:
            if status is not None:
                self.core.patch_namespaced_pod_status(name, namespace, status, _preload_content=False)
            # Like kubelet's status manager: grace 0 with a UID precondition. The options go in the body,
            # because a DELETE body overrides the query parameters.
            self.core.delete_namespaced_pod(name, namespace, body={"gracePeriodSeconds": 0,
                                                                   "preconditions": {"uid": uid}},
                                            _preload_content=False)
        self.writer.submit(f"pod/{namespace}/{name}", finish)

    def _sample_usage(self, interval_s: float) -> None:
        sim_t, mono, now = self.clock.now(), time.monotonic(), now_rfc3339()
        for pod in self.pods.values():
            if pod.phase in TERMINAL or pod.deleting:
                continue
            changed = False
            for c in pod.containers.values():
                changed |= self._sample_container(pod, c, sim_t, interval_s, mono, now)
            if changed:
                if pod.restart_policy == "Never" and not any(c.running for c in pod.containers.values()):
                    pod.phase = "Failed"
                self._write(pod, self.nodes[pod.node])

    def _sample_container(self, pod: SimPod, c: SimContainer, sim_t: float, dt: float, mono: float,
                          now: str) -> bool:
        if not c.running:
            if c.terminated is None and mono >= c.backoff_until:
                c.restart_count += 1
                c.running, c.waiting_reason, c.started_at = True, "", now
                return True
            return False
        usage = c.model.sample(sim_t)
        throttled = cadvisor.throttle(usage.cpu_cores, c.actual.cpu_limit_millicores, dt)
        c.cpu_seconds_total += throttled.used_cpu_seconds
        if c.actual.cpu_limit_millicores is not None:
            c.cfs_periods_total += throttled.periods
            c.cfs_throttled_periods_total += throttled.throttled_periods
        c.memory_working_set_bytes = usage.memory_bytes
        limit = c.actual.memory_limit_bytes
        if limit is None or usage.memory_bytes <= limit:
            return False
        self._oom_kill(pod, c, mono, now)
        return True

    def _oom_kill(self, pod: SimPod, c: SimContainer, mono: float, now: str) -> None:
        log.info("container OOM-killed", extra={"pod": pod.key, "container": c.name})
        c.oom_events_total += 1
        c.memory_working_set_bytes = 0
        ended = {"exitCode": 137, "reason": "OOMKilled", "startedAt": c.started_at, "finishedAt": now}
        c.running = False
        if pod.restart_policy == "Never":
            c.terminated = ended
            return
        c.last_state = {"terminated": ended}
        c.waiting_reason = "CrashLoopBackOff"
        c.backoff_until = mono + min(self.config.crash_backoff_s * 2**c.crashes, 300.0)
        c.crashes += 1

    # -- writes and metrics ----------------------------------------------------------------------------
    def _write(self, pod: SimPod, node: SimNode, body: Obj | None = None) -> None:
        payload = body if body is not None else pod.status_patch(node.address)
        self.writer.submit(f"pod/{pod.key}", lambda: self.core.patch_namespaced_pod_status(
            pod.name, pod.namespace, payload, _preload_content=False))

    def _refresh_replicasets(self) -> None:
        try:
            items = read_json(self.apps.list_replica_set_for_all_namespaces(_preload_content=False))["items"]
        except Exception as err:  # API server down or unreachable: keep the last list, try again next time
            log.warning("replicaset list failed: %s", err)
            return
        snaps = tuple(cadvisor.replicaset_snapshot(rs) for rs in items)
        with self.lock:
            self.replicasets = snaps

    def snapshot(self) -> cadvisor.ClusterSnapshot:
        with self.lock:
            containers, pods = [], []
            for pod in self.pods.values():
                node = self.nodes[pod.node]
                pods.append(cadvisor.PodSnapshot(namespace=pod.namespace, pod=pod.name, uid=pod.uid, node=pod.node,
                                                 phase=pod.phase, owner_kind=pod.owner_kind,
                                                 owner_name=pod.owner_name, host_ip=node.address,
                                                 pod_ip=pod.pod_ip))
                for c in pod.containers.values():
                    last = (c.last_state or {}).get("terminated", {}).get("reason")
                    containers.append(cadvisor.ContainerSnapshot(
                        namespace=pod.namespace, pod=pod.name, container=c.name, node=pod.node, pod_uid=pod.uid,
                        image=c.image, container_id=c.container_id(pod.uid),
                        cpu_usage_seconds_total=c.cpu_seconds_total,
                        memory_working_set_bytes=c.memory_working_set_bytes, cfs_periods_total=c.cfs_periods_total,
                        cfs_throttled_periods_total=c.cfs_throttled_periods_total, oom_events_total=c.oom_events_total,
                        cpu_request_millicores=c.actual.cpu_request_millicores,
                        cpu_limit_millicores=c.actual.cpu_limit_millicores,
                        memory_request_bytes=c.actual.memory_request_bytes,
                        memory_limit_bytes=c.actual.memory_limit_bytes, last_terminated_reason=last,
                        cgroup=c.cgroup or c.actual))
            nodes = tuple(cadvisor.NodeSnapshot(node=n.name, labels=n.labels()) for n in self.nodes.values())
            return cadvisor.ClusterSnapshot(containers=tuple(containers), pods=tuple(pods),
                                            replicasets=self.replicasets, nodes=nodes)


def pod_usage_model(obj: Obj, container: Obj, trace_dir: Path | None) -> UsageModel:
    """The usage model of one container of a pod: its ``USAGE_ANNOTATION`` (one model, or one per container
    under ``containers``), else a constant half of its smallest request or limit (at most 200m / 128Mi)."""
    meta = obj["metadata"]
    raw = (meta.get("annotations") or {}).get(USAGE_ANNOTATION)
    if raw:
        try:
            spec = json.loads(raw)
            spec = spec.get("containers", {}).get(container["name"], spec) if "containers" in spec else spec
            return parse_model(spec, trace_dir=trace_dir)
        except (ValueError, TypeError, AttributeError) as err:
            log.warning("bad usage annotation; using the default model: %s", err,
                        extra={"namespace": meta["namespace"], "pod": meta["name"]})
    res = container_resources(container)
    cpu = min(x for x in (res.cpu_request_millicores, res.cpu_limit_millicores, 200) if x is not None)
    mem = min(x for x in (res.memory_request_bytes, res.memory_limit_bytes, 128 * 2**20) if x is not None)
    return Constant(cpu_cores=cpu / 2000.0, memory_bytes=mem // 2)


def _gates(obj: Obj) -> dict[str, bool]:
    """Each ``spec.readinessGates`` condition type -> whether the pod's condition of that type is True."""
    conditions = {c.get("type"): c.get("status") == "True" for c in (obj.get("status") or {}).get("conditions") or []}
    return {g["conditionType"]: conditions.get(g["conditionType"], False)
            for g in (obj.get("spec") or {}).get("readinessGates") or [] if g.get("conditionType")}


def _api_ready(obj: Obj) -> bool:
    conditions = (obj.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
