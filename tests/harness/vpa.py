"""The real Vertical Pod Autoscaler 1.8.1 against the local cluster: recommender, updater, admission controller.

Owns finding VPA's binaries (``scripts/build-vpa.sh`` builds them from the Go module proxy into
``~/.cache/podtailor/vpa-<version>/bin`` on first use), installing its ``VerticalPodAutoscalerCheckpoint`` CRD
from the module's own ``deploy/vpa-v1-crd-gen.yaml`` (the VPA CRD itself is ours, ``manifests/crds``, which the
compatibility tests hold to VPA's), and starting each component as a child process on 127.0.0.1, each with a
client certificate of its own (a user in ``system:masters`` named after it, so the audit log and the
managedFields tell its writes apart) and its log in ``<workdir>/logs``:

- the admission controller with its own CA and serving certificate, registering its
  MutatingWebhookConfiguration by URL (``--register-by-url``, ``https://127.0.0.1:<port>``) as its deploy
  scripts do with a Service, and publishing its status Lease (which the updater waits for);
- the recommender, with ``--storage=prometheus`` and the label flags that match our cAdvisor-style backfill
  (``PROMETHEUS_FLAGS``) when given a Prometheus URL, else with checkpoints;
- the updater.

Every component is scoped to one namespace (``--vpa-object-namespace``) so that it never acts on other tests'
objects. Readiness is read from each component's own ``/metrics``.
"""

from __future__ import annotations

import json
import os
import subprocess
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import yaml

from tests.harness import certs
from tests.harness.cluster import ClusterState, user_kubeconfig
from tests.harness.process import HarnessError, Managed, free_port, http_ok, wait_until

REPO_ROOT = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = REPO_ROOT / "scripts" / "build-vpa.sh"
VPA_MODULE = "k8s.io/autoscaler/vertical-pod-autoscaler"
WEBHOOK_CONFIG = "vpa-webhook-config"
"""The MutatingWebhookConfiguration VPA's admission controller registers (a constant in its config.go)."""


def vpa_bin_dir() -> Path:
    """Directory of the cached VPA binaries; builds them on first use (progress on stderr)."""
    override = os.environ.get("PODTAILOR_VPA_BIN")
    if override:
        return Path(override)
    result = subprocess.run(["bash", str(BUILD_SCRIPT)], stdout=subprocess.PIPE, text=True, check=False)
    if result.returncode != 0:
        raise HarnessError(f"building VPA failed (exit {result.returncode}); see the messages above")
    return Path(result.stdout.strip().splitlines()[-1])


def vpa_version() -> str:
    return (vpa_bin_dir().parent / "VERSION").read_text().strip()


def vpa_source_dir() -> Path:
    """VPA's module source in the Go module cache (the build put it there): its deploy/ and docs."""
    gomodcache = subprocess.run(["go", "env", "GOMODCACHE"], capture_output=True, text=True, check=True).stdout
    path = Path(gomodcache.strip()) / f"{VPA_MODULE}@{vpa_version()}"
    if not path.is_dir():
        raise HarnessError(f"{path} is missing; scripts/build-vpa.sh downloads it")
    return path


def checkpoint_crd() -> dict[str, Any]:
    """VPA's own ``verticalpodautoscalercheckpoints.autoscaling.k8s.io`` CRD, from its deploy folder."""
    docs = yaml.safe_load_all((vpa_source_dir() / "deploy" / "vpa-v1-crd-gen.yaml").read_text())
    found: dict[str, Any] = next(d for d in docs if d and d["metadata"]["name"].startswith("verticalpodautoscalerch"))
    return found


PROMETHEUS_FLAGS = (
    # Our backfill (tests/nodesim/openmetrics.py) writes the series as kubelet's /metrics/cadvisor and
    # kube-state-metrics v2 name them, without a job label: these flags point VPA's history provider at them.
    "--prometheus-cadvisor-job-name=",  # no job matcher
    "--container-namespace-label=namespace", "--container-pod-name-label=pod", "--container-name-label=container",
    "--pod-namespace-label=namespace", "--pod-name-label=pod", "--pod-label-prefix=label_",
)


