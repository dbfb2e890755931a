"""The admission webhook against the real API server: the server calls it over TLS, and pods start at the target.

The webhook runs as a subprocess (``python -m updater.webhook``) on 127.0.0.1 with a self-managed CA and
``--webhook-url``; it registers its own MutatingWebhookConfiguration (a name unique to the test, deleted
afterwards: it is cluster-scoped). The test plays the recommender by writing VPA status through the status
subresource. Pods run on simulated nodes. Then the webhook is killed: pods must still be created, with the
template's resources (failurePolicy Ignore).
"""

from __future__ import annotations

import base64
import json
import os
import signal
import ssl
import subprocess
import sys
import tempfile
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from tests.conftest import SimFactory
from tests.harness.process import free_port
from tests.nodesim.nodes import POOL_LABEL_KEYS, NodePool
from tests.waiting import eventually
from updater.webhook.review import ANNOTATION

pytestmark = pytest.mark.cluster
REPO = Path(__file__).resolve().parents[2]
POOL_KEY = POOL_LABEL_KEYS["podtailor"]
TEMPLATE = {"requests": {"cpu": "500m", "memory": "256Mi"}, "limits": {"cpu": "1", "memory": "512Mi"}}
TARGET = {"cpu": "250m", "memory": "128Mi"}
# Expected for TEMPLATE and TARGET: requests = target; limits keep the 2:1 ratio: ceil(1000 x 250 / 500) = 500m,
# ceil(512Mi x 128Mi / 256Mi) = 256Mi.
MUTATED = {"requests": {"cpu": "250m", "memory": "128Mi"}, "limits": {"cpu": "500m", "memory": "256Mi"}}


class Cluster:
    def __init__(self, api: client.ApiClient) -> None:
        self.core, self.apps = client.CoreV1Api(api), client.AppsV1Api(api)
        self.custom, self.admission = client.CustomObjectsApi(api), client.AdmissionregistrationV1Api(api)

    def vpa(self, ns: str, name: str, mode: str) -> None:
        group = ("autoscaling.k8s.io", "v1", ns, "verticalpodautoscalers")
        self.custom.create_namespaced_custom_object(*group, {
            "apiVersion": "autoscaling.k8s.io/v1", "kind": "VerticalPodAutoscaler", "metadata": {"name": name},
            "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
                     "updatePolicy": {"updateMode": mode}}})
        obj = self.custom.get_namespaced_custom_object(*group, name)
        obj["status"] = {"recommendation": {"containerRecommendations": [{
            "containerName": "app", "target": TARGET, "lowerBound": TARGET, "upperBound": TARGET,
            "uncappedTarget": TARGET}]}}
        self.custom.replace_namespaced_custom_object_status(*group, name, obj)

    def deployment(self, ns: str, name: str, pool: str, replicas: int) -> None:
        labels = {"app": name}
        container = {"name": "app", "image": "registry.invalid/app:1", "resources": TEMPLATE}
        self.apps.create_namespaced_deployment(ns, {
            "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
            "spec": {"replicas": replicas, "selector": {"matchLabels": labels}, "template": {
                "metadata": {"labels": labels, "annotations": {"nodesim.podtailor.io/usage": json.dumps(
                    {"kind": "constant", "cpu_cores": 0.05, "memory_bytes": 50 * 2**20})}},
                "spec": {"nodeSelector": {POOL_KEY: pool}, "terminationGracePeriodSeconds": 1,
                         "containers": [container]}}}})

    def pods(self, ns: str, app: str) -> list[client.V1Pod]:
        return list(self.core.list_namespaced_pod(ns, label_selector=f"app={app}").items)

    def probe(self, ns: str) -> bool:
        """A dry-run pod owned by a ReplicaSet of Deployment "web" (by its pod-template-hash): mutated once the
        API server has picked up our configuration."""
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {
            "generateName": "probe-", "labels": {"pod-template-hash": "probe1"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-probe1",
                                 "uid": "00000000-0000-0000-0000-000000000001", "controller": True}]},
            "spec": {"containers": [{"name": "app", "image": "registry.invalid/app:1", "resources": TEMPLATE}]}}
        created = self.core.create_namespaced_pod(ns, pod, dry_run="All")
        return ANNOTATION in (created.metadata.annotations or {})


def resources_of(pod: client.V1Pod) -> dict[str, Any]:
    res = pod.spec.containers[0].resources
    return {"requests": res.requests, "limits": res.limits}


def get(url: str, ctx: ssl.SSLContext) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, context=ctx, timeout=2) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, ""
    except OSError:
        return 0, ""


@pytest.fixture
def own_namespace(api: client.ApiClient, namespace: str) -> Iterator[str]:
    core, name = client.CoreV1Api(api), f"{namespace[:55]}-own"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    eventually("default ServiceAccount", lambda: any(
        s.metadata.name == "default" for s in core.list_namespaced_service_account(name).items), timeout_s=30)
    try:
        yield name
    finally:
        core.delete_namespace(name)


