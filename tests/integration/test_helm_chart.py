"""The Helm chart (manifests/helm/podtailor) against the kustomize base, with a real Helm and a real API server.

Helm v4, built from its Go module by scripts/build-helm.sh (cached), renders the chart with ``helm template``.
For the default values the objects are exactly those of ``kustomize build manifests/`` (kustomize built by
scripts/build-kustomize.sh), once only Helm's own labels and the Namespace's keep policy are removed; with
``dryRun=true`` exactly the dry-run overlay's; with the cert-manager and template-fallback values exactly the
base plus those two components. Other values change what they name; bad values are refused by the schema
before anything renders; ``helm lint --strict`` passes (and fails on a broken copy of the chart).

On the local control plane (tests/conftest.py): the dry-run rendering is server-side applied with strict
field validation and accepted, and its recommender pods pass Pod Security admission; then the README's
Helm block (marked ``<!-- test: helm -->``) runs verbatim (a real ``helm install`` of the reports-only
mode, the upgrade to the full install, the uninstall), checked against the API server after each.
podtailor-system and the cluster-scoped names are shared with test_manifests_real.py and
test_readme_commands.py: each test waits for them to be gone before it starts and deletes what it made,
waiting until it is gone.
"""

from __future__ import annotations

import atexit
import difflib
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from tests.crds import SERVICE_MONITOR_CRD, wait_established
from tests.kube_apply import Applier, build, raw
from tests.readme import block
from tests.waiting import eventually

REPO = Path(__file__).resolve().parents[2]
MANIFESTS = REPO / "manifests"
CHART = MANIFESTS / "helm" / "podtailor"
NS = "podtailor-system"
RELEASE = "podtailor"
MANAGER = "podtailor-helm-test"
HELM_LABELS = ("helm.sh/chart", "app.kubernetes.io/managed-by", "app.kubernetes.io/instance")
Obj = dict[str, Any]
Key = tuple[str, str, str]


# -- helm ----------------------------------------------------------------------------------------------
@cache
def helm_bin() -> str:
    done = subprocess.run(["bash", str(REPO / "scripts" / "build-helm.sh")], capture_output=True, text=True,
                          timeout=1200, check=False)
    assert done.returncode == 0, f"scripts/build-helm.sh failed:\n{done.stderr[-3000:]}"
    return done.stdout.strip().splitlines()[-1]


@cache
def helm_home() -> str:
    """Helm's cache, config and data directories: private to this test session, never the user's."""
    home = tempfile.mkdtemp(prefix="podtailor-helm-")
    atexit.register(shutil.rmtree, home, True)
    return home


