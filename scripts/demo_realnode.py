"""The demo's real-node step: an in-place CPU resize seen in a real container's cgroup, as the article does it.

Owns what ``make demo`` shows on a real node (``tests/harness/realnode.py``: kubelet v1.37 on containerd and
runc): it starts one beside the demo's control plane, runs a busybox pod on it, prints ``kubectl exec ... cat``
of the container's CPU cgroup files, resizes the pod's CPU through ``--subresource resize``, and prints the
files again with the container's host PID, ID and restart count before and after (same PID, no restart). The
real node is removed at the end of the step (its processes die with the demo, the cluster stays up). On a host
that cannot run one it says what is missing and goes on.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

from kubernetes import client

from tests.builders.realpods import container, container_id, hold_mib, read_cgroup, run_pod, status_of, wait_resized
from tests.harness import realhost
from tests.harness.cluster import ClusterState
from tests.harness.realnode import RealNodePool
from tests.nodesim.nodes import NodePool

POD = "cgroup-demo"


def _files(layout: realhost.CgroupLayout) -> list[str]:
    if layout is realhost.CgroupLayout.V2:
        return ["/sys/fs/cgroup/cpu.max", "/sys/fs/cgroup/cpu.weight"]
    return ["/sys/fs/cgroup/cpu/cpu.cfs_quota_us", "/sys/fs/cgroup/cpu/cpu.shares"]


def _show(kubectl: list[str], ns: str, layout: realhost.CgroupLayout) -> None:
    for path in _files(layout):
        argv = [*kubectl, "exec", "-n", ns, POD, "--", "cat", path]
        print(f"\n\033[2m$ kubectl exec -n {ns} {POD} -- cat {path}\033[0m", flush=True)
        out = subprocess.run(argv, capture_output=True, text=True, check=True, timeout=60).stdout
        print(f"    {out.strip()}")


def show_real_node(workdir: Path, kubectl: Path, api: client.ApiClient, ns: str, say: object) -> dict[str, object]:
    """The step; returns its figures for the summary (empty when the host cannot run a real node)."""
    tell = say if callable(say) else print
    gaps = realhost.missing()
    if gaps:
        tell("no real node on this host (it lacks " + "; ".join(gaps) + "): skipping the cgroup walk-through")
        return {}
    state = ClusterState.load(workdir)
    tell("starting a real node: kubelet v1.37.2 on containerd and runc, writing real cgroups")
    pool = RealNodePool(cluster=state, workdir=workdir / "realnode",
                        pools=(NodePool(name="real", count=1, instance_type="local.real"),))
    pool.start()
    try:
        node = next(iter(pool.nodes.values()))
        print(f"    node {node.name} Ready in {node.timings['start_s']:.1f}s (cgroup {pool.layout.value})")
        core = client.CoreV1Api(api)
        kc = [str(kubectl), f"--kubeconfig={state.kubeconfig}"]
        pod = run_pod(core, ns, POD, node.name, container(
            "app", hold_mib(0), requests={"cpu": "500m", "memory": "32Mi"}, limits={"cpu": "1", "memory": "64Mi"}))
        cid = container_id(pod, "app")
        pid = node.task_pid(cid)
        tell(f"a busybox container on the real node: CPU request 500m, limit 1; its process is host PID {pid}")
        _show(kc, ns, pool.layout)
        patch = {"spec": {"containers": [{"name": "app", "resources": {"requests": {"cpu": "800m"},
                                                                       "limits": {"cpu": "1500m"}}}]}}
        print(f"\n\033[2m$ kubectl patch pod -n {ns} {POD} --subresource resize --patch '{json.dumps(patch)}'\033[0m")
        subprocess.run([*kc, "patch", "pod", "-n", ns, POD, "--subresource", "resize", "--patch", json.dumps(patch)],
                       check=True, capture_output=True, timeout=60)
        t0 = time.monotonic()
        took = wait_resized(core, ns, POD, generation=2)
        _show(kc, ns, pool.layout)
        after_pod = core.read_namespaced_pod(POD, ns)
        after = read_cgroup(node, pool.layout, container_id(after_pod, "app"))
        st, pid_after = status_of(after_pod, "app"), node.task_pid(container_id(after_pod, "app"))
        same = "unchanged" if container_id(after_pod, "app") == cid else "CHANGED"
        tell(f"resized in place in {took:.2f}s: host PID {pid} -> {pid_after} (in the cgroup: "
             f"{pid_after in after.pids}), container ID {same}, restartCount {st.restart_count}")
        core.delete_namespaced_pod(POD, ns, grace_period_seconds=0)
        return {"real_node_start_s": round(node.timings["start_s"], 1), "resize_s": round(took, 2),
                "same_pid": pid_after == pid, "restarts": st.restart_count,
                "wall_s": round(time.monotonic() - t0, 2)}
    finally:
        pool.stop()
