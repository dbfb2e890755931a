"""What drills 1-7 share besides their fixtures (tests/drills/conftest.py): a private control plane, invariants
sampled during the fault, updater drivers and the drills' result rows.

The private control plane: helpers to stop and start kube-apiserver or etcd of a drill module's own LocalCluster,
reach it through a fault proxy, and compact etcd. ``Invariants`` is a background thread that reads the API server
directly every ~0.5 s during a drill and records every breach: Ready pods of a workload below its floor, a request
or limit outside the admin bounds, a pod whose ``metadata.generation`` is ahead of the resizes its journal entries
allow, a pod replaced (an eviction) or a container restarted beyond the budget. ``PassLoop`` runs the in-process
Executor the way ``run`` does (a pass every interval, one broad catch), recording each pass. ``UpdaterProcess``
runs the real CLI. ``DrillRow`` appends the drill's one-line result to ``tests/artifacts/drills-1-7.json``.
"""

from __future__ import annotations

import base64
import builtins
import json
import os
import signal
import socket
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import yaml
from kubernetes import client

from podtailor.units import parse_cpu_millicores, parse_memory_bytes
from tests.builders.cluster import POOL_KEY, Scenario
from tests.harness.cluster import ClusterState, LocalCluster
from tests.harness.faultproxy import FaultProxy, Mode
from tests.harness.process import Managed, free_port, http_ok, wait_until
from updater.kube.writes import PodResizer, RolloutStore
from updater.rollout.act.executor import Executor
from updater.rollout.machine.journal import BatchPhase, EntryState, Rollout

REPO_ROOT = Path(__file__).resolve().parents[2]
ARTIFACT = REPO_ROOT / "tests" / "artifacts" / "drills-1-7.json"
UPDATER_CLI = Path(sys.executable).with_name("podtailor-updater")

# Resize requests the API server may have accepted for a journal entry in this state (the write may be in
# flight while Applying or Reverting; Skipped and Gone may follow a sent resize).
SENT_AT_MOST = {EntryState.PLANNED: 0, EntryState.APPLYING: 1, EntryState.APPLIED: 1, EntryState.VERIFIED: 1,
                EntryState.REVERTING: 2, EntryState.REVERTED: 2, EntryState.INFEASIBLE: 2, EntryState.SKIPPED: 1,
                EntryState.GONE: 2, EntryState.NOT_RESTORED: 2}
# ... and exactly, once the rollout has settled (only states that say it for sure).
SENT_EXACTLY = {EntryState.PLANNED: 0, EntryState.APPLIED: 1, EntryState.VERIFIED: 1, EntryState.REVERTED: 2,
                EntryState.NOT_RESTORED: 2}


def default_sa_exists(core: client.CoreV1Api, ns: str) -> bool:
    try:
        core.read_namespaced_service_account("default", ns)
        return True
    except client.ApiException:
        return False


# ------------------------------------------------------------------------------------------ private cluster
def state_of(local: LocalCluster) -> ClusterState:
    assert local.state is not None
    return local.state


def component(local: LocalCluster, name: str) -> Managed:
    return next(p for p in local.procs if p.name == name)


def wait_api_ready(local: LocalCluster, timeout_s: float = 60.0) -> None:
    state = state_of(local)
    wait_until("kube-apiserver /readyz", lambda: http_ok(f"{state.server}/readyz", state.ssl_context()),
               timeout_s=timeout_s, interval_s=0.2)


def stop_apiserver(local: LocalCluster, sim: FaultProxy) -> None:
    """Stop kube-apiserver, and kube-controller-manager with it. In a real control plane the controller
    manager is leader-elected and exits when it cannot renew for its 10 s renew deadline (then restarts with
    fresh informers); the harness runs it with --leader-elect=false, where it would keep a stale cache across
    the restart and mark every pod NotReady from it."""
    component(local, "kube-controller-manager").stop()
    sim.set_mode(Mode.HOLD)
    component(local, "kube-apiserver").stop()


