"""Benchmark: the disruption VPA 1.8.1's updater causes beside podtailor's, on real kubelets, in one run.

One local control plane with its audit log on, and two identical arenas in it, each a namespace with its own
pools of real kubelets v1.37.2 (hollow nodes: 4 small nodes of 2 CPU and 4 GiB, 2 large of 8 CPU and 16 GiB)
and the same six workloads (``WORKLOADS``): a decrease that fits in place, a target larger than a small node,
a memory change with ``resizePolicy: RestartContainer``, a PodDisruptionBudget that allows no eviction, a
single replica and a ``restartPolicy: Never`` Job. In the ``vpa`` arena VPA's admission controller and updater
run (built from its Go module; every VPA in ``InPlaceOrRecreate``); in the ``podtailor`` arena our webhook and
``podtailor-updater run`` with its default policy (no ResizePolicy object). Both start on pods at their
template values, older than podtailor's minimum pod age (5 min) as in a cluster that has been running; then the
same targets are written into every VPA's status at once, and each arena's pods are read every second until both
arenas have settled (or ``--minutes`` pass).

Counted per tool: from the audit log, by the tool's own users, its writes (evictions done and refused,
in-place resizes done and refused, everything else by kind); from the pod snapshots, pods created (the
replacements of evicted pods), container restarts, pods at, above or below their target at the end, and the
time of the last change to any pod after the targets were written.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from kubernetes import client, config

from podtailor.units import parse_cpu_millicores, parse_memory_bytes
from tests.benchmarks.disruption import PodTimeline, PodView, Writes, placement, read_writes
from tests.benchmarks.results import machine_facts, write_section
from tests.harness.cluster import LocalCluster, user_kubeconfig
from tests.harness.kubelets import HOLLOW_TOLERATION, KubeletPool
from tests.harness.process import Managed, free_port
from tests.harness.vpa import Vpa, vpa_version
from tests.nodesim.nodes import POOL_LABEL_KEYS, NodePool
from updater.policy.types import RolloutPolicy

ARENA_KEY = "bench.podtailor.io/arena"
POOL_KEY = POOL_LABEL_KEYS["podtailor"]
ARENAS = ("vpa", "podtailor")
USERS = {"vpa": ("vpa-updater", "vpa-admission-controller"), "podtailor": ("podtailor-updater", "podtailor-webhook")}
Gi, Mi = 2**30, 2**20
MIN_POD_AGE_S = RolloutPolicy().min_pod_age_s
AUDIT_POLICY = {"apiVersion": "audit.k8s.io/v1", "kind": "Policy", "omitStages": ["RequestReceived"],
                "rules": [{"level": "None", "verbs": ["get", "list", "watch"]},
                          {"level": "None", "resources": [{"group": "", "resources": ["nodes", "nodes/status"]}]},
                          {"level": "Metadata"}]}


@dataclass(frozen=True, slots=True, kw_only=True)
class Workload:
    name: str
    replicas: int
    requests: tuple[str, str]
    limits: tuple[str, str]
    target: tuple[str, str]
    note: str
    job: bool = False
    memory_policy: str = "NotRequired"
    pdb_min_available: int | None = None


WORKLOADS = (
    Workload(name="web", replicas=4, requests=("500m", "768Mi"), limits=("1", "1536Mi"), target=("250m", "384Mi"),
             note="decrease, fits in place"),
    Workload(name="big", replicas=2, requests=("500m", "512Mi"), limits=("1", "1Gi"), target=("3", "1536Mi"),
             note="target above a small node's 2 CPU"),
    Workload(name="cache", replicas=3, requests=("100m", "512Mi"), limits=("200m", "1Gi"), target=("150m", "768Mi"),
             memory_policy="RestartContainer", note="memory resizePolicy RestartContainer"),
    Workload(name="guarded", replicas=2, requests=("500m", "512Mi"), limits=("1", "1Gi"), target=("2500m", "1Gi"),
             pdb_min_available=2, note="PDB minAvailable 2, target above a small node"),
    Workload(name="single", replicas=1, requests=("200m", "256Mi"), limits=("400m", "512Mi"),
             target=("300m", "256Mi"), note="one replica, CPU up"),
    Workload(name="batch", replicas=2, requests=("200m", "256Mi"), limits=("400m", "512Mi"),
             target=("300m", "384Mi"), job=True, note="Job, restartPolicy Never"),
)


def pools(arena: str) -> list[NodePool]:
    extra = {ARENA_KEY: arena}
    return [NodePool(name=f"{arena}-small", count=4, cpu_millicores=2000, memory_bytes=4 * Gi, extra_labels=extra),
            NodePool(name=f"{arena}-large", count=2, cpu_millicores=8000, memory_bytes=16 * Gi, extra_labels=extra)]


def _template(arena: str, w: Workload) -> dict[str, Any]:
    """Pinned to the arena, preferring its small pool: what does not fit there lands on its large one."""
    affinity = {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [
            {"key": ARENA_KEY, "operator": "In", "values": [arena]}]}]},
        "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100, "preference": {"matchExpressions": [
            {"key": POOL_KEY, "operator": "In", "values": [f"{arena}-small"]}]}}]}}
    container = {"name": "app", "image": "registry.invalid/app:1",
                 "resources": {"requests": {"cpu": w.requests[0], "memory": w.requests[1]},
                               "limits": {"cpu": w.limits[0], "memory": w.limits[1]}},
                 "resizePolicy": [{"resourceName": "cpu", "restartPolicy": "NotRequired"},
                                  {"resourceName": "memory", "restartPolicy": w.memory_policy}]}
    spec = {"affinity": affinity, "tolerations": [HOLLOW_TOLERATION], "terminationGracePeriodSeconds": 1,
            "containers": [container], **({"restartPolicy": "Never"} if w.job else {})}
    return {"metadata": {"labels": {"app": w.name}}, "spec": spec}


def create_workloads(api: client.ApiClient, ns: str, arena: str) -> None:
    apps: Any = client.AppsV1Api(api)
    batch: Any = client.BatchV1Api(api)
    custom: Any = client.CustomObjectsApi(api)
    policy: Any = client.PolicyV1Api(api)
    for w in WORKLOADS:
        if w.job:
            batch.create_namespaced_job(ns, {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": w.name},
                                             "spec": {"parallelism": w.replicas, "completions": w.replicas,
                                                      "backoffLimit": 6, "template": _template(arena, w)}})
        else:
            apps.create_namespaced_deployment(ns, {
                "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": w.name},
                "spec": {"replicas": w.replicas, "selector": {"matchLabels": {"app": w.name}},
                         "template": _template(arena, w)}})
        if w.pdb_min_available is not None:
            policy.create_namespaced_pod_disruption_budget(ns, {
                "apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": w.name},
                "spec": {"minAvailable": w.pdb_min_available, "selector": {"matchLabels": {"app": w.name}}}})
        custom.create_namespaced_custom_object("autoscaling.k8s.io", "v1", ns, "verticalpodautoscalers", {
            "apiVersion": "autoscaling.k8s.io/v1", "kind": "VerticalPodAutoscaler", "metadata": {"name": w.name},
            "spec": {"targetRef": {"apiVersion": "batch/v1" if w.job else "apps/v1",
                                   "kind": "Job" if w.job else "Deployment", "name": w.name},
                     # Served by no running recommender: the benchmark writes the targets itself.
                     "updatePolicy": {"updateMode": "InPlaceOrRecreate"}, "recommenders": [{"name": "bench"}]}})


def _scaled(quantity: str, factor: float, cpu: bool) -> str:
    return f"{round(parse_cpu_millicores(quantity) * factor)}m" if cpu else str(
        round(parse_memory_bytes(quantity) * factor))


def write_targets(api: client.ApiClient, ns: str) -> None:
    custom: Any = client.CustomObjectsApi(api)
    for w in WORKLOADS:
        target = {"cpu": w.target[0], "memory": w.target[1]}
        bounds = {name: {"cpu": _scaled(w.target[0], f, True), "memory": _scaled(w.target[1], f, False)}
                  for name, f in (("lowerBound", 0.9), ("upperBound", 1.2))}
        obj = custom.get_namespaced_custom_object("autoscaling.k8s.io", "v1", ns, "verticalpodautoscalers", w.name)
        obj["status"] = {"recommendation": {"containerRecommendations": [{
            "containerName": "app", "target": target, "uncappedTarget": target, **bounds}]},
            "conditions": [{"type": "RecommendationProvided", "status": "True",
                            "lastTransitionTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}]}
        custom.replace_namespaced_custom_object_status("autoscaling.k8s.io", "v1", ns, "verticalpodautoscalers",
                                                       w.name, obj)


def snapshot(core: Any, ns: str) -> list[PodView]:
    views = []
    for pod in core.list_namespaced_pod(ns).items:
        if pod.metadata.deletion_timestamp:
            continue
        statuses = {s.name: s for s in pod.status.container_statuses or []}
        requests, restarts = [], 0
        for c in pod.spec.containers:
            st = statuses.get(c.name)
            res = (st.resources.requests if st is not None and st.resources is not None else None) or \
                c.resources.requests or {}
            requests.append((parse_cpu_millicores(res.get("cpu", "0")), parse_memory_bytes(res.get("memory", "0"))))
            restarts += st.restart_count if st is not None else 0
        running = pod.status.phase == "Running" and all(s.ready for s in statuses.values()) and bool(statuses)
        views.append(PodView(uid=pod.metadata.uid, name=pod.metadata.name, workload=pod.metadata.labels["app"],
                             running=running, requests=tuple(requests), restarts=restarts))
    return views


def start_podtailor(api: client.ApiClient, state: Any, workdir: Path, ns: str) -> list[Managed]:
    """Our webhook and updater for ``ns`` as a user runs them, with their defaults (no ResizePolicy object)."""
    hook_port, updater_port = free_port(), free_port()
    webhook = Managed(name="podtailor-webhook", log_path=workdir / "logs" / "podtailor-webhook.log", argv=[
        sys.executable, "-m", "updater", "webhook",
        "--kubeconfig", str(user_kubeconfig(state, "podtailor-webhook", workdir)),
        "--listen", f"127.0.0.1:{hook_port}", "--webhook-url", f"https://127.0.0.1:{hook_port}/mutate",
        "--webhook-config-name", "bench-podtailor", "--only-namespace", ns, "--log-level", "info"])
    updater_kc = user_kubeconfig(state, "podtailor-updater", workdir)
    updater = Managed(name="podtailor-updater", log_path=workdir / "logs" / "podtailor-updater.log", argv=[
        sys.executable, "-m", "updater", "run", "--kubeconfig", str(updater_kc), "-n", ns,
        "--listen", f"127.0.0.1:{updater_port}", "--no-leader-elect", "--log-level", "info"])
    webhook.start()
    _wait(partial(_webhook_called, api, ns, f"https://127.0.0.1:{hook_port}/metrics"), 60)
    updater.start()
    return [webhook, updater]


def _admissions(url: str) -> float | None:
    import ssl

    try:
        with urllib.request.urlopen(url, context=ssl._create_unverified_context(), timeout=2) as resp:
            lines = resp.read().decode().splitlines()
    except OSError:
        return None
    return sum(float(x.split()[-1]) for x in lines if x.startswith("podtailor_webhook_admissions_total"))


def _webhook_called(api: client.ApiClient, ns: str, metrics_url: str) -> bool:
    """The API server loads a new webhook configuration asynchronously: a dry-run pod must reach the webhook."""
    before = _admissions(metrics_url)
    if before is None:
        return False
    core: Any = client.CoreV1Api(api)
    core.create_namespaced_pod(ns, {"metadata": {"generateName": "probe-"}, "spec": {"containers": [
        {"name": "c", "image": "registry.invalid/probe:1"}]}}, dry_run="All")
    after = _admissions(metrics_url)
    return after is not None and after > before


def _wait(probe: Callable[[], bool], timeout_s: float, interval_s: float = 0.5) -> None:
    deadline = time.monotonic() + timeout_s
    while not probe():
        if time.monotonic() > deadline:
            raise TimeoutError("benchmark step timed out")
        time.sleep(interval_s)


def _all_running(core: Any, ns: str) -> bool:
    pods = snapshot(core, ns)
    return len(pods) == sum(w.replicas for w in WORKLOADS) and all(p.running for p in pods)


def _all_older_than(core: Any, namespaces: list[str], age_s: float) -> bool:
    now = time.time()
    return all(now - p.metadata.creation_timestamp.timestamp() >= age_s
               for ns in namespaces for p in core.list_namespaced_pod(ns).items)


def _targets() -> dict[str, tuple[int, int]]:
    return {w.name: (parse_cpu_millicores(w.target[0]), parse_memory_bytes(w.target[1])) for w in WORKLOADS}


@dataclass
class Arena:
    name: str
    ns: str
    timeline: PodTimeline
    done_s: float | None = None
    """Seconds after the targets when the arena was seen settled (None: not within the run)."""


def _settled(arena: Arena, now_s: float, quiet_s: float) -> bool:
    last = arena.timeline.last_change_s or 0.0
    return now_s - arena.timeline.t0_s - last >= quiet_s


def _observe(core: Any, arenas: list[Arena], deadline_s: float, quiet_s: Mapping[str, float]) -> None:
    while time.time() < deadline_s and any(a.done_s is None for a in arenas):
        now = time.time()
        for a in arenas:
            a.timeline.add(now, snapshot(core, a.ns))
            if a.done_s is None and _settled(a, now, quiet_s[a.name]):
                a.done_s = now - a.timeline.t0_s
        time.sleep(max(0.0, 1.0 - (time.time() - now)))


def _per_workload(writes: Writes, timeline: PodTimeline) -> dict[str, dict[str, int]]:
    """Pods seen, container restarts, resizes and evictions done, per workload."""
    rows = {w.name: {"pods": 0, "restarts": 0, "resizes": 0, "evictions": 0, "at_target": 0, "running": 0}
            for w in WORKLOADS}
    targets = _targets()
    for view in timeline.latest:
        rows[view.workload]["running"] += view.running
        rows[view.workload]["at_target"] += placement([view], targets).at_target
    workload_of = {}
    for uid, view in timeline.seen.items():
        workload_of[view.name] = view.workload
        rows[view.workload]["pods"] += 1
        rows[view.workload]["restarts"] += timeline.max_restarts[uid]
    for (kind, name), n in writes.done_by_object.items():
        if kind in ("resize", "eviction") and name in workload_of:
            rows[workload_of[name]]["resizes" if kind == "resize" else "evictions"] += n
    return rows


def run(minutes: float = 45.0) -> tuple[str, dict[str, Any]]:
    with tempfile.TemporaryDirectory(prefix="bench-vpa-") as tmp:
        work = Path(tmp)
        cluster = LocalCluster(work / "c", audit_policy=AUDIT_POLICY)
        state = cluster.start()
        api = config.new_client_from_config(config_file=state.kubeconfig)  # type: ignore[no-untyped-call]
        core: Any = client.CoreV1Api(api)
        kubelets = KubeletPool(cluster=state, workdir=work / "k", pools=[p for a in ARENAS for p in pools(a)])
        vpa: Vpa | None = None
        ours: list[Managed] = []
        try:
            kubelets.start()
            _install_crds(api, Path(__file__).resolve().parents[2] / "manifests" / "crds")
            arenas = []
            for arena in ARENAS:
                ns = f"bench-{arena}"
                core.create_namespace({"metadata": {"name": ns}})
                _wait(partial(_has_service_account, core, ns), 30)
                create_workloads(api, ns, arena)
                arenas.append(Arena(name=arena, ns=ns, timeline=PodTimeline(t0_s=0.0)))
            for a in arenas:
                _wait(partial(_all_running, core, a.ns), 180)
            # As in a cluster that has been running: every pod older than podtailor's minimum age (5 minutes) when
            # the targets appear. VPA has no such wait for pods outside their bounds (its 12 h applies inside).
            _wait(partial(_all_older_than, core, [a.ns for a in arenas], MIN_POD_AGE_S + 5), 600, 5)
            vpa = Vpa(cluster=state, workdir=work / "vpa", namespace="bench-vpa")
            vpa.start_admission_controller()
            vpa.start_updater()
            ours = start_podtailor(api, state, work, "bench-podtailor")
            t0 = time.time()
            for a in arenas:
                a.timeline.t0_s = t0
                write_targets(api, a.ns)
            # VPA: a loop a minute, evictions after a 5-minute Deferred; podtailor: bakes of up to 10 minutes.
            _observe(core, arenas, t0 + minutes * 60, {"vpa": 420.0, "podtailor": 720.0})
            results = {a.name: _summarise(a, cluster.audit_log, t0) for a in arenas}
        finally:
            for proc in ours:
                proc.stop()
            if vpa is not None:
                vpa.stop()
            kubelets.stop()
            cluster.stop()
    return _table(results, minutes), results


def _install_crds(api: client.ApiClient, directory: Path) -> None:
    """Our CRDs, the VPA one included, as the tests' session installs them; waits until each is served."""
    import yaml

    ext: Any = client.ApiextensionsV1Api(api)
    names = []
    for path in sorted(directory.glob("*.yaml")):
        body = yaml.safe_load(path.read_text())
        ext.create_custom_resource_definition(body)
        names.append(body["metadata"]["name"])
    for name in names:
        _wait(partial(_established, ext, name), 30, 0.1)


