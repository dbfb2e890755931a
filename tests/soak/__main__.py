"""Soak: recommender and updater in-process for minutes over ~300 simulated pods, with faults, then an audit.

Owns one long run on a private local cluster (``tests.harness``) and node simulator on a fast clock: three
pools of nodes, Deployments with VPAs (seeded targets, then the real ``RecommenderEngine`` reading the real
Prometheus), one ResizePolicy, the real ``Executor`` every second. Faults on a schedule: memory usage grown
past the limit on a few pods (OOM), a node's kubelet lost for a while (``set_heartbeat``), Prometheus stopped
and started, targets moved up and down. At the end the audit compares every journal entry with the pods:
the last settled entry of each live pod (same uid) holds its "after" values (Verified) or "before" values
(Reverted) in spec and status, and each pod's generation equals 1 + the resizes the journal says were sent.
Exit 0 when the audit passes, 1 otherwise; the summary is printed as JSON. ``--seeds N`` runs N seeds one after
another (from ``--seed``), each on a fresh cluster, and exits 0 only when all N pass. A seed's temp dir (its
cluster's and Prometheus's data) is removed when its audit passes and kept, with its path printed, otherwise.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client, config
from prometheus_client import CollectorRegistry

from podtailor.units import parse_cpu_millicores, parse_memory_bytes
from recommender.engine import EngineConfig, RecommenderEngine
from recommender.kube.cluster import KubeAdapter
from recommender.metrics import RecommenderMetrics
from recommender.model.registry import get_strategy
from recommender.sources.config import PrometheusConfig
from recommender.sources.prometheus import PrometheusSource
from tests.drills._rollout_scenario import sent_exactly
from tests.harness.cluster import REPO_ROOT, LocalCluster
from tests.harness.prometheus import LocalPrometheus
from tests.nodesim.kubelet import NodeSimulator, SimConfig
from tests.nodesim.nodes import POOL_LABEL_KEYS, NodePool
from tests.nodesim.usage import Constant
from updater.kube.snapshot import ClusterReader
from updater.kube.writes import EventRecorder, Evictor, PodResizer, RolloutStore, TemplatePatcher
from updater.policy.planner import plan
from updater.rollout.act.executor import Executor
from updater.rollout.act.grouping import group_by_policy
from updater.rollout.machine.journal import TERMINAL, ContainerValues, EntryState, Phase

NS = "soak"
POOL_KEY = POOL_LABEL_KEYS["podtailor"]
Mi = 2**20


def _install_crds(api: client.ApiClient) -> None:
    ext = client.ApiextensionsV1Api(api)
    for path in sorted((REPO_ROOT / "manifests" / "crds").glob("*.yaml")):
        body = yaml.safe_load(path.read_text())
        ext.create_custom_resource_definition(body)
        name = body["metadata"]["name"]
        deadline = time.monotonic() + 30
        while not any(c.type == "Established" and c.status == "True"
                      for c in ext.read_custom_resource_definition(name).status.conditions or []):
            if time.monotonic() > deadline:
                raise TimeoutError(name)
            time.sleep(0.2)


def _workloads(api: client.ApiClient, pools: list[str], per_pool: int, replicas: int) -> list[str]:
    apps, custom = client.AppsV1Api(api), client.CustomObjectsApi(api)
    names = []
    for pool in pools:
        for i in range(per_pool):
            name = f"{pool}-w{i}"
            names.append(name)
            usage = json.dumps({"kind": "constant", "cpu_cores": 0.1, "memory_bytes": 150 * Mi})
            apps.create_namespaced_deployment(NS, {"apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": name}, "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                "template": {"metadata": {"labels": {"app": name},
                                          "annotations": {"nodesim.podtailor.io/usage": usage}},
                             "spec": {"nodeSelector": {POOL_KEY: pool}, "terminationGracePeriodSeconds": 1,
                                      "containers": [{"name": "app", "image": "registry.invalid/app:1",
                                                      "resources": {"requests": {"cpu": "500m", "memory": "256Mi"},
                                                                    "limits": {"cpu": "1", "memory": "512Mi"}}}]}}}})
            custom.create_namespaced_custom_object("autoscaling.k8s.io", "v1", NS, "verticalpodautoscalers", {
                "apiVersion": "autoscaling.k8s.io/v1", "kind": "VerticalPodAutoscaler", "metadata": {"name": name},
                "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
                         "updatePolicy": {"updateMode": "InPlaceOrRecreate"}, "recommenders": [{"name": "podtailor"}],
                         "resourcePolicy": {"containerPolicies": [{
                             "containerName": "app", "minAllowed": {"cpu": "100m", "memory": "128Mi"},
                             "maxAllowed": {"cpu": "2", "memory": "1Gi"}}]}}})
    return names


def _set_target(api: client.ApiClient, name: str, cpu: str, memory: str) -> None:
    custom = client.CustomObjectsApi(api)
    obj = custom.get_namespaced_custom_object("autoscaling.k8s.io", "v1", NS, "verticalpodautoscalers", name)
    t = {"cpu": cpu, "memory": memory}
    obj["status"] = {"recommendation": {"containerRecommendations": [{
        "containerName": "app", "target": t, "lowerBound": t, "upperBound": t, "uncappedTarget": t}]},
        "conditions": [{"type": "RecommendationProvided", "status": "True",
                        "lastTransitionTime": "2026-01-01T00:00:00Z"}]}
    custom.replace_namespaced_custom_object_status("autoscaling.k8s.io", "v1", NS, "verticalpodautoscalers", name, obj)


def _values(c: ContainerValues) -> tuple[Any, ...]:
    return (c.requests.cpu_millicores, c.requests.memory_bytes, c.limits.cpu_millicores, c.limits.memory_bytes)


def _pod_values(res: Any) -> tuple[Any, ...]:
    req, lim = dict(res.requests or {}), dict(res.limits or {})
    return (parse_cpu_millicores(req["cpu"]), parse_memory_bytes(req["memory"]),
            parse_cpu_millicores(lim["cpu"]), parse_memory_bytes(lim["memory"]))


def _explain(api: client.ApiClient, r: Any, pods: dict[str, Any]) -> list[str]:
    """Why a rollout is still open: its batches, and each unsettled entry's pod as the API server has it."""
    out = [f"  {r.name}: batch {r.current_batch} message {r.message!r} batches "
           + ", ".join(f"{b.index}:{b.phase.value}" for b in r.batches)]
    nodes = {n.metadata.name: n for n in client.CoreV1Api(api).list_node().items}
    for e in r.entries:
        if e.state in (EntryState.VERIFIED, EntryState.SKIPPED, EntryState.GONE, EntryState.REVERTED,
                       EntryState.NOT_RESTORED, EntryState.INFEASIBLE, EntryState.EVICTED) or e.batch > r.current_batch:
            continue
        pod = pods.get(e.uid)
        line = f"  {e.key} batch {e.batch} {e.state.value} gen {e.generation} applied_s {e.applied_s} {e.message!r}"
        if pod is None:
            out.append(line + " pod: gone")
            continue
        st = pod.status
        conds = [(c.type, c.status, c.reason) for c in st.conditions or []]
        cs = st.container_statuses[0] if st.container_statuses else None
        node = nodes.get(pod.spec.node_name)
        ready_node = [c.status for c in (node.status.conditions or []) if c.type == "Ready"] if node else None
        out.append(line + f" pod gen {pod.metadata.generation} observed {st.observed_generation} phase {st.phase}"
                   f" conds {conds} spec {_pod_values(pod.spec.containers[0].resources)}"
                   f" status {_pod_values(cs.resources) if cs and cs.resources else None}"
                   f" restarts {cs.restart_count if cs else None} ready {cs.ready if cs else None}"
                   f" state {cs.state if cs else None} last {cs.last_state if cs else None}"
                   f" node {pod.spec.node_name} ready {ready_node} taints {node.spec.taints if node else None}")
    return out


