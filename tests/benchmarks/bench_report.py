"""Benchmark: ``podtailor-recommender report`` over 1,000 workloads (wall time, Prometheus and API requests).

A private control plane (``tests.harness.cluster``) gets ``--workloads`` Deployments (default 1,000) in 20
namespaces, paused with 3 replicas (no pods: nothing would run them, and the report prices replicas), and a
private Prometheus gets ``--days`` of history for one pod per Deployment, backfilled with ``promtool`` from
the node simulator's OpenMetrics exporter at a 5-minute resolution (the report reads it with ``--step 5m
--scrape-interval 5m``). Measured: the whole command as a user runs it (a fresh ``python`` process writing
JSON, then HTML, to a file), and in one process the stages (discovery, history read, model and costs,
rendering), with the requests each backend received and the CPU seconds Prometheus spent (its own
``process_cpu_seconds_total``). Every fifth container has a 300m CPU limit, so some are throttled at their
daily peak. The history read runs sparse (the default) and at full resolution (``sparse_signals`` off: every
container's OOM counter and throttled fraction at every step), side by side; both must read the same.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from kubernetes import client, config
from prometheus_client import CollectorRegistry

from recommender.sources.config import PrometheusConfig
from tests.benchmarks.results import machine_facts, write_section
from tests.harness.cluster import REPO_ROOT, LocalCluster
from tests.harness.prometheus import LocalPrometheus
from tests.nodesim.openmetrics import ExportContainer, write_openmetrics
from tests.nodesim.usage import Daily

NAMESPACES = 20
IN_FLIGHT = (1, 2, 4)
DEFAULT_IN_FLIGHT = PrometheusConfig(url="http://x").requests_in_flight
STEP_S = 300
MI = 2**20


def create_fleet(api: client.ApiClient, workloads: int) -> list[tuple[str, str]]:
    core: Any = client.CoreV1Api(api)
    apps: Any = client.AppsV1Api(api)
    names = [(f"bench-{i % NAMESPACES:02d}", f"app-{i:04d}") for i in range(workloads)]
    for ns in sorted({ns for ns, _ in names}):
        core.create_namespace({"metadata": {"name": ns}})

    def create(item: tuple[str, str]) -> None:
        ns, name = item
        apps.create_namespaced_deployment(ns, {
            "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "labels": {"bench": "report"}},
            "spec": {"replicas": 3, "paused": True, "selector": {"matchLabels": {"app": name}}, "template": {
                "metadata": {"labels": {"app": name}}, "spec": {"containers": [{
                    "name": "app", "image": "registry.invalid/app:1",
                    "resources": {"requests": {"cpu": "500m", "memory": "512Mi"},
                                  "limits": {"cpu": "1", "memory": "1Gi"}}}]}}}})

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(create, names))
    return names


def backfill(prom: LocalPrometheus, names: list[tuple[str, str]], days: float, end_s: float, tmp: Path) -> float:
    rows = [ExportContainer(namespace=ns, pod=f"{name}-5d9c-aaaaa", container="app", node="n1",
                            model=Daily(cpu_cores=0.1 + (i % 10) * 0.05, cpu_amplitude_cores=0.05,
                                        memory_bytes=(100 + (i % 7) * 40) * MI, memory_amplitude_bytes=20 * MI,
                                        cpu_noise=0.2, seed=i),
                            pod_uid=f"uid-{i}", owner_name=f"{name}-5d9c", replicaset_owner_name=name,
                            cpu_request_millicores=500, memory_request_bytes=512 * MI, memory_limit_bytes=1024 * MI,
                            cpu_limit_millicores=300 if i % 5 == 0 else None)
            for i, (ns, name) in enumerate(names)]
    path = tmp / "fleet.om"
    with path.open("w") as out:
        write_openmetrics(out, rows, now_s=end_s, days=days, step_s=STEP_S, substeps=2)
    return prom.backfill(path)


def cli(kubeconfig: str, url: str, fmt: str, out: Path, days: float) -> float:
    code = ("import sys, argparse; from recommender.report.cli import add_report_parser, run_report; "
            "p = argparse.ArgumentParser(); add_report_parser(p.add_subparsers(dest='c')); "
            "sys.exit(run_report(p.parse_args(['report', *sys.argv[1:]])))")
    t0 = time.monotonic()
    done = subprocess.run([sys.executable, "-c", code, "--kubeconfig", kubeconfig, "--prometheus-url", url,
                           "--step", "5m", "--scrape-interval", "5m", "--history", f"{days:g}d", "-o", fmt,
                           "--output-file", str(out), "--no-progress"], capture_output=True, text=True,
                          cwd=REPO_ROOT, check=False, timeout=1800)
    wall = time.monotonic() - t0
    if done.returncode != 0:
        raise RuntimeError(f"report exited {done.returncode}: {done.stderr[-2000:]}")
    return wall


def stages(kubeconfig: str, url: str, days: float, dense_first: bool = True) -> dict[str, Any]:
    from recommender.model.registry import get_strategy
    from recommender.report.build import BuildConfig, build_report
    from recommender.report.discovery import Discovery, Filters
    from recommender.report.html import as_html
    from recommender.report.render import as_json
    from recommender.sources.prometheus import PrometheusSource

    api = config.new_client_from_config(config_file=kubeconfig)  # type: ignore[no-untyped-call]
    out: dict[str, Any] = {}
    t0 = time.monotonic()
    inventory = Discovery(api).read(Filters())
    out["discovery_s"], out["api_requests"] = time.monotonic() - t0, inventory.api_requests
    now = time.time()
    namespaces = sorted({w.namespace for w in inventory.workloads})

    def read(sparse: bool) -> tuple[PrometheusSource, dict[Any, Any], float, float]:
        src = PrometheusSource(PrometheusConfig(url=url, step_s=STEP_S, scrape_interval_s=STEP_S,
                                                requests_in_flight=IN_FLIGHT[0], sparse_signals=sparse),
                               registry=CollectorRegistry())
        cpu0, t0 = prometheus_cpu_s(url), time.monotonic()
        got = src.history(namespaces, now - 120 - days * 86400, now - 120)
        return src, got, time.monotonic() - t0, prometheus_cpu_s(url) - cpu0

    # The two reads alternate which goes first from one repeat to the next, so neither always finds the
    # other's pages in the cache.
    first, second = read(not dense_first), read(dense_first)
    (dense, full, dense_s, dense_cpu), (source, batches, sparse_s, sparse_cpu) = \
        (first, second) if dense_first else (second, first)
    out["history_dense_s"], out["prometheus_cpu_dense_s"] = dense_s, dense_cpu
    out["prometheus_requests_dense"] = dense.request_count
    out["history_s"], out["prometheus_cpu_s"], out["prometheus_requests"] = sparse_s, sparse_cpu, source.request_count
    if _points(full) != _points(batches):
        raise RuntimeError("the sparse read differs from the full-resolution one")
    out["throttled_containers"] = sum(1 for b in batches.values() if (b.cpu_throttled_fraction.values > 0).any())
    for k in IN_FLIGHT[1:]:  # the same pass with more queries on the wire at once: same requests, same answers
        wide = PrometheusSource(PrometheusConfig(url=url, step_s=STEP_S, scrape_interval_s=STEP_S,
                                                 requests_in_flight=k), registry=CollectorRegistry())
        t0 = time.monotonic()
        again = wide.history(sorted({w.namespace for w in inventory.workloads}), now - 120 - days * 86400,
                             now - 120)
        out[f"history_{k}_s"] = time.monotonic() - t0
        if wide.request_count != source.request_count or _points(again) != _points(batches):
            raise RuntimeError(f"requests_in_flight={k} read something else than 1 did")
    t0 = time.monotonic()
    report = build_report(inventory, batches, get_strategy("podtailor"), BuildConfig(
        now_s=now, start_s=now - 120 - days * 86400, end_s=now - 120, strategy_name="podtailor"))
    out["build_s"] = time.monotonic() - t0
    for fmt, render in (("json", as_json), ("html", as_html)):
        t0 = time.monotonic()
        text = render(report)
        out[f"render_{fmt}_s"], out[f"{fmt}_bytes"] = time.monotonic() - t0, len(text.encode())
    out["workloads"] = len(report.workloads)
    api.close()
    return out


def prometheus_cpu_s(url: str) -> float:
    """The CPU seconds the Prometheus process has used so far (its own ``process_cpu_seconds_total``)."""
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as resp:  # 127.0.0.1: the harness's Prometheus
        for line in resp.read().decode().splitlines():
            if line.startswith("process_cpu_seconds_total "):
                return float(line.split()[1])
    raise RuntimeError("Prometheus does not report process_cpu_seconds_total")


def _points(batches: dict[Any, Any]) -> dict[Any, tuple[int, float, float, float, int]]:
    """Per container: CPU points, their sum, the sum of memory peaks, of throttled fractions and the OOM kills
    (equal reads give equal values)."""
    return {k: (len(b.cpu_cores.values), round(float(b.cpu_cores.values.sum()), 6),
                round(float(b.memory_peak_bytes.values.sum()), 0),
                round(float(b.cpu_throttled_fraction.values.sum()), 6), len(b.oom_kills)) for k, b in batches.items()}


def run(workloads: int, days: float, repeats: int) -> str:
    with tempfile.TemporaryDirectory() as tmp:
        cluster, prom = LocalCluster(Path(tmp) / "c"), LocalPrometheus(Path(tmp) / "p")
        state = cluster.start()
        prom.start()
        try:
            api = config.new_client_from_config(config_file=state.kubeconfig)  # type: ignore[no-untyped-call]
            t0 = time.monotonic()
            names = create_fleet(api, workloads)
            create_s = time.monotonic() - t0
            backfill_s = backfill(prom, names, days, time.time() - 60, Path(tmp))
            walls = {fmt: [cli(state.kubeconfig, prom.url, fmt, Path(tmp) / f"r.{fmt}", days) for _ in range(repeats)]
                     for fmt in ("json", "html")}
            doc = json.loads((Path(tmp) / "r.json").read_text())
            staged = [stages(state.kubeconfig, prom.url, days, dense_first=i % 2 == 0) for i in range(repeats)]
        finally:
            prom.stop()
            cluster.stop()
    return table(workloads, days, create_s, backfill_s, walls, doc, staged)


def table(workloads: int, days: float, create_s: float, backfill_s: float, walls: dict[str, list[float]],
          doc: dict[str, Any], staged: list[dict[str, Any]]) -> str:
    def med(key: str) -> float:
        return float(statistics.median(s[key] for s in staged))

    with_history = sum(1 for w in doc["workloads"] if w["containers"][0]["usage"])
    rows = [
        f"| `report -o json` (fresh process, to a file, default settings) | {statistics.median(walls['json']):.2f} s | "
        f"{', '.join(f'{w:.2f}' for w in walls['json'])} |",
        f"| `report -o html` (fresh process, to a file, default settings) | {statistics.median(walls['html']):.2f} s | "
        f"{', '.join(f'{w:.2f}' for w in walls['html'])} |",
        f"| stage: discovery (list calls) | {med('discovery_s'):.2f} s | |",
        f"| stage: usage history at full resolution (sparse signals off), 1 query in flight | "
        f"{med('history_dense_s'):.2f} s | Prometheus CPU {med('prometheus_cpu_dense_s'):.2f} s, "
        f"{med('prometheus_requests_dense'):.0f} requests |",
        f"| stage: usage history (PrometheusSource.history, the default: sparse signals), 1 query in flight | "
        f"{med('history_s'):.2f} s | {med('history_s') / med('history_dense_s'):.2f}x of full resolution; Prometheus "
        f"CPU {med('prometheus_cpu_s'):.2f} s ({med('prometheus_cpu_s') / med('prometheus_cpu_dense_s'):.2f}x), "
        f"{med('prometheus_requests'):.0f} requests; the same batches |",
        *(f"| stage: usage history, {k} queries in flight (same requests and answers) | "
          f"{med(f'history_{k}_s'):.2f} s | {med(f'history_{k}_s') / med('history_s'):.2f}x of 1 in flight"
          f"{' (the default)' if k == DEFAULT_IN_FLIGHT else ''} |"
          for k in IN_FLIGHT[1:]),
        f"| stage: model, costs, disruption, summaries | {med('build_s'):.2f} s | |",
        f"| stage: render JSON ({med('json_bytes') / 1e6:.1f} MB) | {med('render_json_s'):.2f} s | |",
        f"| stage: render HTML ({med('html_bytes') / 1e6:.1f} MB) | {med('render_html_s'):.2f} s | |",
    ]
    return "\n".join([
        machine_facts(), "",
        f"{workloads} Deployments (3 replicas, paused, one container) in {NAMESPACES} namespaces on a private "
        f"control plane; {days:g} days of history per workload at a 5-minute step in a private Prometheus "
        f"(fleet created in {create_s:.1f} s, backfilled in {backfill_s:.1f} s). {with_history} of "
        f"{len(doc['workloads'])} workloads had history in the report; {staged[0]['throttled_containers']} "
        "containers were throttled at some step.", "",
        f"Requests per report: **{doc['requests']['prometheus']} to Prometheus** (1 series + per namespace batch "
        f"3 owner queries, 1 for containers with OOM kills and 3 range queries; none per workload; KRR's measured "
        f"formula 6 + 7 N gives {6 + 7 * workloads}) "
        f"and **{doc['requests']['kubernetes']} to the API server** (one list per kind).", "",
        "| measurement | median | runs |", "|---|---|---|", *rows])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--workloads", type=int, default=1000)
    parser.add_argument("--days", type=float, default=2.0)
    parser.add_argument("--repeats", type=int, default=4,
                        help="runs of each measurement (the two history reads alternate their order)")
    args = parser.parse_args(argv)
    write_section("report", f"Report over {args.workloads} workloads", run(args.workloads, args.days, args.repeats))


if __name__ == "__main__":
    main()
