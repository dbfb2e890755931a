"""Shared pieces of the recommender drills (8-12, 19, 20): history, objects, wiring, faults and proof.

Owns what those drills have in common: backfilling known usage into the real Prometheus (through the node
simulator's OpenMetrics exporter), Deployments and VPAs on the real API server, a ``RecommenderEngine``
wired with the real ``PrometheusSource`` and ``KubeAdapter``, a loopback HTTP proxy in front of the real
Prometheus that records every request and can delay or rewrite answers (the fault injector), a sampler
that reads every VPA status of the drill's namespaces a few times a second and checks the invariants
while the fault lasts, and the row each drill writes to ``tests/artifacts/drills-8-20.json``.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import requests
from kubernetes import client
from prometheus_client import CollectorRegistry

from podtailor.units import parse_cpu_millicores, parse_memory_bytes
from recommender.engine import EngineConfig, RecommenderEngine
from recommender.kube.cluster import KubeAdapter
from recommender.metrics import RecommenderMetrics
from recommender.model.registry import get_strategy
from recommender.model.types import ContainerKey, UsageBatch
from recommender.sources.config import PrometheusConfig
from recommender.sources.prometheus import PrometheusSource
from recommender.sources.remote_read import decode_response
from tests.builders.remote_read import decode_request, encode_response, selector_text
from tests.harness.prometheus import LocalPrometheus
from tests.nodesim.openmetrics import ExportContainer, write_openmetrics
from tests.nodesim.usage import UsageModel

Mi = 2**20
STEP = 60
LAG_S = EngineConfig().read_lag_s
ARTIFACT = Path(__file__).resolve().parents[1] / "artifacts" / "drills-8-20.json"
Obj = dict[str, Any]


# ------------------------------------------------------------------------------------------------- history
def pods(ns: str, workload: str, rs: str, count: int, model: UsageModel, **resources: int | None,
         ) -> list[ExportContainer]:
    """``count`` pods ``<rs>-p<i>`` of Deployment ``workload`` (through ReplicaSet ``rs``), container ``app``."""
    defaults: dict[str, int | None] = {"cpu_request_millicores": 500, "memory_request_bytes": 256 * Mi,
                                       "memory_limit_bytes": 1024 * Mi}
    return [ExportContainer(namespace=ns, pod=f"{rs}-p{i}", container="app", node="n1", model=model,
                            pod_uid=f"{rs}-p{i}", owner_kind="ReplicaSet", owner_name=rs,
                            replicaset_owner_kind="Deployment", replicaset_owner_name=workload,
                            **{**defaults, **resources})  # type: ignore[arg-type]
            for i in range(count)]


def backfill(prom: LocalPrometheus, tmp: Path, name: str, containers: Sequence[ExportContainer], end_s: float,
             days: float) -> None:
    path = tmp / f"{name}-{int(end_s)}.om"
    with path.open("w") as out:
        write_openmetrics(out, containers, now_s=end_s, days=days, step_s=STEP)
    prom.backfill(path)
    path.unlink()


def grid_now(offset_s: float = 0.0) -> float:
    return float(int(time.time() + offset_s) // STEP * STEP)


# ------------------------------------------------------------------------------------------------- objects
def make_deployment(api: client.ApiClient, ns: str, name: str, *, cpu: str = "500m", memory: str = "256Mi",
                    limits: Mapping[str, str] | None = None, annotations: Mapping[str, str] | None = None) -> None:
    labels = {"app": name}
    client.AppsV1Api(api).create_namespaced_deployment(ns, {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "annotations": dict(annotations or {})},
        "spec": {"replicas": 0, "selector": {"matchLabels": labels}, "template": {
            "metadata": {"labels": labels}, "spec": {"containers": [{
                "name": "app", "image": "registry.invalid/app:1",
                "resources": {"requests": {"cpu": cpu, "memory": memory},
                              "limits": dict(limits or {"memory": "1Gi"})}}]}}}})


def make_vpa(api: client.ApiClient, ns: str, name: str, target: str, *,
             policy: Mapping[str, Any] | None = None) -> None:
    spec: Obj = {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": target},
                 "updatePolicy": {"updateMode": "Off"}, "recommenders": [{"name": "podtailor"}]}
    if policy is not None:
        spec["resourcePolicy"] = {"containerPolicies": [{"containerName": "app", **policy}]}
    client.CustomObjectsApi(api).create_namespaced_custom_object(
        "autoscaling.k8s.io", "v1", ns, "verticalpodautoscalers",
        {"apiVersion": "autoscaling.k8s.io/v1", "kind": "VerticalPodAutoscaler", "metadata": {"name": name},
         "spec": spec})


def statuses(api: client.ApiClient, namespaces: Sequence[str]) -> dict[tuple[str, str], Obj]:
    """(namespace, VPA name) -> status, one list call per namespace."""
    custom = client.CustomObjectsApi(api)
    out: dict[tuple[str, str], Obj] = {}
    for ns in namespaces:
        items = custom.list_namespaced_custom_object("autoscaling.k8s.io", "v1", ns, "verticalpodautoscalers")
        for item in items["items"]:
            out[(ns, item["metadata"]["name"])] = item.get("status") or {}
    return out


def condition(status: Mapping[str, Any], ctype: str) -> Obj:
    return next((c for c in status.get("conditions") or [] if c.get("type") == ctype), {})


def target(status: Mapping[str, Any], key: str = "target") -> tuple[int, int] | None:
    recs = (status.get("recommendation") or {}).get("containerRecommendations") or []
    if not recs or key not in recs[0]:
        return None
    return parse_cpu_millicores(recs[0][key]["cpu"]), parse_memory_bytes(recs[0][key]["memory"])


def recommendation_bytes(status: Mapping[str, Any]) -> str:
    """The stored recommendation as canonical JSON: equal strings mean byte-identical targets."""
    return json.dumps(status.get("recommendation"), sort_keys=True)


# ---------------------------------------------------------------------------------------------- the engine
class SpySource:
    """The real PrometheusSource with its calls and results recorded (a spy, not a fake)."""

    def __init__(self, inner: PrometheusSource) -> None:
        self.inner = inner
        self.calls: list[tuple[tuple[str, ...], float, float]] = []
        self.results: list[dict[ContainerKey, UsageBatch]] = []

    def history(self, namespaces: Sequence[str], start_s: float, end_s: float,
                pools: Mapping[tuple[str, str], str] | None = None) -> dict[ContainerKey, UsageBatch]:
        self.calls.append((tuple(namespaces), start_s, end_s))
        out = self.inner.history(namespaces, start_s, end_s, pools)
        self.results.append(out)
        return out


def engine_for(api: client.ApiClient, url: str, namespaces: Sequence[str], *, history_s: float,
               registry: CollectorRegistry | None = None, strategy: str = "podtailor",
               **source_options: Any) -> tuple[RecommenderEngine, SpySource, CollectorRegistry]:
    registry = registry or CollectorRegistry()
    # read_api pinned (auto would choose remote read on Prometheus too, after one probe request that would
    # otherwise count in the drills' request budgets)
    options: dict[str, Any] = {"step_s": STEP, "scrape_interval_s": 60, "retries": 0, "timeout_s": 20,
                               "read_api": "remote-read", **source_options}
    source = SpySource(PrometheusSource(PrometheusConfig(url=url, **options), registry=registry))
    engine = RecommenderEngine(store=KubeAdapter(api), source=source, strategy=get_strategy(strategy),
                               config=EngineConfig(namespaces=tuple(namespaces), history_s=history_s),
                               metrics=RecommenderMetrics(registry))
    return engine, source, registry


# ----------------------------------------------------------------------------------------------- the proxy
@dataclass(frozen=True, slots=True)
class Sent:
    endpoint: str
    form: list[tuple[str, str]]
    body_bytes: int
    seconds: float

    @property
    def query(self) -> str:
        return next((v for k, v in self.form if k == "query"), "")


Rewrite = Callable[[str, list[tuple[str, str]], Obj], Obj]
Delay = Callable[[str, list[tuple[str, str]]], float]


@dataclass
class ProxyFaults:
    """What the proxy does to each request: a delay before answering and a rewrite of the JSON answer."""

    delay: Delay = field(default=lambda endpoint, form: 0.0)
    rewrite: Rewrite | None = None


class PromProxy:
    """A loopback HTTP proxy to the real Prometheus that records requests and injects ``faults``."""

    def __init__(self, upstream: Callable[[], str]) -> None:
        self.upstream = upstream
        self.faults = ProxyFaults()
        self.sent: list[Sent] = []
        self.in_flight = self.max_in_flight = 0
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="prom-proxy", daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> PromProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                return

            def do_POST(self) -> None:
                proxy._serve(self)

        return Handler

    def _serve(self, handler: BaseHTTPRequestHandler) -> None:
        started = time.monotonic()
        raw = handler.rfile.read(int(handler.headers.get("Content-Length") or 0))
        endpoint = handler.path.rsplit("/", 1)[-1]
        remote = endpoint == "read"  # a remote read: snappy protobuf both ways, shown to faults as a query
        form = ([("query", selector_text(m)) for m, _, _ in decode_request(raw)] if remote
                else urllib.parse.parse_qsl(raw.decode(), keep_blank_values=True))
        headers = {k: handler.headers[k] for k in REMOTE_HEADERS} if remote else {
            "Content-Type": "application/x-www-form-urlencoded"}
        with self._lock:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            upstream = requests.post(f"{self.upstream()}{handler.path}", data=raw, timeout=60, headers=headers)
            status, body = upstream.status_code, upstream.content
            faults = self.faults
            if faults.rewrite is not None and status == 200:
                body = (_rewrite_read(faults.rewrite, form, body) if remote
                        else json.dumps(faults.rewrite(endpoint, form, upstream.json())).encode())
            time.sleep(faults.delay(endpoint, form))
            with contextlib.suppress(OSError):  # the client may have timed out and gone
                handler.send_response(status)
                for name, value in ({"Content-Type": "application/x-protobuf", "Content-Encoding": "snappy"}
                                    if remote and status == 200 else {"Content-Type": "application/json"}).items():
                    handler.send_header(name, value)
                handler.send_header("Content-Length", str(len(body)))
                handler.end_headers()
                handler.wfile.write(body)
        finally:
            with self._lock:
                self.in_flight -= 1
                self.sent.append(Sent(endpoint=endpoint, form=form, body_bytes=len(raw),
                                      seconds=time.monotonic() - started))


REMOTE_HEADERS = ("Content-Type", "Content-Encoding", "X-Prometheus-Remote-Read-Version")


def _rewrite_read(rewrite: Rewrite, form: list[tuple[str, str]], body: bytes) -> bytes:
    """A remote-read answer rewritten by a JSON rewrite: its series shown as a range answer's matrix (times in
    seconds, values as text), rewritten as endpoint ``read``, and written back as a remote-read answer."""
    [series] = decode_response(body)
    doc = {"status": "success", "data": {"resultType": "matrix", "result": [
        {"metric": s.labels, "values": [[t / 1000, repr(float(v))] for t, v in zip(s.times_ms, s.values, strict=True)]}
        for s in series]}}
    result = rewrite("read", form, doc)["data"]["result"]
    return encode_response([[(item["metric"], [(round(float(t) * 1000), float(v)) for t, v in item["values"]])
                             for item in result]])


# ---------------------------------------------------------------------------------------------- invariants
Check = Callable[[dict[tuple[str, str], Obj]], list[str]]


class Sampler:
    """Reads the VPA statuses of ``namespaces`` every ``interval_s`` in a thread and runs ``check`` on
    each reading; ``violations`` collects what any check reported (with the reading's time)."""

    def __init__(self, api: client.ApiClient, namespaces: Sequence[str], check: Check,
                 interval_s: float = 0.25) -> None:
        self.api, self.namespaces, self.check, self.interval_s = api, list(namespaces), check, interval_s
        self.readings = 0
        self.violations: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="status-sampler", daemon=True)

    def _run(self) -> None:
        started = time.monotonic()
        while not self._stop.is_set():
            try:
                found = self.check(statuses(self.api, self.namespaces))
            except Exception as err:  # a sampler that dies silently would prove nothing
                found = [f"sampler failed: {err!r}"]
            self.readings += 1
            self.violations += [f"t+{time.monotonic() - started:.1f}s: {v}" for v in found]
            self._stop.wait(self.interval_s)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def assert_held(self, min_readings: int = 2) -> None:
        assert self.readings >= min_readings, f"only {self.readings} status readings during the fault"
        assert not self.violations, "invariants broken:\n" + "\n".join(self.violations[:20])