def _established(ext: Any, name: str) -> bool:
    conditions = ext.read_custom_resource_definition(name).status.conditions or []
    return any(c.type == "Established" and c.status == "True" for c in conditions)


def _has_service_account(core: Any, ns: str) -> bool:
    return bool(core.list_namespaced_service_account(ns).items)


def _summarise(a: Arena, audit_log: Path, t0: float) -> dict[str, Any]:
    writes: Writes = read_writes(audit_log, USERS[a.name], since_s=t0)
    final = placement(a.timeline.latest, _targets())
    return {"evictions": writes.done("eviction"), "evictions_refused": writes.refused("eviction"),
            "resizes": writes.done("resize"), "resizes_refused": writes.refused("resize"),
            "created": a.timeline.created, "restarts": a.timeline.restarts,
            "at": final.at_target, "above": final.above, "below": final.below, "not_running": final.not_running,
            "last_change_s": a.timeline.last_change_s, "settled_s": a.done_s,
            "writes_total": writes.total, "writes": dict(sorted(writes.by_kind.items())),
            "per_workload": _per_workload(writes, a.timeline)}


def _minutes(s: float | None) -> str:
    return "-" if s is None else f"{s / 60:.1f} min"


def _table(results: Mapping[str, Mapping[str, Any]], minutes: float) -> str:
    v, p = results["vpa"], results["podtailor"]
    rows: list[tuple[str, Callable[[Mapping[str, Any]], str]]] = [
        ("evictions (done / refused by the PDB)", lambda r: f"{r['evictions']} / {r['evictions_refused']}"),
        ("pods created to replace evicted ones", lambda r: str(r["created"])),
        ("container restarts", lambda r: str(r["restarts"])),
        ("in-place resizes (done / refused)", lambda r: f"{r['resizes']} / {r['resizes_refused']}"),
        ("pods at / above / below target at the end", lambda r: f"{r['at']} / {r['above']} / {r['below']}"),
        ("pods not running at the end", lambda r: str(r["not_running"])),
        ("time to converge (last pod change after the targets)", lambda r: _minutes(r["last_change_s"])),
        ("API writes by the tool (all kinds)", lambda r: str(r["writes_total"])),
        ("... without leases (VPA's admission controller renews its status Lease every 10 s)",
         lambda r: str(r["writes_total"] - r["writes"].get("lease", 0))),
        ("... of which", lambda r: ", ".join(f"{k} {n}" for k, n in r["writes"].items())),
    ]
    lines = [machine_facts(), "",
             f"One run, one control plane (audit log on), two identical arenas of real kubelets v1.37.2 (4 x 2 CPU, "
             f"2 x 8 CPU each), the same {sum(w.replicas for w in WORKLOADS)} pods in {len(WORKLOADS)} workloads "
             f"and the same targets, written at once; each arena read every second until settled (no pod change "
             f"for 7 min for VPA, 12 min for podtailor, longer than its longest bake) or {minutes:g} min.", "",
             f"| | VPA {vpa_version()} updater + admission controller, `InPlaceOrRecreate` | "
             "podtailor updater + webhook, default policy |", "|---|---|---|"]
    lines += [f"| {name} | {fmt(v)} | {fmt(p)} |" for name, fmt in rows]
    lines += ["", "Per workload, VPA / podtailor:", "",
              "| workload | what | pods seen | in-place resizes | evictions | container restarts | at target, end |",
              "|---|---|---|---|---|---|---|"]
    for w in WORKLOADS:
        pv, pp = v["per_workload"][w.name], p["per_workload"][w.name]
        cells = " | ".join(f"{pv[k]} / {pp[k]}" for k in ("pods", "resizes", "evictions", "restarts"))
        at = f"{pv['at_target']} of {pv['running']} / {pp['at_target']} of {pp['running']}"
        lines.append(f"| {w.name} | {w.note} | {cells} | {at} |")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--minutes", type=float, default=45.0, help="give up after this long (default: 45)")
    parser.add_argument("--json", type=Path, help="also write the raw figures here")
    args = parser.parse_args(argv)
    body, results = run(minutes=args.minutes)
    write_section("vpa-disruption", "Disruption side by side: VPA 1.8.1 and podtailor on real kubelets", body)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2, default=str) + "\n")
    print(body)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
