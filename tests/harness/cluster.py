"""The local Kubernetes control plane: real etcd, kube-apiserver, kube-controller-manager, kube-scheduler.

Owns starting and stopping one cluster on 127.0.0.1: finds (or builds, through
``scripts/build-control-plane.sh``) the cached binaries, generates the PKI, picks free ports, starts each
component with its log in ``<workdir>/logs/``, waits for it to be healthy, writes an admin kubeconfig
and a ``cluster.json`` state file so that another process can attach to the cluster or stop it. The
kubelet is not here: nodes are the node simulator's job (``tests/nodesim``).
"""

from __future__ import annotations

import json
import os
import shutil
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import Any

import yaml

from tests.harness import certs
from tests.harness.process import HarnessError, Managed, free_port, http_ok, pid_alive, stop_pid, wait_until

REPO_ROOT = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = REPO_ROOT / "scripts" / "build-control-plane.sh"
COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")


def control_plane_bin_dir() -> Path:
    """Directory of the cached binaries; builds them on first use (prints progress to stderr)."""
    override = os.environ.get("PODTAILOR_K8S_BIN")
    if override:
        path = Path(override)
        if not all((path / c).exists() for c in COMPONENTS):
            raise HarnessError(f"PODTAILOR_K8S_BIN={override} lacks one of {', '.join(COMPONENTS)}")
        return path
    result = subprocess.run(
        ["bash", str(BUILD_SCRIPT)], stdout=subprocess.PIPE, text=True, check=False
    )
    if result.returncode != 0:
        raise HarnessError(f"building the control plane failed (exit {result.returncode}); see messages above")
    return Path(result.stdout.strip().splitlines()[-1])


def kubectl_bin() -> Path:
    """kubectl of the control plane's version, built beside it by ``scripts/build-control-plane.sh``."""
    path = control_plane_bin_dir() / "kubectl"
    if not path.exists():
        raise HarnessError(f"{path} is missing; scripts/build-control-plane.sh builds it with the control plane")
    return path


@dataclass(frozen=True, slots=True, kw_only=True)
class ClusterState:
    """What another process needs to use or stop a running cluster (saved as ``cluster.json``)."""

    workdir: str
    kubeconfig: str
    server: str
    ca_cert: str
    admin_cert: str
    admin_key: str
    version: str
    pids: dict[str, int]

    @classmethod
    def load(cls, workdir: Path) -> ClusterState:
        path = workdir / "cluster.json"
        try:
            return cls(**json.loads(path.read_text()))
        except FileNotFoundError:
            raise HarnessError(f"no cluster state at {path}; start one with `python -m tests.harness up`") from None

    def save(self) -> None:
        Path(self.workdir, "cluster.json").write_text(json.dumps(asdict(self), indent=2) + "\n")

    def running(self) -> bool:
        return all(pid_alive(pid) for pid in self.pids.values())

    def ssl_context(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=self.ca_cert)
        ctx.load_cert_chain(self.admin_cert, self.admin_key)
        return ctx

    def admin_call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        """One call to the API server as admin, a JSON merge patch for a body; the parsed answer, None for a 404."""
        req = urllib.request.Request(f"{self.server}{path}", method=method,
                                     data=None if body is None else json.dumps(body).encode(),
                                     headers={"Content-Type": "application/merge-patch+json"})
        try:
            with urllib.request.urlopen(req, context=self.ssl_context(), timeout=10) as resp:
                return json.loads(resp.read())
        except urllib.error.HTTPError as err:
            if err.code == 404:
                return None
            raise


def write_kubeconfig(path: Path, server: str, ca: Path, client: certs.ClientCert, user: str) -> Path:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "podtailor-local", "cluster": {"server": server, "certificate-authority": str(ca)}}],
        "users": [{"name": user, "user": {"client-certificate": str(client.cert), "client-key": str(client.key)}}],
        "contexts": [{"name": "podtailor-local", "context": {"cluster": "podtailor-local", "user": user}}],
        "current-context": "podtailor-local",
    }
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    path.chmod(0o600)
    return path


def user_kubeconfig(state: ClusterState, user: str, directory: Path) -> Path:
    """A kubeconfig of its own for ``user`` (in the group system:masters): a client certificate from the
    cluster's CA, so that the audit log and managedFields tell this user's writes apart. Made once."""
    path = directory / f"{user}.kubeconfig"
    if not path.exists():
        directory.mkdir(parents=True, exist_ok=True)
        pki = Path(state.ca_cert).parent
        cert = certs.issue_client(pki, f"user-{user}", user, "system:masters")
        write_kubeconfig(path, state.server, Path(state.ca_cert), cert, user)
    return path


