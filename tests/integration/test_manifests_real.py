"""The install manifests on the real API server, and podtailor running as its own ServiceAccounts.

``kustomize build`` (kustomize built from Go modules by scripts/build-kustomize.sh, cached) renders the
base, the dry-run overlay and the optional components; every object is server-side applied (twice: the
second apply changes nothing). Then each component authenticates with a token from the TokenRequest API,
never admin credentials, and does its part of a cycle: the recommender recommends from Prometheus history;
the updater plans and resizes in place under leader election; the webhook server (mounted certificate,
--no-register, as in its Deployment) is called by the API server through the installed
MutatingWebhookConfiguration, routed to 127.0.0.1; the running updater then falls back, evicting the pods
of a workload whose target no node of their pool can hold, and the webhook admits their replacements at
the target. Once granted the template-fallback role in one namespace, the updater may patch that
namespace's templates. No component's log shows a refused request. SubjectAccessReviews prove each account
may do what it needs and nothing listed as forbidden.

The test cluster has no Prometheus Operator: a minimal ServiceMonitor CRD is installed first (and removed
afterwards) so the ServiceMonitor is applied and validated like everything else. Cluster-scoped objects
and podtailor-system are shared by the session: applied under their real names, deleted at the end.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import ssl
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from podtailor.units import parse_cpu_millicores
from tests.conftest import SimFactory
from tests.crds import SERVICE_MONITOR_CRD, wait_established
from tests.harness.process import free_port
from tests.harness.prometheus import LocalPrometheus
from tests.kube_apply import MANAGER, Applier, build, raw
from tests.nodesim.nodes import POOL_LABEL_KEYS, NodePool
from tests.nodesim.openmetrics import ExportContainer, write_openmetrics
from tests.nodesim.usage import Constant
from tests.waiting import eventually
from updater.webhook.review import ANNOTATION
from updater.webhook.tls import issue

pytestmark = [pytest.mark.cluster, pytest.mark.prometheus]

REPO = Path(__file__).resolve().parents[2]
MANIFESTS = REPO / "manifests"
NS = "podtailor-system"
POOL_KEY = POOL_LABEL_KEYS["podtailor"]
Mi = 2**20


STATUS_WRITTEN = {"CustomResourceDefinition", "Namespace", "Deployment", "PodDisruptionBudget"}


def applied_stamp(obj: dict[str, Any]) -> str:
    """What changes when an apply writes: generation, the time of our apply (seconds) and, for kinds no
    controller writes status to, the resourceVersion."""
    [ours] = [m for m in obj["metadata"]["managedFields"] if m["manager"] == MANAGER and m["operation"] == "Apply"]
    rv = "" if obj["kind"] in STATUS_WRITTEN else obj["metadata"]["resourceVersion"]
    return f"{obj['metadata'].get('generation')}@{ours.get('time')}/{rv}"


def by_kind(objs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objs if o["kind"] == kind]


# -- the installed base (module scope) -----------------------------------------------------------------
class Install:
    def __init__(self, api: client.ApiClient, objs: list[dict[str, Any]], first: dict[str, str],
                 second: dict[str, str]) -> None:
        self.api, self.objs, self.first, self.second = api, objs, first, second


@pytest.fixture(scope="module")
def install(api: client.ApiClient, crds: list[str]) -> Iterator[Install]:
    applier = Applier(api)
    ext = client.ApiextensionsV1Api(api)
    objs = build(MANIFESTS)
    samples = [yaml.safe_load((MANIFESTS / "samples" / "resizepolicy.yaml").read_text())]
    vpa_crd = yaml.safe_load((MANIFESTS / "crds" / "autoscaling.k8s.io_verticalpodautoscalers.yaml").read_text())
    created_sm_crd = False
    applied: list[dict[str, Any]] = []
    try:
        try:
            ext.read_custom_resource_definition(SERVICE_MONITOR_CRD["metadata"]["name"])
        except client.ApiException as err:
            assert err.status == 404
            applier.apply(SERVICE_MONITOR_CRD)
            created_sm_crd = True
            wait_established(api, SERVICE_MONITOR_CRD["metadata"]["name"])
        order = {"CustomResourceDefinition": 0, "Namespace": 1}
        ordered = sorted([*objs, vpa_crd, *samples], key=lambda o: order.get(o["kind"], 2))
        versions: list[dict[str, str]] = [{}, {}]
        for round_ in (0, 1):
            time.sleep(1.1 * round_)  # so that a second apply that wrote would show a later time
            for obj in ordered:
                out = applier.apply(obj)
                if round_ == 0 and obj["kind"] not in ("CustomResourceDefinition",):
                    applied.append(obj)
                if obj["kind"] == "CustomResourceDefinition":
                    wait_established(api, obj["metadata"]["name"])
                key = f"{obj['kind']}/{obj['metadata'].get('namespace', '')}/{obj['metadata']['name']}"
                versions[round_][key] = applied_stamp(out)
        yield Install(api, objs, versions[0], versions[1])
    finally:
        for obj in reversed(applied):
            if obj["kind"] != "Namespace":
                applier.delete(obj)
        applier.delete({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
        if created_sm_crd:
            applier.delete(SERVICE_MONITOR_CRD)


def test_kustomize_builds_the_base_the_dry_run_overlay_and_the_components(tmp_path: Path) -> None:
    full = build(MANIFESTS)
    kinds = {o["kind"] for o in full}
    assert {"Namespace", "CustomResourceDefinition", "ServiceAccount", "ClusterRole", "Role", "Deployment",
            "Service", "ServiceMonitor", "NetworkPolicy", "PodDisruptionBudget", "MutatingWebhookConfiguration",
            "ConfigMap"} <= kinds
    assert {d["metadata"]["name"] for d in by_kind(full, "Deployment")} == {
        "podtailor-recommender", "podtailor-updater", "podtailor-webhook"}
    # The VPA CRD is optional and separate; ours are in the base.
    assert {c["metadata"]["name"] for c in by_kind(full, "CustomResourceDefinition")} == {
        "recommendercheckpoints.podtailor.io", "resizepolicies.podtailor.io", "resizerollouts.podtailor.io"}
    assert all(o["metadata"]["labels"]["app.kubernetes.io/part-of"] == "podtailor"
               for o in full if o["kind"] != "CustomResourceDefinition")
    dashboard = by_kind(full, "ConfigMap")[0]
    assert json.loads(dashboard["data"]["podtailor-dashboard.json"])["uid"] == "podtailor"

    dry = build(MANIFESTS / "overlays" / "dry-run")
    components = {o["metadata"].get("labels", {}).get("app.kubernetes.io/component") for o in dry}
    assert "updater" not in components and "webhook" not in components
    assert [d["metadata"]["name"] for d in by_kind(dry, "Deployment")] == ["podtailor-recommender"]
    assert not by_kind(dry, "MutatingWebhookConfiguration")
    assert {r["metadata"]["name"] for r in by_kind(dry, "ClusterRoleBinding")} == {"podtailor-recommender"}
    assert by_kind(dry, "ServiceMonitor") and by_kind(dry, "ConfigMap")

    overlay = tmp_path / "overlay"
    overlay.mkdir()
    rel = os.path.relpath(MANIFESTS, overlay)
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump({
        "resources": [rel], "components": [f"{rel}/components/template-fallback", f"{rel}/components/cert-manager"]}))
    extended = build(overlay)
    assert "podtailor-updater-template-fallback" in {b["metadata"]["name"]
                                                      for b in by_kind(extended, "ClusterRoleBinding")}
    [mwc] = by_kind(extended, "MutatingWebhookConfiguration")
    assert mwc["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == "podtailor-system/podtailor-webhook"
    assert by_kind(extended, "Certificate")[0]["spec"]["secretName"] == "podtailor-webhook-tls"


def test_every_manifest_applies_server_side_and_is_idempotent(install: Install) -> None:
    # Applied: every object of the base, the optional VPA CRD and the sample ResizePolicy (validated by its CRD).
    assert len(install.first) == len(install.objs) + 2
    changed = {k for k in install.first if install.first[k] != install.second[k]}
    assert not changed, f"a second apply changed {sorted(changed)}"
    core, apps = client.CoreV1Api(install.api), client.AppsV1Api(install.api)
    labels = core.read_namespace(NS).metadata.labels
    assert labels["pod-security.kubernetes.io/enforce"] == "restricted"
    # The Pod Security admission plugin let every Deployment's pods in (restricted level, enforced)...
    for d in by_kind(install.objs, "Deployment"):
        sel = ",".join(f"{k}={v}" for k, v in d["spec"]["selector"]["matchLabels"].items())
        eventually(f"{d['metadata']['name']} pods created",
                   lambda sel=sel: len(core.list_namespaced_pod(NS, label_selector=sel).items) == 2, timeout_s=30)
        assert apps.read_namespaced_deployment(d["metadata"]["name"], NS).spec.replicas == 2
    # ...and it is really enforcing: a privileged pod is refused.
    bad = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "not-restricted", "namespace": NS},
           "spec": {"containers": [{"name": "c", "image": "x", "securityContext": {"privileged": True}}]}}
    with pytest.raises(client.ApiException) as refused:
        core.create_namespaced_pod(NS, bad, dry_run="All")
    assert refused.value.status == 403 and "PodSecurity" in refused.value.body


# -- ServiceAccounts ----------------------------------------------------------------------------------
def sa_token(api: client.ApiClient, name: str) -> str:
    req = client.CoreV1Api(api).create_namespaced_service_account_token(name, NS, {
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 1800}})
    token: str = req.status.token
    return token


def sa_client(cluster: Any, token: str) -> client.ApiClient:
    cfg = client.Configuration()
    cfg.host = cluster.server
    cfg.ssl_ca_cert = cluster.ca_cert
    cfg.api_key = {"authorization": token}
    cfg.api_key_prefix = {"authorization": "Bearer"}
    return client.ApiClient(cfg)


def sa_kubeconfig(cluster: Any, tmp: Path, name: str, token: str) -> Path:
    path = tmp / f"{name}.kubeconfig"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": name,
        "clusters": [{"name": "local",
                      "cluster": {"server": cluster.server, "certificate-authority": cluster.ca_cert}}],
        "users": [{"name": name, "user": {"token": token}}],
        "contexts": [{"name": name, "context": {"cluster": "local", "user": name}}]}))
    path.chmod(0o600)
    return path


def allowed(api: client.ApiClient, sa: str, verb: str, resource: str, group: str = "", namespace: str = "",
            name: str = "", subresource: str = "") -> bool:
    review = client.AuthorizationV1Api(api).create_subject_access_review({
        "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
        "spec": {"user": f"system:serviceaccount:{NS}:{sa}",
                 "groups": ["system:serviceaccounts", f"system:serviceaccounts:{NS}", "system:authenticated"],
                 "resourceAttributes": {"verb": verb, "resource": resource, "group": group, "namespace": namespace,
                                        "name": name, "subresource": subresource}}})
    return bool(review.status.allowed)


VPA, PT = "autoscaling.k8s.io", "podtailor.io"
# (verb, resource, group, namespace, name, subresource); namespace "*" stands for the test's namespace.
NEEDS: dict[str, list[tuple[str, ...]]] = {
    "podtailor-recommender": [
        ("list", "verticalpodautoscalers", VPA, ""), ("get", "verticalpodautoscalers", VPA, "*", "web"),
        ("update", "verticalpodautoscalers", VPA, "*", "web", "status"),
        ("get", "recommendercheckpoints", PT, "*"), ("create", "recommendercheckpoints", PT, "*"),
        ("patch", "recommendercheckpoints", PT, "*", "web"), ("list", "pods", "", ""),
        ("list", "nodes", "", ""), ("patch", "verticalpodautoscalers", VPA, "*", "web"),  # a DaemonSet's pools
        ("get", "deployments", "apps", "*"), ("get", "statefulsets", "apps", "*"), ("get", "daemonsets", "apps", "*"),
        ("get", "replicasets", "apps", "*"), ("get", "jobs", "batch", "*"), ("get", "cronjobs", "batch", "*"),
        ("create", "leases", "coordination.k8s.io", NS),
        ("get", "leases", "coordination.k8s.io", NS, "podtailor-recommender"),
        ("update", "leases", "coordination.k8s.io", NS, "podtailor-recommender")],
    "podtailor-updater": [
        ("list", "pods", "", ""), ("list", "nodes", "", ""), ("list", "limitranges", "", ""),
        ("patch", "pods", "", "*", "web-1", "resize"), ("create", "pods", "", "*", "web-1", "eviction"),
        ("create", "events", "", "*"), ("list", "deployments", "apps", ""), ("list", "statefulsets", "apps", ""),
        ("list", "daemonsets", "apps", ""), ("list", "replicasets", "apps", ""), ("list", "jobs", "batch", ""),
        ("list", "cronjobs", "batch", ""), ("list", "horizontalpodautoscalers", "autoscaling", ""),
        ("list", "verticalpodautoscalers", VPA, ""), ("list", "resizepolicies", PT, ""),
        ("create", "resizerollouts", PT, ""), ("get", "resizerollouts", PT, "", "r1"),
        ("list", "resizerollouts", PT, ""),
        ("update", "resizerollouts", PT, "", "r1", "status"),
        ("create", "leases", "coordination.k8s.io", NS),
        ("get", "leases", "coordination.k8s.io", NS, "podtailor-updater"),
        ("update", "leases", "coordination.k8s.io", NS, "podtailor-updater")],
    "podtailor-webhook": [
        ("get", "verticalpodautoscalers", VPA, "*"), ("list", "verticalpodautoscalers", VPA, ""),
        ("watch", "verticalpodautoscalers", VPA, ""), ("get", "replicasets", "apps", "*"),
        ("get", "deployments", "apps", "*"), ("list", "limitranges", "", ""),
        ("list", "nodes", "", "")],  # a new DaemonSet pod's pool
}
NEVER_ANY = [  # forbidden for every podtailor ServiceAccount
    ("get", "secrets", "", "*"), ("list", "secrets", "", ""), ("get", "secrets", "", NS),
    ("create", "pods", "", "*", "web-1", "exec"), ("create", "pods", "", "*", "web-1", "attach"),
    ("delete", "pods", "", "*", "web-1"), ("deletecollection", "pods", "", "*"), ("update", "pods", "", "*", "web-1"),
    ("patch", "pods", "", "*", "web-1"), ("create", "pods", "", "*"), ("update", "nodes", "", "", "n1"),
    ("patch", "nodes", "", "", "n1"), ("delete", "nodes", "", "", "n1"), ("*", "*", "*", ""), ("*", "*", "*", "*"),
    ("impersonate", "users", ""), ("impersonate", "serviceaccounts", "", "*"), ("impersonate", "groups", ""),
    ("escalate", "clusterroles", "rbac.authorization.k8s.io"), ("bind", "clusterroles", "rbac.authorization.k8s.io"),
    ("create", "serviceaccounts", "", "*", "x", "token"), ("get", "configmaps", "", NS),
    ("delete", "verticalpodautoscalers", VPA, "*", "web"), ("update", "verticalpodautoscalers", VPA, "*", "web"),
    ("create", "resizepolicies", PT, ""), ("update", "resizepolicies", PT, "", "sample"),
    ("delete", "resizerollouts", PT, "", "r1"),
    ("get", "leases", "coordination.k8s.io", "kube-system", "kube-scheduler"),
    ("update", "leases", "coordination.k8s.io", NS, "someone-else"), ("delete", "leases", "coordination.k8s.io", NS),
    ("patch", "deployments", "apps", "*", "web"), ("update", "deployments", "apps", "*", "web"),
    ("create", "mutatingwebhookconfigurations", "admissionregistration.k8s.io"),
]
NEVER: dict[str, list[tuple[str, ...]]] = {
    "podtailor-recommender": [
        ("patch", "pods", "", "*", "web-1", "resize"), ("create", "pods", "", "*", "web-1", "eviction"),
        ("create", "resizerollouts", PT, ""), ("update", "leases", "coordination.k8s.io", NS, "podtailor-updater")],
    "podtailor-updater": [
        ("update", "verticalpodautoscalers", VPA, "*", "web", "status"), ("create", "recommendercheckpoints", PT, "*"),
        ("update", "resizerollouts", PT, "", "r1"), ("patch", "statefulsets", "apps", "*", "db"),
        ("update", "leases", "coordination.k8s.io", NS, "podtailor-recommender")],
    "podtailor-webhook": [
        ("update", "verticalpodautoscalers", VPA, "*", "web", "status"), ("patch", "pods", "", "*", "web-1", "resize"),
        ("create", "pods", "", "*", "web-1", "eviction"), ("create", "leases", "coordination.k8s.io", NS),
        ("create", "events", "", "*"), ("list", "pods", "", "")],
}


def check(api: client.ApiClient, sa: str, rules: list[tuple[str, ...]], ns: str) -> list[tuple[str, bool]]:
    out = []
    for rule in rules:
        verb, resource, group, namespace, name, sub = (*rule, "", "", "")[:6]
        out.append((f"{verb} {group}/{resource}{'/' + sub if sub else ''} ns={namespace} name={name}",
                    allowed(api, sa, verb, resource, group, ns if namespace == "*" else namespace, name, sub)))
    return out


def test_subject_access_reviews_grant_exactly_what_each_account_needs(install: Install, namespace: str) -> None:
    api = install.api
    eventually("RBAC in effect", lambda: allowed(api, "podtailor-updater", "patch", "pods", "", namespace, "p",
                                                 "resize"), timeout_s=10)
    for sa in NEEDS:
        denied = [what for what, ok in check(api, sa, NEEDS[sa], namespace) if not ok]
        assert not denied, f"{sa} lacks {denied}"
        granted = [what for what, ok in check(api, sa, NEVER_ANY + NEVER[sa], namespace) if ok]
        assert not granted, f"{sa} may {granted}"
    # Template fallback: nothing until a namespace opts in with a RoleBinding; then only there, only patch.
    rbac = client.RbacAuthorizationV1Api(api)
    rbac.create_namespaced_role_binding(namespace, {
        "metadata": {"name": "podtailor-updater-template-fallback"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": "podtailor-updater-template-fallback"},
        "subjects": [{"kind": "ServiceAccount", "name": "podtailor-updater", "namespace": NS}]})
    eventually("template fallback granted", lambda: allowed(api, "podtailor-updater", "patch", "deployments", "apps",
                                                             namespace, "web"), timeout_s=10)
    for kind in ("statefulsets", "daemonsets"):
        assert allowed(api, "podtailor-updater", "patch", kind, "apps", namespace, "x")
    assert not allowed(api, "podtailor-updater", "patch", "deployments", "apps", "default", "web")
    assert not allowed(api, "podtailor-updater", "delete", "deployments", "apps", namespace, "web")
    assert not allowed(api, "podtailor-updater", "update", "deployments", "apps", namespace, "web")
    assert not allowed(api, "podtailor-recommender", "patch", "deployments", "apps", namespace, "web")


# -- the cycle, as the ServiceAccounts ----------------------------------------------------------------
def backfill(prom: LocalPrometheus, tmp: Path, ns: str, end_s: float) -> None:
    containers = [ExportContainer(namespace=ns, pod=f"web-6b7c-{p}", container="app", node="n1",
                                  model=Constant(cpu_cores=0.1, memory_bytes=100 * Mi), pod_uid=f"uid-{p}",
                                  owner_kind="ReplicaSet", owner_name="web-6b7c", replicaset_owner_kind="Deployment",
                                  replicaset_owner_name="web", cpu_request_millicores=1000,
                                  memory_request_bytes=256 * Mi, memory_limit_bytes=512 * Mi)
                  for p in ("aaaaa", "bbbbb")]
    path = tmp / "history.om"
    with path.open("w") as out:
        write_openmetrics(out, containers, now_s=end_s, days=4, step_s=60)
    prom.backfill(path)


def get(url: str) -> str:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return str(resp.read().decode())
    except OSError:
        return ""


def spawn(args: list[str], log: Path) -> subprocess.Popen[bytes]:
    """A component as a subprocess; its (JSON) log goes to ``log``, not a pipe nobody drains while it runs."""
    with log.open("wb") as out:
        return subprocess.Popen([sys.executable, "-m", *args], stdout=subprocess.DEVNULL, stderr=out, cwd=REPO)


def stop(proc: subprocess.Popen[bytes], log: Path) -> tuple[int, str]:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        code = proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        code = proc.wait()
    return code, log.read_text(errors="replace")[-3000:]


def refusals(log: Path) -> list[str]:
    """Log lines about a request the API server refused for lack of permission (classify() marks 403s)."""
    return [line for line in log.read_text(errors="replace").splitlines()
            if "missing RBAC permission" in line or "forbidden" in line.lower()]


def sample(text: str, name: str, labels: str = "") -> float | None:
    """The value of one series in a /metrics text (labels as exposed, e.g. 'mode="evict",outcome="ok"')."""
    series = f"{name}{{{labels}}}" if labels else name
    values = [float(line.split()[-1]) for line in text.splitlines() if line.split(" ")[0] == series]
    return values[0] if values else None


WEBHOOK_CONFIG = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/podtailor-webhook"


def route_webhook(api: client.ApiClient, client_config: dict[str, Any]) -> None:
    """Point the installed configuration's webhook at ``client_config``: in a cluster the Service and
    cert-manager's cainjector provide it; here the webhook listens on 127.0.0.1 (no kube-proxy)."""
    raw(api, "PATCH", WEBHOOK_CONFIG, body=[{"op": "replace", "path": "/webhooks/0/clientConfig",
                                              "value": client_config}],
        content_type="application/json-patch+json")