def helm_env(kubeconfig: str | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HELM_") and k != "KUBECONFIG"}
    home = helm_home()
    env.update(HELM_CACHE_HOME=f"{home}/cache", HELM_CONFIG_HOME=f"{home}/config", HELM_DATA_HOME=f"{home}/data",
               PATH=f"{Path(helm_bin()).parent}{os.pathsep}{env.get('PATH', '')}")
    # Without a kubeconfig, point at nothing: `helm template` and `helm lint` must not need a cluster.
    env["KUBECONFIG"] = kubeconfig or os.devnull
    return env


def helm(*args: str, kubeconfig: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([helm_bin(), *args], capture_output=True, text=True, timeout=300, check=False, cwd=REPO,
                          env=helm_env(kubeconfig))


def render(*sets: str, chart: Path = CHART) -> list[Obj]:
    """`helm template` with --include-crds (kustomize's base has the CRDs) and each --set given."""
    args = ["template", RELEASE, str(chart), "--include-crds"]
    for s in sets:
        args += ["--set", s]
    done = helm(*args)
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def key(obj: Obj) -> Key:
    return (obj["kind"], obj["metadata"].get("namespace", ""), obj["metadata"]["name"])


def helm_normalized(objs: list[Obj]) -> dict[Key, Obj]:
    """Helm's rendering without Helm's own labels and the Namespace's keep policy, which kustomize lacks; every
    templated object must carry them (CRDs from crds/ are not templated and carry none)."""
    out = {}
    for obj in objs:
        meta = obj["metadata"]
        labels = meta.get("labels", {})
        if obj["kind"] != "CustomResourceDefinition":
            assert labels.get("app.kubernetes.io/managed-by") == "Helm", key(obj)
            assert labels.get("app.kubernetes.io/instance") == RELEASE, key(obj)
            assert labels.get("helm.sh/chart") == "podtailor-0.1.0", key(obj)
        for label in HELM_LABELS:
            labels.pop(label, None)
        if obj["kind"] == "Namespace":
            assert meta.pop("annotations") == {"helm.sh/resource-policy": "keep"}
        out[key(obj)] = obj
    assert len(out) == len(objs), "two rendered objects share a kind, namespace and name"
    return out


def assert_same_objects(helm_objs: list[Obj], kustomize_objs: list[Obj]) -> None:
    ours, theirs = helm_normalized(helm_objs), {key(o): o for o in kustomize_objs}
    assert len(theirs) == len(kustomize_objs)
    assert sorted(ours) == sorted(theirs), (f"only in helm: {sorted(set(ours) - set(theirs))}; "
                                            f"only in kustomize: {sorted(set(theirs) - set(ours))}")
    diffs = []
    for k in sorted(theirs):
        if ours[k] != theirs[k]:
            diffs.append(f"{k}:\n" + "\n".join(difflib.unified_diff(
                yaml.safe_dump(theirs[k]).splitlines(), yaml.safe_dump(ours[k]).splitlines(), "kustomize", "helm",
                lineterm="")))
    assert not diffs, "\n".join(diffs)


def by_kind(objs: list[Obj], kind: str) -> list[Obj]:
    return [o for o in objs if o["kind"] == kind]


def container(objs: list[Obj], deployment: str) -> Obj:
    [d] = [o for o in by_kind(objs, "Deployment") if o["metadata"]["name"] == deployment]
    [c] = d["spec"]["template"]["spec"]["containers"]
    return dict(c)


# -- rendering (no cluster) ----------------------------------------------------------------------------
def test_default_values_render_exactly_the_kustomize_base() -> None:
    rendered = render()
    assert_same_objects(rendered, build(MANIFESTS))
    # What the comparison covered: the whole install, the CRDs from the chart's crds/ and the dashboard from files/.
    assert len(rendered) == 36
    assert {c["metadata"]["name"] for c in by_kind(rendered, "CustomResourceDefinition")} == {
        "recommendercheckpoints.podtailor.io", "resizepolicies.podtailor.io", "resizerollouts.podtailor.io"}
    [dashboard] = by_kind(rendered, "ConfigMap")
    assert dashboard["data"]["podtailor-dashboard.json"] == (
        MANIFESTS / "base" / "monitoring" / "podtailor-dashboard.json").read_text()


def test_dry_run_renders_exactly_the_dry_run_overlay() -> None:
    rendered = render("dryRun=true")
    assert_same_objects(rendered, build(MANIFESTS / "overlays" / "dry-run"))
    assert [d["metadata"]["name"] for d in by_kind(rendered, "Deployment")] == ["podtailor-recommender"]
    assert not by_kind(rendered, "MutatingWebhookConfiguration")


def test_cert_manager_and_template_fallback_values_render_the_components(tmp_path: Path) -> None:
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    rel = os.path.relpath(MANIFESTS, overlay)
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump({
        "resources": [rel], "components": [f"{rel}/components/template-fallback", f"{rel}/components/cert-manager"],
        "images": [{"name": "ghcr.io/podtailor/podtailor", "newTag": "0.2.0"}],
        # The base labels only its own objects part-of podtailor; the chart labels the components' objects too.
        "labels": [{"pairs": {"app.kubernetes.io/part-of": "podtailor"}, "includeSelectors": False}]}))
    rendered = render("webhook.certManager=true", "updater.templateFallbackClusterWide=true", "image.tag=0.2.0")
    assert_same_objects(rendered, build(overlay))
    assert {container(rendered, d)["image"] for d in ("podtailor-recommender", "podtailor-updater",
                                                      "podtailor-webhook")} == {"ghcr.io/podtailor/podtailor:0.2.0"}


def test_shards_values_render_the_shards_component(tmp_path: Path) -> None:
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    rel = os.path.relpath(MANIFESTS, overlay)
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump({
        "resources": [rel], "components": [f"{rel}/components/shards"]}))
    rendered = render("recommender.shards=6", "recommender.replicas=3")
    assert_same_objects(rendered, build(overlay))
    assert "--shards=6" in container(rendered, "podtailor-recommender")["args"]


