"""Real nodes: the real kubelet v1.37 over Debian's containerd and runc, with real cgroups, beside the control plane.

Owns starting and stopping one or more real nodes against a ``ClusterState``: per node its own containerd
(private root, state, socket, runc root and CNI bridge; the CRI plugin's sandbox image is the repo's local pause
image, ``restrict_oom_score_adj`` on because this host refuses a negative ``oom_score_adj``), the two local
images (``scripts/build-images.py``) loaded with ``ctr -n k8s.io images import``, and a kubelet (built by
``scripts/build-kubelet.sh``) with the cgroupfs driver, its own ``cgroupRoot``, ports, pool and instance-type
labels and the ``REAL_TAINT``. The kubelet refuses a loopback node IP, so the harness sets the node's address
(127.0.0.1, ``InternalIP``) as a cloud controller would; exec, logs and the cAdvisor metrics then go through
the API server to the kubelet on 127.0.0.1, and nothing is ever sent to a pod address. ``stop()`` removes
everything: processes, mounts, the bridge, the cgroups and the directories. Host facts are in ``realhost.py``.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.harness import realhost
from tests.harness.cluster import REPO_ROOT, ClusterState
from tests.harness.kubelets import pool_labels
from tests.harness.process import HarnessError, Managed, free_port, stop_pid, wait_until
from tests.nodesim.nodes import NodePool

BUILD_KUBELET = REPO_ROOT / "scripts" / "build-kubelet.sh"
BUILD_IMAGES = REPO_ROOT / "scripts" / "build-images.py"
PAUSE_IMAGE = "localhost/podtailor/pause:1"
WORKLOAD_IMAGE = "localhost/podtailor/busybox:1"
"""The workload image: busybox-static as ``/bin/sh`` and its applets; pods use ``imagePullPolicy: Never``."""
REAL_TAINT = {"key": "podtailor.io/real-node", "value": "true", "effect": "NoSchedule"}
REAL_TOLERATION = {"key": REAL_TAINT["key"], "operator": "Exists", "effect": "NoSchedule"}


def kubelet_binary() -> Path:
    """The cached real kubelet of the control plane's version (built by ``scripts/build-kubelet.sh`` if missing)."""
    result = subprocess.run(["bash", str(BUILD_KUBELET)], stdout=subprocess.PIPE, text=True, check=False)
    if result.returncode != 0:
        raise HarnessError(f"building the kubelet failed (exit {result.returncode}); see the messages above")
    return Path(result.stdout.strip().splitlines()[-1])


def local_images() -> dict[str, Path]:
    """The local images' OCI tarballs (built by ``scripts/build-images.py`` if missing): name -> path."""
    result = subprocess.run([sys.executable, str(BUILD_IMAGES)], stdout=subprocess.PIPE, text=True, check=False)
    if result.returncode != 0:
        raise HarnessError(f"scripts/build-images.py failed (exit {result.returncode})")
    return {name: Path(path) for name, path in (line.split() for line in result.stdout.splitlines())}


@dataclass
class RealNode:
    """One real node: its containerd, its kubelet, and where they keep their state."""

    name: str
    pool: NodePool
    dir: Path
    cgroup_parent: str
    bridge: str
    subnet: str
    kubelet_port: int
    containerd: Managed | None = None
    kubelet: Managed | None = None
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def socket(self) -> Path:
        return self.dir / "containerd.sock"

    def rss_bytes(self) -> dict[str, int]:
        """Resident memory of the kubelet and of containerd, from /proc."""
        out = {}
        for what, proc in (("kubelet", self.kubelet), ("containerd", self.containerd)):
            if proc is not None and proc.alive():
                status = Path(f"/proc/{proc.pid}/status").read_text()
                out[what] = next(int(x.split()[1]) * 1024 for x in status.splitlines() if x.startswith("VmRSS:"))
        return out

    def serving(self) -> bool:
        """containerd answers on its socket."""
        try:
            return self.socket.exists() and bool(self.ctr("version"))
        except HarnessError:
            return False

    def task_pid(self, container_id: str) -> int:
        """The host PID of the container's first process (runc's init), as containerd reports it."""
        for line in self.ctr("tasks", "ls").splitlines()[1:]:
            fields = line.split()
            if fields and fields[0] == container_id:
                return int(fields[1])
        raise HarnessError(f"{self.name}: no task for container {container_id}")

    def ctr(self, *args: str) -> str:
        """``ctr -n k8s.io`` against this node's containerd."""
        result = subprocess.run(["ctr", "-a", str(self.socket), "-n", "k8s.io", *args], capture_output=True,
                                text=True, check=False, timeout=120)
        if result.returncode != 0:
            raise HarnessError(f"{self.name}: ctr {' '.join(args)}: {result.stderr.strip()}")
        return result.stdout