def no_decrease_from(before: Mapping[tuple[str, str], tuple[int, int] | None]) -> Check:
    """Every VPA with a target before keeps one, never zero and never lower in either resource."""
    def check(now: dict[tuple[str, str], Obj]) -> list[str]:
        out = []
        for key, old in before.items():
            if old is None:
                continue
            new = target(now.get(key, {}))
            if new is None or min(new) <= 0 or new[0] < old[0] or new[1] < old[1]:
                out.append(f"{key}: target {old} -> {new}")
        return out
    return check


# -------------------------------------------------------------------------------------------------- proof
@dataclass
class DrillRow:
    drill: int
    name: str
    fault: str
    outcome: str = "fail"
    proof: list[str] = field(default_factory=list)
    run_time_s: float = 0.0
    notes: list[str] = field(default_factory=list)


@contextlib.contextmanager
def drill_row(drill: int, name: str, fault: str) -> Iterator[DrillRow]:
    """Yields the drill's row; on exit records the run time and pass/fail in the artifact (one row per drill)."""
    row = DrillRow(drill=drill, name=name, fault=fault)
    started = time.monotonic()
    try:
        yield row
        row.outcome = "pass"
    except BaseException as err:
        row.notes.append(f"failed: {str(err)[:600]}")
        raise
    finally:
        row.run_time_s = round(time.monotonic() - started, 1)
        ARTIFACT.parent.mkdir(parents=True, exist_ok=True)
        try:
            rows = {r["drill"]: r for r in json.loads(ARTIFACT.read_text())}
        except (OSError, ValueError, TypeError, KeyError):
            rows = {}
        rows[drill] = {"drill": row.drill, "name": row.name, "fault": row.fault, "outcome": row.outcome,
                       "proof": row.proof, "run_time_s": row.run_time_s, "notes": row.notes}
        ARTIFACT.write_text(json.dumps([rows[k] for k in sorted(rows)], indent=2) + "\n")


@contextlib.contextmanager
def extra_namespaces(api: client.ApiClient, prefix: str, count: int) -> Iterator[list[str]]:
    """``count`` more namespaces for a drill that needs several, deleted afterwards."""
    core = client.CoreV1Api(api)
    names = [f"{prefix}-{i:02d}" for i in range(count)]
    for name in names:
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    try:
        yield names
    finally:
        for name in names:
            with contextlib.suppress(client.ApiException):
                core.delete_namespace(name)