class Webhook:
    """`podtailor-updater webhook` as in manifests/base/webhook.yaml (mounted certificate, --no-register), with
    the webhook's ServiceAccount token, on 127.0.0.1; the certificate is issued here, as cert-manager would."""

    def __init__(self, kubeconfig: Path, tmp: Path) -> None:
        self.port = free_port()
        cert = issue(["127.0.0.1"], validity_s=3600, now_s=time.time())
        (tmp / "tls.crt").write_bytes(cert.cert_pem)
        (tmp / "tls.key").write_bytes(cert.key_pem)
        self.ca_pem, self.log = cert.ca_pem, tmp / "webhook.log"
        self.context = ssl.create_default_context(cadata=cert.ca_pem.decode())
        self.proc = spawn(["updater", "webhook", "--kubeconfig", str(kubeconfig),
                           "--listen", f"127.0.0.1:{self.port}", "--tls-cert-file", str(tmp / "tls.crt"),
                           "--tls-key-file", str(tmp / "tls.key"), "--no-register", "--namespace", NS,
                           "--resync", "1s", "--log-format", "json"], self.log)

    def client_config(self) -> dict[str, Any]:
        return {"url": f"https://127.0.0.1:{self.port}/mutate", "caBundle": base64.b64encode(self.ca_pem).decode()}

    def get(self, path: str) -> str:
        try:
            with urllib.request.urlopen(f"https://127.0.0.1:{self.port}{path}", context=self.context,
                                        timeout=5) as resp:
                return str(resp.read().decode())
        except OSError:
            return ""

    def admissions(self) -> float:
        return sum(float(line.split()[-1]) for line in self.get("/metrics").splitlines()
                   if line.startswith("podtailor_webhook_admissions_total{"))