def test_values_change_what_they_name_and_nothing_else() -> None:
    default = render()
    changed = render("namespace.name=pt-prod", "monitoringNamespace=obs", "logFormat=text",
                     "recommender.prometheusUrl=https://vm.obs.svc:8428/select/0/prometheus",
                     "recommender.extraArgs={--serve-all-vpas,--history=14d}", "recommender.replicas=3",
                     "updater.resources.requests.cpu=250m", "updater.extraArgs={--pool-label=pool}",
                     "webhook.caBundle=Q0E=", "webhook.failurePolicy=Fail", "networkPolicy.prometheusPort=8428")
    def kinds_names(objs: list[Obj]) -> list[str]:
        return sorted(f"{o['kind']}/{o['metadata']['name']}" for o in objs if o["kind"] != "Namespace")

    assert kinds_names(changed) == kinds_names(default)
    text = json.dumps(changed)
    assert NS not in text and "podtailor-system" not in text
    assert {o["metadata"].get("namespace") for o in changed if o["kind"] not in (
        "Namespace", "CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding",
        "MutatingWebhookConfiguration")} == {"pt-prod"}
    [namespace] = by_kind(changed, "Namespace")
    assert namespace["metadata"]["name"] == "pt-prod"
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    subjects = [s for o in changed for s in o.get("subjects", [])]
    assert subjects and {s["namespace"] for s in subjects} == {"pt-prod"}
    rec = container(changed, "podtailor-recommender")
    assert rec["args"] == ["run", "--prometheus-url=https://vm.obs.svc:8428/select/0/prometheus",
                           "--listen=0.0.0.0:8942", "--leader-election-namespace=$(POD_NAMESPACE)",
                           "--leader-election-id=podtailor-recommender", "--log-format=text", "--serve-all-vpas",
                           "--history=14d"]
    upd = container(changed, "podtailor-updater")
    assert upd["args"][-2:] == ["--log-format=text", "--pool-label=pool"]
    assert upd["resources"] == {"requests": {"cpu": "250m", "memory": "192Mi"}, "limits": {"memory": "512Mi"}}
    assert container(changed, "podtailor-webhook")["args"][-1] == "--log-format=text"
    [deployment] = [d for d in by_kind(changed, "Deployment") if d["metadata"]["name"] == "podtailor-recommender"]
    assert deployment["spec"]["replicas"] == 3
    [hook] = by_kind(changed, "MutatingWebhookConfiguration")[0]["webhooks"]
    assert hook["clientConfig"] == {"caBundle": "Q0E=", "service": {
        "name": "podtailor-webhook", "namespace": "pt-prod", "path": "/mutate", "port": 443}}
    assert hook["failurePolicy"] == "Fail"
    assert hook["namespaceSelector"]["matchExpressions"][0]["values"][-1] == "pt-prod"
    [prom] = [p for p in by_kind(changed, "NetworkPolicy")
              if p["metadata"]["name"] == "podtailor-recommender-egress-prometheus"]
    assert prom["spec"]["egress"] == [{"to": [{"namespaceSelector": {
        "matchLabels": {"kubernetes.io/metadata.name": "obs"}}}], "ports": [{"protocol": "TCP", "port": 8428}]}]
    # Switched off: no ServiceMonitor, no NetworkPolicy, no dashboard, no Namespace; the rest is unchanged.
    bare = render("serviceMonitor.enabled=false", "networkPolicy.enabled=false", "dashboard.enabled=false",
                  "namespace.create=false")
    gone = {"ServiceMonitor", "NetworkPolicy", "ConfigMap", "Namespace"}
    assert sorted(map(key, bare)) == sorted(key(o) for o in default if o["kind"] not in gone)


