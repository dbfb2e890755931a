"""``report -o patches`` end to end: the patches applied to the real cluster leave the updater nothing to resize.

Real API server with simulated nodes and pods, real Prometheus with backfilled constant usage (the workloads, usage
and helpers of ``test_report_real``). Four Deployments with history (one with a native sidecar and a plain init
container that ran for its pod's first three hours, one with a RestartContainer policy, one Guaranteed, one with
pod-level resources) and one without (no pods, so no history: skipped). The report runs once as JSON (the
recommendation the VPAs then carry) and once with ``-o patches``; docs/patches.md's two marked blocks run verbatim:
the kustomize one renders an overlay over the Deployments' manifests, the kubectl one patches the live Deployments.
After their rollouts, the updater's planner, with a change threshold of 0 so that any difference is a resize, skips
every pod.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from podtailor.units import parse_cpu_millicores, parse_memory_bytes
from tests.conftest import SimFactory
from tests.harness.cluster import kubectl_bin
from tests.harness.prometheus import LocalPrometheus
from tests.integration.test_report_real import (
    POOL_KEY,
    SIDECAR_USAGE,
    USAGE,
    WORKLOADS,
    container,
    deployment,
    planner_decisions,
    run_report,
    write_vpas,
)
from tests.nodesim.nodes import NodePool
from tests.nodesim.openmetrics import ExportContainer, write_openmetrics
from tests.nodesim.usage import Constant
from tests.readme import block
from tests.waiting import eventually
from updater.policy.types import Action

pytestmark = [pytest.mark.cluster, pytest.mark.prometheus]
Gi = 2**30
Mi = 2**20
NAMES = ("online", "restart", "guaranteed", "podlevel")
"""The Deployments with history (``test_report_real``'s, each with its usage there, and ``podlevel``)."""
POD_LEVEL = {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "2", "memory": "2Gi"}}
"""``podlevel``'s pod-level resources: its one container (500m/256Mi, limits 1 core/512Mi) uses 0.2 cores and
300Mi, as ``online``'s app does."""
SETUP_USAGE = (0.3, 100 * Mi)
"""``online``'s plain init container ``setup``: what it used in the three hours it ran (180 one-minute samples,
more than the 100 krr-simple wants)."""


def manifest(name: str, pool: str) -> dict[str, Any]:
    if name != "podlevel":
        return deployment(name, pool, *WORKLOADS[name])
    m = deployment(name, pool, [container("app", {"cpu": "500m", "memory": "256Mi"}, {"cpu": "1", "memory": "512Mi"})])
    m["spec"]["template"]["spec"]["resources"] = POD_LEVEL
    return m


def backfill(prom: LocalPrometheus, tmp: Path, core: client.CoreV1Api, ns: str, end_s: float) -> None:
    """Each pod's app (and online's sidecar) over the whole day; online's init container for three hours a day
    ago, as a finished init container leaves its series (``ExportContainer.init``, ``ran_s``)."""
    rows = []
    for pod in core.list_namespaced_pod(ns).items:
        app, rs = pod.metadata.labels["app"], pod.metadata.owner_references[0].name
        usage = [("app", USAGE.get(app, USAGE["online"]), False)]
        if app == "online":
            usage += [("proxy", SIDECAR_USAGE, False), ("setup", SETUP_USAGE, True)]
        for name, (cpu, memory), init in usage:
            rows.append(ExportContainer(namespace=ns, pod=pod.metadata.name, container=name, node=pod.spec.node_name,
                                        model=Constant(cpu_cores=cpu, memory_bytes=memory), pod_uid=pod.metadata.uid,
                                        owner_kind="ReplicaSet", owner_name=rs, replicaset_owner_name=app, init=init,
                                        ran_s=(end_s - 86400.0, end_s - 86400.0 + 3 * 3600.0) if init else None))
    path = tmp / "usage.om"
    with path.open("w") as out:
        write_openmetrics(out, rows, now_s=end_s, days=1, step_s=60)
    prom.backfill(path)


def amounts(resources: dict[str, Any]) -> dict[str, dict[str, int]]:
    """{"requests": {"cpu": millicores, "memory": bytes}, "limits": ...} of an API resources map."""
    parse = {"cpu": parse_cpu_millicores, "memory": parse_memory_bytes}
    return {kind: {name: parse[name](v) for name, v in (resources.get(kind) or {}).items()}
            for kind in ("requests", "limits") if resources.get(kind)}


def planned(doc: dict[str, Any]) -> dict[tuple[str, str], dict[str, dict[str, int]]]:
    """(workload, container) -> the report's planned requests and limits, for the containers with a target."""
    keys = {"cpuMillicores": "cpu", "memoryBytes": "memory"}
    return {(w["name"], c["name"]): {kind: {keys[k]: v for k, v in c["planned"][kind].items() if v is not None}
                                     for kind in ("requests", "limits")}
            for w in doc["workloads"] for c in w["containers"] if c["recommendation"]}