def running_pods(core: client.CoreV1Api, ns: str) -> list[client.V1Pod]:
    pods = core.list_namespaced_pod(ns, label_selector="app=web").items
    return [p for p in pods if p.status.phase == "Running" and not p.metadata.deletion_timestamp
            and p.status.container_statuses and all(c.ready for c in p.status.container_statuses)]


GROW_TARGET = {"cpu": "2500m", "memory": "128Mi"}
"""Above the small pool's 2-core nodes: no in-place resize can fit, so the updater must replace the pods."""


class Grow:
    """The Deployment "grow": two pods on the small pool, whose target only fits the big pool."""

    def __init__(self, core: client.CoreV1Api, ns: str, small: str, big: str) -> None:
        self.core, self.ns, self.small, self.big = core, ns, small, big
        self.originals: list[str] = []

    def running(self) -> list[client.V1Pod]:
        pods = self.core.list_namespaced_pod(self.ns, label_selector="app=grow").items
        return [p for p in pods if p.status.phase == "Running" and not p.metadata.deletion_timestamp
                and p.status.container_statuses and all(c.ready for c in p.status.container_statuses)]

    def pool_of(self, pod: client.V1Pod) -> str:
        return str(self.core.read_node(pod.spec.node_name).metadata.labels[POOL_KEY])