class LocalCluster:
    """Start, use and stop one local control plane. Use as a context manager or call start()/stop()."""

    def __init__(self, workdir: Path, *, detached: bool = False, bin_dir: Path | None = None,
                 audit_policy: Mapping[str, Any] | None = None) -> None:
        self.workdir = workdir.resolve()
        self.detached = detached
        self.bin_dir = bin_dir
        self.audit_policy = audit_policy
        """An ``audit.k8s.io/v1`` Policy: the API server then writes its audit log, as JSON lines, to
        ``audit_log`` (what the disruption benchmark counts writes from)."""
        self.procs: list[Managed] = []
        self.state: ClusterState | None = None
        self.timings: dict[str, float] = {}

    # -- lifecycle -------------------------------------------------------------------------------------
    def start(self) -> ClusterState:
        t0 = time.monotonic()
        bin_dir = self.bin_dir or control_plane_bin_dir()
        self.timings["binaries_s"] = time.monotonic() - t0
        if self.workdir.exists():
            shutil.rmtree(self.workdir)
        (self.workdir / "logs").mkdir(parents=True)
        pki = certs.generate(self.workdir / "pki")
        t1 = time.monotonic()
        try:
            self._start_all(bin_dir, pki)
        except BaseException:
            self.stop()
            raise
        self.timings["start_s"] = time.monotonic() - t1
        assert self.state is not None
        return self.state

    def _start_all(self, bin_dir: Path, pki: certs.Pki) -> None:
        etcd_port, api_port = free_port(), free_port()
        server = f"https://127.0.0.1:{api_port}"
        etcd = self._spawn("etcd", self._etcd_argv(bin_dir, etcd_port))
        wait_until("etcd /health", lambda: http_ok(f"http://127.0.0.1:{etcd_port}/health"),
                   timeout_s=60, watched=[etcd])
        api = self._spawn("kube-apiserver", self._apiserver_argv(bin_dir, pki, etcd_port, api_port))
        admin_kc = write_kubeconfig(self.workdir / "admin.kubeconfig", server, pki.ca_cert, pki.admin, "admin")
        ctx = ssl.create_default_context(cafile=str(pki.ca_cert))
        ctx.load_cert_chain(str(pki.admin.cert), str(pki.admin.key))
        wait_until("kube-apiserver /readyz", lambda: http_ok(f"{server}/readyz", ctx),
                   timeout_s=120, interval_s=0.25, watched=[etcd, api])
        kcm_kc = write_kubeconfig(self.workdir / "controller-manager.kubeconfig", server, pki.ca_cert,
                             pki.controller_manager, "system:kube-controller-manager")
        sched_kc = write_kubeconfig(self.workdir / "scheduler.kubeconfig", server, pki.ca_cert, pki.scheduler,
                               "system:kube-scheduler")
        kcm_port, sched_port = free_port(), free_port()
        kcm = self._spawn("kube-controller-manager", self._kcm_argv(bin_dir, pki, kcm_kc, kcm_port))
        sched = self._spawn("kube-scheduler", self._scheduler_argv(bin_dir, sched_kc, sched_port))
        insecure = ssl._create_unverified_context()
        everything = [etcd, api, kcm, sched]
        for name, port in (("kube-controller-manager", kcm_port), ("kube-scheduler", sched_port)):
            url = f"https://127.0.0.1:{port}/healthz"
            wait_until(f"{name} /healthz", partial(http_ok, url, insecure), timeout_s=90, interval_s=0.25,
                       watched=everything)
        version = json.loads(_get(f"{server}/version", ctx))["gitVersion"]
        self.state = ClusterState(
            workdir=str(self.workdir), kubeconfig=str(admin_kc), server=server, ca_cert=str(pki.ca_cert),
            admin_cert=str(pki.admin.cert), admin_key=str(pki.admin.key), version=version,
            pids={p.name: p.pid for p in everything},
        )
        self.state.save()
        # The controller manager is really working once it has created the default ServiceAccount.
        wait_until("the default ServiceAccount (controller manager)",
                   lambda: http_ok(f"{server}/api/v1/namespaces/default/serviceaccounts/default", ctx),
                   timeout_s=90, interval_s=0.25, watched=everything)

    def stop(self) -> None:
        for proc in reversed(self.procs):
            proc.stop()
        self.procs.clear()

    def __enter__(self) -> ClusterState:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def audit_log(self) -> Path:
        return self.workdir / "logs" / "audit.log"

    # -- helpers ---------------------------------------------------------------------------------------
    def _spawn(self, name: str, argv: list[str]) -> Managed:
        proc = Managed(name=name, argv=argv, log_path=self.workdir / "logs" / f"{name}.log",
                       detached=self.detached)
        proc.start()
        self.procs.append(proc)
        return proc

    def _etcd_argv(self, bin_dir: Path, port: int) -> list[str]:
        peer = f"http://127.0.0.1:{free_port()}"
        return [
            str(bin_dir / "etcd"), "--name=default", f"--data-dir={self.workdir / 'etcd'}",
            f"--listen-client-urls=http://127.0.0.1:{port}", f"--advertise-client-urls=http://127.0.0.1:{port}",
            f"--listen-peer-urls={peer}", f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=default={peer}", "--unsafe-no-fsync=true",
            "--quota-backend-bytes=8589934592", "--log-level=warn",
        ]

    def _apiserver_argv(self, bin_dir: Path, pki: certs.Pki, etcd_port: int, port: int) -> list[str]:
        return [
            str(bin_dir / "kube-apiserver"), f"--etcd-servers=http://127.0.0.1:{etcd_port}",
            "--bind-address=127.0.0.1", f"--secure-port={port}", "--advertise-address=127.0.0.1",
            f"--tls-cert-file={pki.serving_cert}", f"--tls-private-key-file={pki.serving_key}",
            f"--client-ca-file={pki.ca_cert}", "--authorization-mode=RBAC",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={pki.sa_public_key}",
            f"--service-account-signing-key-file={pki.sa_private_key}",
            "--service-cluster-ip-range=10.96.0.0/16", "--allow-privileged=true",
            "--endpoint-reconciler-type=none", "--profiling=false", f"--cert-dir={self.workdir / 'pki'}",
            "--max-requests-inflight=800", "--max-mutating-requests-inflight=400",
            *self._audit_flags(),
        ]

    def _audit_flags(self) -> list[str]:
        if self.audit_policy is None:
            return []
        policy = self.workdir / "audit-policy.yaml"
        policy.write_text(yaml.safe_dump(dict(self.audit_policy), sort_keys=False))
        return [f"--audit-policy-file={policy}", f"--audit-log-path={self.audit_log}", "--audit-log-format=json",
                "--audit-log-mode=blocking"]

    def _kcm_argv(self, bin_dir: Path, pki: certs.Pki, kubeconfig: Path, port: int) -> list[str]:
        return [
            str(bin_dir / "kube-controller-manager"), f"--kubeconfig={kubeconfig}",
            f"--authentication-kubeconfig={kubeconfig}", f"--authorization-kubeconfig={kubeconfig}",
            "--bind-address=127.0.0.1", f"--secure-port={port}", f"--cert-dir={self.workdir / 'kcm-certs'}",
            "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics",
            f"--service-account-private-key-file={pki.sa_private_key}", f"--root-ca-file={pki.ca_cert}",
            f"--cluster-signing-cert-file={pki.ca_cert}", f"--cluster-signing-key-file={pki.ca_key}",
            "--use-service-account-credentials=true", "--leader-elect=false", "--controllers=*",
            "--kube-api-qps=200", "--kube-api-burst=400", "--profiling=false",
        ]

    def _scheduler_argv(self, bin_dir: Path, kubeconfig: Path, port: int) -> list[str]:
        config: dict[str, Any] = {
            "apiVersion": "kubescheduler.config.k8s.io/v1",
            "kind": "KubeSchedulerConfiguration",
            "clientConnection": {"kubeconfig": str(kubeconfig), "qps": 200, "burst": 400},
            "leaderElection": {"leaderElect": False},
        }
        cfg = self.workdir / "scheduler-config.yaml"
        cfg.write_text(yaml.safe_dump(config))
        return [
            str(bin_dir / "kube-scheduler"), f"--config={cfg}",
            f"--authentication-kubeconfig={kubeconfig}", f"--authorization-kubeconfig={kubeconfig}",
            "--bind-address=127.0.0.1", f"--secure-port={port}", f"--cert-dir={self.workdir / 'sched-certs'}",
            "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics",
        ]


def _get(url: str, ctx: ssl.SSLContext) -> str:
    import urllib.request

    with urllib.request.urlopen(url, context=ctx, timeout=10) as resp:
        return str(resp.read().decode())


def stop_detached(workdir: Path) -> list[str]:
    """Stop a cluster started with ``detached=True`` by another process; returns what was stopped."""
    state = ClusterState.load(workdir)
    stopped = []
    for name in reversed(COMPONENTS):
        pid = state.pids.get(name)
        if pid and pid_alive(pid):
            stop_pid(pid)
            stopped.append(name)
    return stopped