def audit(api: client.ApiClient, store: RolloutStore) -> tuple[list[str], dict[str, Any]]:
    rollouts = sorted(store.list(), key=lambda r: r.name)
    pods = {p.metadata.uid: p for p in client.CoreV1Api(api).list_namespaced_pod(NS).items
            if not p.metadata.deletion_timestamp}
    problems: list[str] = []
    sent: Counter[str] = Counter()
    last: dict[str, Any] = {}
    for r in rollouts:
        if r.phase not in TERMINAL and r.phase != Phase.HALTED:
            problems.append(f"{r.name} still {r.phase.value}")
            problems += _explain(api, r, pods)
        for e in r.entries:
            if e.action != "resize":
                continue
            n = sent_exactly(e.state, e.generation)
            if n is None:
                problems.append(f"{r.name}: {e.key} not settled ({e.state.value})")
                continue
            sent[e.uid] += n
            if n:
                last[e.uid] = e
    checked = 0
    for uid, e in last.items():
        pod = pods.get(uid)
        if pod is None:
            continue
        want = {EntryState.VERIFIED: e.after, EntryState.REVERTED: e.before,
                EntryState.INFEASIBLE: e.before}.get(e.state)
        if want is not None:
            [v] = want
            spec = _pod_values(pod.spec.containers[0].resources)
            status = _pod_values(pod.status.container_statuses[0].resources)
            if spec != _values(v) or status != _values(v):
                problems.append(f"{e.key} ({e.state.value}): spec {spec} status {status} journal {_values(v)}")
        if pod.metadata.generation != 1 + sent[uid]:
            problems.append(f"{e.key}: generation {pod.metadata.generation}, journal says {1 + sent[uid]}")
        checked += 1
    untouched = [p for uid, p in pods.items() if uid not in sent and p.metadata.generation != 1]
    problems += [f"{p.metadata.name}: generation {p.metadata.generation} but no journal entry" for p in untouched]
    states = Counter(e.state.value for r in rollouts for e in r.entries)
    return problems, {"rollouts": len(rollouts), "phases": dict(Counter(r.phase.value for r in rollouts)),
                      "halted": {r.name: r.message for r in rollouts if r.phase == Phase.HALTED},
                      "entries": dict(states), "pods_live": len(pods), "pods_audited": checked}


