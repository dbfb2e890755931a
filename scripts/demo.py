"""`make demo`: podtailor's main job end to end on the local cluster (real control plane and Prometheus,
real kubelets: kubelet v1.37.2 run as hollow nodes, whose usage the node simulator feeds), with the real
commands a user would run.

It brings up the cluster, shows an in-place CPU resize in a real container's cgroup on a real node (kubelet on
containerd and runc, scripts/demo_realnode.py), three node pools of different machine sizes, a dozen workloads
whose usage replays series of a Bitbrains trace subset committed in tests/data/traces/, backfills their history
into Prometheus, creates VPA objects and a ResizePolicy, then runs: podtailor-recommender once,
podtailor-recommender report (table and HTML), podtailor-updater plan, and podtailor-updater run (with its
admission webhook) until the rollouts settle.
It prints what happens as it happens and a summary, and leaves the cluster up. ``--fast`` shrinks history
and bake times for the test that runs this script.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from kubernetes import client, config  # noqa: E402

from podtailor.units import format_cpu, human_memory, parse_cpu_millicores, parse_memory_bytes  # noqa: E402
from tests.harness.cluster import kubectl_bin  # noqa: E402
from tests.harness.kubelets import HOLLOW_TOLERATION  # noqa: E402
from tests.harness.process import free_port  # noqa: E402

TRACES = REPO / "tests" / "data" / "traces"  # the demo's series only; see its README for the attribution
TRACE = "bitbrains_rnd_2013-08_demo.csv.gz"
POOL_KEY = "podtailor.io/node-pool"
NS = "demo"
REAL_NS = "demo-real-node"
Mi = 2**20
# Printed at the end and shown in the README (block "demo-look-around"), run verbatim by test_demo.
LOOK_AROUND = (
    "export KUBECONFIG=$PWD/.cluster/admin.kubeconfig PATH=$PWD/.cluster/bin:$PWD/.venv/bin:$PATH",
    f"kubectl get vpa -n {NS}",
    "kubectl get resizerollouts",
    f"kubectl describe pods -n {NS} -l app=checkout --show-events=true",
    f"podtailor-updater plan -n {NS} --pool-label {POOL_KEY}",
    "python -m tests.harness status",
)
PRICE_CPU_HOUR, PRICE_GIB_HOUR, HOURS = 0.031611, 0.004237, 730.0  # OpenCost's default prices


def say(text: str) -> None:
    print(f"\033[1m==>\033[0m {text}", flush=True)


def batch_progress(current_batch: int, batch_count: int) -> str:
    """"2/3": the batch a rollout is on, counted from 1, out of its batches. ``status.currentBatch`` counts from 0
    and, once the last batch is done, equals the number of batches (``updater/rollout/machine.py`` completes a
    rollout with ``current_batch=nxt``), so a finished rollout shows its last batch, never one past it."""
    return f"{min(current_batch + 1, batch_count)}/{batch_count}"


def requested_line(before: dict[str, dict[str, Any]], after: dict[str, dict[str, Any]], key: str, label: str) -> str:
    """One summary line, the pods' total request before and after, as kubectl prints quantities ("8250m",
    "12.3Gi") through the base's formatters: ``key`` is ``cpu_m`` (millicores) or ``memory_b`` (bytes)."""
    fmt = format_cpu if key == "cpu_m" else human_memory
    total0, total1 = (sum(s[key] for s in state.values()) for state in (before, after))
    return f"    {label} {fmt(total0):>8} -> {fmt(total1):>8}"


@dataclass
class Workload:
    name: str
    replicas: int
    requests: dict[str, str]
    limits: dict[str, str]
    usage: dict[str, Any]
    kind: str = "Deployment"
    pool: str | None = None
    prefer_pool: str | None = None
    memory_policy: str = "NotRequired"
    pdb: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


TRACE_NOW_DAYS = 11.0
"""Where in the trace the demo's "now" falls (days after its first sample). Anchored, not left to the date: a
trace series loops over its 30 days, so with simulated time equal to wall time the demo's history window moved
a day along the trace every day, and on some days the "search" series (a VM busy at 8 cores for a week) turned
the fast demo's savings into a net increase. Day 11 puts the fast demo's 2 days (days 9-11) after that busy
week and the full demo's 8 days (days 3-11) over it, whatever the date."""
SIM_START_S = round(time.time() - TRACE_NOW_DAYS * 86400.0)


