"""The README's install commands, run verbatim with a real kubectl against the local control plane.

kubectl is built from ``k8s.io/kubernetes/cmd/kubectl`` at the control plane's version by
scripts/build-control-plane.sh (same wrapper module, cached). Each marked block of "Running it on your own
cluster" runs line by line through ``bash -c`` in the repository root, as a user would paste it, with only
KUBECONFIG and PATH set. The full install must bring up the three Deployments and the webhook
configuration; the dry-run install only the recommender. A ``kubectl`` line the README shows outside a
marked block fails the test: every command it prints is one a test runs. The Prometheus Operator's
ServiceMonitor CRD is a stated prerequisite of both installs; a minimal one is installed first, as the
manifests test does. Cluster-scoped objects other than CRDs, and the namespace, are removed afterwards.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from tests.crds import SERVICE_MONITOR_CRD, ensure_crd
from tests.harness.cluster import ClusterState, kubectl_bin
from tests.readme import block, unmarked_kubectl_lines
from tests.waiting import eventually

pytestmark = pytest.mark.cluster

REPO = Path(__file__).resolve().parents[2]
NS = "podtailor-system"


def run(line: str, env: dict[str, str]) -> str:
    done = subprocess.run(["bash", "-c", line], cwd=REPO, env=env, capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 0, f"README command failed ({done.returncode}): {line}\n{done.stderr[-3000:]}"
    return done.stdout


@pytest.fixture
def user_env(cluster: ClusterState) -> dict[str, str]:
    path = f"{kubectl_bin().parent}:{os.environ['PATH']}"
    return {"HOME": os.environ.get("HOME", "/root"), "PATH": path, "KUBECONFIG": cluster.kubeconfig}


def _gone(core: client.CoreV1Api) -> bool:
    try:
        core.read_namespace(NS)
    except client.ApiException as err:
        return err.status == 404
    return False


@pytest.fixture
def clean_install(api: client.ApiClient, user_env: dict[str, str]) -> Iterator[None]:
    """Nothing of podtailor-system before (an earlier test's namespace may still be terminating) or after."""
    core = client.CoreV1Api(api)
    created_crd = ensure_crd(api, SERVICE_MONITOR_CRD)
    eventually(f"namespace {NS} absent", lambda: _gone(core), timeout_s=120, interval_s=0.5)
    try:
        yield
    finally:
        rendered = run("kubectl kustomize manifests/", user_env)
        objects = [doc for doc in rendered.split("\n---\n") if "kind: CustomResourceDefinition" not in doc]
        subprocess.run([str(kubectl_bin()), "delete", "--ignore-not-found", "--wait=false", "-f", "-"],
                       input="\n---\n".join(objects), env=user_env, capture_output=True, text=True, timeout=120,
                       check=False)
        eventually(f"namespace {NS} deleted", lambda: _gone(core), timeout_s=120, interval_s=0.5)
        if created_crd:
            client.ApiextensionsV1Api(api).delete_custom_resource_definition(SERVICE_MONITOR_CRD["metadata"]["name"])


def _deployments(api: client.ApiClient) -> set[str]:
    return {d.metadata.name for d in client.AppsV1Api(api).list_namespaced_deployment(NS).items}


def _webhooks(api: client.ApiClient) -> set[str]:
    items = client.AdmissionregistrationV1Api(api).list_mutating_webhook_configuration().items
    return {w.metadata.name for w in items if w.metadata.name.startswith("podtailor")}


def test_every_kubectl_command_in_the_readme_is_in_a_block_a_test_runs() -> None:
    assert unmarked_kubectl_lines() == []
    for name in ("install-full", "install-dry-run"):
        assert any(line.startswith("kubectl apply") for line in block(name))


def test_the_readme_full_install_runs_verbatim(api: client.ApiClient, user_env: dict[str, str],
                                                clean_install: None) -> None:
    for line in block("install-full"):
        run(line, user_env)
    assert _deployments(api) == {"podtailor-recommender", "podtailor-updater", "podtailor-webhook"}
    assert _webhooks(api) == {"podtailor-webhook"}
    # The CRDs the install brought are served: kubectl resolves the resources by name.
    for resource in ("verticalpodautoscalers", "resizerollouts", "resizepolicies", "recommendercheckpoints"):
        run(f"kubectl get {resource} -A", user_env)


def test_the_readme_dry_run_install_runs_verbatim(api: client.ApiClient, user_env: dict[str, str],
                                                   clean_install: None) -> None:
    for line in block("install-dry-run"):
        run(line, user_env)
    assert _deployments(api) == {"podtailor-recommender"}
    assert _webhooks(api) == set()
