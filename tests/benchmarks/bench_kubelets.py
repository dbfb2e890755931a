"""Benchmark: real kubelets (hollow nodes) beside the node simulator, measured in one run.

Measures the start time of a 6-node pool of real kubelets v1.37.2 (spawn → every Node Ready), their RSS
once idle and once running pods, and the time from a ``/resize`` to the resize verified (observedGeneration
caught up, no resize condition, status resources equal to the spec, read from the API server every 20 ms)
for CPU resizes on real kubelets and on the simulator, against the same control plane.
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
from tests.harness.cluster import LocalCluster
from tests.harness.kubelets import HOLLOW_TOLERATION, KubeletPool
from tests.nodesim.kubelet import NodeSimulator, SimConfig
from tests.nodesim.nodes import NodePool

POOL = NodePool(name="bench", count=6, cpu_millicores=4000, memory_bytes=8 * 2**30)


def _pod(name: str, node: str, cpu: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"nodeName": node, "tolerations": [HOLLOW_TOLERATION], "terminationGracePeriodSeconds": 1,
                     "containers": [{"name": "app", "image": "registry.invalid/app:1",
                                     "resources": {"requests": {"cpu": cpu, "memory": "32Mi"}}}]}}


def _wait(probe: Callable[[], bool], timeout_s: float = 60.0, interval_s: float = 0.02) -> None:
    deadline = time.monotonic() + timeout_s
    while not probe():
        if time.monotonic() > deadline:
            raise TimeoutError("benchmark step timed out")
        time.sleep(interval_s)


def _running(core: Any, ns: str, name: str) -> bool:
    return bool(core.read_namespaced_pod(name, ns).status.phase == "Running")


def _verified(core: Any, ns: str, name: str, gen: int, cpu: str) -> bool:
    pod = core.read_namespaced_pod(name, ns)
    if (pod.status.observed_generation or 0) < gen:
        return False
    if any(c.type in ("PodResizePending", "PodResizeInProgress") for c in pod.status.conditions or []):
        return False
    (cs,) = pod.status.container_statuses
    return bool(cs.resources and (cs.resources.requests or {}).get("cpu") == cpu)


def _resize_times(core: Any, ns: str, nodes: list[str], prefix: str, rounds: int) -> list[float]:
    names = [f"{prefix}-{i}" for i in range(len(nodes))]
    for name, node in zip(names, nodes, strict=True):
        core.create_namespaced_pod(ns, _pod(name, node, "100m"))
    for name in names:
        _wait(partial(_running, core, ns, name))
    times = []
    for r in range(rounds):
        cpu = f"{200 + 100 * (r % 2)}m"
        for name in names:
            t0 = time.monotonic()
            body = {"spec": {"containers": [{"name": "app", "resources": {"requests": {"cpu": cpu}}}]}}
            gen = int(core.patch_namespaced_pod_resize(name, ns, body).metadata.generation)
            _wait(partial(_verified, core, ns, name, gen, cpu))
            times.append(time.monotonic() - t0)
    return times


def _summary(xs: list[float]) -> str:
    qs = statistics.quantiles(xs, n=10)
    return f"{statistics.median(xs) * 1000:.0f} ms | {qs[8] * 1000:.0f} ms | {max(xs) * 1000:.0f} ms | {len(xs)}"


def run(rounds: int = 4, pods_per_node: int = 10) -> str:
    with tempfile.TemporaryDirectory() as tmp:
        cluster = LocalCluster(Path(tmp) / "c")
        state = cluster.start()
        api = config.new_client_from_config(config_file=state.kubeconfig)  # type: ignore[no-untyped-call]
        core: Any = client.CoreV1Api(api)
        pool = KubeletPool(cluster=state, workdir=Path(tmp) / "k", pools=(POOL,))
        sim: NodeSimulator | None = None
        try:
            pool.start()
            start_s = pool.timings["start_s"]
            idle = [n.rss_bytes() for n in pool.nodes.values()]
            core.create_namespace({"metadata": {"name": "bench"}})
            _wait(lambda: bool(core.list_namespaced_service_account("bench").items), timeout_s=30)
            nodes = pool.node_names()
            for node in nodes:
                for i in range(pods_per_node):
                    core.create_namespaced_pod("bench", _pod(f"{node}-{i}", node, "10m"))
            _wait(lambda: sum(p.status.phase == "Running" for p in core.list_namespaced_pod("bench").items)
                  >= len(nodes) * pods_per_node, timeout_s=120, interval_s=0.2)
            busy = [n.rss_bytes() for n in pool.nodes.values()]
            real = _resize_times(core, "bench", nodes, "real", rounds)
            sim = NodeSimulator(api, SimConfig(pools=(NodePool(name="sim", count=6),), name_prefix="bsim")).start()
            simulated = _resize_times(core, "bench", sim.node_names(), "sim", rounds)
        finally:
            if sim is not None:
                sim.stop(delete_nodes=True)
            pool.stop()
            cluster.stop()
    mib = 2**20
    body = [machine_facts(), "",
            f"One run: a local control plane, {POOL.count} real kubelets v1.37.2 (`tests/hollownode`, node status "
            f"every {pool.status_period_s:g} s, pod sync every {pool.sync_period_s:g} s), then a simulator with 6 "
            "nodes (default settings: actuation delay 0.3 s) against the same API server.", "",
            "| measurement | value |", "|---|---|",
            f"| start of the {POOL.count}-node pool (spawn → every Node Ready) | {start_s:.1f} s |",
            f"| RSS per real kubelet, idle (median, max) | {statistics.median(idle) / mib:.0f} MiB, "
            f"{max(idle) / mib:.0f} MiB |",
            f"| RSS per real kubelet with {pods_per_node} pods (median, max) | "
            f"{statistics.median(busy) / mib:.0f} MiB, {max(busy) / mib:.0f} MiB |", "",
            "`/resize` (CPU request, one pod at a time) → verified:", "",
            "| nodes | median | p90 | max | resizes |", "|---|---|---|---|---|",
            f"| real kubelets | {_summary(real)} |", f"| node simulator | {_summary(simulated)} |"]
    return "\n".join(body)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args(argv)
    body = run(rounds=args.rounds)
    write_section("kubelets", "Real kubelets beside the node simulator", body)
    print(body)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