def main(argv: list[str] | None = None) -> int:
    """One soak per seed (``--seed``, then the next ``--seeds`` - 1 numbers), one after another, each on a fresh
    cluster; exit 0 only when every audit passed."""
    parser = argparse.ArgumentParser(prog="python -m tests.soak", description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=float, default=5.0)
    parser.add_argument("--pods", type=int, default=300)
    parser.add_argument("--seed", type=int, default=7, help="the first seed")
    parser.add_argument("--seeds", type=int, default=1, help="how many seeds to run, one after another")
    args = parser.parse_args(argv)
    if args.seeds < 1 or args.minutes <= 0 or args.pods < 15:
        parser.error("--seeds must be at least 1, --minutes above 0 and --pods at least 15")
    passed = []
    for seed in range(args.seed, args.seed + args.seeds):
        print(f"soak: seed {seed}, {args.minutes:g} minutes, {args.pods} pods", file=sys.stderr)
        if soak(minutes=args.minutes, pods=args.pods, seed=seed)["audit"] == "passed":
            passed.append(seed)
    if args.seeds > 1:
        print(json.dumps({"seeds": args.seeds, "passed": len(passed), "passed_seeds": passed,
                          "failed_seeds": sorted(set(range(args.seed, args.seed + args.seeds)) - set(passed))}))
    return 0 if len(passed) == args.seeds else 1


