"""Benchmark: the node simulator at scale against the real control plane.

500 nodes in 5 pools (``python -m tests.nodesim`` in its own process, so its CPU time and memory are its
own), 5,000 pods from 5 Deployments placed by the real scheduler. Measures the time until every pod is
Running, the simulator's CPU seconds and peak RSS, and the sustained rate of in-place resizes: a batch of
CPU resizes sent through ``pods/resize`` and the time until the simulator has actuated all of them.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from kubernetes import client, config

from tests.benchmarks.results import machine_facts, write_section
from tests.harness.cluster import REPO_ROOT, LocalCluster
from tests.harness.process import wait_until

POOL_KEY = "podtailor.io/node-pool"


def _proc_stats(pid: int) -> tuple[float, int]:
    """(CPU seconds, peak RSS bytes) of a process from /proc."""
    stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = 100.0
    cpu = (int(stat[11]) + int(stat[12])) / ticks
    peak = 0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            peak = int(line.split()[1]) * 1024
    return cpu, peak


def _pods(core: Any, namespace: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = json.loads(core.list_namespaced_pod(namespace, _preload_content=False).data)["items"]
    return items


def _deployment(name: str, pool: str, replicas: int) -> dict[str, Any]:
    labels = {"app": name}
    container = {"name": "app", "image": "registry.invalid/app:1",
                 "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"cpu": "1"}}}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
            "spec": {"replicas": replicas, "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels},
                                  "spec": {"nodeSelector": {POOL_KEY: pool}, "containers": [container]}}}}


def run(nodes_per_pool: int = 100, pods: int = 5000, resizes: int = 1000) -> str:
    pools = [f"pool{i}" for i in range(5)]
    with tempfile.TemporaryDirectory() as tmp:
        local = LocalCluster(Path(tmp) / "cluster")
        state = local.start()
        try:
            api = config.new_client_from_config(config_file=state.kubeconfig)  # type: ignore[no-untyped-call]
            core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
            sim = subprocess.Popen(
                [sys.executable, "-m", "tests.nodesim", "--kubeconfig", state.kubeconfig, "--metrics-port", "0",
                 *[a for p in pools for a in ("--pool", f"{p}={nodes_per_pool}:16:64Gi")]],
                cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
            try:
                return _measure(core, apps, sim, pools, nodes_per_pool, pods, resizes)
            finally:
                sim.terminate()
                sim.wait(timeout=120)
        finally:
            local.stop()


def _measure(core: Any, apps: Any, sim: subprocess.Popen[str], pools: list[str], nodes_per_pool: int,
             pods: int, resizes: int) -> str:
    assert sim.stdout is not None
    t0 = time.monotonic()
    sim.stdout.readline()  # "simulating N nodes": registration is done
    register_s = time.monotonic() - t0
    wait_until("nodes untainted", lambda: sum(1 for n in core.list_node().items if not n.spec.taints)
               >= len(pools) * nodes_per_pool, timeout_s=300, interval_s=1.0)
    core.create_namespace({"metadata": {"name": "bench"}})
    wait_until("default ServiceAccount", lambda: bool(core.list_namespaced_service_account("bench").items),
               timeout_s=60)
    t1 = time.monotonic()
    for pool in pools:
        apps.create_namespaced_deployment("bench", _deployment(pool, pool, pods // len(pools)))
    wait_until(f"{pods} pods Running", lambda: sum(1 for p in _pods(core, "bench")
                                                   if p["status"].get("phase") == "Running") >= pods,
               timeout_s=1800, interval_s=2.0)
    running_s = time.monotonic() - t1
    cpu_running, rss_running = _proc_stats(sim.pid)
    names = [p["metadata"]["name"] for p in _pods(core, "bench")][:resizes]
    body = {"spec": {"containers": [{"name": "app", "resources": {"requests": {"cpu": "150m"}}}]}}
    t2 = time.monotonic()
    with ThreadPoolExecutor(8) as pool_exec:
        list(pool_exec.map(lambda n: core.patch_namespaced_pod_resize(n, "bench", body, _preload_content=False),
                           names))
    sent_s = time.monotonic() - t2
    wanted = set(names)

    def actuated() -> bool:
        done = 0
        for p in _pods(core, "bench"):
            if p["metadata"]["name"] in wanted:
                st = (p["status"].get("containerStatuses") or [{}])[0]
                done += st.get("resources", {}).get("requests", {}).get("cpu") == "150m"
        return done >= len(wanted)

    wait_until("resizes actuated", actuated, timeout_s=900, interval_s=1.0)
    resize_s = time.monotonic() - t2
    cpu_end, rss_end = _proc_stats(sim.pid)
    total_nodes = len(pools) * nodes_per_pool
    return "\n".join([
        machine_facts(), "",
        f"{total_nodes} simulated nodes in {len(pools)} pools, {pods} pods from {len(pools)} Deployments placed "
        "by the real scheduler; the simulator runs as its own process. Real control plane on the same 2 cores.",
        "", "| measurement | value |", "|---|---|",
        f"| node registration (create, status, lease for {total_nodes} nodes) | {register_s:.1f} s |",
        f"| Deployments created → all {pods} pods Running | {running_s:.1f} s ({pods / running_s:.0f} pods/s) |",
        f"| simulator CPU time until then | {cpu_running:.1f} s |",
        f"| simulator peak RSS with {pods} pods | {rss_running / 2**20:.0f} MiB |",
        f"| {len(names)} resizes sent (8 client threads) | {sent_s:.1f} s ({len(names) / sent_s:.0f}/s) |",
        f"| {len(names)} resizes sent → all actuated (in status) | {resize_s:.1f} s "
        f"({len(names) / resize_s:.0f} resizes/s sustained) |",
        f"| simulator CPU time, whole run | {cpu_end:.1f} s |",
        f"| simulator peak RSS, whole run | {rss_end / 2**20:.0f} MiB |",
    ])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nodes-per-pool", type=int, default=100)
    parser.add_argument("--pods", type=int, default=5000)
    parser.add_argument("--resizes", type=int, default=1000)
    args = parser.parse_args(argv)
    body = run(args.nodes_per_pool, args.pods, args.resizes)
    print(body)
    write_section("nodesim", "Node simulator at scale", body)


if __name__ == "__main__":
    main()
