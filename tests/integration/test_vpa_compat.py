"""Compatibility with the real VPA 1.8.1, both ways, on one cluster.

VPA's three components are built from its Go module (``scripts/build-vpa.sh``) and run against the session's
control plane (``tests/harness/vpa.py``), each scoped to one namespace of this module, started once for the
module:

- ``ns_a``: VPA's admission controller (its own TLS, registered by URL) admits new pods at the targets our
  recommender wrote;
- ``ns_b``: VPA's recommender (``--storage=prometheus``, reading the session Prometheus' backfilled history once
  at start) writes targets that our updater applies in place on real kubelets and our webhook admits new pods
  at; it serves only the VPAs that name no recommender, ours only those that name ``podtailor``, neither writes
  the other's status; a second VPA recommender (``vpa-ckpt``, with checkpoints) keeps its
  ``VerticalPodAutoscalerCheckpoint`` beside our ``RecommenderCheckpoint``, and each one's garbage collection
  leaves the other's alone.

Our VPA CRD (manifests/crds) is the one installed: these tests also hold it to what VPA writes.
"""

from __future__ import annotations

import json
import secrets
import ssl
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from podtailor.units import parse_cpu_millicores, parse_memory_bytes
from tests.builders.cluster import POOL_KEY, Mi
from tests.builders.kubelets import RealUsage, UsageOnKubelets
from tests.harness.cluster import ClusterState
from tests.harness.kubelets import HOLLOW_TOLERATION, KubeletPool
from tests.harness.process import free_port
from tests.harness.prometheus import LocalPrometheus
from tests.harness.vpa import Vpa, VpaComponent
from tests.nodesim.openmetrics import ExportContainer, write_openmetrics
from tests.nodesim.usage import Constant, Daily
from tests.waiting import eventually

pytestmark = [pytest.mark.cluster, pytest.mark.prometheus]
STEP = 60
GROUP, VERSION, VPAS = "autoscaling.k8s.io", "v1", "verticalpodautoscalers"
CHECKPOINTS = "verticalpodautoscalercheckpoints"
HISTORY = {  # workload -> (namespace key, usage); two days of it, for pods labelled app=<workload>
    "web": ("a", Daily(cpu_cores=0.3, memory_bytes=300 * Mi, cpu_amplitude_cores=0.1, seed=11)),
    "api": ("b", Constant(cpu_cores=0.4, memory_bytes=400 * Mi)),
    "vpas": ("b", Constant(cpu_cores=0.2, memory_bytes=350 * Mi)),
    "mine": ("b", Constant(cpu_cores=0.6, memory_bytes=500 * Mi)),
    "nobody": ("b", Constant(cpu_cores=0.1, memory_bytes=300 * Mi)),
}


@dataclass
class Compat:
    api: client.ApiClient
    cluster: ClusterState
    prometheus: LocalPrometheus
    ns_a: str
    ns_b: str
    vpa_a: Vpa
    vpa_b: Vpa
    admission: VpaComponent
    recommender: VpaComponent

    @property
    def custom(self) -> Any:
        return client.CustomObjectsApi(self.api)

    def vpa(self, ns: str, name: str, target: str, recommenders: list[str] | None, mode: str = "Off") -> None:
        self.custom.create_namespaced_custom_object(GROUP, VERSION, ns, VPAS, {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "VerticalPodAutoscaler", "metadata": {"name": name},
            "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": target},
                     "updatePolicy": {"updateMode": mode},
                     **({} if recommenders is None else {"recommenders": [{"name": n} for n in recommenders]})}})

    def get(self, ns: str, name: str) -> dict[str, Any]:
        obj: dict[str, Any] = self.custom.get_namespaced_custom_object(GROUP, VERSION, ns, VPAS, name)
        return obj

    def target(self, ns: str, name: str, container: str = "app") -> dict[str, str] | None:
        recs = ((self.get(ns, name).get("status") or {}).get("recommendation") or {}).get(
            "containerRecommendations") or []
        found: dict[str, str] | None = next((r["target"] for r in recs if r["containerName"] == container), None)
        return found

    def podtailor_once(self, ns: str) -> dict[str, Any]:
        """One pass of our recommender, as a user runs it (``podtailor-recommender once``)."""
        cmd = [sys.executable, "-m", "recommender", "once", "--kubeconfig", self.cluster.kubeconfig,
               "--prometheus-url", self.prometheus.url, "-n", ns, "--scrape-interval", "60s", "--history", "2d",
               "-o", "json"]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=180, check=False)
        assert done.returncode == 0, done.stderr
        printed: dict[str, Any] = json.loads(done.stdout)
        return printed