def _containerd_config(node: RealNode) -> str:
    cri = {
        "sandbox_image": PAUSE_IMAGE,
        "restrict_oom_score_adj": True,
        "netns_mounts_under_state_dir": True,
        "stream_server_address": "127.0.0.1",
        "stream_server_port": "0",
        "containerd": {
            "snapshotter": "overlayfs",
            "default_runtime_name": "runc",
            "runtimes": {"runc": {"runtime_type": "io.containerd.runc.v2",
                                  "options": {"SystemdCgroup": False, "Root": str(node.dir / "runc")}}},
        },
        "cni": {"bin_dir": str(realhost.CNI_BIN_DIR), "conf_dir": str(node.dir / "cni")},
    }
    config = {
        "version": 2,
        "root": str(node.dir / "containerd-root"),
        "state": str(node.dir / "containerd-state"),
        "grpc": {"address": str(node.socket)},
        "ttrpc": {"address": str(node.dir / "containerd.sock.ttrpc")},
        "metrics": {"address": ""},
        "plugins": {"io.containerd.grpc.v1.cri": cri,
                    "io.containerd.internal.v1.opt": {"path": str(node.dir / "opt")}},
    }
    return _toml(config)


def _toml(value: dict[str, Any], prefix: str = "") -> str:
    """A nested dict of scalars as TOML: enough for containerd's config (no arrays of tables)."""
    lines, tables = [], []
    for key, v in value.items():
        if isinstance(v, dict):
            tables.append((key, v))
        else:
            lines.append(f"{key} = {json.dumps(v)}")
    out = "\n".join(lines) + ("\n" if lines else "")
    for key, v in tables:
        name = f"{prefix}.{json.dumps(key) if '.' in key else key}" if prefix else (
            json.dumps(key) if "." in key else key)
        out += f"\n[{name}]\n" + _toml(v, name)
    return out


def _cni_config(node: RealNode) -> dict[str, Any]:
    return {"cniVersion": "0.4.0", "name": f"podtailor-{node.bridge}", "plugins": [{
        "type": "bridge", "bridge": node.bridge, "isGateway": True, "ipMasq": False,
        "ipam": {"type": "host-local", "ranges": [[{"subnet": node.subnet}]], "dataDir": str(node.dir / "ipam")},
    }]}


def _kubelet_config(node: RealNode, layout: realhost.CgroupLayout) -> dict[str, Any]:
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
        "failCgroupV1": layout is not realhost.CgroupLayout.V1,
        "cgroupDriver": "cgroupfs", "cgroupRoot": node.cgroup_parent, "cgroupsPerQOS": True,
        "containerRuntimeEndpoint": f"unix://{node.socket}",
        "address": "127.0.0.1", "port": node.kubelet_port, "readOnlyPort": 0, "healthzPort": 0,
        "authentication": {"anonymous": {"enabled": True}, "webhook": {"enabled": False}},
        "authorization": {"mode": "AlwaysAllow"},
        "podLogsDir": str(node.dir / "logs"), "resolvConf": "", "oomScoreAdj": 0,
        "failSwapOn": False, "maxPods": node.pool.max_pods,
        "nodeStatusUpdateFrequency": "1s", "nodeStatusReportFrequency": "10s", "syncFrequency": "5s",
        "imageGCHighThresholdPercent": 100, "imageGCLowThresholdPercent": 99,
        "evictionHard": {"memory.available": "1Mi", "nodefs.available": "1%", "imagefs.available": "1%"},
        "registerWithTaints": [REAL_TAINT],
    }