def _metric(port: int, name: str) -> float:
    """Sum of the samples of ``name`` (any labels) on a component's /metrics; 0 when absent."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        lines = resp.read().decode().splitlines()
    total = 0.0
    for line in lines:
        if line.startswith(name) and line[len(name):len(name) + 1] in ("{", " "):
            total += float(line.rsplit(" ", 1)[1])
    return total


@dataclass
class VpaComponent:
    """One running VPA process and its metrics port."""

    name: str
    proc: Managed
    metrics_port: int

    def metric(self, name: str) -> float:
        return _metric(self.metrics_port, name)

    def loops(self) -> int:
        """Completed main loops (recommender, updater): the count of their ``step="total"`` timer."""
        prefix = self.name.removeprefix("vpa-").replace("-", "_")
        return int(_metric_labelled(self.metrics_port, f"vpa_{prefix}_execution_latency_seconds_count",
                                    'step="total"'))

    def stop(self) -> None:
        self.proc.stop()


def _metric_labelled(port: int, name: str, label: str) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        lines = resp.read().decode().splitlines()
    return sum(float(x.rsplit(" ", 1)[1]) for x in lines if x.startswith(name + "{") and label in x)


@dataclass
class Vpa:
    """VPA's components for one namespace of ``cluster``; ``start_*`` each, ``stop()`` all."""

    cluster: ClusterState
    workdir: Path
    namespace: str
    components: list[VpaComponent] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.workdir = self.workdir.resolve()
        (self.workdir / "logs").mkdir(parents=True, exist_ok=True)
        self.bin_dir = vpa_bin_dir()

    def kubeconfig(self, user: str) -> Path:
        return user_kubeconfig(self.cluster, user, self.workdir)

    def _spawn(self, binary: str, args: Sequence[str], user: str | None = None) -> VpaComponent:
        port = free_port()
        name = f"{binary}-{len(self.components)}"
        argv = [str(self.bin_dir / binary), f"--kubeconfig={self.kubeconfig(user or binary)}",
                f"--address=127.0.0.1:{port}", f"--vpa-object-namespace={self.namespace}", "--v=2", *args]
        proc = Managed(name=name, argv=argv, log_path=self.workdir / "logs" / f"{name}.log")
        proc.start()
        component = VpaComponent(name=binary, proc=proc, metrics_port=port)
        self.components.append(component)
        wait_until(f"{binary} /metrics", partial(http_ok, f"http://127.0.0.1:{port}/metrics"), timeout_s=60,
                   interval_s=0.2, watched=[proc])
        return component

    def start_admission_controller(self, *extra: str, timeout_s: float = 60.0) -> VpaComponent:
        """Start it with its own TLS and wait until the API server has called it once (it registers its webhook
        10 s after start, a constant of its main.go, and the API server loads a configuration asynchronously)."""
        pki = certs.generate_serving(self.workdir / "admission-tls", "vpa-webhook")
        port = free_port()
        component = self._spawn("vpa-admission-controller", [
            f"--client-ca-file={pki.ca_cert}", f"--tls-cert-file={pki.cert}", f"--tls-private-key={pki.key}",
            f"--port={port}", "--register-by-url", "--webhook-address=https://127.0.0.1", f"--webhook-port={port}",
            "--webhook-timeout-seconds=10", *extra])
        wait_until("VPA's admission controller called by the API server",
                   partial(self._admission_called, component), timeout_s=timeout_s, interval_s=0.5,
                   watched=[component.proc])
        return component

    def _admission_called(self, component: VpaComponent) -> bool:
        before = component.metric("vpa_admission_controller_admission_latency_seconds_count")
        probe = {"apiVersion": "v1", "kind": "Pod", "metadata": {"generateName": "vpa-probe-"},
                 "spec": {"containers": [{"name": "c", "image": "registry.invalid/probe:1"}]}}
        self.request("POST", f"/api/v1/namespaces/{self.namespace}/pods?dryRun=All", probe)
        return component.metric("vpa_admission_controller_admission_latency_seconds_count") > before

    def start_recommender(self, *extra: str, prometheus_url: str | None = None, name: str = "default",
                          interval_s: float = 5.0, history: str = "8d", labels_metric: str | None = None,
                          wait_loops: int = 1) -> VpaComponent:
        """The recommender named ``name`` (it serves the VPAs that name it; ``default`` also those naming
        none). With ``prometheus_url`` it reads its history from there once at start (``--storage=prometheus``,
        which turns checkpoints off); the pod labels come from ``labels_metric`` (a range selector: VPA expects
        a matrix), by default ``kube_pod_labels`` of the namespace over the history. Waits for ``wait_loops``
        completed loops."""
        self.ensure_checkpoint_crd()  # it waits for its checkpoint informer to sync, whatever the storage
        args = [f"--recommender-name={name}", f"--recommender-interval={interval_s:g}s", *extra]
        if prometheus_url is not None:
            labels = labels_metric or f'kube_pod_labels{{namespace="{self.namespace}"}}[{history}]'
            args += ["--storage=prometheus", f"--prometheus-address={prometheus_url}", f"--history-length={history}",
                     f"--metric-for-pod-labels={labels}", *PROMETHEUS_FLAGS]
        component = self._spawn("vpa-recommender", args, user=f"vpa-recommender-{name}")
        self.wait_loops(component, wait_loops, timeout_s=120 + 5 * interval_s)
        return component

    def start_updater(self, *extra: str) -> VpaComponent:
        return self._spawn("vpa-updater", list(extra))

    def wait_loops(self, component: VpaComponent, count: int, timeout_s: float = 120.0) -> None:
        """Wait until ``component`` has completed ``count`` more main loops than now."""
        target = component.loops() + count
        wait_until(f"{count} loops of {component.name}", lambda: component.loops() >= target, timeout_s=timeout_s,
                   interval_s=0.2, watched=[component.proc])

    def ensure_checkpoint_crd(self) -> None:
        """Install VPA's checkpoint CRD unless it is there, and wait until it is served."""
        crd = checkpoint_crd()
        base = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
        try:
            self.request("POST", base, crd)
        except urllib.error.HTTPError as err:
            if err.code != 409:
                raise

        def established() -> bool:
            status = self.request("GET", f"{base}/{crd['metadata']['name']}").get("status") or {}
            return any(c["type"] == "Established" and c["status"] == "True" for c in (status.get("conditions") or []))

        wait_until("VPA's checkpoint CRD established", established, timeout_s=30, interval_s=0.1)

    def request(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(f"{self.cluster.server}{path}", method=method, data=data,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, context=self.cluster.ssl_context(), timeout=10) as resp:
            return json.loads(resp.read())

    def stop(self) -> None:
        for component in reversed(self.components):
            component.stop()
        if any(c.name == "vpa-admission-controller" for c in self.components):
            try:
                self.request("DELETE", f"/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/"
                                       f"{WEBHOOK_CONFIG}")
            except urllib.error.HTTPError as err:
                if err.code != 404:
                    raise
        self.components.clear()

    def __enter__(self) -> Vpa:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