def _deployment(api: client.ApiClient, ns: str, name: str, replicas: int = 0) -> None:
    labels = {"app": name}
    client.AppsV1Api(api).create_namespaced_deployment(ns, {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
        "spec": {"replicas": replicas, "selector": {"matchLabels": labels}, "template": {
            "metadata": {"labels": labels}, "spec": {"terminationGracePeriodSeconds": 1, "containers": [{
                "name": "app", "image": "registry.invalid/app:1",
                "resources": {"requests": {"cpu": "500m", "memory": "256Mi"},
                              "limits": {"cpu": "1", "memory": "1Gi"}}}]}}}})


def _history(path: Path, ns_of: dict[str, str], end_s: float) -> None:
    rows = []
    for workload, (key, model) in HISTORY.items():
        for k in range(2):
            pod = f"{workload}-hist-{'ab'[k] * 5}"
            rows.append(ExportContainer(namespace=ns_of[key], pod=pod, container="app", node="n1", model=model,
                                        pod_uid=f"{ns_of[key]}-{pod}", owner_kind="ReplicaSet",
                                        owner_name=f"{workload}-hist", replicaset_owner_name=workload,
                                        cpu_request_millicores=500, memory_request_bytes=256 * Mi,
                                        pod_labels={"app": workload}))
    with path.open("w") as out:
        write_openmetrics(out, rows, now_s=end_s, days=2, step_s=STEP)


def _namespace(core: client.CoreV1Api, stem: str) -> str:
    name = f"t-vpa-{stem}-{secrets.token_hex(3)}"
    core.create_namespace({"metadata": {"name": name}})
    eventually("the default ServiceAccount", lambda: core.list_namespaced_service_account(name).items, timeout_s=30)
    return name