def grow_deployment(pools: tuple[str, str]) -> dict[str, Any]:
    """Prefers the small pool, may use the big one (added later, so the first pods had no other choice)."""
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "grow"},
            "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "grow"}}, "template": {
                "metadata": {"labels": {"app": "grow"}, "annotations": {"nodesim.podtailor.io/usage": json.dumps(
                    {"kind": "constant", "cpu_cores": 0.3, "memory_bytes": 64 * Mi})}},
                "spec": {"terminationGracePeriodSeconds": 1, "affinity": {"nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [
                        {"key": POOL_KEY, "operator": "In", "values": list(pools)}]}]},
                    "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100, "preference": {
                        "matchExpressions": [{"key": POOL_KEY, "operator": "In", "values": [pools[0]]}]}}]}},
                    "containers": [{"name": "app", "image": "registry.invalid/app:1",
                                    "resources": {"requests": {"cpu": "500m", "memory": "128Mi"},
                                                  "limits": {"cpu": "4", "memory": "256Mi"}}}]}}}}


def fall_back_and_admit(api: client.ApiClient, ns: str, make_sim: SimFactory,
                        recommender_api: client.ApiClient) -> Grow:
    """Set the stage for the running updater and webhook: "grow" runs on the small pool at its template's
    500m; its VPA gets a 2500m target in mode Initial (admission only: the updater leaves it, the webhook
    applies it, which a dry-run pod of its ReplicaSet proves); then a big pool appears and the mode becomes
    InPlaceOrRecreate, so the updater must evict, and the ReplicaSet's replacements are admitted at the target."""
    core, grow = client.CoreV1Api(api), Grow(client.CoreV1Api(api), ns, f"{ns[-6:]}-s", f"{ns[-6:]}-b")
    make_sim(NodePool(name=grow.small, count=2, cpu_millicores=2000, memory_bytes=32 * 2**30), tick_s=0.2,
             crash_backoff_s=0.5)
    vpa = yaml.safe_load((MANIFESTS / "samples" / "vpa.yaml").read_text())
    vpa["metadata"] = {"name": "grow", "namespace": ns}
    vpa["spec"]["targetRef"]["name"] = "grow"
    vpa["spec"]["updatePolicy"]["updateMode"] = "Initial"
    Applier(api).apply(vpa)
    client.AppsV1Api(api).create_namespaced_deployment(ns, grow_deployment((grow.small, grow.big)))
    first = eventually("grow running on the small pool", lambda: len(r := grow.running()) == 2 and r, timeout_s=60)
    assert [grow.pool_of(p) for p in first] == [grow.small, grow.small]
    # Admitted while its VPA had no target: left as the template says.
    assert all(p.spec.containers[0].resources.requests == {"cpu": "500m", "memory": "128Mi"} for p in first)
    grow.originals = [p.metadata.name for p in first]

    # The recommender's account writes the target (the test plays the recommender: a target it chose).
    as_recommender = client.CustomObjectsApi(recommender_api)
    obj = as_recommender.get_namespaced_custom_object(VPA, "v1", ns, "verticalpodautoscalers", "grow")
    obj["status"] = {"recommendation": {"containerRecommendations": [{
        "containerName": "app", "target": GROW_TARGET, "lowerBound": GROW_TARGET, "upperBound": GROW_TARGET,
        "uncappedTarget": GROW_TARGET}]}, "conditions": [{"type": "RecommendationProvided", "status": "True",
                                                          "lastTransitionTime": "2026-01-01T00:00:00Z"}]}
    as_recommender.replace_namespaced_custom_object_status(VPA, "v1", ns, "verticalpodautoscalers", "grow", obj)
    [rs] = client.AppsV1Api(api).list_namespaced_replica_set(ns, label_selector="app=grow").items
    probe = api.sanitize_for_serialization(rs.spec.template)
    probe["metadata"].update({"generateName": "grow-probe-", "ownerReferences": [{
        "apiVersion": "apps/v1", "kind": "ReplicaSet", "name": rs.metadata.name, "uid": rs.metadata.uid,
        "controller": True}]})
    eventually("the webhook admitting a pod of grow at its target", lambda: core.create_namespaced_pod(
        ns, probe, dry_run="All").spec.containers[0].resources.requests == GROW_TARGET, timeout_s=30, interval_s=0.5)
    # Mode Initial: the running updater left the pods where they were.
    assert sorted(p.metadata.name for p in grow.running()) == sorted(grow.originals)

    make_sim(NodePool(name=grow.big, count=1, cpu_millicores=8000, memory_bytes=32 * 2**30), tick_s=0.2,
             crash_backoff_s=0.5)
    vpa["spec"]["updatePolicy"]["updateMode"] = "InPlaceOrRecreate"
    Applier(api).apply(vpa)
    return grow


