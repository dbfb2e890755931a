"""A pool of real kubelets: one hollow-node process (kubelet v1.37.2 over a fake CRI runtime) per node.

Owns starting, controlling and stopping the ``hollow-node`` binary built from ``tests/hollownode`` by
``scripts/build-control-plane.sh``: one process per node, each with its own fixed root directory, kubelet
port and control port on 127.0.0.1, pool, instance-type and zone labels as the node simulator sets them
(``tests/nodesim/nodes.py``), and the taint ``HOLLOW_TAINT`` so the scheduler never places other tests'
pods there (tests bind pods with ``spec.nodeName``; a NoSchedule taint does not stop the kubelet from
running those). The control endpoint sets per-container usage (what the kubelet's memory-limit check and
stats see), the node's allocatable at run time, and OOM-kills a container.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from tests.harness.cluster import ClusterState, control_plane_bin_dir
from tests.harness.process import HarnessError, Managed, free_port, log_tail, wait_until
from tests.nodesim.nodes import NodePool

HOLLOW_BINARY = "hollow-node"
HOLLOW_TAINT = {"key": "podtailor.io/hollow-node", "value": "true", "effect": "NoSchedule"}
HOLLOW_TOLERATION = {"key": HOLLOW_TAINT["key"], "operator": "Exists", "effect": "NoSchedule"}
PORT_ATTEMPTS = 3
"""Starts of a node whose port was taken between ``free_port`` and its own bind (``KubeletPool._port_taken``)."""


def hollow_node_binary() -> Path:
    """The cached hollow-node binary; ``scripts/build-control-plane.sh`` builds it when missing or stale."""
    path = control_plane_bin_dir() / HOLLOW_BINARY
    if not os.access(path, os.X_OK):
        raise HarnessError(f"{path} is missing after the build; run scripts/build-control-plane.sh")
    return path


@dataclass
class HollowNode:
    """One running kubelet and its control endpoint."""

    name: str
    pool: NodePool
    kubelet_port: int
    control_port: int
    root_dir: Path
    proc: Managed

    def _post(self, path: str, body: dict[str, Any]) -> None:
        req = urllib.request.Request(f"http://127.0.0.1:{self.control_port}{path}", method="POST",
                                     data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=5) as resp:
                resp.read()
        except urllib.error.HTTPError as err:
            raise HarnessError(f"{self.name} {path}: HTTP {err.code}: {err.read().decode(errors='replace')}") from None

    def set_usage(self, namespace: str, pod: str, container: str, *, memory_bytes: int, cpu_millicores: int) -> None:
        self._post("/usage", {"namespace": namespace, "pod": pod, "container": container,
                              "memory_bytes": memory_bytes, "cpu_millicores": cpu_millicores})

    def set_allocatable(self, *, cpu_millicores: int, memory_bytes: int) -> None:
        """Takes effect in the kubelet at once; the API server sees it at the next node-status update."""
        self._post("/allocatable", {"cpu_millicores": cpu_millicores, "memory_bytes": memory_bytes})

    def oom_kill(self, namespace: str, pod: str, container: str) -> None:
        self._post("/oom", {"namespace": namespace, "pod": pod, "container": container})

    def rss_bytes(self) -> int:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        raise HarnessError(f"no VmRSS for {self.name}")


def pool_labels(pool: NodePool, kind: str = "hollow") -> dict[str, str]:
    """The node labels of ``pool`` for a kubelet of ``kind`` (``type``: hollow or real), as SimNode.labels(), minus
    the ones the kubelet sets itself (hostname, os, arch)."""
    labels = {"node.kubernetes.io/instance-type": pool.instance_type, "topology.kubernetes.io/zone": pool.zone,
              "type": kind}
    labels.update({key: pool.name for key in pool.label_keys})
    labels.update(pool.extra_labels)
    return labels


@dataclass
class KubeletPool:
    """Start ``pools`` as real kubelets against ``cluster``; ``start()``, use ``nodes``, ``stop()``."""

    cluster: ClusterState
    workdir: Path
    pools: Sequence[NodePool]
    name_prefix: str = "hk"
    taint_value: str = HOLLOW_TAINT["value"]
    """Value of the ``HOLLOW_TAINT`` key: a test's own value keeps pods tolerating only it off other pools."""
    status_period_s: float = 1.0
    sync_period_s: float = 2.0
    nodes: dict[str, HollowNode] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    roots: Path | None = None
    """Parent of the nodes' root directories: a short path of its own under the system temp dir, because the
    kubelet binds Unix sockets below its root (``pods-api/…``) and a socket path has at most 107 bytes, which
    a pytest temp dir named after a long test already nearly fills. Logs stay in ``workdir``."""

    def start(self, timeout_s: float = 120.0) -> KubeletPool:
        binary = hollow_node_binary()
        t0 = time.monotonic()
        try:
            for pool in self.pools:
                if pool.cpu_millicores % 1000:
                    raise HarnessError(f"pool {pool.name}: a real kubelet's CPU capacity is whole cores")
                for i in range(pool.count):
                    self._spawn(binary, pool, f"{self.name_prefix}-{pool.name}-{i}")
            for attempt in range(PORT_ATTEMPTS):
                try:
                    self._wait_ready(timeout_s)
                    break
                except HarnessError:
                    lost = self._port_taken()
                    if not lost or attempt == PORT_ATTEMPTS - 1:
                        raise
                    for node in lost:  # the same node again, on fresh ports
                        self._spawn(binary, node.pool, node.name)
        except BaseException:
            self.stop()
            raise
        self.timings["start_s"] = time.monotonic() - t0
        return self

    def _port_taken(self) -> list[HollowNode]:
        """The nodes that exited because a port ``free_port`` gave them was taken before they bound it (another
        process, or an outgoing connection's ephemeral port, got there first): they can start again elsewhere."""
        return [n for n in self.nodes.values()
                if not n.proc.alive() and "address already in use" in log_tail(n.proc.log_path, lines=5)]

    def _spawn(self, binary: Path, pool: NodePool, name: str) -> None:
        if self.roots is None:
            self.roots = Path(tempfile.mkdtemp(prefix="hn-"))
        root = self.roots / name
        kport, cport = free_port(), free_port()
        labels = ",".join(f"{k}={v}" for k, v in pool_labels(pool).items())
        taint = f"{HOLLOW_TAINT['key']}={self.taint_value}:{HOLLOW_TAINT['effect']}"
        argv = [str(binary), f"--kubeconfig={self.cluster.kubeconfig}", f"--name={name}", f"--root-dir={root}",
                f"--kubelet-port={kport}", f"--control-port={cport}", f"--cpu={pool.cpu_millicores // 1000}",
                f"--memory={pool.memory_bytes}", f"--max-pods={pool.max_pods}", f"--node-labels={labels}",
                f"--register-with-taint={taint}",
                f"--cpu-manager-policy={pool.cpu_manager_policy}", f"--node-status-period={self.status_period_s}s",
                f"--sync-period={self.sync_period_s}s", "--v=1"]
        proc = Managed(name=name, argv=argv, log_path=self.workdir / "logs" / f"{name}.log")
        proc.start()
        self.nodes[name] = HollowNode(name=name, pool=pool, kubelet_port=kport, control_port=cport, root_dir=root,
                                      proc=proc)

    def _api(self, method: str, path: str) -> Any:
        return self.cluster.admin_call(method, path)

    def node_ready(self, name: str) -> bool:
        node = self._api("GET", f"/api/v1/nodes/{name}")
        conditions = ((node or {}).get("status") or {}).get("conditions") or []
        return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)

    def _wait_ready(self, timeout_s: float) -> None:
        procs = [n.proc for n in self.nodes.values()]
        for name in self.nodes:
            wait_until(f"node {name} Ready", partial(self.node_ready, name), timeout_s=timeout_s, interval_s=0.2,
                       watched=procs)

    def _call(self, method: str, path: str, body: dict[str, Any]) -> None:
        req = urllib.request.Request(f"{self.cluster.server}{path}", method=method, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/merge-patch+json"})
        with urllib.request.urlopen(req, context=self.cluster.ssl_context(), timeout=10) as resp:
            resp.read()

    def free(self, name: str) -> bool:
        """No pod is bound to the node (the previous user's pods are gone)."""
        pods = self._api("GET", f"/api/v1/pods?fieldSelector=spec.nodeName%3D{name}")
        return not (pods or {}).get("items")

    def lend(self, count: int, labels: dict[str, str], timeout_s: float = 90.0) -> list[str]:
        """``count`` nodes with no pods on them, labelled ``labels`` (e.g. a test's own pool name)."""
        deadline = time.monotonic() + timeout_s
        while True:
            names = [n for n in self.nodes if self.free(n)][:count]
            if len(names) == count:
                break
            if time.monotonic() > deadline:
                raise HarnessError(f"fewer than {count} free real kubelets after {timeout_s:.0f}s")
            time.sleep(0.25)
        for name in names:
            self._call("PATCH", f"/api/v1/nodes/{name}", {"metadata": {"labels": labels}})
        return names

    def give_back(self, names: Sequence[str], labels: dict[str, str]) -> None:
        for name in names:
            self._call("PATCH", f"/api/v1/nodes/{name}", {"metadata": {"labels": dict.fromkeys(labels)}})

    def node_names(self, pool: str | None = None) -> list[str]:
        return [n for n, node in self.nodes.items() if pool is None or node.pool.name == pool]

    def stop(self, *, delete_nodes: bool = True) -> None:
        for node in self.nodes.values():
            node.proc.stop()
        if delete_nodes:
            for name in self.nodes:
                self._api("DELETE", f"/api/v1/nodes/{name}")
        for node in self.nodes.values():
            shutil.rmtree(node.root_dir, ignore_errors=True)
        if self.roots is not None:
            shutil.rmtree(self.roots, ignore_errors=True)
            self.roots = None
