"""Benchmark: a real node (kubelet v1.37 on containerd and runc) beside a hollow node and the node simulator.

Measures, in one run against one control plane: the real node's start time (containerd + image import +
kubelet until the Node is Ready with its address) and the resident memory of its kubelet and containerd;
``/resize`` (a CPU request and limit) to verified in status (observedGeneration caught up, no resize condition,
status equal to the patch, polled every 20 ms) on each kind of node; on the real node also until the new quota
is in the container's cgroup and until the kubelet's cAdvisor series agree (read from the kubelet on 127.0.0.1:
the API server refuses to proxy to a loopback node address); and the cgroup check's cost per batch: one node's
/metrics/cadvisor read and parsed, and what a hollow node serves there.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from kubernetes import client, config

from tests.benchmarks.results import machine_facts, write_section
from tests.builders.realpods import container, container_id, hold_mib, kubelet_cadvisor, read_cgroup
from tests.harness.cluster import LocalCluster
from tests.harness.kubelets import HOLLOW_TOLERATION, KubeletPool
from tests.harness.realnode import REAL_TOLERATION, RealNodePool
from tests.nodesim.kubelet import NodeSimulator, SimConfig
from tests.nodesim.nodes import NodePool
from updater.cgroups import quota_us

NS = "bench"


def _wait(probe: Callable[[], bool], timeout_s: float = 60.0, interval_s: float = 0.02) -> None:
    deadline = time.monotonic() + timeout_s
    while not probe():
        if time.monotonic() > deadline:
            raise TimeoutError("benchmark step timed out")
        time.sleep(interval_s)


def _pod(name: str, node: str, real: bool) -> dict[str, Any]:
    res = {"requests": {"cpu": "100m", "memory": "32Mi"}, "limits": {"cpu": "1", "memory": "64Mi"}}
    if real:
        c = container("app", hold_mib(0), requests=res["requests"], limits=res["limits"])
    else:
        c = {"name": "app", "image": "registry.invalid/app:1", "resources": res}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"nodeName": node, "tolerations": [REAL_TOLERATION if real else HOLLOW_TOLERATION],
                     "terminationGracePeriodSeconds": 1, "automountServiceAccountToken": False,
                     "containers": [c]}}


def _verified(core: Any, name: str, gen: int, cpu: str) -> bool:
    pod = core.read_namespaced_pod(name, NS)
    if (pod.status.observed_generation or 0) < gen:
        return False
    if any(c.type in ("PodResizePending", "PodResizeInProgress") for c in pod.status.conditions or []):
        return False
    (cs,) = pod.status.container_statuses
    return bool(cs.resources and (cs.resources.limits or {}).get("cpu") == cpu)


def _resize(core: Any, name: str, limit_m: int) -> tuple[int, float]:
    body = {"spec": {"containers": [{"name": "app", "resources": {"requests": {"cpu": f"{limit_m // 2}m"},
                                                                  "limits": {"cpu": f"{limit_m}m"}}}]}}
    t0 = time.monotonic()
    gen = int(core.patch_namespaced_pod_resize(name, NS, body).metadata.generation)
    return gen, t0


def _times(core: Any, name: str, rounds: int, extra: Callable[[str, int], Callable[[], bool]] | None = None,
           ) -> tuple[list[float], list[float]]:
    """(status-verified times, extra-probe times) over ``rounds`` resizes of ``name``."""
    status, more = [], []
    for r in range(rounds):
        limit_m = 1500 if r % 2 == 0 else 1000
        gen, t0 = _resize(core, name, limit_m)
        cpu = f"{limit_m}m" if limit_m % 1000 else str(limit_m // 1000)
        _wait(partial(_verified, core, name, gen, cpu))
        status.append(time.monotonic() - t0)
        if extra is not None:
            _wait(extra(name, limit_m), timeout_s=60)
            more.append(time.monotonic() - t0)
    return status, more


def _row(label: str, xs: list[float]) -> str:
    return (f"| {label} | {statistics.median(xs) * 1000:.0f} ms | {max(xs) * 1000:.0f} ms | {len(xs)} |"
            if xs else f"| {label} | - | - | 0 |")


def run(rounds: int = 6, reads: int = 20) -> str:
    with tempfile.TemporaryDirectory() as tmp:
        cluster = LocalCluster(Path(tmp) / "c")
        state = cluster.start()
        api = config.new_client_from_config(config_file=state.kubeconfig)  # type: ignore[no-untyped-call]
        core: Any = client.CoreV1Api(api)
        real = RealNodePool(cluster=state, workdir=Path(tmp) / "r", pools=(NodePool(name="real", count=1),))
        hollow = KubeletPool(cluster=state, workdir=Path(tmp) / "k",
                             pools=(NodePool(name="hollow", count=1, cpu_millicores=4000),))
        sim: NodeSimulator | None = None
        try:
            real.start()
            node = next(iter(real.nodes.values()))
            hollow.start()
            sim = NodeSimulator(api, SimConfig(pools=(NodePool(name="sim", count=1),), name_prefix="bsim")).start()
            core.create_namespace({"metadata": {"name": NS}})
            _wait(lambda: bool(core.list_namespaced_service_account(NS).items), timeout_s=30)
            targets = {"real": (node.name, True), "hollow": (hollow.node_names()[0], False),
                       "sim": (sim.node_names()[0], False)}
            for label, (where, is_real) in targets.items():
                core.create_namespaced_pod(NS, _pod(label, where, is_real))
            _wait(lambda: all(core.read_namespaced_pod(n, NS).status.phase == "Running" for n in targets),
                  timeout_s=120, interval_s=0.2)
            cid = container_id(core.read_namespaced_pod("real", NS), "app")
            rss = node.rss_bytes()
            cadvisor = kubelet_cadvisor(node.kubelet_port)  # the node proxy refuses a loopback node address

            def in_cgroup(name: str, limit_m: int) -> Callable[[], bool]:
                return lambda: read_cgroup(node, real.layout, cid).cpu_quota_us == quota_us(limit_m)

            def in_series(name: str, limit_m: int) -> Callable[[], bool]:
                return lambda: (r := cadvisor(node.name).get(cid)) is not None and r.cpu_quota_us == quota_us(limit_m)

            real_status, real_cgroup = _times(core, "real", rounds, in_cgroup)
            _, real_series = _times(core, "real", max(2, rounds // 3), in_series)
            hollow_status, _ = _times(core, "hollow", rounds)
            sim_status, _ = _times(core, "sim", rounds)
            read_s = []
            for _ in range(reads):
                t0 = time.monotonic()
                page = cadvisor(node.name)
                read_s.append(time.monotonic() - t0)
            hollow_name = hollow.node_names()[0]
            hollow_page = kubelet_cadvisor(hollow.nodes[hollow_name].kubelet_port, "http")(hollow_name)
        finally:
            if sim is not None:
                sim.stop(delete_nodes=True)
            hollow.stop()
            real.stop()
            cluster.stop()
    mib = 2**20
    body = [machine_facts(), "",
            f"One run: a local control plane; one real node (kubelet v1.37.2 on Debian's containerd and runc, cgroup "
            f"{real.layout.value}), one hollow node and one simulated node against it; a busybox pod (CPU 100m/1, "
            f"memory 32Mi/64Mi) on each, its CPU resized {rounds} times between limits 1 and 1.5 (request half). The "
            "cAdvisor page counts the pod's sandbox and its container.", "",
            "| measurement | value |", "|---|---|",
            f"| real node start (containerd, image import, kubelet → Ready with its address) | "
            f"{node.timings['start_s']:.1f} s |",
            f"| RSS of the real node's kubelet, containerd (1 pod running) | {rss.get('kubelet', 0) / mib:.0f} MiB, "
            f"{rss.get('containerd', 0) / mib:.0f} MiB |",
            f"| cgroup check per batch: one node's /metrics/cadvisor read from the kubelet on 127.0.0.1 and parsed "
            f"(median, max of {reads}) | {statistics.median(read_s) * 1000:.0f} ms, {max(read_s) * 1000:.0f} ms "
            f"({len(page)} containers) |",
            f"| what a hollow node serves at /metrics/cadvisor | {len(hollow_page)} containers with "
            "container_spec series |", "",
            "`/resize` → verified:", "", "| node, verified by | median | max | resizes |", "|---|---|---|---|",
            _row("real node, status", real_status), _row("real node, quota in the container's cgroup", real_cgroup),
            _row("real node, the kubelet's cAdvisor series", real_series),
            _row("hollow node, status", hollow_status), _row("node simulator, status", sim_status)]
    return "\n".join(body)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args(argv)
    body = run(rounds=args.rounds)
    write_section("realnode", "A real node beside a hollow node and the simulator", body)
    print(body)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