def soak(*, minutes: float, pods: int, seed: int) -> dict[str, Any]:
    """One soak on a fresh private cluster; prints the audit's problems and returns (and prints) its summary."""
    rng = random.Random(seed)
    work = Path(tempfile.mkdtemp(prefix="podtailor-soak-"))
    cluster = LocalCluster(work / "cluster")
    state = cluster.start()
    sim = prom = None
    kept = True
    counts: Counter[str] = Counter()
    try:
        api = config.new_client_from_config(config_file=state.kubeconfig)
        _install_crds(api)
        core = client.CoreV1Api(api)
        core.create_namespace({"metadata": {"name": NS}})
        while True:
            try:
                core.read_namespaced_service_account("default", NS)
                break
            except client.ApiException:
                time.sleep(0.2)
        pools = ["p0", "p1", "p2"]
        sim = NodeSimulator(api, SimConfig(pools=tuple(NodePool(name=p, count=4, cpu_millicores=16000,
                                                                memory_bytes=64 * 2**30) for p in pools),
                                           name_prefix="soak", clock_speed=60.0, tick_s=1.0, crash_backoff_s=1.0,
                                           metrics_port=0)).start()
        prom = LocalPrometheus(work / "prometheus", targets=[f"127.0.0.1:{sim.metrics_port}"], scrape_interval_s=2.0)
        prom.start()
        per_pool, replicas = 5, max(1, pods // 15)
        names = _workloads(api, pools, per_pool, replicas)
        for n in names:
            _set_target(api, n, rng.choice(["300m", "400m", "600m"]), rng.choice(["200Mi", "256Mi", "320Mi"]))
        custom = client.CustomObjectsApi(api)
        custom.create_cluster_custom_object("podtailor.io", "v1alpha1", "resizepolicies", {
            "apiVersion": "podtailor.io/v1alpha1", "kind": "ResizePolicy", "metadata": {"name": "soak"},
            "spec": {"namespaces": [NS], "steps": [{"fraction": 0, "bake": "5s"}, {"fraction": 0.25, "bake": "5s"},
                                                    {"fraction": 1, "bake": "2s"}],
                     "minPodAge": "0s", "changeThreshold": 0.05, "deferredTimeout": "10s",
                     "inProgressTimeout": "60s"}})  # a batch's deadline: well inside the soak (default 1h)
        reader, store = ClusterReader(api), RolloutStore(api)
        executor = Executor(read=lambda: reader.read(policy_pool_label=POOL_KEY, namespaces=(NS,)), planner=plan,
                            store=store, resizer=PodResizer(api), recorder=EventRecorder(api),
                            policy=group_by_policy, evictor=Evictor(api), templates=TemplatePatcher(api))
        registry = CollectorRegistry()
        source = PrometheusSource(PrometheusConfig(url=prom.url, step_s=60, scrape_interval_s=2, retries=0,
                                                   timeout_s=10), registry=registry)
        engine = RecommenderEngine(store=KubeAdapter(api), source=source, strategy=get_strategy("podtailor"),
                                   config=EngineConfig(namespaces=(NS,), history_s=3600, read_lag_s=10),
                                   metrics=RecommenderMetrics(registry))
        total = minutes * 60
        t0 = time.monotonic()
        lost: str | None = None
        prom_down = False
        next_rec, next_fault = t0, t0 + 20
        while (elapsed := time.monotonic() - t0) < total:
            try:
                counts["resizes"] += executor.run_pass(time.time()).resized
                counts["updater_passes"] += 1
            except Exception as err:  # the run loop's one broad catch
                counts["updater_passes_failed"] += 1
                print(f"[{elapsed:5.0f}s] updater pass failed: {err}", file=sys.stderr)
            if time.monotonic() >= next_rec:
                try:
                    counts["recommender_written"] += engine.run_pass(time.time()).written
                    counts["recommender_passes"] += 1
                except Exception as err:
                    counts["recommender_passes_failed"] += 1
                    print(f"[{elapsed:5.0f}s] recommender pass failed: {err}", file=sys.stderr)
                next_rec = time.monotonic() + 15
            if time.monotonic() >= next_fault:
                fault = rng.choice(["oom", "node", "prometheus", "targets"])
                pods = core.list_namespaced_pod(NS).items
                if fault == "oom" and pods:
                    for p in rng.sample(pods, 3):
                        sim.set_usage(NS, p.metadata.name, "app", Constant(cpu_cores=0.1, memory_bytes=600 * Mi))
                elif fault == "node":
                    if lost:
                        sim.set_heartbeat(lost, True)
                    lost = rng.choice(sim.node_names())
                    sim.set_heartbeat(lost, False)
                elif fault == "prometheus":
                    if prom_down:
                        prom.start()
                    else:
                        prom.stop()
                    prom_down = not prom_down
                else:
                    for n in rng.sample(names, 3):
                        _set_target(api, n, rng.choice(["250m", "450m", "700m"]), rng.choice(["200Mi", "300Mi"]))
                counts[f"fault_{fault}"] += 1
                print(f"[{elapsed:5.0f}s] fault {fault}", file=sys.stderr)
                next_fault = time.monotonic() + rng.uniform(15, 30)
            time.sleep(1.0)
        # Faults end; the updater settles what is open (halted pools stay halted: that is a valid end state).
        if lost:
            sim.set_heartbeat(lost, True)
        if prom_down:
            prom.start()
        settle_until = time.monotonic() + 120
        while time.monotonic() < settle_until:
            try:
                executor.run_pass(time.time())
            except Exception:
                counts["updater_passes_failed"] += 1
            if all(r.phase in TERMINAL or r.phase == Phase.HALTED for r in store.list()):
                break
            time.sleep(1.0)
        time.sleep(3)
        problems, summary = audit(api, store)
        summary.update(counts=dict(counts), minutes=minutes, seed=seed, audit_problems=len(problems),
                       audit="passed" if not problems else "FAILED")
        for p in problems[:50]:
            print(f"audit: {p}")
        print(json.dumps(summary, indent=2))
        kept = bool(problems)
        return summary
    finally:
        if sim is not None:
            sim.stop()
        if prom is not None:
            prom.stop()
        cluster.stop()
        if kept:  # a failed audit or an error: the cluster's and Prometheus's data (~70 MB) stay for a look
            print(f"soak: seed {seed}: the cluster's and Prometheus's data are kept in {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
