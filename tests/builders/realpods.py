"""Pods on a real node and what their cgroups hold: the builders of ``test_real_node.py``, the demo and the drill.

Owns the shape of a workload pod for a real node (the local busybox image, ``imagePullPolicy: Never``, the
real node's toleration, no probes that reach the pod: exec probes or none), the shell programs the tests run
in it (hold N MiB, grow on a signal file), and reading a container's cgroup from the host: its directory is
found by container ID below the node's cgroup parent (the cgroupfs driver names it after the ID), in each
hierarchy on v1 or in the unified one on v2, and read as the kernel shows it (``CgroupValues``).
"""

from __future__ import annotations

import ssl
import subprocess
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes import client

from tests.harness import realhost
from tests.harness.cluster import ClusterState, kubectl_bin
from tests.harness.realnode import REAL_TOLERATION, WORKLOAD_IMAGE, RealNode
from tests.waiting import eventually
from updater.cgroups import CgroupReading
from updater.kube.cadvisor import parse_cadvisor

Mi = 2**20
GROW_FILE = "/tmp/grow"


def hold_mib(mib: int, grow_to_mib: int = 0) -> list[str]:
    """A shell that holds ``mib`` MiB in a variable (reading it peaks at about twice that) and sleeps; once
    ``GROW_FILE`` exists it also holds ``grow_to_mib`` MiB more (a spike the tests trigger with exec)."""
    grow = (f"if [ -f {GROW_FILE} ] && [ -z \"$y\" ]; then y=$(head -c {grow_to_mib}m /dev/zero | tr '\\0' b); fi; "
            if grow_to_mib else "")
    held = f"x=$(head -c {mib}m /dev/zero | tr '\\0' a); " if mib else ""
    return ["/bin/sh", "-c", f"{held}echo ready; while :; do {grow}sleep 0.5; done"]


def container(name: str, command: list[str], *, requests: dict[str, str], limits: dict[str, str],
              cpu_policy: str = "NotRequired", memory_policy: str = "NotRequired") -> dict[str, Any]:
    return {"name": name, "image": WORKLOAD_IMAGE, "imagePullPolicy": "Never", "command": command,
            "resources": {"requests": requests, "limits": limits},
            "resizePolicy": [{"resourceName": "cpu", "restartPolicy": cpu_policy},
                             {"resourceName": "memory", "restartPolicy": memory_policy}]}


def pod_spec(node: str, *containers: dict[str, Any], init_containers: tuple[dict[str, Any], ...] = ()
             ) -> dict[str, Any]:
    return {"nodeName": node, "tolerations": [REAL_TOLERATION], "terminationGracePeriodSeconds": 1,
            "enableServiceLinks": False, "automountServiceAccountToken": False, "containers": list(containers),
            **({"initContainers": list(init_containers)} if init_containers else {})}


def run_pod(core: client.CoreV1Api, ns: str, name: str, node: str, *containers: dict[str, Any],
            init_containers: tuple[dict[str, Any], ...] = (), timeout_s: float = 90.0) -> client.V1Pod:
    """Create the pod on ``node`` (its ``init_containers`` first) and wait until all its containers run and it
    is Ready."""
    body: Any = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
                 "spec": pod_spec(node, *containers, init_containers=init_containers)}
    core.create_namespaced_pod(ns, body)  # the client sends a plain dict as it is
    return eventually(f"pod {name} Ready on the real node {node}", lambda: _ready(core.read_namespaced_pod(name, ns)),
                      timeout_s=timeout_s, interval_s=0.2)


def _ready(pod: client.V1Pod) -> client.V1Pod | None:
    status = pod.status
    if status is None:
        return None
    ok = any(c.type == "Ready" and c.status == "True" for c in status.conditions or [])
    return pod if ok and status.phase == "Running" else None


def status_of(pod: client.V1Pod, name: str) -> client.V1ContainerStatus:
    return next(s for s in (pod.status.container_statuses if pod.status else None) or [] if s.name == name)


def container_id(pod: client.V1Pod, name: str) -> str:
    """The runtime's ID of the container (``containerd://<id>`` in status)."""
    return str(status_of(pod, name).container_id).split("://", 1)[1]


@dataclass(frozen=True, slots=True, kw_only=True)
class CgroupValues:
    """A container's CPU and memory cgroup as the kernel holds it, in v1 terms (v2 files are converted here:
    ``cpu.max`` "quota period", ``cpu.weight`` kept as it is, ``memory.max`` "max" as None)."""

    cpu_quota_us: int | None
    """v1 ``cpu.cfs_quota_us`` (-1 there: None), v2 the first field of ``cpu.max``."""
    cpu_period_us: int
    cpu_shares: int | None
    """v1 ``cpu.shares``; None on v2 (see ``cpu_weight``)."""
    cpu_weight: int | None
    """v2 ``cpu.weight``; None on v1."""
    memory_limit_bytes: int | None
    pids: tuple[int, ...]
    """The host PIDs in the cgroup (the container's processes)."""