@pytest.fixture(scope="module")
def compat(api: client.ApiClient, crds: list[str], cluster: ClusterState, prometheus: LocalPrometheus,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[Compat]:
    work = tmp_path_factory.mktemp("vpa-compat")
    core = client.CoreV1Api(api)
    ns_a, ns_b = _namespace(core, "admission"), _namespace(core, "recommender")
    path = work / "history.om"
    _history(path, {"a": ns_a, "b": ns_b}, end_s=float(int(time.time()) // STEP * STEP) - 120)
    prometheus.backfill(path)
    vpa_a, vpa_b = Vpa(cluster=cluster, workdir=work / "a", namespace=ns_a), Vpa(cluster=cluster, workdir=work / "b",
                                                                                 namespace=ns_b)
    try:
        admission = vpa_a.start_admission_controller()
        recommender = vpa_b.start_recommender(prometheus_url=prometheus.url, history="3d")
        yield Compat(api=api, cluster=cluster, prometheus=prometheus, ns_a=ns_a, ns_b=ns_b, vpa_a=vpa_a,
                     vpa_b=vpa_b, admission=admission, recommender=recommender)
    finally:
        vpa_a.stop()
        vpa_b.stop()
        for ns in (ns_a, ns_b):
            core.delete_namespace(ns)


def _cpu(q: str) -> int:
    return parse_cpu_millicores(q)


def _mem(q: str) -> int:
    return parse_memory_bytes(q)


def test_vpa_admission_controller_admits_new_pods_at_the_targets_podtailor_wrote(compat: Compat) -> None:
    ns = compat.ns_a
    _deployment(compat.api, ns, "web")
    compat.vpa(ns, "web", "web", ["podtailor"], mode="Initial")
    printed = compat.podtailor_once(ns)
    assert printed["served"] == 1
    target = compat.target(ns, "web")
    assert target is not None
    client.AppsV1Api(compat.api).patch_namespaced_deployment_scale("web", ns, {"spec": {"replicas": 2}})
    pods = eventually("two web pods", lambda: (lambda p: p if len(p) == 2 else None)(
        client.CoreV1Api(compat.api).list_namespaced_pod(ns, label_selector="app=web").items), timeout_s=60)
    cpu, mem = _cpu(target["cpu"]), _mem(target["memory"])
    assert (cpu, mem) != (500, 256 * Mi)  # the history (0.2-0.4 cores, ~300Mi) is not the template's
    for pod in pods:
        (c,) = pod.spec.containers
        assert _cpu(c.resources.requests["cpu"]) == cpu and _mem(c.resources.requests["memory"]) == mem
        # Limits keep the template's limit:request ratio, rounded down (VPA's limit_and_request_scaling.go
        # getProportionalResourceLimit, noRounding): 1 core per 500m, 1Gi per 256Mi.
        assert _cpu(c.resources.limits["cpu"]) == 1000 * cpu // 500
        assert _mem(c.resources.limits["memory"]) == 4 * mem
        annotations = pod.metadata.annotations or {}
        assert "vpaUpdates" in annotations and annotations.get("vpaObservedContainers") == "app"
    assert compat.admission.metric("vpa_admission_controller_admission_pods_total") >= 2


class _Scenario(RealUsage):
    """The updater tests' scenario (tests/builders) in this module's namespace, its pool of real kubelets lent
    from the session's ``kubelet_pool``."""

    def __init__(self, api: client.ApiClient, ns: str, kubelets: KubeletPool) -> None:
        super().__init__(api, ns, make_sim=lambda *a, **k: None)
        self.kubelets, self.hollow, self.tolerations = kubelets, kubelets.nodes, [HOLLOW_TOLERATION]
        self.lent: list[tuple[list[str], dict[str, str]]] = []

    def pool(self, short: str, nodes: int = 2, cpu: int = 8000) -> Any:
        name = f"{self.ns[-6:]}-{short}"
        self.pools[short] = name
        labels = {POOL_KEY: name}
        self.lent.append((self.kubelets.lend(nodes, labels), labels))
        return UsageOnKubelets(self.core, self.hollow)

    def give_back(self) -> None:
        for names, labels in self.lent:
            self.kubelets.give_back(names, labels)


def _delete_deployment(apps: Any, ns: str, name: str) -> None:
    try:
        apps.delete_namespaced_deployment(name, ns)
    except client.ApiException as err:
        if err.status != 404:
            raise


def _webhook(compat: Compat, ns: str, log: Path) -> subprocess.Popen[bytes]:
    port, name = free_port(), f"{ns}-hook"[:63]
    proc = subprocess.Popen([sys.executable, "-m", "updater", "webhook", "--kubeconfig", compat.cluster.kubeconfig,
                             "--listen", f"127.0.0.1:{port}", "--webhook-url", f"https://127.0.0.1:{port}/mutate",
                             "--webhook-config-name", name, "--only-namespace", ns, "--resync", "1s"],
                            stdout=subprocess.DEVNULL, stderr=log.open("wb"))
    ctx = ssl._create_unverified_context()  # our own loopback endpoint

    def admissions() -> float:
        with urllib.request.urlopen(f"https://127.0.0.1:{port}/metrics", context=ctx, timeout=2) as r:
            lines = r.read().decode().splitlines()
        return sum(float(x.split()[-1]) for x in lines if x.startswith("podtailor_webhook_admissions_total"))

    def called() -> bool:
        try:
            before = admissions()
        except OSError:
            return False
        probe = {"metadata": {"generateName": "probe-"}, "spec": {"containers": [{"name": "c", "image": "x"}]}}
        client.CoreV1Api(compat.api).create_namespaced_pod(ns, probe, dry_run="All")
        return admissions() > before

    eventually("our webhook called by the API server", called, timeout_s=60, interval_s=0.5)
    return proc


def test_podtailor_updater_and_webhook_act_on_targets_vpas_recommender_wrote(
        compat: Compat, kubelet_pool: KubeletPool, tmp_path: Path) -> None:
    ns = compat.ns_b
    s = _Scenario(compat.api, ns, kubelet_pool)
    hook = None
    try:
        s.pool("p", nodes=2)
        s.deployment("api", "p", 2, requests={"cpu": "100m", "memory": "128Mi"},
                     limits={"cpu": "1", "memory": "1Gi"},
                     usage={"kind": "constant", "cpu_cores": 0.05, "memory_bytes": 60 * Mi})
        compat.vpa(ns, "api", "api", None, mode="InPlaceOrRecreate")  # names no recommender: VPA's
        target = eventually("VPA's recommender's target for api", lambda: compat.target(ns, "api"), timeout_s=60)
        cpu, mem = _cpu(target["cpu"]), _mem(target["memory"])
        # From the history (0.4 cores, 400Mi): p90 x 1.15 at a bucket's upper edge, well above the pods' 100m/128Mi.
        assert 460 <= cpu <= 500 and 460 * Mi <= mem <= 500 * Mi, target
        s.policy()
        s.run_until(s.executor(), s.settled, timeout_s=120)
        for pod in s.running("api"):
            (st,) = pod.status.container_statuses
            assert _cpu(st.resources.requests["cpu"]) == cpu and _mem(st.resources.requests["memory"]) == mem
            assert st.restart_count == 0  # online: memory resizePolicy NotRequired
        hook = _webhook(compat, ns, tmp_path / "webhook.log")
        client.AppsV1Api(compat.api).patch_namespaced_deployment_scale("api", ns, {"spec": {"replicas": 3}})
        newest = eventually("a third api pod", lambda: next(
            (p for p in client.CoreV1Api(compat.api).list_namespaced_pod(ns, label_selector="app=api").items
             if "podtailor.io/admitted-resources" in (p.metadata.annotations or {})), None), timeout_s=60)
        (c,) = newest.spec.containers
        assert _cpu(c.resources.requests["cpu"]) == cpu and _mem(c.resources.requests["memory"]) == mem
        # Admitted by our webhook alone: VPA's admission controller serves another namespace.
        assert "vpaUpdates" not in (newest.metadata.annotations or {})
    finally:
        if hook is not None:
            hook.terminate()
            hook.wait(timeout=20)
            client.AdmissionregistrationV1Api(compat.api).delete_mutating_webhook_configuration(f"{ns}-hook"[:63])
        s.stop_watching()
        for name in s.policies:
            s.custom.delete_cluster_custom_object("podtailor.io", "v1alpha1", "resizepolicies", name)
        _delete_deployment(s.apps, ns, "api")  # frees the lent kubelets for the tests after this one
        try:  # and VPA's recommender writes nothing more for it (its pods gone, it would: NoPodsMatched)
            compat.custom.delete_namespaced_custom_object(GROUP, VERSION, ns, VPAS, "api")
        except client.ApiException as err:
            if err.status != 404:
                raise
        s.give_back()


def _status_managers(obj: dict[str, Any]) -> set[str]:
    return {m["manager"] for m in obj["metadata"].get("managedFields") or [] if m.get("subresource") == "status"}


def test_each_recommender_serves_only_the_vpas_that_name_it(compat: Compat) -> None:
    ns = compat.ns_b
    for name in ("vpas", "mine", "nobody"):
        _deployment(compat.api, ns, name)
    compat.vpa(ns, "vpas", "vpas", None)
    compat.vpa(ns, "mine", "mine", ["podtailor"])
    compat.vpa(ns, "nobody", "nobody", ["someone-else"])
    eventually("VPA's target for vpas", lambda: compat.target(ns, "vpas"), timeout_s=60)
    compat.podtailor_once(ns)
    assert compat.target(ns, "mine") is not None
    before = {name: compat.get(ns, name) for name in ("vpas", "mine", "nobody")}
    patches = _status_patches(compat.cluster)
    compat.vpa_b.wait_loops(compat.recommender, 3, timeout_s=60)
    vpa_patches = _status_patches(compat.cluster) - patches
    compat.podtailor_once(ns)
    after = {name: compat.get(ns, name) for name in ("vpas", "mine", "nobody")}
    # Nobody serves a VPA that names a third recommender.
    assert "status" not in after["nobody"] or not after["nobody"]["status"].get("recommendation")
    # Each status is written by its own recommender only (the status subresource's managedFields).
    vpa_managers, our_managers = _status_managers(after["vpas"]), _status_managers(after["mine"])
    assert vpa_managers and our_managers and not vpa_managers & our_managers, (vpa_managers, our_managers)
    # Neither wrote the other's status in three loops of VPA and a pass of ours.
    for name in ("vpas", "mine"):
        assert after[name]["metadata"]["resourceVersion"] == before[name]["metadata"]["resourceVersion"], name
    # And VPA's recommender sent no status write at all in those three loops: with our CRD keeping
    # status.observedGeneration (VPA's AsStatus sets it), UpdateVpaStatusIfNeeded finds the status it wrote
    # unchanged. Without it in the schema the API server prunes it and VPA sends a (no-op) PATCH every loop.
    assert vpa_patches == 0, vpa_patches
    assert after["vpas"]["status"]["observedGeneration"] == after["vpas"]["metadata"]["generation"]


def _status_patches(cluster: ClusterState) -> float:
    """The API server's count of PATCH requests to VPA status (its own /metrics, ``apiserver_request_total``):
    our recommender writes status with PUT, VPA's with PATCH (pkg/utils/vpa/api.go patchVpaStatus)."""
    with urllib.request.urlopen(f"{cluster.server}/metrics", context=cluster.ssl_context(), timeout=10) as r:
        lines = r.read().decode().splitlines()
    want = ('verb="PATCH"', 'resource="verticalpodautoscalers"', 'subresource="status"')
    return sum(float(x.rsplit(" ", 1)[1]) for x in lines
               if x.startswith("apiserver_request_total{") and all(w in x for w in want))


def _checkpoints(compat: Compat, plural: str, group: str = GROUP, version: str = VERSION) -> dict[str, Any]:
    body = compat.custom.list_namespaced_custom_object(group, version, compat.ns_b, plural)
    return {o["metadata"]["name"]: o for o in body["items"]}


def test_vpa_and_podtailor_checkpoints_live_side_by_side(compat: Compat, kubelet_pool: KubeletPool) -> None:
    ns = compat.ns_b
    ckpt = compat.vpa_b.start_recommender("--checkpoints-gc-interval=5s", name="vpa-ckpt")
    s = _Scenario(compat.api, ns, kubelet_pool)
    try:
        s.pool("ck", nodes=1)
        # A running pod for VPA to track: its recommender keeps a container's state only for pods that are not
        # Pending (cluster_feeder.go newPodClients), and writes a checkpoint per container it tracks.
        s.deployment("ckpt", "ck", 1)
        compat.vpa(ns, "ck", "ckpt", ["vpa-ckpt"])
        _checkpoints_side_by_side(compat, ckpt)
    finally:
        _delete_deployment(s.apps, ns, "ckpt")
        s.give_back()


def _checkpoints_side_by_side(compat: Compat, ckpt: VpaComponent) -> None:
    ns = compat.ns_b
    if "mine" not in {o["metadata"]["name"] for o in compat.custom.list_namespaced_custom_object(
            GROUP, VERSION, ns, VPAS)["items"]}:  # when run alone
        _deployment(compat.api, ns, "mine")
        compat.vpa(ns, "mine", "mine", ["podtailor"])
    compat.podtailor_once(ns)
    theirs = eventually("VPA's checkpoint ck-app", lambda: _checkpoints(compat, CHECKPOINTS).get("ck-app"),
                        timeout_s=60)
    assert theirs["spec"] == {"vpaObjectName": "ck", "containerName": "app"}
    assert theirs["status"]["version"] == "v3"
    ours = _checkpoints(compat, "recommendercheckpoints", "podtailor.io", "v1alpha1")
    assert set(ours) == {"mine"}  # one per VPA of ours; none for VPA's
    # Two of VPA's checkpoint garbage collections (every 5 s) and a pass of ours later, both are still there.
    compat.vpa_b.wait_loops(ckpt, 3, timeout_s=60)
    compat.podtailor_once(ns)
    assert "ck-app" in _checkpoints(compat, CHECKPOINTS)
    again = _checkpoints(compat, "recommendercheckpoints", "podtailor.io", "v1alpha1")
    assert again["mine"]["metadata"]["uid"] == ours["mine"]["metadata"]["uid"]
    # Each one's collection removes only its own: VPA's checkpoint goes with its VPA, ours stays.
    compat.custom.delete_namespaced_custom_object(GROUP, VERSION, ns, VPAS, "ck")
    eventually("VPA's checkpoint collected", lambda: "ck-app" not in _checkpoints(compat, CHECKPOINTS),
               timeout_s=60, interval_s=1)
    assert "mine" in _checkpoints(compat, "recommendercheckpoints", "podtailor.io", "v1alpha1")
    assert not set(_checkpoints(compat, CHECKPOINTS)) & {"mine", "mine-app"}
    ckpt.stop()
