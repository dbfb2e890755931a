"""`make demo` in fast mode, end to end, and its summary checked against the cluster's final state.

Runs the real demo script (its own detached cluster in .cluster/, as a user gets it), then reads the cluster
independently and compares: the nodes (real kubelets v1.37.2), the pods, the requests it reports before and
after, and the resize journal.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from kubernetes import client, config

from podtailor.units import parse_cpu_millicores, parse_memory_bytes
from tests.harness.realhost import missing as real_node_host_gaps
from tests.readme import block

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.cluster
WORKLOADS = ("checkout", "search", "cart", "payments", "ledger", "nightly-export", "thumbnailer", "frontend", "api",
             "cache", "notifications", "auth")


def _look_around(stdout: str) -> None:
    """The hints the demo printed are the README's block, and each runs as printed, in one shell."""
    lines = block("demo-look-around")
    printed = stdout[stdout.index("Look around"):].splitlines()[1:len(lines) + 1]
    assert [p.strip() for p in printed] == lines
    script = "set -e\n" + "".join(f"echo '@@ {i}'\n{line}\n" for i, line in enumerate(lines))
    done = subprocess.run(["bash", "-c", script], cwd=REPO, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    outputs = dict(zip(lines, done.stdout.split("@@ ")[1:], strict=True))
    vpas = outputs["kubectl get vpa -n demo"]
    assert all(f"\n{w} " in vpas for w in WORKLOADS), vpas
    rollouts = outputs["kubectl get resizerollouts"]
    assert "Completed" in rollouts and "POOL" in rollouts, rollouts
    # The describe is of pods the updater resized in place: podtailor's Event is on them.
    described = outputs["kubectl describe pods -n demo -l app=checkout --show-events=true"]
    assert "ResizeVerified" in described and "podtailor-updater" in described, described
    assert "batches" in outputs["podtailor-updater plan -n demo --pool-label podtailor.io/node-pool"].lower()


def test_the_demo_does_the_main_job_and_tells_the_truth() -> None:
    try:
        done = subprocess.run([sys.executable, "scripts/demo.py", "--fast"], cwd=REPO, capture_output=True,
                              text=True, timeout=900, check=False)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        assert "summary" in done.stdout and "make demo-down" in done.stdout
        # The real node's step: the CPU cgroup files read with kubectl exec before and after the resize, the same
        # process, no restart (on a host that cannot run a real node, the step says what is missing instead).
        if real_node_host_gaps():
            assert "no real node on this host" in done.stdout
        else:
            assert done.stdout.count("cgroup-demo -- cat /sys/fs/cgroup/cpu") == 4, done.stdout[:5000]
            assert "(in the cgroup: True), container ID unchanged, restartCount 0" in done.stdout, done.stdout[:5000]
        _look_around(done.stdout)
        summary = json.loads((REPO / ".cluster" / "demo-summary.json").read_text())
        api = config.new_client_from_config(config_file=str(REPO / ".cluster" / "admin.kubeconfig"))
        core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
        # The demo's nodes are real kubelets v1.37.2 (hollow nodes), and they ran every demo pod.
        nodes = core.list_node().items
        assert len(nodes) == 9 and {n.status.node_info.kubelet_version for n in nodes} == {"v1.37.2"}
        assert all(n.metadata.labels.get("type") == "hollow" for n in nodes)
        pods = [p for p in core.list_namespaced_pod("demo").items
                if p.status.phase == "Running" and not p.metadata.deletion_timestamp]
        assert summary["pods_after"] == len(pods)
        cpu = sum(parse_cpu_millicores(p.spec.containers[0].resources.requests["cpu"]) for p in pods) / 1000
        memory = sum(parse_memory_bytes(p.spec.containers[0].resources.requests["memory"]) for p in pods) / 2**30
        assert summary["cpu_cores_after"] == pytest.approx(cpu, abs=0.001)
        assert summary["memory_gib_after"] == pytest.approx(memory, abs=0.001)
        # The demo shows every path: online resizes, restarts for memory, and a replacement.
        assert summary["resized_in_place"] > 0 and summary["restarted"] > 0 and summary["replaced"] > 0
        assert summary["cpu_cores_after"] < summary["cpu_cores_before"]
        assert summary["monthly_cost_after"] < summary["monthly_cost_before"]
        # Every pod it counts as restarted really restarted, and nothing restarted that the journal did not plan.
        restarted = sum(1 for p in pods if sum(c.restart_count for c in p.status.container_statuses) > 0)
        assert restarted == summary["restarted"]
        rollouts = custom.list_cluster_custom_object("podtailor.io", "v1alpha1", "resizerollouts")["items"]
        assert rollouts and all(r["status"]["phase"] == "Completed" for r in rollouts)
        evicted = [e for r in rollouts for e in r["status"]["entries"] if e["action"] == "evict"]
        assert len(evicted) == summary["replaced"]
        # The replacements were admitted at the target by the webhook: at least the target's CPU request.
        for e in evicted:
            after = e["after"][0]["requests"]["cpuMillicores"]
            replacements = [p for p in pods if p.metadata.labels.get("app") == e["workloadName"]]
            assert all(parse_cpu_millicores(p.spec.containers[0].resources.requests["cpu"]) == after
                       for p in replacements)
    finally:
        subprocess.run([sys.executable, "-m", "tests.harness", "down"], cwd=REPO, capture_output=True, check=False)
