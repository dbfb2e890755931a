"""Real Prometheus-compatible backends: VictoriaMetrics single-node and Thanos Query over sidecars.

For each backend the same history (the node simulator's OpenMetrics files) is written twice: into the
session's Prometheus (promtool) under a reference namespace, and into the backend under its own namespace
as cluster ``a``. The backend also holds a distractor cluster ``b``: the same namespace and pods at 3 cores
and 900 MiB, which any selector without the cluster matcher would pool in. Each backend is reached as it
often is in production: under a path prefix (VictoriaMetrics ``-http.pathPrefix``, Thanos
``--web.route-prefix``) and behind a proxy that demands a bearer token (``tests/harness/authproxy.py``;
neither VictoriaMetrics single-node nor Thanos Query checks bearer tokens itself). A cold and an
incremental recommender pass, and a report, then run against the backend and against Prometheus, and the
targets and request counts are compared.

How close the targets must be (``CPU_REL``): memory targets equal, CPU within one VPA histogram bucket.
VictoriaMetrics' ``rate`` differs from Prometheus's only in windows that samples do not cover from end to end
(a series' first steps and those after its last sample), Thanos' Prometheus 3 engine in windows with a
sample exactly on their start (all of them, with this grid-aligned history); ``max_over_time`` over
``step - 1 ms`` holds the same raw samples in all three. The sample-level differences are asserted in
``test_rate_differs_only_where_samples_do_not_cover_the_window``; docs/recommender.md's "Other backends" states them.
"""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests
from kubernetes import client
from prometheus_client import CollectorRegistry

from podtailor.units import parse_cpu_millicores
from recommender.engine import EngineConfig, RecommenderEngine
from recommender.kube.cluster import KubeAdapter
from recommender.metrics import RecommenderMetrics
from recommender.model.common import upper_multiplier
from recommender.model.histogram import VPA_CPU_BUCKETS
from recommender.model.registry import get_strategy
from recommender.model.vpa import VpaParams
from recommender.sources.config import PrometheusConfig
from recommender.sources.errors import TemporarySourceError
from recommender.sources.prometheus import PrometheusSource
from tests.backend_history import (
    LAG,
    STEP,
    WORKLOADS,
    Mi,
    RecordingSource,
    condition,
    history_files,
    make_workloads,
    target,
    vpa_status,
)
from tests.harness.authproxy import BearerProxy
from tests.harness.process import wait_until
from tests.harness.prometheus import LocalPrometheus
from tests.harness.thanos import LocalThanos
from tests.harness.victoriametrics import LocalVictoriaMetrics

pytestmark = [pytest.mark.cluster, pytest.mark.prometheus]
REPO = Path(__file__).resolve().parents[2]


@dataclass
class Backend:
    name: str
    url: str
    """Through the bearer proxy, with the path prefix."""
    token_file: Path
    proxy: BearerProxy
    ref_ns: str
    """Read from the session's Prometheus (no cluster label)."""
    ns: str
    """Read from the backend, cluster ``a``."""
    t2_s: float
    """The second pass; the first is an hour earlier. History ends at ``t2_s - LAG``."""
    thanos: LocalThanos | None = None