def trace(series: int, cpu: float = 1.0, memory: float = 1.0) -> dict[str, Any]:
    return {"kind": "trace", "file": TRACE, "series_id": f"bb-rnd-2013-08-{series}", "cpu_scale": cpu,
            "memory_scale": memory, "sim_start_s": SIM_START_S}


WORKLOADS = [
    Workload("checkout", 3, {"cpu": "1", "memory": "1Gi"}, {"cpu": "2", "memory": "2Gi"}, trace(28, 1.0, 0.2),
             pool="medium"),
    Workload("search", 3, {"cpu": "500m", "memory": "1Gi"}, {"cpu": "4", "memory": "2Gi"}, trace(41, 0.25, 0.1),
             pool="large"),
    Workload("cart", 2, {"cpu": "250m", "memory": "256Mi"}, {"cpu": "500m", "memory": "512Mi"},
             {"kind": "daily", "cpu_cores": 0.1, "cpu_amplitude": 0.05, "memory_bytes": "300Mi", "cpu_noise": 0.1},
             pool="medium", memory_policy="RestartContainer"),
    Workload("payments", 3, {"cpu": "1", "memory": "512Mi"}, {"cpu": "2", "memory": "1Gi"}, trace(8, 4.0, 0.2),
             pool="medium", pdb=True),
    Workload("ledger", 2, {"cpu": "500m", "memory": "1Gi"}, {"cpu": "1", "memory": "2Gi"}, trace(3, 10.0, 2.0),
             kind="StatefulSet", pool="large"),
    Workload("nightly-export", 1, {"cpu": "500m", "memory": "512Mi"}, {"cpu": "1", "memory": "1Gi"},
             {"kind": "constant", "cpu_cores": 0.08, "memory_bytes": "150Mi"}, kind="Job", pool="small"),
    Workload("thumbnailer", 2, {"cpu": "500m", "memory": "256Mi"}, {"cpu": "4", "memory": "512Mi"},
             {"kind": "constant", "cpu_cores": 2.4, "memory_bytes": "120Mi"}, prefer_pool="small"),
    Workload("frontend", 3, {"cpu": "300m", "memory": "256Mi"}, {"cpu": "600m", "memory": "512Mi"},
             {"kind": "daily", "cpu_cores": 0.08, "cpu_amplitude": 0.05, "memory_bytes": "90Mi", "cpu_noise": 0.2},
             pool="small"),
    Workload("api", 3, {"cpu": "1", "memory": "1Gi"}, {"cpu": "2", "memory": "2Gi"}, trace(33, 1.0, 0.2),
             pool="large"),
    Workload("cache", 2, {"cpu": "200m", "memory": "2Gi"}, {"cpu": "400m", "memory": "2Gi"},
             {"kind": "constant", "cpu_cores": 0.05, "memory_bytes": "700Mi"}, pool="medium",
             memory_policy="RestartContainer"),
    Workload("notifications", 2, {"cpu": "200m", "memory": "256Mi"}, {"cpu": "400m", "memory": "512Mi"},
             {"kind": "spikes", "cpu_cores": 0.02, "memory_bytes": "80Mi", "spike_cpu_cores": 0.3,
              "period_s": 3600, "duration_s": 300}, pool="small"),
    Workload("auth", 2, {"cpu": "500m", "memory": "512Mi"}, {"cpu": "1", "memory": "1Gi"}, trace(9, 1.0, 0.5),
             pool="medium"),
]