def test_a_full_cycle_runs_as_the_service_accounts(
    install: Install, cluster: Any, namespace: str, make_sim: SimFactory, prometheus: LocalPrometheus,
    tmp_path: Path,
) -> None:
    api, ns = install.api, namespace
    core, apps, custom = client.CoreV1Api(api), client.AppsV1Api(api), client.CustomObjectsApi(api)
    backfill(prometheus, tmp_path, ns, time.time() - 120)
    pool = f"{ns[-6:]}-a"
    make_sim(NodePool(name=pool, count=2, cpu_millicores=8000, memory_bytes=32 * 2**30), tick_s=0.2,
             crash_backoff_s=0.5)
    labels = {"app": "web"}
    apps.create_namespaced_deployment(ns, {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
        "spec": {"replicas": 2, "selector": {"matchLabels": labels}, "template": {
            # Opted out of the (not yet served) webhook, so pod creation does not wait for its timeout.
            "metadata": {"labels": {**labels, "podtailor.io/admission": "skip"}, "annotations": {
                "nodesim.podtailor.io/usage": json.dumps({"kind": "constant", "cpu_cores": 0.1,
                                                          "memory_bytes": 100 * Mi})}},
            "spec": {"nodeSelector": {POOL_KEY: pool}, "terminationGracePeriodSeconds": 1, "containers": [{
                "name": "app", "image": "registry.invalid/app:1",
                "resources": {"requests": {"cpu": "1", "memory": "256Mi"}, "limits": {"cpu": "2", "memory": "512Mi"}},
                "resizePolicy": [{"resourceName": "cpu", "restartPolicy": "NotRequired"},
                                 {"resourceName": "memory", "restartPolicy": "NotRequired"}]}]}}}})
    client.PolicyV1Api(api).create_namespaced_pod_disruption_budget(ns, {
        "metadata": {"name": "web"}, "spec": {"maxUnavailable": 1, "selector": {"matchLabels": labels}}})
    # The sample VPA, in this namespace (validated by the VPA CRD); the policy covers only this namespace.
    vpa = yaml.safe_load((MANIFESTS / "samples" / "vpa.yaml").read_text())
    vpa["metadata"]["namespace"] = ns
    Applier(api).apply(vpa)
    policy = f"{ns}-policy"[:63]
    custom.create_cluster_custom_object(PT, "v1alpha1", "resizepolicies", {
        "apiVersion": f"{PT}/v1alpha1", "kind": "ResizePolicy", "metadata": {"name": policy},
        "spec": {"namespaces": [ns], "steps": [{"fraction": 0, "bake": "1s"}, {"fraction": 1, "bake": "1s"}],
                 "minPodAge": "0s", "changeThreshold": 0.05}})
    tokens = {sa: sa_token(api, sa) for sa in NEEDS}
    kubeconfigs = {sa: sa_kubeconfig(cluster, tmp_path, sa, t) for sa, t in tokens.items()}
    procs: list[subprocess.Popen[bytes]] = []
    manifest_hook = by_kind(install.objs, "MutatingWebhookConfiguration")[0]["webhooks"][0]["clientConfig"]
    try:
        eventually("web pods running", lambda: len(running_pods(core, ns)) == 2, timeout_s=60)

        # 1. Recommend: `podtailor-recommender run` as its ServiceAccount, leading through its Lease.
        rec_log = tmp_path / "recommender.log"
        rec = spawn(["recommender", "run", "--kubeconfig", str(kubeconfigs["podtailor-recommender"]),
                     "--prometheus-url", prometheus.url, "-n", ns, "--scrape-interval", "60s", "--history", "5d",
                     "--interval", "2s", "--listen", f"127.0.0.1:{free_port()}", "--leader-election-namespace", NS,
                     "--log-format", "json"], rec_log)
        procs.append(rec)
        status = eventually("a recommendation in the VPA status", lambda: custom.get_namespaced_custom_object(
            VPA, "v1", ns, "verticalpodautoscalers", "web").get("status", {}).get("recommendation"), timeout_s=40)
        code, err = stop(rec, rec_log)
        assert code == 0, err
        target_cpu = parse_cpu_millicores(status["containerRecommendations"][0]["target"]["cpu"])
        assert target_cpu < 500, status
        lease = client.CoordinationV1Api(api).read_namespaced_lease("podtailor-recommender", NS)
        assert lease.spec.holder_identity
        checkpoint = custom.get_namespaced_custom_object(PT, "v1alpha1", ns, "recommendercheckpoints", "web")
        assert checkpoint["spec"]["containers"], "the leader checkpointed on its way out"

        # 2. Plan: the updater's dry run, as its ServiceAccount.
        upd_args = ["--kubeconfig", str(kubeconfigs["podtailor-updater"]), "-n", ns, "--pool-label", POOL_KEY]
        planned = subprocess.run([sys.executable, "-m", "updater", "plan", *upd_args, "-o", "json"],
                                 capture_output=True, text=True, timeout=60, check=False)
        assert planned.returncode == 0, planned.stderr[-3000:]
        [plan] = [p for p in json.loads(planned.stdout)["plans"] if p["policy"] == policy]
        assert sorted(pod for b in plan["batches"] for pod in b["pods"]) == sorted(
            f"{ns}/{p.metadata.name}" for p in running_pods(core, ns)), plan

        # 3. Resize in place: `podtailor-updater run` as its ServiceAccount until the rollout completes. It keeps
        # running (a controller) through step 4, where it falls back.
        port, upd_log = free_port(), tmp_path / "updater.log"
        upd = spawn(["updater", "run", *upd_args, "--interval", "1s", "--listen", f"127.0.0.1:{port}",
                     "--leader-election-namespace", NS, "--log-format", "json"], upd_log)
        procs.append(upd)

        def rollouts() -> list[dict[str, Any]]:
            return [r for r in custom.list_cluster_custom_object(PT, "v1alpha1", "resizerollouts")["items"]
                    if r["spec"]["policy"] == policy]

        def completed(pool_name: str) -> bool:
            mine = [r for r in rollouts() if r["spec"]["pool"] == pool_name]
            return bool(mine) and all(r.get("status", {}).get("phase") == "Completed" for r in mine)

        eventually("the rollout completed", lambda: completed(pool), timeout_s=40, interval_s=0.5)
        metrics = get(f"http://127.0.0.1:{port}/metrics")
        pods = running_pods(core, ns)
        assert [parse_cpu_millicores(p.status.container_statuses[0].resources.requests["cpu"]) for p in pods] == [
            target_cpu, target_cpu]
        assert all(p.status.container_statuses[0].restart_count == 0 for p in pods)
        assert (sample(metrics, "podtailor_updater_resizes_total", 'outcome="ok"') or 0) >= 2, metrics
        assert client.CoordinationV1Api(api).read_namespaced_lease("podtailor-updater", NS).spec.holder_identity
        # Verification is reported once per batch, on the (cluster-scoped) rollout: its Events live in default.
        rollout_names = {r["metadata"]["name"] for r in rollouts()}
        events = core.list_namespaced_event("default").items
        assert any(e.source and e.source.component == "podtailor-updater" and e.reason == "BatchVerified"
                   and e.involved_object.name in rollout_names for e in events)

        # 4. Admit, then fall back. The webhook runs as its ServiceAccount; the installed configuration is
        # routed to it; the API server then calls it for every new pod not labelled podtailor.io/admission=skip.
        webhook = Webhook(kubeconfigs["podtailor-webhook"], tmp_path)
        procs.append(webhook.proc)
        eventually("the webhook ready", lambda: webhook.get("/readyz"), timeout_s=30, interval_s=0.3)
        route_webhook(api, webhook.client_config())
        probe = {"metadata": {"generateName": "probe-"},
                 "spec": {"containers": [{"name": "c", "image": "registry.invalid/probe:1"}]}}

        def called() -> bool:  # the API server loads a changed configuration asynchronously
            before = webhook.admissions()
            core.create_namespaced_pod(ns, probe, dry_run="All")
            return webhook.admissions() > before

        eventually("the API server calling the webhook", called, timeout_s=30, interval_s=0.3)
        grow = fall_back_and_admit(api, ns, make_sim, sa_client(cluster, tokens["podtailor-recommender"]))
        eventually("the fallback rollout completed", lambda: completed(grow.small), timeout_s=150, interval_s=1)
        # The updater evicted both pods (one per batch: 25% of 2 replicas rounds up to one)...
        [evicting] = [r for r in rollouts() if r["spec"]["pool"] == grow.small]
        entries = evicting["status"]["entries"]
        assert sorted(e["pod"] for e in entries) == sorted(grow.originals), entries
        assert [(e["action"], e["state"]) for e in entries] == [("evict", "Verified")] * 2, entries
        metrics = get(f"http://127.0.0.1:{port}/metrics")
        assert sample(metrics, "podtailor_updater_fallbacks_total", 'mode="evict",outcome="ok"') == 2.0, metrics
        code, err = stop(upd, upd_log)
        assert code == 0, err
        assert not refusals(upd_log) and not refusals(rec_log), err  # the manifests' RBAC covers the real code
        # ...and their replacements were admitted at the target by the webhook, so they run on the big pool.
        replaced = eventually("both replacements running", lambda: len(r := grow.running()) == 2 and r,
                              timeout_s=60)
        assert not {p.metadata.name for p in replaced} & set(grow.originals)
        for pod in replaced:
            assert pod.spec.containers[0].resources.requests == GROW_TARGET, pod.spec.containers[0].resources
            assert pod.metadata.annotations[ANNOTATION] == "grow: app cpu 2500m memory 128Mi"
            assert grow.pool_of(pod) == grow.big
        code, err = stop(webhook.proc, webhook.log)
        assert code == 0, err
        logged = [json.loads(line) for line in webhook.log.read_text().splitlines()]  # --log-format json
        assert [e["message"] for e in logged][:1] == ["webhook serving"], err
        assert not [e for e in logged if e["levelname"] in ("WARNING", "ERROR")], err  # e.g. a 403 on a list
        assert not refusals(webhook.log), err

        # The updater's account may evict (above) but never delete a pod.
        updater_api = sa_client(cluster, tokens["podtailor-updater"])
        with pytest.raises(client.ApiException) as refused:
            client.CoreV1Api(updater_api).delete_namespaced_pod(pods[0].metadata.name, ns)
        assert refused.value.status == 403
        # The template fallback, in this opted-in namespace only (a server-side dry run: authorized, not applied).
        client.RbacAuthorizationV1Api(api).create_namespaced_role_binding(ns, {
            "metadata": {"name": "podtailor-updater-template-fallback"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                        "name": "podtailor-updater-template-fallback"},
            "subjects": [{"kind": "ServiceAccount", "name": "podtailor-updater", "namespace": NS}]})
        patch = {"spec": {"template": {"metadata": {"annotations": {"podtailor.io/resized": "test"}}}}}
        def template_patch() -> Any:  # the RoleBinding reaches the authorizer's cache asynchronously: 403 until then
            try:
                return client.AppsV1Api(updater_api).patch_namespaced_deployment("web", ns, patch, dry_run="All")
            except client.ApiException as e:
                if e.status != 403:
                    raise
                return None

        eventually("template patch allowed", template_patch, timeout_s=10)
        # Neither the webhook's account nor the recommender's can read secrets.
        for sa in ("podtailor-webhook", "podtailor-recommender"):
            with pytest.raises(client.ApiException) as refused:
                client.CoreV1Api(sa_client(cluster, tokens[sa])).list_namespaced_secret(NS)
            assert refused.value.status == 403
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        route_webhook(api, manifest_hook)
        custom.delete_cluster_custom_object(PT, "v1alpha1", "resizepolicies", policy)
        for r in custom.list_cluster_custom_object(PT, "v1alpha1", "resizerollouts")["items"]:
            if r["spec"]["policy"] == policy:
                custom.delete_cluster_custom_object(PT, "v1alpha1", "resizerollouts", r["metadata"]["name"])