@pytest.fixture(scope="module")
def world(api: client.ApiClient, crds: list[str], prometheus: LocalPrometheus,
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    tag = secrets.token_hex(3)
    names = {kind: (f"be-ref-{kind}-{tag}", f"be-{kind}-{tag}") for kind in ("vm", "thanos")}
    tmp = tmp_path_factory.mktemp("backends")
    t2_s = float(int(time.time()) // STEP * STEP)
    for ref_ns, ns in names.values():
        for path in history_files(tmp, ref_ns, t2_s):
            prometheus.backfill(path)
        make_workloads(api, ref_ns)
        make_workloads(api, ns)
    token_file = tmp / "token"
    token_file.write_text(secrets.token_urlsafe(24) + "\n")
    try:
        yield {"names": names, "tmp": tmp, "t2_s": t2_s, "token_file": token_file}
    finally:
        for pair in names.values():
            for ns in pair:
                client.CoreV1Api(api).delete_namespace(ns)


@pytest.fixture(scope="module")
def vm_backend(world: dict[str, Any]) -> Iterator[Backend]:
    ref_ns, ns = world["names"]["vm"]
    vm = LocalVictoriaMetrics(world["tmp"] / "vm", path_prefix="/vm")
    vm.start()
    proxy = BearerProxy(vm.port, world["token_file"].read_text().strip()).start()
    try:
        for path in history_files(world["tmp"], ns, world["t2_s"]):
            vm.import_openmetrics(path, extra_labels={"cluster": "a"})
        for path in history_files(world["tmp"], ns, world["t2_s"], distractor=True):
            vm.import_openmetrics(path, extra_labels={"cluster": "b"})
        yield Backend(name="victoria-metrics", url=f"{proxy.url}/vm", token_file=world["token_file"], proxy=proxy,
                      ref_ns=ref_ns, ns=ns, t2_s=world["t2_s"])
    finally:
        proxy.stop()
        vm.stop()


@pytest.fixture(scope="module")
def thanos_backend(world: dict[str, Any]) -> Iterator[Backend]:
    ref_ns, ns = world["names"]["thanos"]
    thanos = LocalThanos(world["tmp"] / "thanos", clusters=("a", "b"), route_prefix="/thanos")
    # Written before the sidecars start: a sidecar advertises its Prometheus's oldest sample time, and the
    # query skips a store whose advertised range is outside the query's.
    for path in history_files(world["tmp"], ns, world["t2_s"]):
        thanos.prometheus["a"].backfill(path)
    for path in history_files(world["tmp"], ns, world["t2_s"], distractor=True):
        thanos.prometheus["b"].backfill(path)
    thanos.start()
    proxy = BearerProxy(thanos.port, world["token_file"].read_text().strip()).start()
    try:
        yield Backend(name="thanos", url=f"{proxy.url}/thanos", token_file=world["token_file"], proxy=proxy,
                      ref_ns=ref_ns, ns=ns, t2_s=world["t2_s"], thanos=thanos)
    finally:
        proxy.stop()
        thanos.stop()


@pytest.fixture(params=["vm_backend", "thanos_backend"], ids=["victoria-metrics", "thanos"])
def backend(request: pytest.FixtureRequest) -> Backend:
    found: Backend = request.getfixturevalue(request.param)
    return found


def engine_for(api: client.ApiClient, config: PrometheusConfig, ns: str) -> tuple[RecommenderEngine, RecordingSource]:
    registry = CollectorRegistry()
    source = RecordingSource(PrometheusSource(config, registry=registry))
    engine = RecommenderEngine(store=KubeAdapter(api), source=source, strategy=get_strategy("vpa"),
                               config=EngineConfig(namespaces=(ns,), history_s=3 * 86400),
                               metrics=RecommenderMetrics(registry))
    return engine, source


def backend_config(backend: Backend, **extra: Any) -> PrometheusConfig:
    return PrometheusConfig(url=backend.url, bearer_token_file=backend.token_file, cluster_label="cluster",
                            cluster_value="a", step_s=STEP, scrape_interval_s=60, retries=0, timeout_s=30, **extra)


def one_vpa_cpu_bucket(value_m: int, path: str = "") -> float:
    """The relative width of VPA's CPU histogram bucket that a value of ``value_m`` millicores comes from.

    Bucket i starts at s = first x (r^i - 1) / (r - 1) and is first x r^i = s x (r - 1) + first wide, so its
    relative width is (r - 1) + first / s: 5% only for large values. A target is s x (1 + margin), rounded
    up to a millicore (hence + 1m). Example: 764m comes from s = 0.664 cores, whose bucket is 0.05 +
    0.01 / 0.664 = 6.5% wide, so 813m is the next bucket. An upper bound is s x (1 + margin) x (1 + 1/c),
    c the confidence in days (VPA's estimator): with at least a day of samples s is at least the value /
    (1.15 x 2), and c itself counts samples, which differ where a backend leaves out a window's first one,
    moving the factor by under 1% (one run: Thanos 1846m against 1742m, one bucket of the p95 and that)."""
    scheme, margin = VPA_CPU_BUCKETS, 1.0 + VpaParams().margin_fraction
    upper = path.rsplit(".", 2)[-2:-1] == ["upperBound"]
    factor = margin * (upper_multiplier(1.0) if upper else 1.0)
    start_cores = value_m / 1000.0 / factor
    return (scheme.ratio - 1.0) + scheme.first_bucket_size / start_cores + 1.0 / value_m + (0.01 if upper else 0.0)


CPU_REL = {"victoria-metrics": one_vpa_cpu_bucket, "thanos": one_vpa_cpu_bucket}
"""How far a backend's CPU targets may be from Prometheus's (memory targets must be equal): one bucket of
VPA's CPU histogram at that value (``one_vpa_cpu_bucket``). VictoriaMetrics: the first three samples of each
series differ (its rate is the pod's, Prometheus's less, see the rate test), which can move a percentile
across a bucket edge, rarely. Thanos v0.42 evaluates PromQL with the Prometheus 3 engine, whose range
selectors are open at the start: a sample exactly on a window's start (every window, with this grid-aligned
history) is left out, and ``rate`` extrapolates the last 180 s of the 240 s window instead of reading all of
it; the per-step CPU of noisy usage differs by a few per cent. Most runs gave exactly Prometheus's targets;
one fresh-clone run gave Thanos 813m against 764m, the next bucket (6.6% wide there, not 5%)."""
REPORT_CPU_REL = {"victoria-metrics": 0.01, "thanos": 0.03}


def assert_same(got: Any, ref: Any, cpu_rel: float | Callable[[int, str], float], key: str = "") -> None:
    """``got == ref``, except CPU quantities (``cpu``, ``cpuMillicores``) within ``cpu_rel`` (relative, or a
    function of the reference millicores and the field's path, e.g. ``.web.containerRecommendations.target.cpu``)."""
    if isinstance(ref, dict):
        assert isinstance(got, dict) and set(got) == set(ref), (got, ref)
        for k in ref:
            assert_same(got[k], ref[k], cpu_rel, f"{key}.{k}")
    elif isinstance(ref, list):
        assert isinstance(got, list) and len(got) == len(ref), (got, ref)
        for g, r in zip(got, ref, strict=True):
            assert_same(g, r, cpu_rel, key)
    elif (leaf := key.rsplit(".", 1)[-1]) in ("cpu", "cpuMillicores") and ref is not None:
        g = parse_cpu_millicores(got) if leaf == "cpu" else got
        r = parse_cpu_millicores(ref) if leaf == "cpu" else ref
        rel = cpu_rel(r, key) if callable(cpu_rel) else cpu_rel
        assert abs(g - r) <= rel * r, (key, got, ref, rel)
    else:
        assert got == ref, (key, got, ref)


def recommendations(api: client.ApiClient, ns: str) -> dict[str, Any]:
    return {name: vpa_status(api, ns, name)["recommendation"] for name in WORKLOADS}


def test_cold_and_incremental_passes_match_prometheus(
    api: client.ApiClient, prometheus: LocalPrometheus, backend: Backend,
) -> None:
    # The reference reads through the same range queries; the backend's source is left at read_api auto, and
    # its one remote-read probe is refused (neither Thanos Query nor VictoriaMetrics serves /api/v1/read).
    ref_config = PrometheusConfig(url=prometheus.url, step_s=STEP, scrape_interval_s=60, retries=0, timeout_s=30,
                                  read_api="promql")
    ref, ref_source = engine_for(api, ref_config, backend.ref_ns)
    other, other_source = engine_for(api, backend_config(backend), backend.ns)
    t1, t2 = backend.t2_s - 3600, backend.t2_s
    forwarded = backend.proxy.forwarded

    # Cold pass: the whole three-day window.
    assert (ref.run_pass(t1).written, other.run_pass(t1).written) == (2, 2)
    assert other_source.calls == [((backend.ns,), t1 - LAG - 3 * 86400, t1 - LAG)]
    assert other_source.inner.request_count - 1 == ref_source.inner.request_count == 1 + 3 + 4
    assert other_source.inner._remote is False
    assert_same(recommendations(api, backend.ns), recommendations(api, backend.ref_ns), CPU_REL[backend.name])
    # Cluster b (3 cores, 900 MiB in the same namespace and pods) was not pooled in: web's p90 is 1.2 cores.
    web_cpu, web_memory = target(vpa_status(api, backend.ns, "web"))
    assert 1380 <= web_cpu < 1500 and web_memory < 400 * Mi

    # Incremental pass: only the hour since the cold pass's read end, which brings web's new pods.
    assert (ref.run_pass(t2).written, other.run_pass(t2).written) == (2, 2)
    assert other_source.calls[1] == ((backend.ns,), t1 - LAG, t2 - LAG)
    assert other_source.inner.request_count - 1 == ref_source.inner.request_count == 2 * (1 + 3 + 4)
    assert_same(recommendations(api, backend.ns), recommendations(api, backend.ref_ns), CPU_REL[backend.name])
    assert target(vpa_status(api, backend.ns, "web"))[1] > web_memory  # the new 600 MiB daily peak is in
    # Every request went through the bearer proxy with the token; none was refused.
    assert backend.proxy.forwarded - forwarded == other_source.inner.request_count and backend.proxy.refused == 0


def run_report(url: str, ns: str, *flags: str, kubeconfig: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "recommender", "report", "--kubeconfig", kubeconfig, "--prometheus-url", url,
           "--scrape-interval", "60s", "--history", "2d", "-n", ns, "-o", "json", "--strategy", "krr-simple", *flags]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=180, check=False, cwd=REPO)


def report_targets(doc: dict[str, Any]) -> dict[str, Any]:
    return {w["name"]: [c["recommendation"] for c in w["containers"]] for w in doc["workloads"]}


def test_report_matches_prometheus_with_the_cli_flags(
    cluster: Any, prometheus: LocalPrometheus, backend: Backend,
) -> None:
    flags = ("--prometheus-bearer-token-file", str(backend.token_file), "--cluster-label", "cluster",
             "--cluster-value", "a")
    # A report reads up to the current minute (less the read lag); both must read the same steps.
    if time.time() % 60 > 20:
        time.sleep(60 - time.time() % 60)
    started = time.time()
    with ThreadPoolExecutor(2) as pool:
        ref_run = pool.submit(run_report, prometheus.url, backend.ref_ns, kubeconfig=cluster.kubeconfig)
        done = run_report(backend.url, backend.ns, *flags, kubeconfig=cluster.kubeconfig)
        ref = ref_run.result()
    assert started // 60 == time.time() // 60, "the two reports did not run in the same minute"
    assert ref.returncode == 0, ref.stderr[-2000:]
    assert done.returncode == 0, done.stderr[-2000:]
    targets, ref_targets = report_targets(json.loads(done.stdout)), report_targets(json.loads(ref.stdout))
    assert set(targets) == set(WORKLOADS) and all(targets.values())
    # Exact percentiles (no buckets), over a window that ends at the real now - 2 min, so it may hold the few
    # steps after the history's last sample, where VictoriaMetrics' rate is the pod's and Prometheus's less.
    assert_same(targets, ref_targets, REPORT_CPU_REL[backend.name])

    refused = backend.proxy.refused
    wrong = backend.token_file.with_name("wrong-token")
    wrong.write_text("not-the-token\n")
    denied = run_report(backend.url, backend.ns, "--prometheus-bearer-token-file", str(wrong), "--cluster-label",
                        "cluster", "--cluster-value", "a", kubeconfig=cluster.kubeconfig)
    assert denied.returncode == 1 and "401" in denied.stderr, denied.stderr[-2000:]
    assert backend.proxy.refused > refused
    # Without the path prefix the backend refuses the request: a named error, exit 1.
    unprefixed = run_report(backend.proxy.url, backend.ns, *flags, kubeconfig=cluster.kubeconfig)
    assert unprefixed.returncode == 1, unprefixed.stderr[-2000:]
    expected = {"victoria-metrics": 'answered 400: missing -http.pathPrefix="/vm"', "thanos": "answered 404"}
    assert expected[backend.name] in unprefixed.stderr, unprefixed.stderr[-2000:]
    # Without the cluster matcher cluster b is pooled in: the report's CPU targets jump to about 3 cores.
    pooled = run_report(backend.url, backend.ns, *flags[:2], kubeconfig=cluster.kubeconfig)
    assert pooled.returncode == 0, pooled.stderr[-2000:]
    pooled_web = report_targets(json.loads(pooled.stdout))["web"][0]["target"]["cpuMillicores"]
    assert pooled_web >= 3000 > targets["web"][0]["target"]["cpuMillicores"]


def query_range(url: str, query: str, start_s: float, end_s: float, token: str | None = None) -> dict[int, float]:
    """The one series of a range query, as {timestamp: value}, straight over HTTP."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    body = requests.post(f"{url}/api/v1/query_range", headers=headers, timeout=30, data={
        "query": query, "start": str(start_s), "end": str(end_s), "step": str(STEP)}).json()
    assert body["status"] == "success", body
    [series] = body["data"]["result"]
    return {int(float(t)): float(v) for t, v in series["values"]}


def test_rate_differs_only_where_samples_do_not_cover_the_window(prometheus: LocalPrometheus,
                                                                backend: Backend) -> None:
    """The stated difference, measured on one new pod (0.2 cores from its first sample to its last): the
    source's CPU query (a 240 s window) from the backend and from Prometheus, per step."""
    last = backend.t2_s - LAG
    first = last - 57 * STEP  # write_openmetrics' grid of 0.04 d (57.6 min): 58 points ending at ``last``
    def cpu(ns: str, extra: str = "") -> str:
        return f'rate(container_cpu_usage_seconds_total{{namespace="{ns}",pod="web-2-0",container="app"{extra}}}[240s])'

    ref = query_range(prometheus.url, cpu(backend.ref_ns), first - 2 * STEP, last + 5 * STEP)
    got = query_range(backend.url, cpu(backend.ns, ',cluster="a"'), first - 2 * STEP, last + 5 * STEP,
                      backend.token_file.read_text().strip())
    covered = [t for t in ref if t - 240 >= first and t <= last]
    assert len(covered) == 57 - 4 + 1
    for t in covered:  # windows with samples at both ends: the increase over the window, in both
        assert ref[t] == pytest.approx(0.2, rel=1e-9) and got[t] == pytest.approx(ref[t], rel=1e-9), t
    edges = sorted(set(ref) - set(covered))
    # Prometheus at the series' start: the increase since the first sample (the counter's 0, which it does not
    # extrapolate below), over the whole window: 0.05, 0.1, 0.15 for 1, 2, 3 sampled minutes of 4; after the
    # last sample, the increase extrapolated by at most half an interval over the whole window: below 0.2.
    starts, ends = [t for t in edges if t < first + 240], [t for t in edges if t > last]
    assert [ref[t] for t in starts] == pytest.approx([0.05, 0.1, 0.15], rel=1e-9), {t: ref[t] for t in edges}
    assert ends and min(ref[t] for t in ends) < 0.2 * 0.9, {t: ref[t] for t in edges}
    if backend.name == "thanos":
        # The Prometheus 3 engine (a constant rate: the same values), except that its windows are open at the
        # start: at last + 180 s the window holds only the last sample, so there is no value there.
        assert set(ref) - set(got) == {last + 180} and set(got) <= set(ref)
        assert got == pytest.approx({t: ref[t] for t in got}, rel=1e-9)
    else:
        # VictoriaMetrics has a value at every step Prometheus has, and also while the last sample before
        # the window is not older than its staleness interval
        assert set(ref) <= set(got) and all(t > last for t in set(got) - set(ref)), sorted(set(got) - set(ref))
        # The increase since the last sample before the window over the time it spans, or from the first
        # sample when there is none: the pod's actual 0.2 cores at every edge
        assert [got[t] for t in edges] == pytest.approx([0.2] * len(edges), rel=1e-9), {t: got[t] for t in edges}


def test_thanos_store_outage_keeps_targets_and_marks_them_stale(api: client.ApiClient,
                                                                thanos_backend: Backend) -> None:
    """A failing store never yields targets from the other stores' part of the data (``partial_response``)."""
    backend, thanos = thanos_backend, thanos_backend.thanos
    assert thanos is not None
    engine, _ = engine_for(api, backend_config(backend), backend.ns)
    engine.run_pass(backend.t2_s)
    before = recommendations(api, backend.ns)
    token = backend.token_file.read_text().strip()
    thanos.prometheus["a"].stop()  # the sidecar stays up; its Store API calls now fail
    try:
        # Thanos' default answer (no partial_response parameter): a success without cluster a's series, here
        # not even with a warning. The source sends partial_response=false, which makes it an error.
        raw = requests.post(f"{backend.url}/api/v1/series", headers={"Authorization": f"Bearer {token}"},
                            data={"match[]": f'container_cpu_usage_seconds_total{{namespace="{backend.ns}"}}'},
                            timeout=30).json()
        assert raw["status"] == "success" and raw["data"], raw
        assert {s["cluster"] for s in raw["data"]} == {"b"}
        # With it: a temporary error (the store is down, the query is fine), never a success without a's data.
        with pytest.raises(TemporarySourceError, match=r"422: execution: .*rpc error"):
            PrometheusSource(backend_config(backend), registry=CollectorRegistry()).history(
                [backend.ns], backend.t2_s - 3600, backend.t2_s)
        report = engine.run_pass(backend.t2_s + STEP)
        assert (report.stale, report.written) == (2, 0)
        assert recommendations(api, backend.ns) == before  # no zero, no floor, no change
        stale = condition(vpa_status(api, backend.ns, "web"), "Stale")
        assert stale["status"] == "True" and "usage history unavailable" in stale["message"]
    finally:
        thanos.prometheus["a"].start()
    wait_until("thanos query to see cluster a again", thanos.sees_every_store, timeout_s=60, interval_s=0.5)
    assert engine.run_pass(backend.t2_s + 2 * STEP).stale == 0
    assert condition(vpa_status(api, backend.ns, "web"), "Stale")["status"] == "False"