def cgroup_dir(node: RealNode, layout: realhost.CgroupLayout, hierarchy: str, cid: str) -> Path:
    base = realhost.CGROUP_ROOT if layout is realhost.CgroupLayout.V2 else realhost.CGROUP_ROOT / hierarchy
    top = base / node.cgroup_parent.strip("/")
    found = [p for p in top.rglob(cid) if p.is_dir()]
    if len(found) != 1:
        raise AssertionError(f"{len(found)} cgroups named {cid} below {top}")
    return found[0]


def read_cgroup(node: RealNode, layout: realhost.CgroupLayout, cid: str) -> CgroupValues:
    if layout is realhost.CgroupLayout.V2:
        d = cgroup_dir(node, layout, "", cid)
        quota, period = (d / "cpu.max").read_text().split()
        memory = (d / "memory.max").read_text().strip()
        return CgroupValues(cpu_quota_us=None if quota == "max" else int(quota), cpu_period_us=int(period),
                            cpu_shares=None, cpu_weight=int((d / "cpu.weight").read_text()),
                            memory_limit_bytes=None if memory == "max" else int(memory),
                            pids=tuple(sorted(int(p) for p in (d / "cgroup.procs").read_text().split())))
    cpu, mem = cgroup_dir(node, layout, "cpu", cid), cgroup_dir(node, layout, "memory", cid)
    quota_us = int((cpu / "cpu.cfs_quota_us").read_text())
    return CgroupValues(cpu_quota_us=None if quota_us < 0 else quota_us,
                        cpu_period_us=int((cpu / "cpu.cfs_period_us").read_text()),
                        cpu_shares=int((cpu / "cpu.shares").read_text()), cpu_weight=None,
                        memory_limit_bytes=int((mem / "memory.limit_in_bytes").read_text()),
                        pids=tuple(sorted(int(p) for p in (cpu / "cgroup.procs").read_text().split())))


def memory_usage_bytes(node: RealNode, layout: realhost.CgroupLayout, cid: str) -> int:
    if layout is realhost.CgroupLayout.V2:
        return int((cgroup_dir(node, layout, "", cid) / "memory.current").read_text())
    return int((cgroup_dir(node, layout, "memory", cid) / "memory.usage_in_bytes").read_text())


def kubelet_cadvisor(port: int, scheme: str = "https") -> Callable[[str], dict[str, CgroupReading]]:
    """The updater's cgroup-check read (``updater.kube.cadvisor``'s parser), straight from a kubelet on 127.0.0.1:
    the API server refuses to proxy to a loopback node address. A real kubelet serves HTTPS with a self-signed
    certificate; a hollow node's kubemark kubelet plain HTTP."""
    ctx = ssl._create_unverified_context() if scheme == "https" else None

    def read(node: str) -> dict[str, CgroupReading]:
        with urllib.request.urlopen(f"{scheme}://127.0.0.1:{port}/metrics/cadvisor", context=ctx, timeout=10) as r:
            return parse_cadvisor(r.read().decode())
    return read


def kubectl_exec(cluster: ClusterState, ns: str, pod: str, container: str, *argv: str) -> str:
    """``kubectl exec`` through the API server and the kubelet on 127.0.0.1 (never to the pod's address)."""
    result = subprocess.run([str(kubectl_bin()), f"--kubeconfig={cluster.kubeconfig}", "-n", ns, "exec", pod,
                             "-c", container, "--", *argv], capture_output=True, text=True, check=False, timeout=60)
    if result.returncode != 0:
        raise AssertionError(f"kubectl exec {pod} {' '.join(argv)}: exit {result.returncode}: {result.stderr}")
    return result.stdout


def wait_resized(core: client.CoreV1Api, ns: str, name: str, generation: int, timeout_s: float = 60.0) -> float:
    """Seconds until status caught up with ``generation`` and no resize condition is left."""
    t0 = time.monotonic()

    def done() -> bool:
        status = core.read_namespaced_pod(name, ns).status
        if status is None:
            return False
        conditions = {c.type for c in status.conditions or []}
        return (status.observed_generation or 0) >= generation and not (
            {"PodResizePending", "PodResizeInProgress"} & conditions)

    eventually(f"{name}'s resize done in status", done, timeout_s=timeout_s, interval_s=0.05)
    return time.monotonic() - t0