def start_apiserver(local: LocalCluster, sim: FaultProxy) -> None:
    component(local, "kube-apiserver").start()
    wait_api_ready(local)
    sim.set_mode(Mode.PASS)
    component(local, "kube-controller-manager").start()


def api_port(local: LocalCluster) -> int:
    return int(state_of(local).server.rsplit(":", 1)[1])


def kubeconfig_via(local: LocalCluster, port: int, path: Path) -> Path:
    """A copy of the admin kubeconfig whose server is 127.0.0.1:``port`` (a fault proxy)."""
    kc = yaml.safe_load(Path(state_of(local).kubeconfig).read_text())
    kc["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{port}"
    path.write_text(yaml.safe_dump(kc))
    return path


def etcd_url(local: LocalCluster) -> str:
    flag = next(a for a in component(local, "etcd").argv if a.startswith("--listen-client-urls="))
    return flag.split("=", 1)[1]


def etcd_post(local: LocalCluster, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
    """etcd's v3 HTTP gateway (etcdctl is not installed): JSON with base64 keys."""
    req = urllib.request.Request(f"{etcd_url(local)}{path}", data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        out: dict[str, Any] = json.loads(resp.read())
        return out


def etcd_compact(local: LocalCluster) -> int:
    """Compact etcd at its current revision (physically); returns the revision."""
    rev = int(etcd_post(local, "/v3/kv/range", {"key": base64.b64encode(b"/").decode()})["header"]["revision"])
    etcd_post(local, "/v3/kv/compaction", {"revision": str(rev), "physical": True})
    return rev


# -------------------------------------------------------------------------------------------- invariants
@dataclass(frozen=True, slots=True, kw_only=True)
class Bounds:
    """Admin bounds per field ("requests.cpu" in millicores, "limits.memory" in bytes, ...)."""

    ranges: Mapping[str, tuple[int, int]]

    def breach(self, resources: Any) -> str | None:
        for key, (lo, hi) in self.ranges.items():
            kind, res = key.split(".")
            values = getattr(resources, kind) or {}
            if res not in values:
                return f"{key} missing"
            v = parse_cpu_millicores(values[res]) if res == "cpu" else parse_memory_bytes(values[res])
            if not lo <= v <= hi:
                return f"{key}={values[res]} outside [{lo}, {hi}]"
        return None


def journal_allows(rollouts: Sequence[Rollout], table: Mapping[EntryState, int]) -> dict[str, int | None]:
    """Pod key -> resize requests its journal entries stand for (None: a state with no exact answer)."""
    out: dict[str, int | None] = {}
    for r in rollouts:
        for e in r.entries:
            n = table.get(e.state)
            prev = out.get(e.key, 0)
            out[e.key] = None if n is None or prev is None else prev + n
    return out


SAMPLE_FLOOR = 5  # the samples a drill's invariant sampler must have taken for its "clean" to mean anything


def await_sample_floor(samples: Callable[[], int], sampler: threading.Thread, interval_s: float,
                       floor: int = SAMPLE_FLOOR, timeout_s: float = 60.0) -> None:
    """Let a drill's sampler reach its floor before it is stopped.

    On a loaded machine a drill can settle before its sampler (a list of pods and one of the journal per sample,
    none while the API server is down on purpose) has taken ``floor`` samples. Samples taken now check the
    settled state against the same invariants, so waiting for them makes the floor a matter of time, not of the
    machine's load; a sampler that cannot sample at all still fails the floor in ``assert_clean``.
    """
    deadline = time.monotonic() + timeout_s
    while samples() < floor and sampler.is_alive() and time.monotonic() < deadline:
        time.sleep(interval_s)


class Invariants:
    """Samples the namespace every ``interval_s`` (direct admin client) and records every breach."""

    def __init__(self, api: client.ApiClient, ns: str, *, min_ready: Mapping[str, int], bounds: Bounds,
                 max_restarts: int = 0, interval_s: float = 0.5) -> None:
        self.core = client.CoreV1Api(api)
        self.store = RolloutStore(api)
        self.ns, self.min_ready, self.bounds = ns, dict(min_ready), bounds
        self.max_restarts, self.interval_s = max_restarts, interval_s
        self.base = {f"{ns}/{p.metadata.name}": p.metadata.generation for p in self._pods()}
        self.uids = {p.metadata.uid for p in self._pods()}
        self.samples, self.unreachable = 0, 0
        self.violations: list[str] = []
        self.generations: dict[str, int] = dict(self.base)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="drill-invariants", daemon=True)

    def _pods(self) -> list[client.V1Pod]:
        return list(self.core.list_namespaced_pod(self.ns, _request_timeout=(2, 3)).items)

    def __enter__(self) -> Invariants:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if exc[0] is None:
            await_sample_floor(lambda: self.samples, self._thread, self.interval_s)
        self._stop.set()
        self._thread.join(timeout=10)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.check_once()
            except Exception:  # the API server (or etcd) is down on purpose: a gap, not a breach
                self.unreachable += 1

    def check_once(self) -> None:
        pods = self._pods()  # pods first, then the journal: a resize is journaled before it is sent
        allows = journal_allows([r for r in self.store.list()], SENT_AT_MOST)
        now = time.strftime("%H:%M:%S")
        ready: dict[str, int] = {}
        restarts = 0
        for p in pods:
            key = f"{self.ns}/{p.metadata.name}"
            app = (p.metadata.labels or {}).get("app", "")
            ok = p.status.phase == "Running" and not p.metadata.deletion_timestamp and bool(
                p.status.container_statuses) and all(c.ready for c in p.status.container_statuses)
            ready[app] = ready.get(app, 0) + int(ok)
            restarts += sum(c.restart_count for c in p.status.container_statuses or [])
            for c in p.spec.containers:
                why = self.bounds.breach(c.resources)
                if why:
                    self.violations.append(f"{now} {key}/{c.name}: {why}")
            if p.metadata.uid not in self.uids:
                self.violations.append(f"{now} {key}: replaced (uid {p.metadata.uid}): an eviction")
                self.uids.add(p.metadata.uid)
            gen, base = p.metadata.generation, self.base.get(key)
            if base is not None:
                if gen < self.generations.get(key, base):
                    self.violations.append(f"{now} {key}: generation went back to {gen}")
                self.generations[key] = gen
                allowed = allows.get(key, 0)
                if allowed is not None and gen - base > allowed:
                    self.violations.append(f"{now} {key}: generation +{gen - base} but the journal allows {allowed}")
        for app, floor in self.min_ready.items():
            if ready.get(app, 0) < floor:
                self.violations.append(f"{now} {app}: {ready.get(app, 0)} Ready pods, floor {floor}")
        if restarts > self.max_restarts:
            self.violations.append(f"{now} {restarts} container restarts, budget {self.max_restarts}")
        self.samples += 1

    def assert_clean(self, min_samples: int = SAMPLE_FLOOR) -> None:
        assert self.samples >= min_samples, f"only {self.samples} invariant samples"
        assert not self.violations, "\n".join(self.violations[:20])

    def exact_report(self, rollouts: Sequence[Rollout]) -> dict[str, tuple[int, int | None]]:
        """Pod key -> (generation bumps seen now, resizes the settled journal says were sent)."""
        now = {f"{self.ns}/{p.metadata.name}": p.metadata.generation for p in self._pods()}
        sent = journal_allows(rollouts, SENT_EXACTLY)
        return {k: (now[k] - b, sent.get(k, 0)) for k, b in self.base.items() if k in now}


def assert_each_resized_once(inv: Invariants, rollouts: Sequence[Rollout], pods: int) -> None:
    report = inv.exact_report(rollouts)
    assert len(report) == pods, report
    assert all(bumps == 1 and sent == 1 for bumps, sent in report.values()), report


# ------------------------------------------------------------------------------------------ updater drivers
@dataclass(frozen=True, slots=True, kw_only=True)
class PassRecord:
    started: float
    ended: float
    error: str = ""
    resized: int = 0
    new_rollouts: int = 0


class PassLoop:
    """``Executor.run_pass`` every ``interval_s`` in a thread, as the ``run`` command's loop does."""

    def __init__(self, executor: Executor, interval_s: float = 0.5) -> None:
        self.executor, self.interval_s = executor, interval_s
        self.records: list[PassRecord] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="drill-passes", daemon=True)

    def __enter__(self) -> PassLoop:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=60)
        assert not self._thread.is_alive(), "a pass hung for over a minute"

    def _loop(self) -> None:
        while not self._stop.is_set():
            t0 = time.monotonic()
            try:
                result = self.executor.run_pass(time.time())
                self.records.append(PassRecord(started=t0, ended=time.monotonic(), resized=result.resized,
                                               new_rollouts=len(result.started)))
            except Exception as err:  # the one broad catch, as in the run loop: the next pass re-reads
                self.records.append(PassRecord(started=t0, ended=time.monotonic(), error=f"{type(err).__name__}: "
                                                                                          f"{err}"))
            self._stop.wait(max(0.0, self.interval_s - (time.monotonic() - t0)))

    def between(self, t0: float, t1: float) -> list[PassRecord]:
        return [r for r in self.records if t0 <= r.started < t1]