def test_the_updaters_prometheus_adds_its_flag_and_its_egress_and_nothing_else() -> None:
    """``updater.prometheusUrl`` (for the canary analyses): unset, the render is the default one; set, the updater
    gets ``--prometheus-url`` and one more NetworkPolicy, its egress to Prometheus's port in the monitoring
    namespace, and no other object changes."""
    default = render()
    changed = render("updater.prometheusUrl=http://prometheus-operated.obs.svc:9090", "monitoringNamespace=obs")
    added = [o for o in changed if o["kind"] == "NetworkPolicy"
             and o["metadata"]["name"] == "podtailor-updater-egress-prometheus"]
    assert len(added) == 1 and len(changed) == len(default) + 1
    [rule] = added[0]["spec"]["egress"]
    assert rule["to"] == [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "obs"}}}]
    assert rule["ports"] == [{"protocol": "TCP", "port": 9090}]
    assert added[0]["spec"]["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "updater"
    args = container(changed, "podtailor-updater")["args"]
    assert "--prometheus-url=http://prometheus-operated.obs.svc:9090" in args
    assert not any(a.startswith("--prometheus-url") for a in container(default, "podtailor-updater")["args"])


def test_the_pool_label_goes_to_all_three_components_and_nothing_else() -> None:
    """``poolLabel`` (#38: the canary's pool key, and a DaemonSet's per-pool values, must agree across the
    recommender, the updater and the webhook): set, each of the three gets ``--pool-label`` after its own flags;
    every other field of every object is the default render's."""
    default, changed = render(), render("poolLabel=node.kubernetes.io/pool")
    assert sorted(map(key, changed)) == sorted(map(key, default))
    for name in ("podtailor-recommender", "podtailor-updater", "podtailor-webhook"):
        assert container(changed, name)["args"] == [*container(default, name)["args"],
                                                     "--pool-label=node.kubernetes.io/pool"]
        assert not any(a.startswith("--pool-label") for a in container(default, name)["args"])
    flag = '"--pool-label=node.kubernetes.io/pool", '
    text = sorted(json.dumps(o, sort_keys=True).replace(flag, "").replace(', "--pool-label=node.kubernetes.io/pool"',
                                                                        "") for o in changed)
    assert text == sorted(json.dumps(o, sort_keys=True) for o in default)


@pytest.mark.parametrize(("setting", "complaint"), [
    ("dryrun=true", "additional properties 'dryrun' not allowed"),
    ("dryRun=maybe", "/dryRun"),
    ("logFormat=xml", "/logFormat"),
    ("recommender.prometheusUrl=prometheus:9090", "/recommender/prometheusUrl"),
    ("recommender.port=0", "/recommender/port"),
    ("updater.extraArgs={run}", "/updater/extraArgs/0"),
    ("updater.prometheusUrl=prometheus:9090", "/updater/prometheusUrl"),
    ("webhook.failurePolicy=Open", "/webhook/failurePolicy"),
    ("namespace.name=Podtailor_System", "/namespace/name"),
    ("image.pullPolicy=Sometimes", "/image/pullPolicy"),
    ("poolLabel=-pool", "/poolLabel"),
    ("poolLabel=a/b/c", "/poolLabel"),
])
def test_bad_values_are_refused_before_anything_renders(setting: str, complaint: str) -> None:
    done = helm("template", RELEASE, str(CHART), "--set", setting)
    assert done.returncode != 0
    assert done.stdout == ""
    assert "values don't meet the specifications of the schema" in done.stderr and complaint in done.stderr, done.stderr


def test_an_empty_namespace_name_is_the_releases_but_never_a_system_namespace() -> None:
    done = helm("template", RELEASE, str(CHART), "--namespace", "pt-release", "--set", "namespace.name=")
    assert done.returncode == 0, done.stderr
    objs = [d for d in yaml.safe_load_all(done.stdout) if d]
    assert {o["metadata"].get("namespace") for o in objs if o["kind"] == "Deployment"} == {"pt-release"}
    assert [n["metadata"]["name"] for n in by_kind(objs, "Namespace")] == ["pt-release"]
    for ns in ("default", "kube-system"):
        done = helm("template", RELEASE, str(CHART), "--namespace", ns, "--set", "namespace.name=")
        assert done.returncode != 0 and done.stdout == ""
        assert f'namespace.create would take over the namespace "{ns}"' in done.stderr, done.stderr
    # Into an existing namespace, without making it: allowed (its Pod Security labels are then the owner's).
    done = helm("template", RELEASE, str(CHART), "--set", "namespace.name=kube-system,namespace.create=false")
    assert done.returncode == 0, done.stderr
    assert not by_kind([d for d in yaml.safe_load_all(done.stdout) if d], "Namespace")


def test_helm_lint_passes_and_can_fail(tmp_path: Path) -> None:
    for extra in ([], ["--set", "dryRun=true"], ["--set", "webhook.certManager=true"]):
        done = helm("lint", "--strict", str(CHART), *extra)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "1 chart(s) linted, 0 chart(s) failed" in done.stdout, done.stdout
    broken = tmp_path / "podtailor"
    shutil.copytree(CHART, broken)
    (broken / "templates" / "broken.yaml").write_text("kind: ConfigMap\nmetadata: {name: {{ .Values.nope.x }}}\n")
    done = helm("lint", "--strict", str(broken))
    assert done.returncode != 0 and "1 chart(s) failed" in done.stderr, done.stdout + done.stderr
    assert "[ERROR] templates/: podtailor/templates/broken.yaml" in done.stdout, done.stdout


# -- on the real API server ----------------------------------------------------------------------------
def gone(api: client.ApiClient, what: str, path: str, timeout_s: float = 120) -> None:
    def absent() -> bool:
        try:
            raw(api, "GET", path)
        except client.ApiException as err:
            if err.status == 404:
                return True
            raise
        return False

    eventually(f"{what} gone", absent, timeout_s=timeout_s, interval_s=0.5)


def exists(api: client.ApiClient, applier: Applier, obj: Obj) -> bool:
    try:
        raw(api, "GET", applier.path(obj))
    except client.ApiException as err:
        if err.status == 404:
            return False
        raise
    return True


def missing(api: client.ApiClient, applier: Applier, objs: list[Obj]) -> list[Key]:
    return [key(o) for o in objs if not exists(api, applier, o)]


@pytest.fixture(scope="module")
def service_monitors(api: client.ApiClient) -> Iterator[None]:
    """The ServiceMonitor CRD (no Prometheus Operator here), as in test_manifests_real.py; removed afterwards
    (waiting until it is gone) when this module made it."""
    applier, ext = Applier(api), client.ApiextensionsV1Api(api)
    name = SERVICE_MONITOR_CRD["metadata"]["name"]
    if _terminating_crd(ext, name):  # another module's, on its way out
        gone(api, f"the terminating CRD {name}", applier.path(SERVICE_MONITOR_CRD))
    created = False
    if not exists(api, applier, SERVICE_MONITOR_CRD):
        applier.apply(SERVICE_MONITOR_CRD)
        created = True
    wait_established(api, name)
    try:
        yield
    finally:
        if created:
            applier.delete(SERVICE_MONITOR_CRD)
            gone(api, f"CRD {name}", applier.path(SERVICE_MONITOR_CRD))


def _terminating_crd(ext: client.ApiextensionsV1Api, name: str) -> bool:
    try:
        return ext.read_custom_resource_definition(name).metadata.deletion_timestamp is not None
    except client.ApiException as err:
        if err.status == 404:
            return False
        raise


def clear_install(api: client.ApiClient, objs: list[Obj]) -> None:
    """Delete every non-CRD object of a rendering (cluster-scoped ones by name) and the namespace, and wait until
    the namespace is gone; CRDs stay, as Helm leaves them."""
    applier = Applier(api)
    for obj in objs:
        if obj["kind"] not in ("CustomResourceDefinition", "Namespace") and "namespace" not in obj["metadata"]:
            applier.delete(obj)
    applier.delete({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    gone(api, f"namespace {NS}", f"/api/v1/namespaces/{NS}")


def free_namespace(api: client.ApiClient) -> None:
    """podtailor-system must not exist (another test may still be deleting it): wait for that, but never take
    over a namespace nobody is deleting."""
    try:
        ns = client.CoreV1Api(api).read_namespace(NS)
    except client.ApiException as err:
        if err.status == 404:
            return
        raise
    assert ns.metadata.deletion_timestamp is not None, f"{NS} exists and is not being deleted: a real install?"
    gone(api, f"the terminating namespace {NS}", f"/api/v1/namespaces/{NS}")


@pytest.mark.cluster
def test_the_dry_run_rendering_is_accepted_by_server_side_apply(
    api: client.ApiClient, service_monitors: None,
) -> None:
    free_namespace(api)
    objs = render("dryRun=true")
    applier = Applier(api)
    order = {"CustomResourceDefinition": 0, "Namespace": 1}
    try:
        for obj in sorted(objs, key=lambda o: order.get(o["kind"], 2)):
            # Strict field validation: an unknown or duplicated field is an error, not a warning.
            out = raw(api, "PATCH", applier.path(obj), body=json.dumps(obj),
                      query=[("fieldManager", MANAGER), ("force", "true"), ("fieldValidation", "Strict")],
                      content_type="application/apply-patch+yaml")
            assert out["kind"] == obj["kind"] and out["metadata"]["name"] == obj["metadata"]["name"]
            assert any(m["manager"] == MANAGER for m in out["metadata"]["managedFields"]), out["metadata"]
            if obj["kind"] == "CustomResourceDefinition":
                wait_established(api, obj["metadata"]["name"])
        assert not missing(api, applier, objs)
        core = client.CoreV1Api(api)
        assert core.read_namespace(NS).metadata.labels["pod-security.kubernetes.io/enforce"] == "restricted"
        # The recommender's pods passed Pod Security admission ("restricted", enforced); nothing else runs.
        sel = "app.kubernetes.io/name=podtailor,app.kubernetes.io/component=recommender"
        eventually("2 recommender pods created",
                   lambda: len(core.list_namespaced_pod(NS, label_selector=sel).items) == 2, timeout_s=60)
        assert [d.metadata.name for d in client.AppsV1Api(api).list_namespaced_deployment(NS).items] == [
            "podtailor-recommender"]
        assert not client.AdmissionregistrationV1Api(api).list_mutating_webhook_configuration(
            label_selector="app.kubernetes.io/name=podtailor").items
    finally:
        clear_install(api, objs)


def release(kubeconfig: str) -> Obj:
    done = helm("status", RELEASE, "--namespace", NS, "-o", "json", kubeconfig=kubeconfig)
    assert done.returncode == 0, done.stderr
    out: Obj = json.loads(done.stdout)
    return out


def run_verbatim(command: str, kubeconfig: str) -> str:
    started = time.monotonic()
    done = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=300, check=False, cwd=REPO,
                          env=helm_env(kubeconfig))
    assert done.returncode == 0, f"{command}\n{done.stdout}\n{done.stderr}"
    print(f"{command.split('#')[0].strip()}: {time.monotonic() - started:.1f}s")
    return done.stdout


@pytest.mark.cluster
def test_the_readme_helm_commands_install_upgrade_and_uninstall(
    cluster: Any, api: client.ApiClient, service_monitors: None,
) -> None:
    install, upgrade, uninstall = block("helm")
    assert install.startswith("helm install ") and "--set dryRun=true" in install
    # (helm upgrade without any value reuses the release's, so it says dryRun=false.)
    assert upgrade.startswith("helm upgrade ") and "--set dryRun=false" in upgrade
    assert uninstall.startswith("helm uninstall ")
    free_namespace(api)
    kubeconfig = cluster.kubeconfig
    applier, apps = Applier(api), client.AppsV1Api(api)
    dry, full = render("dryRun=true"), render()
    templated = [o for o in full if o["kind"] != "CustomResourceDefinition"]
    try:
        notes = run_verbatim(install, kubeconfig)  # the chart's NOTES.txt
        assert "in dry-run mode: the recommender writes VPA status and reports" in notes, notes
        rel = release(kubeconfig)
        assert (rel["info"]["status"], rel["version"]) == ("deployed", 1), rel["info"]
        # What Helm installed is what `helm template` renders, and the API server has every object of it.
        done = helm("get", "manifest", RELEASE, "--namespace", NS, kubeconfig=kubeconfig)
        assert done.returncode == 0, done.stderr
        manifest = [d for d in yaml.safe_load_all(done.stdout) if d]
        assert sorted(map(key, manifest)) == sorted(key(o) for o in dry if o["kind"] != "CustomResourceDefinition")
        assert not missing(api, applier, dry)
        assert [d.metadata.name for d in apps.list_namespaced_deployment(NS).items] == ["podtailor-recommender"]
        assert client.CoreV1Api(api).read_namespace(NS).metadata.labels[
            "pod-security.kubernetes.io/enforce"] == "restricted"

        notes = run_verbatim(upgrade, kubeconfig)
        assert "dry-run" not in notes and "The webhook needs the Secret podtailor-webhook-tls" in notes, notes
        rel = release(kubeconfig)
        assert (rel["info"]["status"], rel["version"]) == ("deployed", 2), rel["info"]
        assert not missing(api, applier, full)
        assert sorted(d.metadata.name for d in apps.list_namespaced_deployment(NS).items) == [
            "podtailor-recommender", "podtailor-updater", "podtailor-webhook"]
        deployment = apps.read_namespaced_deployment("podtailor-updater", NS)
        assert deployment.metadata.labels["app.kubernetes.io/managed-by"] == "Helm"

        # And back to reports only: the upgrade deletes what the updater and the webhook had, nothing else.
        done = helm("upgrade", RELEASE, str(CHART), "--namespace", NS, "--set", "dryRun=true", kubeconfig=kubeconfig)
        assert done.returncode == 0, done.stderr
        dry_keys = {key(o) for o in dry}
        for obj in full:
            if key(obj) not in dry_keys:
                gone(api, "/".join(key(obj)), applier.path(obj), timeout_s=60)
        assert not missing(api, applier, dry)

        run_verbatim(uninstall, kubeconfig)
        # Every templated object is deleted but the namespace (kept, as the chart says); the CRDs stay.
        for obj in templated:
            if obj["kind"] != "Namespace":
                gone(api, "/".join(key(obj)), applier.path(obj), timeout_s=60)
        assert client.CoreV1Api(api).read_namespace(NS).metadata.deletion_timestamp is None
        assert not missing(api, applier, by_kind(full, "CustomResourceDefinition"))
        listed = helm("list", "--namespace", NS, "-q", kubeconfig=kubeconfig)
        assert listed.returncode == 0 and listed.stdout.strip() == "", listed.stdout + listed.stderr
    finally:
        helm("uninstall", RELEASE, "--namespace", NS, kubeconfig=kubeconfig)
        clear_install(api, full)
