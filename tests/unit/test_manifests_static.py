"""The install manifests, read as files: least-privilege RBAC, restricted pods, a hardened webhook.

No server and no kustomize here: every YAML file under manifests/ is parsed and checked against the rules
of the security reference (least-privilege RBAC, Pod Security "restricted", NetworkPolicy, webhook
hardening). tests/integration/test_manifests_real.py applies the same objects to a real API server.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from tests.builders.manifests import (
    BASE,
    BASE_OBJECTS,
    DOCS,
    MANIFESTS,
    NS,
    OBJECTS,
    REPO,
    Obj,
    grants,
    of_kind,
    one,
    rules_of,
    yaml_files,
)

IMAGE = "ghcr.io/podtailor/podtailor"


def test_every_yaml_file_parses_and_every_object_is_named() -> None:
    assert len(yaml_files()) >= 20
    for path, d in OBJECTS:
        assert d.get("apiVersion") and d.get("kind") and d["metadata"].get("name"), path


def test_kustomizations_name_existing_files_and_the_base_uses_every_file() -> None:
    used: set[Path] = set()
    for path, k in DOCS:
        if k["kind"] not in ("Kustomization", "Component"):
            continue
        refs = list(k.get("resources", [])) + list(k.get("components", []))
        refs += [f for g in k.get("configMapGenerator", []) for f in g.get("files", [])]
        for ref in refs:
            target = (path.parent / ref).resolve()
            assert target.exists(), f"{path}: {ref} does not exist"
            used.add(target)
    for path in yaml_files() + sorted(MANIFESTS.rglob("*.json")):
        if path.name.startswith("kustomization") or path.is_relative_to(MANIFESTS / "samples") \
                or path.is_relative_to(MANIFESTS / "helm"):  # the chart's own files (see yaml_files)
            continue
        if path.name == "autoscaling.k8s.io_verticalpodautoscalers.yaml":
            assert path.resolve() not in used, "the VPA CRD is optional: it must not be in the base"
            continue
        assert path.resolve() in used, f"{path} is not part of any kustomization"


def test_rbac_has_no_wildcards_and_nothing_the_reference_forbids() -> None:
    forbidden_resources = {"secrets", "pods/exec", "pods/attach", "pods/portforward", "pods/proxy", "nodes/proxy",
                           "serviceaccounts/token", "users", "groups", "serviceaccounts", "clusterroles", "roles",
                           "clusterrolebindings", "rolebindings", "configmaps", "certificatesigningrequests"}
    forbidden_verbs = {"*", "escalate", "bind", "impersonate", "delete", "deletecollection"}
    roles = [o for _, o in OBJECTS if o["kind"] in ("ClusterRole", "Role")]
    assert len(roles) >= 6
    for role in roles:
        assert role.get("rules") and "aggregationRule" not in role, role["metadata"]["name"]
        for rule in role["rules"]:
            where = f"{role['metadata']['name']}: {rule}"
            for field in ("apiGroups", "resources", "verbs", "resourceNames"):
                assert not any("*" in item for item in rule.get(field, [])), where
            assert "nonResourceURLs" not in rule, where
            assert not set(rule["verbs"]) & forbidden_verbs, where
            assert not set(rule["resources"]) & forbidden_resources, where
            if "" in rule["apiGroups"] and {"pods", "nodes"} & set(rule["resources"]):
                assert set(rule["verbs"]) <= {"get", "list", "watch"}, where


def test_each_service_account_is_granted_what_its_component_needs() -> None:
    assert {sa["metadata"]["name"] for sa in of_kind("ServiceAccount")} == {
        "podtailor-recommender", "podtailor-updater", "podtailor-webhook"}
    rec, upd, web = "podtailor-recommender", "podtailor-updater", "podtailor-webhook"
    vpa = "autoscaling.k8s.io"
    assert grants(rec, "list", vpa, "verticalpodautoscalers") and grants(rec, "update", vpa,
                                                                         "verticalpodautoscalers/status")
    assert grants(rec, "create", "podtailor.io", "recommendercheckpoints")
    assert grants(rec, "patch", "podtailor.io", "recommendercheckpoints")
    assert grants(rec, "get", "apps", "deployments") and grants(rec, "list", "", "pods")
    assert grants(rec, "patch", vpa, "verticalpodautoscalers"), "a DaemonSet's per-pool annotation"
    assert grants(rec, "list", "", "nodes"), "the pool of a DaemonSet's pod"
    assert grants(upd, "patch", "", "pods/resize") and grants(upd, "create", "", "pods/eviction")
    assert grants(upd, "create", "", "events") and grants(upd, "list", "", "nodes")
    assert grants(upd, "create", "podtailor.io", "resizerollouts")
    assert grants(upd, "update", "podtailor.io", "resizerollouts/status")
    assert grants(upd, "list", "podtailor.io", "resizepolicies")
    assert grants(web, "get", vpa, "verticalpodautoscalers") and grants(web, "list", vpa, "verticalpodautoscalers")
    # Division of labour: only the recommender writes VPA status, only the updater touches pods.
    assert not grants(upd, "update", vpa, "verticalpodautoscalers/status")
    assert not grants(web, "update", vpa, "verticalpodautoscalers/status")
    for sa in (rec, web):
        assert not grants(sa, "patch", "", "pods/resize") and not grants(sa, "create", "", "pods/eviction")
    for sa in (rec, upd, web):
        assert not grants(sa, "update", vpa, "verticalpodautoscalers")
        assert not grants(sa, "patch", "apps", "deployments"), "template patching is opt-in, not in the base"


def test_workload_patching_exists_only_in_the_unbound_template_fallback_role() -> None:
    writers = [(o["metadata"]["name"], r) for _, o in OBJECTS if o["kind"] in ("ClusterRole", "Role")
               for r in o["rules"] if "apps" in r["apiGroups"] and set(r["verbs"]) - {"get", "list", "watch"}]
    assert [name for name, _ in writers] == ["podtailor-updater-template-fallback"]
    assert writers[0][1]["verbs"] == ["patch"]
    assert set(writers[0][1]["resources"]) == {"deployments", "statefulsets", "daemonsets"}
    base_refs = {b["roleRef"]["name"] for b in of_kind("ClusterRoleBinding") + of_kind("RoleBinding")}
    assert "podtailor-updater-template-fallback" not in base_refs
    component = [o for p, o in OBJECTS if "template-fallback" in p.parts and o["kind"] == "ClusterRoleBinding"]
    assert component and component[0]["subjects"] == [
        {"kind": "ServiceAccount", "name": "podtailor-updater", "namespace": NS}]


@pytest.mark.parametrize("component", ["recommender", "updater"])
def test_leases_are_created_freely_but_read_and_renewed_only_by_name(component: str) -> None:
    sa = f"podtailor-{component}"
    lease_rules = [(scope, r) for scope, r in rules_of(sa) if "leases" in r["resources"]]
    assert lease_rules and all(scope == NS for scope, _ in lease_rules), "leases only in our namespace"
    for _, rule in lease_rules:
        if rule.get("resourceNames"):
            assert rule["resourceNames"] == [sa] and set(rule["verbs"]) <= {"get", "update", "patch", "watch"}
        else:
            assert rule["verbs"] == ["create"]
    assert grants(sa, "update", "coordination.k8s.io", "leases", NS, sa)
    other = "podtailor-updater" if component == "recommender" else "podtailor-recommender"
    assert not grants(sa, "update", "coordination.k8s.io", "leases", NS, other)
    deployment = one("Deployment", sa)
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert f"--leader-election-id={sa}" in args and "--leader-election-namespace=$(POD_NAMESPACE)" in args


def restricted(ctx: Obj, where: str) -> None:
    assert ctx.get("allowPrivilegeEscalation") is False, where
    assert ctx.get("readOnlyRootFilesystem") is True, where
    assert ctx.get("runAsNonRoot") is True, where
    assert ctx.get("capabilities", {}).get("drop") == ["ALL"] and not ctx["capabilities"].get("add"), where
    assert ctx.get("seccompProfile", {}).get("type") == "RuntimeDefault", where
    assert not ctx.get("privileged"), where


@pytest.mark.parametrize("name", ["podtailor-recommender", "podtailor-updater", "podtailor-webhook"])
def test_deployments_are_replicated_probed_bounded_and_restricted(name: str) -> None:
    d = one("Deployment", name)
    assert d["metadata"]["namespace"] == NS and d["spec"]["replicas"] == 2
    pod = d["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == name
    assert d["spec"]["selector"]["matchLabels"].items() <= d["spec"]["template"]["metadata"]["labels"].items()
    psc = pod["securityContext"]
    assert psc["runAsNonRoot"] is True and psc["runAsUser"] > 0 and psc["seccompProfile"]["type"] == "RuntimeDefault"
    for key in ("hostNetwork", "hostPID", "hostIPC"):
        assert not pod.get(key), key
    for volume in pod.get("volumes", []):
        assert set(volume) - {"name"} <= {"emptyDir", "secret", "configMap", "projected", "downwardAPI"}, volume
    for c in pod.get("initContainers", []) + pod["containers"]:
        where = f"{name}/{c['name']}"
        restricted(c["securityContext"], where)
        assert c["image"].startswith(f"{IMAGE}:"), where
        assert {"cpu", "memory"} <= set(c["resources"]["requests"]), where
        assert "memory" in c["resources"]["limits"], where
        for probe in ("livenessProbe", "readinessProbe"):
            assert c.get(probe), f"{where} lacks {probe}"
        assert not any(p.get("hostPort") for p in c.get("ports", [])), where
        mounts = {m["mountPath"] for m in c.get("volumeMounts", [])}
        assert "/tmp" in mounts, f"{where}: a read-only root needs a writable /tmp"
        env = {e["name"]: e for e in c.get("env", [])}
        assert env["POD_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"
        named_ports = {p["name"] for p in c["ports"]}
        for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
            port = c.get(probe, {}).get("httpGet", {}).get("port")
            assert port is None or port in named_ports, f"{where} {probe} port {port}"


def _selects(monitor: dict[str, Any], labels: dict[str, str]) -> bool:
    sel = monitor["spec"]["selector"]
    if not sel.get("matchLabels", {}).items() <= labels.items():
        return False
    return all(labels.get(e["key"]) in e["values"] for e in sel.get("matchExpressions", []) if e["operator"] == "In")


def test_every_deployment_has_a_pdb_a_service_and_is_scraped() -> None:
    monitors = of_kind("ServiceMonitor")
    for d in of_kind("Deployment"):
        pod_labels = d["spec"]["template"]["metadata"]["labels"]
        ports = {p["name"] for c in d["spec"]["template"]["spec"]["containers"] for p in c["ports"]}
        [pdb] = [p for p in of_kind("PodDisruptionBudget")
                 if p["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()]
        assert pdb["spec"]["minAvailable"] == 1
        [svc] = [s for s in of_kind("Service") if s["spec"]["selector"].items() <= pod_labels.items()]
        assert {p["targetPort"] for p in svc["spec"]["ports"]} <= ports
        # Exactly one ServiceMonitor scrapes the Service, on a port the Service has.
        [monitor] = [m for m in monitors if _selects(m, svc["metadata"]["labels"])]
        assert {e["port"] for e in monitor["spec"]["endpoints"]} <= {p["name"] for p in svc["spec"]["ports"]}


def test_the_webhook_is_hardened() -> None:
    [mwc] = of_kind("MutatingWebhookConfiguration")
    assert mwc["webhooks"]
    for hook in mwc["webhooks"]:
        assert hook["failurePolicy"] == "Ignore"
        assert 1 <= hook["timeoutSeconds"] <= 5
        assert hook["sideEffects"] == "None"
        assert "v1" in hook["admissionReviewVersions"]
        assert hook["rules"] and all(r["operations"] == ["CREATE"] and r["resources"] == ["pods"]
                                     for r in hook["rules"])
        [expr] = [e for e in hook["namespaceSelector"]["matchExpressions"]
                  if e["key"] == "kubernetes.io/metadata.name"]
        assert expr["operator"] == "NotIn" and {"kube-system", "kube-node-lease", NS} <= set(expr["values"])
        svc_ref = hook["clientConfig"]["service"]
        svc = one("Service", svc_ref["name"])
        assert svc_ref["namespace"] == NS and svc_ref["port"] in {p["port"] for p in svc["spec"]["ports"]}


def test_the_namespace_enforces_restricted_pod_security() -> None:
    [ns] = of_kind("Namespace")
    assert ns["metadata"]["name"] == NS
    labels = ns["metadata"]["labels"]
    for mode in ("enforce", "audit", "warn"):
        assert labels[f"pod-security.kubernetes.io/{mode}"] == "restricted"
    assert all(o["metadata"].get("namespace") in (None, NS) for o in BASE_OBJECTS)


def test_network_policy_denies_by_default_and_opens_only_what_is_needed() -> None:
    policies = of_kind("NetworkPolicy")
    [deny] = [p for p in policies if p["spec"]["podSelector"] == {}]
    assert set(deny["spec"]["policyTypes"]) == {"Ingress", "Egress"}
    assert "ingress" not in deny["spec"] and "egress" not in deny["spec"]
    egress_ports = {p["port"] for pol in policies for e in pol["spec"].get("egress", []) for p in e.get("ports", [])}
    assert egress_ports == {53, 443, 6443, 9090}
    ingress = [r for pol in policies for r in pol["spec"].get("ingress", [])]
    assert all(r.get("ports") for r in ingress), "every ingress rule names its ports"


def test_the_dockerfile_is_multi_stage_non_root_and_matches_the_deployments() -> None:
    text = (REPO / "Dockerfile").read_text()
    assert len(re.findall(r"^FROM ", text, re.M)) >= 2
    assert re.search(r"^COPY --from=build ", text, re.M)
    users = re.findall(r"^USER (\S+)", text, re.M)
    assert users, "the final stage sets USER"
    uid = users[-1].split(":")[0]
    assert uid.isdigit() and int(uid) > 0, "a numeric non-root UID, so that runAsNonRoot can be verified"
    for d in of_kind("Deployment"):
        assert d["spec"]["template"]["spec"]["securityContext"]["runAsUser"] == int(uid)
        for c in d["spec"]["template"]["spec"]["containers"]:
            assert c["command"][0] in ("podtailor-recommender", "podtailor-updater")
    [kustomization] = [d for p, d in DOCS if p == BASE / "kustomization.yaml"]
    assert [i["name"] for i in kustomization["images"]] == [IMAGE]


def test_the_samples_are_safe_to_apply() -> None:
    samples = [d for p, d in OBJECTS if p.is_relative_to(MANIFESTS / "samples")]
    [policy] = of_kind("ResizePolicy", samples)
    assert policy["spec"]["namespaces"] and NS in policy["spec"]["excludedNamespaces"]
    assert policy["spec"]["steps"][0]["fraction"] == 0 and policy["spec"]["steps"][-1]["fraction"] == 1
    [vpa] = of_kind("VerticalPodAutoscaler", samples)
    assert vpa["spec"]["recommenders"] == [{"name": "podtailor"}]


def test_the_dry_run_overlay_removes_the_updater_and_the_webhook_by_label() -> None:
    [overlay] = [d for p, d in DOCS if p == MANIFESTS / "overlays" / "dry-run" / "kustomization.yaml"]
    [patch] = overlay["patches"]
    assert "$patch: delete" in patch["patch"]
    selector = patch["target"]["labelSelector"]
    removed = [o for o in BASE_OBJECTS
               if o["metadata"].get("labels", {}).get("app.kubernetes.io/component") in ("updater", "webhook")]
    assert "updater" in selector and "webhook" in selector
    kinds = {(o["kind"], o["metadata"]["name"]) for o in removed}
    assert ("Deployment", "podtailor-updater") in kinds
    assert ("MutatingWebhookConfiguration", "podtailor-webhook") in kinds
    assert ("ClusterRole", "podtailor-updater-template-fallback") in kinds