@dataclass
class RealNodePool:
    """Start ``pools`` as real nodes against ``cluster``: ``start()``, use ``nodes``, ``stop()``."""

    cluster: ClusterState
    workdir: Path
    pools: Sequence[NodePool]
    name_prefix: str = "rn"
    nodes: dict[str, RealNode] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    layout: realhost.CgroupLayout = field(default_factory=realhost.cgroup_layout)
    token: str = field(default_factory=lambda: secrets.token_hex(3))
    """Tells this run's cgroups, bridges and directories from another run's on the same host."""
    base: Path | None = None
    """Parent of the nodes' directories: short, under the system temp dir (Unix socket paths are at most 107
    bytes and the kubelet binds some below its root). Logs stay in ``workdir``."""

    def start(self, timeout_s: float = 120.0) -> RealNodePool:
        gaps = realhost.missing()
        if gaps:
            raise HarnessError("this host cannot run a real node: it lacks " + "; ".join(gaps))
        t0 = time.monotonic()
        kubelet, images = kubelet_binary(), local_images()
        self.timings["binaries_s"] = time.monotonic() - t0
        self.base = Path(tempfile.mkdtemp(prefix=f"rn-{self.token}-"))
        try:
            index = 0
            for pool in self.pools:
                for i in range(pool.count):
                    self._start_node(kubelet, images, pool, f"{self.name_prefix}-{pool.name}-{i}", index, timeout_s)
                    index += 1
        except BaseException:
            self.stop()
            raise
        self.timings["start_s"] = time.monotonic() - t0
        return self

    def _new_node(self, pool: NodePool, name: str, index: int) -> RealNode:
        assert self.base is not None
        used = realhost.used_subnets()
        subnet = next(s for s in (f"10.{200 + (int(self.token, 16) + index + k) % 50}.{index}.0/24"
                                  for k in range(50)) if s not in used)
        return RealNode(name=name, pool=pool, dir=self.base / name, bridge=f"ptb{self.token}{index}",
                        cgroup_parent=f"/podtailor/{self.token}/{name}", subnet=subnet, kubelet_port=free_port())

    def _start_node(self, kubelet: Path, images: dict[str, Path], pool: NodePool, name: str, index: int,
                    timeout_s: float) -> None:
        t0 = time.monotonic()
        node = self._new_node(pool, name, index)
        self.nodes[name] = node
        for sub in ("cni", "logs", "runc", "opt", "ipam", "kubelet"):
            (node.dir / sub).mkdir(parents=True, exist_ok=True)
        (node.dir / "containerd.toml").write_text(_containerd_config(node))
        (node.dir / "cni" / "10-podtailor.conflist").write_text(json.dumps(_cni_config(node), indent=2))
        node.containerd = Managed(name=f"{name}-containerd", log_path=self.workdir / "logs" / f"{name}-containerd.log",
                                  argv=["containerd", "--config", str(node.dir / "containerd.toml")])
        node.containerd.start()
        wait_until(f"{name}'s containerd", node.serving, timeout_s=60, interval_s=0.1, watched=[node.containerd])
        for path in images.values():
            node.ctr("images", "import", str(path))
        realhost.make_cgroup_parent(node.cgroup_parent, self.layout)
        config = node.dir / "kubelet.yaml"
        config.write_text(yaml.safe_dump(_kubelet_config(node, self.layout), sort_keys=False))
        labels = ",".join(f"{k}={v}" for k, v in pool_labels(pool, "real").items())
        node.kubelet = Managed(name=f"{name}-kubelet", log_path=self.workdir / "logs" / f"{name}-kubelet.log",
                               argv=[str(kubelet), f"--config={config}", f"--kubeconfig={self.cluster.kubeconfig}",
                                     f"--root-dir={node.dir / 'kubelet'}", f"--hostname-override={name}",
                                     "--node-ip=127.0.0.1",  # refused as loopback: no address of its own
                                     f"--node-labels={labels}", "--v=1"])
        node.kubelet.start()
        watched = [node.containerd, node.kubelet]
        wait_until(f"node {name} registered", lambda: self._api("GET", f"/api/v1/nodes/{name}") is not None,
                   timeout_s=timeout_s, interval_s=0.2, watched=watched)
        self.set_address(name)
        wait_until(f"node {name} Ready with its address", lambda: self._ready_with_address(name),
                   timeout_s=timeout_s, interval_s=0.2, watched=watched)
        node.timings["start_s"] = time.monotonic() - t0

    def set_address(self, name: str) -> None:
        """What a cloud controller does: the node's address (127.0.0.1, InternalIP) in its status. Only that one:
        the API server prefers a Hostname address, and would look the node's name up in DNS."""
        self._api("PATCH", f"/api/v1/nodes/{name}/status",
                  {"status": {"addresses": [{"type": "InternalIP", "address": "127.0.0.1"}]}})

    def _ready_with_address(self, name: str) -> bool:
        status = (self._api("GET", f"/api/v1/nodes/{name}") or {}).get("status") or {}
        if (status.get("addresses") or []) != [{"type": "InternalIP", "address": "127.0.0.1"}]:
            self.set_address(name)
            return False
        return any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])

    def _api(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        return self.cluster.admin_call(method, path, body)

    def node_names(self, pool: str | None = None) -> list[str]:
        return [n for n, node in self.nodes.items() if pool is None or node.pool.name == pool]

    def stop(self, *, delete_nodes: bool = True) -> list[str]:
        """Stop every node and remove what it made; what could not be removed (empty when all went)."""
        left: list[str] = []
        for node in self.nodes.values():
            left += self._stop_node(node, delete_nodes)
        self.nodes.clear()
        if self.base is not None:
            shutil.rmtree(self.base, ignore_errors=True)
            self.base = None
        left += realhost.remove_cgroup_tree(f"/podtailor/{self.token}", self.layout)
        realhost.remove_if_empty("/podtailor", self.layout)  # another run's nodes may still be in it
        if left:
            print(f"real nodes: could not remove {left}", file=sys.stderr)
        return left

    def _stop_node(self, node: RealNode, delete_nodes: bool) -> list[str]:
        if node.kubelet is not None:
            node.kubelet.stop()
        realhost.kill_cgroup_tree(node.cgroup_parent, self.layout)  # the containers: kill, not drain
        for pid in realhost.shims_of(node.socket):
            stop_pid(pid, timeout_s=5)
        if node.containerd is not None:
            node.containerd.stop()
        if delete_nodes:
            with contextlib.suppress(OSError):  # the control plane is already gone: nothing to delete
                self._api("DELETE", f"/api/v1/nodes/{node.name}")
        left = realhost.unmount_below(node.dir)
        realhost.delete_link(node.bridge)
        left += realhost.remove_cgroup_tree(node.cgroup_parent, self.layout)
        shutil.rmtree(node.dir, ignore_errors=True)
        return left