class Demo:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.dir = REPO / ".cluster"
        self.py = str(REPO / ".venv" / "bin" / "python") if (REPO / ".venv").exists() else sys.executable
        self.procs: list[subprocess.Popen[bytes]] = []

    # -- setup -------------------------------------------------------------------------------------------
    def cluster(self) -> None:
        subprocess.run([self.py, "-m", "tests.harness", "down"], cwd=REPO, capture_output=True, check=False)
        self.kubectl = kubectl_bin()  # built with the control plane; linked into .cluster/bin for the hints
        self.metrics_port = free_port()
        say("starting the control plane (etcd, kube-apiserver, controller manager, scheduler) and Prometheus")
        subprocess.run([self.py, "-m", "tests.harness", "up", "--scrape", f"127.0.0.1:{self.metrics_port}"],
                       cwd=REPO, check=True)
        self.kubeconfig = str(self.dir / "admin.kubeconfig")
        self.prom_url = json.loads((self.dir / "prometheus.json").read_text())["url"]
        self.api = config.new_client_from_config(config_file=self.kubeconfig)
        self.core, self.apps = client.CoreV1Api(self.api), client.AppsV1Api(self.api)
        self.custom, self.batch = client.CustomObjectsApi(self.api), client.BatchV1Api(self.api)
        say("starting 9 real kubelets (v1.37.2, hollow nodes) in pools small (4 x 2 CPU/8Gi), medium (3 x 8/32Gi), "
            "large (2 x 32/128Gi); the node simulator feeds their usage and serves the metrics")
        log = (self.dir / "logs" / "nodesim.log").open("ab")
        sim = subprocess.Popen([self.py, "-m", "tests.nodesim", "--real-kubelets", "--kubeconfig", self.kubeconfig,
                                "--metrics-port", str(self.metrics_port), "--labels", "podtailor,karpenter",
                                "--trace-dir", str(TRACES), "--name-prefix", "node",
                                "--pool", "small=4:2:8Gi:sim.small", "--pool", "medium=3:8:32Gi:sim.medium",
                                "--pool", "large=2:32:128Gi:sim.large"], cwd=REPO, stdout=log, stderr=log,
                               start_new_session=True)
        (self.dir / "nodesim.pid").write_text(f"{sim.pid}\n")

        def kubelets_ready() -> bool:
            if sim.poll() is not None:
                raise SystemExit(f"the node simulator exited {sim.returncode}; see {self.dir / 'logs' / 'nodesim.log'}")
            return len(self._ready_kubelets()) >= 9
        self._wait("9 real kubelets Ready", kubelets_ready, timeout_s=240)
        versions = sorted({v for v in self._ready_kubelets().values()})
        print(f"    nodes report kubelet {', '.join(versions)} (node.status.nodeInfo.kubeletVersion)")
        for path in sorted((REPO / "manifests" / "crds").glob("*.yaml")):
            self._apply_crd(path)

    def real_node(self) -> None:
        """A real node beside the hollow ones: the in-place CPU resize seen in a real container's cgroup."""
        from scripts.demo_realnode import show_real_node

        try:
            self.core.create_namespace({"metadata": {"name": REAL_NS}})
        except client.ApiException as err:
            if err.status != 409:
                raise
        self._wait(f"the default ServiceAccount in {REAL_NS}", lambda: any(
            a.metadata.name == "default" for a in self.core.list_namespaced_service_account(REAL_NS).items))
        self.real = show_real_node(self.dir, self.kubectl, self.api, REAL_NS, say)

    def _ready_kubelets(self) -> dict[str, str]:
        """Name -> kubeletVersion of each Ready node the demo's real kubelets registered."""
        out = {}
        for n in self.core.list_node(label_selector="type=hollow").items:
            if any(c.type == "Ready" and c.status == "True" for c in n.status.conditions or []):
                out[n.metadata.name] = n.status.node_info.kubelet_version
        return out

    def _apply_crd(self, path: Path) -> None:
        import yaml

        body = yaml.safe_load(path.read_text())
        try:
            client.ApiextensionsV1Api(self.api).create_custom_resource_definition(body)
        except client.ApiException as err:
            if err.status != 409:
                raise
        self._wait(f"CRD {body['metadata']['name']}", lambda: any(
            c.type == "Established" and c.status == "True" for c in client.ApiextensionsV1Api(self.api)
            .read_custom_resource_definition(body["metadata"]["name"]).status.conditions or []))

    def _wait(self, what: str, probe: Any, timeout_s: float = 120.0) -> None:
        deadline = time.monotonic() + timeout_s
        while not probe():
            if time.monotonic() > deadline:
                raise SystemExit(f"demo: timed out waiting for {what}; logs in {self.dir / 'logs'}")
            time.sleep(0.5)

    # -- workloads and history ---------------------------------------------------------------------------
    def workloads(self) -> None:
        self.core.create_namespace({"metadata": {"name": NS}})
        self._wait("the default ServiceAccount", lambda: bool(self.core.list_namespaced_service_account(NS).items))
        say(f"deploying {len(WORKLOADS)} workloads whose usage replays production traces")
        for w in WORKLOADS:
            self._create(w)
        self._wait("every demo pod Running", self._all_running, timeout_s=180)
        self.before = self._pods_state()

    def _template(self, w: Workload) -> dict[str, Any]:
        container = {"name": "app", "image": f"registry.invalid/{w.name}:1",
                     "resources": {"requests": w.requests, "limits": w.limits},
                     "resizePolicy": [{"resourceName": "memory", "restartPolicy": w.memory_policy}]}
        spec: dict[str, Any] = {"containers": [container], "terminationGracePeriodSeconds": 2,
                                "tolerations": [HOLLOW_TOLERATION]}  # the real kubelets' taint
        if w.pool:
            spec["nodeSelector"] = {POOL_KEY: w.pool}
        if w.prefer_pool:
            spec["affinity"] = {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 100, "preference": {"matchExpressions": [
                    {"key": POOL_KEY, "operator": "In", "values": [w.prefer_pool]}]}}]}}
        if w.kind == "Job":
            spec["restartPolicy"] = "Never"
        return {"metadata": {"labels": {"app": w.name},
                             "annotations": {"nodesim.podtailor.io/usage": json.dumps(w.usage)}}, "spec": spec}

    def _create(self, w: Workload) -> None:
        meta, sel, tpl = {"name": w.name}, {"matchLabels": {"app": w.name}}, self._template(w)
        if w.kind == "Deployment":
            self.apps.create_namespaced_deployment(NS, {"apiVersion": "apps/v1", "kind": "Deployment",
                                                        "metadata": meta, "spec": {"replicas": w.replicas,
                                                                                   "selector": sel, "template": tpl}})
        elif w.kind == "StatefulSet":
            self.apps.create_namespaced_stateful_set(NS, {"apiVersion": "apps/v1", "kind": "StatefulSet",
                                                          "metadata": meta, "spec": {
                                                              "replicas": w.replicas, "selector": sel,
                                                              "serviceName": w.name, "template": tpl}})
        else:
            self.batch.create_namespaced_job(NS, {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta,
                                                  "spec": {"parallelism": w.replicas, "completions": w.replicas,
                                                           "backoffLimit": 0, "template": tpl}})
        if w.pdb:
            client.PolicyV1Api(self.api).create_namespaced_pod_disruption_budget(NS, {
                "apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": w.name},
                "spec": {"maxUnavailable": 1, "selector": sel}})

    def _all_running(self) -> bool:
        pods = [p for p in self.core.list_namespaced_pod(NS).items if not p.metadata.deletion_timestamp]
        return len(pods) >= sum(w.replicas for w in WORKLOADS) and all(p.status.phase == "Running" for p in pods)

    def history(self) -> None:
        from tests.nodesim.openmetrics import ExportContainer, write_openmetrics
        from tests.nodesim.usage import parse_model

        days = 2.0 if self.args.fast else 8.0
        say(f"backfilling {days:g} days of usage history into Prometheus (promtool tsdb create-blocks-from)")
        rows = []
        for w in WORKLOADS:
            model = parse_model(w.usage, trace_dir=TRACES)
            owner_kind, owner = ("ReplicaSet", f"{w.name}-hist") if w.kind == "Deployment" else (w.kind, w.name)
            for i in range(w.replicas):
                rows.append(ExportContainer(
                    namespace=NS, pod=f"{w.name}-hist-{i}", container="app", node="sim-history", model=model,
                    owner_kind=owner_kind, owner_name=owner, replicaset_owner_kind="Deployment",
                    replicaset_owner_name=w.name, cpu_request_millicores=parse_cpu_millicores(w.requests["cpu"]),
                    memory_request_bytes=parse_memory_bytes(w.requests["memory"]),
                    cpu_limit_millicores=parse_cpu_millicores(w.limits["cpu"]),
                    memory_limit_bytes=parse_memory_bytes(w.limits["memory"])))
        path = self.dir / "history.om"
        end = time.time() - 300
        with path.open("w") as out:
            samples = write_openmetrics(out, rows, now_s=end, days=days, step_s=60)
        from tests.harness.process import stop_pid

        stop_pid(int(json.loads((self.dir / "prometheus.json").read_text())["pid"]))
        subprocess.run(["promtool", "tsdb", "create-blocks-from", "openmetrics", "--max-block-duration=24h",
                        str(path), str(self.dir / "prometheus" / "tsdb")], check=True, stdout=subprocess.DEVNULL)
        self._restart_prometheus()
        path.unlink()
        print(f"    {samples:,} samples for {len(rows)} containers")

    def _restart_prometheus(self) -> None:
        from tests.harness.prometheus import LocalPrometheus

        prom = LocalPrometheus(self.dir / "prometheus", targets=[f"127.0.0.1:{self.metrics_port}"], detached=True)
        prom.port = int(self.prom_url.rsplit(":", 1)[1])
        prom.start()
        assert prom.proc is not None
        (self.dir / "prometheus.json").write_text(json.dumps({"url": prom.url, "pid": prom.proc.pid}) + "\n")

    def objects(self) -> None:
        say("creating a VPA per workload (served by podtailor) and a ResizePolicy")
        for w in WORKLOADS:
            self.custom.create_namespaced_custom_object("autoscaling.k8s.io", "v1", NS, "verticalpodautoscalers", {
                "apiVersion": "autoscaling.k8s.io/v1", "kind": "VerticalPodAutoscaler", "metadata": {"name": w.name},
                "spec": {"targetRef": {"apiVersion": "batch/v1" if w.kind == "Job" else "apps/v1", "kind": w.kind,
                                       "name": w.name},
                         "updatePolicy": {"updateMode": "InPlaceOrRecreate"}, "recommenders": [{"name": "podtailor"}]}})
        bake = "3s" if self.args.fast else "20s"
        now = time.gmtime()
        days = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"]
        window = {"days": [days[now.tm_wday]], "start": "00:00", "end": "24:00"}  # today: restarts allowed now
        self.custom.create_cluster_custom_object("podtailor.io", "v1alpha1", "resizepolicies", {
            "apiVersion": "podtailor.io/v1alpha1", "kind": "ResizePolicy", "metadata": {"name": "demo"},
            "spec": {"namespaces": [NS], "nodePoolLabel": POOL_KEY, "minPodAge": "0s", "changeThreshold": 0.1,
                     "steps": [{"fraction": 0, "bake": bake}, {"fraction": 1, "bake": bake}],
                     "maintenanceWindows": [window], "disruptionBudget": 0.5, "fallback": "evict",
                     "allowSingleReplicaEviction": False}})

    # -- the real commands -------------------------------------------------------------------------------
    def run(self, *argv: str, capture: bool = False) -> str:
        print(f"\n\033[2m$ {' '.join(argv)}\033[0m", flush=True)
        done = subprocess.run([self.py, "-m", *argv], cwd=REPO, text=True, check=False,
                              stdout=subprocess.PIPE if capture else None)
        if done.returncode != 0:
            raise SystemExit(f"demo: `{' '.join(argv)}` exited {done.returncode}")
        return done.stdout or ""

    def recommend(self) -> None:
        say("the recommender reads the history (a few batched PromQL queries) and writes VPA targets")
        k = ["--kubeconfig", self.kubeconfig]
        self.run("recommender", "once", *k, "--prometheus-url", self.prom_url, "-n", NS,
                 "--history", "2d" if self.args.fast else "8d")
        say("the same model as a dry-run report and cost review (read-only: no CRDs or VPAs needed)")
        self.run("recommender", "report", *k, "--prometheus-url", self.prom_url, "-n", NS, "--no-progress",
                 "--history", "2d" if self.args.fast else "8d", "--pool-label", POOL_KEY)
        self.html = self.dir / "demo-report.html"
        self.run("recommender", "report", *k, "--prometheus-url", self.prom_url, "-n", NS, "--no-progress",
                 "--history", "2d" if self.args.fast else "8d", "--pool-label", POOL_KEY, "-o", "html",
                 "--output-file", str(self.html))
        print(f"    HTML report: {self.html}")

    def webhook(self) -> None:
        port = free_port()
        say("starting the admission webhook, so replacement pods start at their target")
        log = (self.dir / "logs" / "webhook.log").open("ab")
        proc = subprocess.Popen([self.py, "-m", "updater", "webhook", "--kubeconfig", self.kubeconfig, "--listen",
                                 f"127.0.0.1:{port}", "--webhook-url", f"https://127.0.0.1:{port}/mutate",
                                 "--webhook-config-name", "podtailor-demo", "--namespace", "podtailor-system"],
                                cwd=REPO, stdout=log, stderr=log, start_new_session=True)
        (self.dir / "webhook.pid").write_text(f"{proc.pid}\n")
        import urllib.request

        def ready() -> bool:
            try:
                import ssl

                ctx = ssl._create_unverified_context()
                with urllib.request.urlopen(f"https://127.0.0.1:{port}/readyz", context=ctx, timeout=2) as r:
                    return bool(r.status == 200)
            except OSError:
                return False
        self._wait("the webhook to be ready", ready, timeout_s=60)

        def admissions() -> float:
            import ssl

            ctx = ssl._create_unverified_context()
            with urllib.request.urlopen(f"https://127.0.0.1:{port}/metrics", context=ctx, timeout=2) as r:
                lines = r.read().decode().splitlines()
            return sum(float(x.split()[-1]) for x in lines if x.startswith("podtailor_webhook_admissions_total"))

        def called() -> bool:  # the API server loads a new webhook configuration asynchronously
            before = admissions()
            probe = {"metadata": {"generateName": "probe-"},
                     "spec": {"containers": [{"name": "c", "image": "registry.invalid/probe:1"}]}}
            self.core.create_namespaced_pod(NS, probe, dry_run="All")
            return admissions() > before
        self._wait("the API server to call the webhook", called, timeout_s=60)

    def update(self) -> None:
        k = ["--kubeconfig", self.kubeconfig, "-n", NS, "--pool-label", POOL_KEY]
        say("the updater's plan: batches per node pool, and how each pod changes (in place, restart, replacement)")
        self.run("updater", "plan", *k)
        say("the updater applies it: canary batch per pool, verify, bake, next batch")
        log = (self.dir / "logs" / "updater.log").open("ab")
        proc = subprocess.Popen([self.py, "-m", "updater", "run", *k, "--interval", "1s", "--no-leader-elect",
                                 "--listen", f"127.0.0.1:{free_port()}"], cwd=REPO, stdout=log, stderr=log)
        try:
            self._follow(timeout_s=240 if self.args.fast else 900)
        finally:
            proc.terminate()
            proc.wait(timeout=30)

    def _follow(self, timeout_s: float) -> None:
        seen: dict[str, tuple[str, int, int]] = {}
        quiet_since = time.monotonic()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            rollouts = self.custom.list_cluster_custom_object("podtailor.io", "v1alpha1", "resizerollouts")["items"]
            for r in rollouts:
                st = r.get("status") or {}
                entries = st.get("entries") or []
                done = sum(1 for e in entries if e["state"] in ("Verified", "Reverted", "Skipped", "Gone",
                                                                "Infeasible"))
                now = (st.get("phase", "?"), int(st.get("currentBatch", 0)), done)
                if seen.get(r["metadata"]["name"]) != now:
                    seen[r["metadata"]["name"]] = now
                    quiet_since = time.monotonic()
                    print(f"    rollout {r['spec']['pool']:7} phase {now[0]:12} batch "
                          f"{batch_progress(now[1], int(r['spec']['batchCount']))}  {done}/{len(entries)} pods "
                          f"settled  {st.get('message', '')}", flush=True)
            settled = rollouts and all((r.get("status") or {}).get("phase") in ("Completed", "Halted", "RolledBack")
                                       for r in rollouts)
            if settled and time.monotonic() - quiet_since > (8 if self.args.fast else 30):
                return  # every rollout settled and no new one started for a while
            time.sleep(1.0)
        print("    (time limit reached; the updater goes on if you run it again)")

    # -- summary -----------------------------------------------------------------------------------------
    def _pods_state(self) -> dict[str, dict[str, Any]]:
        out = {}
        for p in self.core.list_namespaced_pod(NS).items:
            if p.status.phase != "Running" or p.metadata.deletion_timestamp:
                continue
            c = p.spec.containers[0].resources.requests or {}
            out[p.metadata.uid] = {"pod": p.metadata.name, "workload": p.metadata.labels.get("app", ""),
                                   "cpu_m": parse_cpu_millicores(c.get("cpu", "0")),
                                   "memory_b": parse_memory_bytes(c.get("memory", "0")),
                                   "restarts": sum(s.restart_count for s in p.status.container_statuses or []),
                                   "generation": p.metadata.generation}
        return out

    def summary(self) -> dict[str, Any]:
        after = self._pods_state()
        in_place = restarted = replaced = 0
        for uid, b in self.before.items():
            a = after.get(uid)
            if a is None:
                replaced += 1
            elif (a["cpu_m"], a["memory_b"]) != (b["cpu_m"], b["memory_b"]):
                if a["restarts"] > b["restarts"]:
                    restarted += 1
                else:
                    in_place += 1
        rollouts = self.custom.list_cluster_custom_object("podtailor.io", "v1alpha1", "resizerollouts")["items"]
        rolled_back = sum(1 for r in rollouts for e in (r.get("status") or {}).get("entries") or []
                          if e["state"] == "Reverted")

        def totals(state: dict[str, dict[str, Any]]) -> tuple[float, float, float]:
            cpu = sum(s["cpu_m"] for s in state.values()) / 1000
            gib = sum(s["memory_b"] for s in state.values()) / 2**30
            return cpu, gib, (cpu * PRICE_CPU_HOUR + gib * PRICE_GIB_HOUR) * HOURS

        cpu0, gib0, cost0 = totals(self.before)
        cpu1, gib1, cost1 = totals(after)
        result = {"pods_before": len(self.before), "pods_after": len(after), "resized_in_place": in_place,
                  "restarted": restarted, "replaced": replaced, "rolled_back": rolled_back,
                  "cpu_cores_before": round(cpu0, 3), "cpu_cores_after": round(cpu1, 3),
                  "memory_gib_before": round(gib0, 3), "memory_gib_after": round(gib1, 3),
                  "monthly_cost_before": round(cost0, 2), "monthly_cost_after": round(cost1, 2)}
        (self.dir / "demo-summary.json").write_text(json.dumps(result, indent=2) + "\n")
        say("summary")
        print(f"    pods resized in place without a restart: {in_place}")
        print(f"    pods resized in place with a container restart (memory, RestartContainer): {restarted}")
        print(f"    pods replaced (in place impossible, evicted; replacement admitted at the target): {replaced}")
        print(f"    pods rolled back: {rolled_back}")
        print(requested_line(self.before, after, "cpu_m", "CPU requested:   "))
        print(requested_line(self.before, after, "memory_b", "memory requested:"))
        print(f"    monthly cost (OpenCost default prices, 730 h): ${cost0:,.2f} -> ${cost1:,.2f}")
        return result

    def goodbye(self) -> None:
        bin_dir = self.dir / "bin"
        bin_dir.mkdir(exist_ok=True)
        link = bin_dir / "kubectl"
        link.unlink(missing_ok=True)
        link.symlink_to(self.kubectl)
        print("\nThe cluster stays up. Look around (these lines are in the README; test_demo runs them):")
        for line in LOOK_AROUND:
            print(f"  {line}")
        print(f"HTML report: {getattr(self, 'html', '-')}\nStop everything:  make demo-down")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--fast", action="store_true", help="2 days of history and short bakes (for tests)")
    args = parser.parse_args()
    if not (TRACES / TRACE).exists():
        print(f"demo: the trace {TRACES / TRACE} is missing from the checkout (git checkout -- tests/data)",
              file=sys.stderr)
        return 2
    os.environ.setdefault("PYTHONPATH", str(REPO))
    demo = Demo(args)
    t0 = time.monotonic()
    steps = [("start the cluster and nodes", demo.cluster), ("a real node's cgroup", demo.real_node),
             ("deploy the workloads", demo.workloads),
             ("backfill history", demo.history), ("create VPAs and the policy", demo.objects),
             ("recommend", demo.recommend), ("start the webhook", demo.webhook), ("update", demo.update),
             ("summary", demo.summary), ("look-around hints", demo.goodbye)]
    for name, step in steps:
        try:
            step()
        except (Exception, SystemExit) as err:  # one message naming the step and the logs, not a traceback
            detail = err if isinstance(err, SystemExit) else f"{type(err).__name__}: {err}"
            print(f"demo: step '{name}' failed: {detail}\n  logs: {demo.dir / 'logs'}; "
                  f"stop what was started with make demo-down", file=sys.stderr)
            return 1
    print(f"\n(demo took {time.monotonic() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