def test_pods_start_at_the_target_and_creation_fails_open(
    api: client.ApiClient, cluster: Any, crds: list[str], namespace: str, own_namespace: str, make_sim: SimFactory
) -> None:
    c = Cluster(api)
    pool = f"{namespace[-6:]}-wh"
    make_sim(NodePool(name=pool, count=1, cpu_millicores=16000, memory_bytes=32 * 2**30), tick_s=0.5)
    c.vpa(namespace, "web", "InPlaceOrRecreate")
    c.vpa(namespace, "quiet", "Off")
    c.vpa(own_namespace, "web", "Auto")
    port, config_name = free_port(), f"podtailor-test-{namespace}"[:63]
    log = tempfile.NamedTemporaryFile(prefix="webhook-", suffix=".log", delete=False)  # noqa: SIM115
    proc = subprocess.Popen(
        [sys.executable, "-m", "updater.webhook", "--kubeconfig", cluster.kubeconfig, "--listen", f"127.0.0.1:{port}",
         "--webhook-url", f"https://127.0.0.1:{port}/mutate", "--webhook-config-name", config_name,
         "--namespace", own_namespace, "--only-namespace", namespace, "--only-namespace", own_namespace,
         "--resync", "1s", "--log-level", "debug"],
        cwd=REPO, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        # The registered object: fail open, short timeout, our namespace and the system ones kept out.
        hook = eventually("registration", lambda: next(iter(
            c.admission.list_mutating_webhook_configuration(field_selector=f"metadata.name={config_name}").items),
            None), timeout_s=20).webhooks[0]
        assert (hook.failure_policy, hook.timeout_seconds, hook.side_effects) == ("Ignore", 5, "None")
        assert hook.admission_review_versions == ["v1"] and hook.reinvocation_policy == "IfNeeded"
        assert hook.client_config.url == f"https://127.0.0.1:{port}/mutate"
        assert hook.rules[0].operations == ["CREATE"] and hook.rules[0].resources == ["pods"]
        not_in = next(e for e in hook.namespace_selector.match_expressions if e.operator == "NotIn")
        assert not_in.key == "kubernetes.io/metadata.name"
        assert {"kube-system", "kube-node-lease", "kube-public", own_namespace} <= set(not_in.values)
        # /readyz over TLS, verified with the CA bundle the webhook registered (and the IP SAN 127.0.0.1).
        ca = base64.b64decode(hook.client_config.ca_bundle).decode()
        ctx = ssl.create_default_context(cadata=ca)
        eventually("webhook ready", lambda: get(f"https://127.0.0.1:{port}/readyz", ctx)[0] == 200, timeout_s=20)
        eventually("API server using the webhook", lambda: c.probe(namespace), timeout_s=20, interval_s=0.3)

        c.deployment(namespace, "web", pool, 2)
        c.deployment(namespace, "quiet", pool, 1)
        c.deployment(own_namespace, "web", pool, 1)
        web = eventually("web pods running", lambda: (pods := c.pods(namespace, "web")) and len(pods) == 2 and all(
            p.status.phase == "Running" and p.status.container_statuses for p in pods) and pods, timeout_s=40)
        for pod in web:
            assert resources_of(pod) == MUTATED
            assert pod.status.container_statuses[0].resources.requests == MUTATED["requests"]  # the kubelet's view
            assert pod.metadata.annotations[ANNOTATION] == "web: app cpu 250m memory 128Mi"
            assert pod.status.qos_class == "Burstable"
        quiet = eventually("quiet pod", lambda: c.pods(namespace, "quiet"), timeout_s=20)
        assert resources_of(quiet[0]) == TEMPLATE and ANNOTATION not in (quiet[0].metadata.annotations or {})
        own = eventually("pod in our own namespace", lambda: c.pods(own_namespace, "web"), timeout_s=20)
        assert resources_of(own[0]) == TEMPLATE and ANNOTATION not in (own[0].metadata.annotations or {})
        status, metrics = get(f"https://127.0.0.1:{port}/metrics", ctx)
        assert status == 200 and 'podtailor_webhook_admissions_total{outcome="mutated"}' in metrics
        assert 'podtailor_webhook_admissions_total{outcome="mode-off"} 1.0' in metrics

        # Webhook down: the API server cannot connect, ignores the failure and creates the pod unchanged.
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        c.apps.patch_namespaced_deployment_scale("web", namespace, {"spec": {"replicas": 3}})
        pods = eventually("a third web pod", lambda: len(p := c.pods(namespace, "web")) == 3 and p, timeout_s=20)
        fresh = [p for p in pods if p.metadata.name not in {w.metadata.name for w in web}]
        assert len(fresh) == 1 and resources_of(fresh[0]) == TEMPLATE
        assert ANNOTATION not in (fresh[0].metadata.annotations or {})
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        try:
            c.admission.delete_mutating_webhook_configuration(config_name)
        except client.ApiException as err:
            if err.status != 404:
                raise
        log.close()
        print(Path(log.name).read_text()[-4000:], file=sys.stderr)
        Path(log.name).unlink()