def without_unrecommended_limits(want: dict[str, dict[str, int]], rec: dict[str, Any]) -> dict[str, dict[str, int]]:
    """``want`` with only the limits the recommendation sets (the patch writes no other)."""
    keys = {"cpu": "cpuMillicores", "memory": "memoryBytes"}
    limits = {k: v for k, v in want["limits"].items() if rec["limits"][keys[k]] is not None}
    return {"requests": want["requests"], **({"limits": limits} if limits else {})}


def merged(base: dict[str, dict[str, int]], patch: dict[str, dict[str, int]]) -> dict[str, dict[str, int]]:
    return {kind: {**base.get(kind, {}), **patch.get(kind, {})} for kind in ("requests", "limits")
            if base.get(kind) or patch.get(kind)}


def sh(line: str, cwd: Path, env: dict[str, str]) -> str:
    done = subprocess.run(["bash", "-c", line], cwd=cwd, env=env, capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 0, f"docs/patches.md command failed ({done.returncode}): {line}\n{done.stderr[-3000:]}"
    return done.stdout


def pod_containers(spec: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in [*(spec.get("initContainers") or []), *spec["containers"]]}


def rolled_out(core: client.CoreV1Api, ns: str, name: str, want: dict[str, dict[str, dict[str, int]]],
               pod_level: dict[str, dict[str, int]] | None = None) -> bool:
    """One running, ready, not terminating pod of ``name``, and every pod of it at the wanted values (and, where
    given, at the wanted pod-level resources)."""
    pods = core.list_namespaced_pod(ns, label_selector=f"app={name}").items
    live = [p for p in pods if not p.metadata.deletion_timestamp]
    ready = [p for p in live if p.status.phase == "Running" and p.status.container_statuses
             and all(c.ready for c in p.status.container_statuses)]
    if len(pods) != 1 or len(ready) != 1:
        return False
    spec = client.ApiClient().sanitize_for_serialization(ready[0].spec)
    have = pod_containers(spec)
    if pod_level is not None and amounts(spec.get("resources") or {}) != pod_level:
        return False
    return all(amounts(have[c].get("resources") or {}) == values for c, values in want.items())


def test_patches_applied_leave_the_updater_nothing_to_resize(
    api: client.ApiClient, cluster: Any, crds: list[str], namespace: str, prometheus: LocalPrometheus,
    make_sim: SimFactory, tmp_path: Path,
) -> None:
    ns, core, apps = namespace, client.CoreV1Api(api), client.AppsV1Api(api)
    pool = f"{ns[-6:]}-a"
    make_sim(NodePool(name=pool, count=1, cpu_millicores=4000, memory_bytes=8 * Gi), tick_s=0.5)
    manifests = [manifest(name, pool) for name in NAMES]
    for m in manifests:
        apps.create_namespaced_deployment(ns, m)
    eventually("all pods running", lambda: sum(p.status.phase == "Running" and bool(p.status.container_statuses)
                                               for p in core.list_namespaced_pod(ns).items) == len(NAMES),
               timeout_s=60)
    backfill(prometheus, tmp_path, core, ns, time.time() - 180)
    apps.create_namespaced_deployment(ns, deployment("idle", pool, WORKLOADS["online"][0], replicas=0))

    report = run_report(cluster, prometheus.url, "-n", ns, "--strategy", "krr-simple", "-o", "json")
    assert report.returncode == 0, report.stderr
    doc = yaml.safe_load(report.stdout)
    want = planned(doc)
    assert {w for w, _ in want} == set(NAMES) and {("online", "proxy"), ("online", "setup")} <= set(want)

    out = tmp_path / "overlay" / "podtailor"
    done = run_report(cluster, prometheus.url, "-n", ns, "--strategy", "krr-simple", "-o", "patches",
                      "--output-dir", str(out))
    assert done.returncode == 0, done.stderr
    assert (done.stdout, f"wrote 4 patch files to {out}") == ("", done.stderr.splitlines()[0])
    assert "skipped 1 workload without a patch: 1 no usage history" in done.stderr
    assert sorted(p.name for p in out.iterdir()) == [f"{ns}_deployment_{n}.yaml" for n in sorted(NAMES)]

    # The patch files carry the report's planned amounts exactly, limits only where the recommendation sets one.
    recs = {(w["name"], c["name"]): c["recommendation"] for w in doc["workloads"] for c in w["containers"]}
    expected = {key: without_unrecommended_limits(v, recs[key]) for key, v in want.items()}
    for name in NAMES:
        patch = yaml.safe_load((out / f"{ns}_deployment_{name}.yaml").read_text())
        assert patch["metadata"] == {"name": name, "namespace": ns}
        entries = pod_containers(patch["spec"]["template"]["spec"])
        assert {c: amounts(e["resources"]) for c, e in entries.items()} == {
            c: v for (w, c), v in expected.items() if w == name}
        assert ("resources" in patch["spec"]["template"]["spec"]) == (name == "podlevel")
    # The pod-level requests follow the container's: 1 core x (its planned request / 500m), rounded up, and
    # 1Gi x 345Mi / 256Mi = 1380Mi exactly; the pod-level limits are left alone (not in the patch).
    pod_patch = yaml.safe_load((out / f"{ns}_deployment_podlevel.yaml").read_text())["spec"]["template"]["spec"]
    app_cpu = want[("podlevel", "app")]["requests"]["cpu"]
    pod_level = amounts(pod_patch["resources"])
    assert pod_level == {"requests": {"cpu": -(-1000 * app_cpu // 500), "memory": 1380 * Mi}}, pod_patch

    # Before: with the report's targets in VPAs, the planner resizes a pod of every workload.
    write_vpas(api, ns, {"workloads": [w for w in doc["workloads"] if w["name"] in NAMES]})
    before = planner_decisions(api, ns, change_threshold=0.0)
    # podlevel's change waits for its node to declare pod-level resize (the simulated nodes declare nothing);
    # the others are resized. Either way, nothing is within bounds before the patches.
    assert sorted(d.workload_name for d in before if d.action != Action.SKIP) == sorted(set(NAMES) - {"podlevel"})
    assert all(d.reason.value != "within-bounds" for d in before), before

    env = {"HOME": os.environ.get("HOME", "/root"), "PATH": f"{kubectl_bin().parent}:{os.environ['PATH']}",
           "KUBECONFIG": cluster.kubeconfig}
    # Every container after its patch: the manifest's amounts with the patch's merged in, per requests and limits
    # (strategic merge merges the resources maps); containers without an entry (setup) keep theirs.
    final = {(m["metadata"]["name"], c): merged(amounts(e["resources"]), expected.get((m["metadata"]["name"], c), {}))
             for m in manifests for c, e in pod_containers(m["spec"]["template"]["spec"]).items()}
    # kustomize: an overlay over the Deployments' own manifests renders them at those values, the rest kept.
    (tmp_path / "base").mkdir()
    (tmp_path / "base" / "deployments.yaml").write_text(yaml.safe_dump_all(
        [{**m, "metadata": {**m["metadata"], "namespace": ns}} for m in manifests]))
    (tmp_path / "base" / "kustomization.yaml").write_text("resources:\n- deployments.yaml\n")
    rendered = [sh(line, tmp_path, env) for line in block("patches-kustomize")][-1]
    by_name = {d["metadata"]["name"]: d for d in yaml.safe_load_all(rendered)}
    assert set(by_name) == set(NAMES)
    for m in manifests:
        name = m["metadata"]["name"]
        have = pod_containers(by_name[name]["spec"]["template"]["spec"])
        base = pod_containers(m["spec"]["template"]["spec"])
        assert {c: amounts(e["resources"]) for c, e in have.items()} == {c: final[(name, c)] for c in base}
        rendered_pod_level = amounts(by_name[name]["spec"]["template"]["spec"].get("resources") or {})
        assert rendered_pod_level == (merged(amounts(POD_LEVEL), pod_level) if name == "podlevel" else {})
        assert {c: {k: v for k, v in e.items() if k != "resources"} for c, e in have.items()} == {
            c: {k: v for k, v in e.items() if k != "resources"} for c, e in base.items()}

    # kubectl: the live Deployments patched; their new pods come up at the same values.
    for line in block("patches-kubectl"):
        sh(line, tmp_path, env)
    for name in NAMES:
        values = {c: v for (w, c), v in final.items() if w == name}
        level = merged(amounts(POD_LEVEL), pod_level) if name == "podlevel" else None
        eventually(f"{name} rolled out at the planned values",
                   lambda n=name, v=values, lv=level: rolled_out(core, ns, n, v, lv), timeout_s=90)

    after = planner_decisions(api, ns, change_threshold=0.0)
    assert sorted(d.workload_name for d in after) == sorted(NAMES)
    assert all(d.action == Action.SKIP and d.reason.value == "within-bounds" for d in after), [
        (d.workload_name, d.action.value, d.reason.value, d.message) for d in after]

    # The same through the command: `podtailor-updater plan` under a policy for this namespace that would plan
    # a fresh pod and any difference at all (minPodAge 0s, changeThreshold 0) resizes none of them.
    custom, policy = client.CustomObjectsApi(api), f"{ns}-patches"[:63]
    custom.create_cluster_custom_object("podtailor.io", "v1alpha1", "resizepolicies", {
        "apiVersion": "podtailor.io/v1alpha1", "kind": "ResizePolicy", "metadata": {"name": policy},
        "spec": {"namespaces": [ns], "minPodAge": "0s", "changeThreshold": 0}})
    try:
        out = subprocess.run([sys.executable, "-m", "updater", "plan", "--kubeconfig", cluster.kubeconfig, "-n", ns,
                              "--pool-label", POOL_KEY, "-o", "json"], capture_output=True, text=True, timeout=120,
                             check=False)
    finally:
        custom.delete_cluster_custom_object("podtailor.io", "v1alpha1", "resizepolicies", policy)
    assert out.returncode == 0, out.stderr
    [mine] = [p for p in json.loads(out.stdout)["plans"] if p["policy"] == policy]
    assert sorted(d["workload"].split("/")[1] for d in mine["decisions"]) == sorted(NAMES)
    assert all(d["action"] == "skip" and d["reason"] == "within-bounds" for d in mine["decisions"]), mine
    assert mine["batches"] == []