def baking(r: Rollout, batch: int) -> bool:
    """Batch ``batch`` of ``r`` is baking (a rollout just created has no batches in its status yet)."""
    return len(r.batches) > batch and r.batches[batch].phase == BatchPhase.BAKING


def wait_settled(scenario: Scenario, loop: PassLoop, timeout_s: float = 120.0) -> None:
    """Until every rollout of the scenario is Completed, Halted or RolledBack; explains what it saw if not."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if scenario.settled():
                return
        except Exception:  # the API server may still be coming back
            pass
        time.sleep(0.5)
    journal = [(r.name, r.phase.value, r.message, [(e.pod, e.state.value, e.message) for e in r.entries])
               for r in scenario.rollouts()]
    pods = [(p.metadata.name, p.metadata.generation, p.status.observed_generation,
             [(c.type, c.status, c.reason) for c in p.status.conditions or []],
             [(c.ready, c.resources.requests if c.resources else None) for c in p.status.container_statuses or []])
            for p in scenario.core.list_namespaced_pod(scenario.ns).items]
    raise AssertionError(f"not settled after {timeout_s}s: {journal}; last passes: {loop.records[-3:]}; pods: {pods}")


@dataclass(frozen=True, slots=True, kw_only=True)
class ResizeCall:
    at: float
    pod: str
    resource_version: str
    generation: int | None
    error: str = ""


class RecordingResizer(PodResizer):
    """The real resizer, keeping a timestamped record of every call (a spy, not a fake)."""

    def __init__(self, api: client.ApiClient) -> None:
        super().__init__(api)
        self.calls: list[ResizeCall] = []
        self.lock = threading.Lock()

    def resize(self, namespace: str, pod: str, uid: str, resource_version: str, values: Sequence[Any],
               pod_level: Any = None) -> int:
        try:
            gen = super().resize(namespace, pod, uid, resource_version, values, pod_level)
        except Exception as err:
            with self.lock:
                self.calls.append(ResizeCall(at=time.monotonic(), pod=f"{namespace}/{pod}",
                                             resource_version=resource_version, generation=None, error=str(err)))
            raise
        with self.lock:
            self.calls.append(ResizeCall(at=time.monotonic(), pod=f"{namespace}/{pod}",
                                         resource_version=resource_version, generation=gen))
        return gen

    def landed(self) -> list[ResizeCall]:
        with self.lock:
            return [c for c in self.calls if c.generation is not None]


T = TypeVar("T")


@dataclass(frozen=True)
class ReadCall:
    started: float
    ended: float
    ok: bool


class ReadLog:
    """When each read of the cluster or of the journals started and returned, and whether it returned data. A
    pass is known by when its reads returned, not by when it began: a read begun during an outage may be held
    by the API server until the outage ends, and then answer from fresh data."""

    def __init__(self) -> None:
        self.calls: list[ReadCall] = []
        self.lock = threading.Lock()

    def timed(self, read: Callable[[], T]) -> T:
        t0, ok = time.monotonic(), False
        try:
            result = read()
            ok = True
            return result
        finally:
            with self.lock:
                self.calls.append(ReadCall(started=t0, ended=time.monotonic(), ok=ok))

    def answered(self) -> list[ReadCall]:
        with self.lock:
            return [c for c in self.calls if c.ok]


class RecordingStore(RolloutStore):
    """The real journal store, its ``list`` timed in ``log`` (a spy, not a fake)."""

    def __init__(self, api: client.ApiClient, log: ReadLog) -> None:
        super().__init__(api)
        self.log = log

    def list(self) -> builtins.list[Rollout]:
        return self.log.timed(super().list)


class UpdaterProcess:
    """One ``podtailor-updater run`` replica (the real CLI) with its own kubeconfig and log file."""

    def __init__(self, name: str, kubeconfig: Path, ns: str, workdir: Path, *, leader_elect: bool = True,
                 interval: str = "1s") -> None:
        argv = [str(UPDATER_CLI), "run", "--kubeconfig", str(kubeconfig), "-n", ns, "--pool-label", POOL_KEY,
                "--interval", interval, "--listen", f"127.0.0.1:{free_port()}", "--log-format", "json",
                "--leader-election-namespace", ns, "--leader-election-id", "podtailor-updater"]
        if not leader_elect:
            argv.append("--no-leader-elect")
        self.proc = Managed(name=name, argv=argv, log_path=workdir / f"{name}.log",
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
        self.exited_at: float | None = None

    def start(self) -> UpdaterProcess:
        self.proc.start()
        return self

    @property
    def identity(self) -> str:
        return f"{socket.gethostname()}-{self.proc.pid}"

    def kill(self) -> None:
        os.kill(self.proc.pid, signal.SIGKILL)

    def returncode(self) -> int | None:
        assert self.proc.proc is not None
        code = self.proc.proc.poll()
        if code is not None and self.exited_at is None:
            self.exited_at = time.monotonic()
        return code

    def stop(self) -> None:
        self.proc.stop(timeout_s=10)

    def log(self) -> str:
        return self.proc.log_path.read_text(errors="replace")


def lease_holder(api: client.ApiClient, ns: str, name: str = "podtailor-updater") -> str | None:
    try:
        lease = client.CoordinationV1Api(api).read_namespaced_lease(name, ns, _request_timeout=(2, 3))
    except client.ApiException:
        return None
    return str(lease.spec.holder_identity) if lease.spec and lease.spec.holder_identity else None


# ------------------------------------------------------------------------------------------- result rows
@dataclass
class DrillRow:
    drill: int
    name: str
    fault: str
    outcome: str = "failed"
    proof: list[str] = field(default_factory=list)
    seconds: float = 0.0
    t0: float = field(default_factory=time.monotonic)

    def prove(self, line: str) -> None:
        self.proof.append(line)

    def write(self, outcome: str) -> None:
        self.outcome, self.seconds = outcome, round(time.monotonic() - self.t0, 1)
        row = {k: v for k, v in asdict(self).items() if k != "t0"}
        row["proof"] = "; ".join(self.proof)
        ARTIFACT.parent.mkdir(parents=True, exist_ok=True)
        rows = json.loads(ARTIFACT.read_text()) if ARTIFACT.exists() else []
        rows = [r for r in rows if r.get("drill") != self.drill] + [row]
        ARTIFACT.write_text(json.dumps(sorted(rows, key=lambda r: int(r["drill"])), indent=2) + "\n")
        print(f"\nDRILL {self.drill} {self.name}: fault={self.fault} | outcome={outcome} | proof={row['proof']} "
              f"| {self.seconds}s", file=sys.stderr)
