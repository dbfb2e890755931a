"""Benchmark: ``podtailor-recommender report`` over 1,000 workloads (wall time, Prometheus and API requests).

A private control plane (``tests.harness.cluster``) gets ``--workloads`` Deployments (default 1,000) in 20
namespaces, paused with 3 replicas (no pods: nothing would run them, and the report prices replicas), and a
private Prometheus gets ``--days`` of history for one pod per Deployment, backfilled with
``promtool`` from the node simulator's OpenMetrics exporter at a 5-minute resolution (the report reads it
with ``--step 5m --scrape-interval 5m``). Measured: the whole command as a user runs it (a fresh ``python``
process writing JSON, then HTML, to a file), and in one process the stages (discovery, history read, model
and costs, rendering), with the requests each backend received and the CPU seconds Prometheus spent (its
own ``process_cpu_seconds_total``). Every fifth container has a 300m CPU limit, so some are throttled at
their daily peak. The history read is a list of variants (``VARIANTS``, measured by
``tests.benchmarks.floors``): the source sparse (the default), at full resolution (``sparse_signals`` off:
every container's OOM counter and throttled fraction at every step), with more queries in flight, and two
floors against the same Prometheus in the same run: every sample touched once (``count_over_time``) and
KRR's per-workload query shape. The report is then stated against both floors as ratios with goals.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes import client, config

from tests.benchmarks.floors import (
    KRR_IN_FLIGHT,
    SOURCE_METRICS,
    Measured,
    Variant,
    Window,
    Workload,
    krr_shape,
    measure,
    prometheus_cpu_s,
    source_read,
    touch_every_sample,
)
from tests.benchmarks.results import machine_facts, write_section
from tests.harness.cluster import REPO_ROOT, LocalCluster
from tests.harness.prometheus import LocalPrometheus
from tests.nodesim.openmetrics import ExportContainer, write_openmetrics
from tests.nodesim.usage import Daily

NAMESPACES = 20
STEP_S = 300
"""The step the report reads at, and the history's sample interval, unless a size says otherwise."""
MI = 2**20
HISTORY = "remote"
"""The variant the report itself runs (default settings): its batches feed the later stages."""
TOUCH, KRR = "touch_1", "krr"
"""The floors the goals compare the report with."""
GOALS = ((KRR, 0.2, "KRR-shaped floor"), (TOUCH, 2.0, "touch-every-sample floor (1 in flight)"))
"""(floor, most the cold report may take as a multiple of it, name)."""


def _samples(answer: Any) -> str:
    return f"counted {sum(answer):,} samples over the {len(SOURCE_METRICS)} metrics"


def _krr_answers(answer: Any) -> str:
    return ("series returned by the 7 queries (replicasets, pods, running pods, CPU p95, CPU count, memory peak, "
            f"memory count): {'/'.join(str(n) for n in answer)} of the workloads")


VARIANTS: tuple[Variant, ...] = (
    Variant(key=HISTORY, short="the report's read", read=source_read("podtailor", requests_in_flight=None),
            label="usage history as the report reads it (the podtailor plan: 3 days at the step, hourly summaries "
                  "before; CPU, working set and CFS counters by remote read; queries in flight sized to the "
                  "server; every namespace in one read, where the report reads them in groups)"),
    Variant(key="promql", short="PromQL", read=source_read("podtailor", requests_in_flight=None, read_api="promql"),
            relative_to=HISTORY, same_as=HISTORY,
            label="the same read through range queries (`read_api` promql, the path for Thanos and VictoriaMetrics)"),
    Variant(key="before", short="the read before #22", read=source_read(sparse_signals=False, read_api="promql"),
            relative_to=HISTORY,
            label="the read before issue #22: range queries at full resolution, every OOM counter and throttled "
                  "fraction at every step, 1 in flight"),
    Variant(key=TOUCH, short="touch floor", read=touch_every_sample(1), describe=_samples,
            label="floor: touch every sample once (`count_over_time(m[history])` per metric, all series, the "
                  "report's matchers), 1 in flight"),
    Variant(key="touch_5", short="touch floor, 5 at once", read=touch_every_sample(len(SOURCE_METRICS)),
            relative_to=TOUCH, same_as=TOUCH, same_requests=True,
            label=f"floor: touch every sample once, all {len(SOURCE_METRICS)} in flight"),
    Variant(key=KRR, short="KRR-shaped floor", read=krr_shape(), describe=_krr_answers,
            label=f"floor: KRR's shape (its 7 per-workload instant queries, 14 d subqueries at 75 s, "
                  f"{KRR_IN_FLIGHT} in flight)"),
)
"""Every history read, measured alike in each repeat; another read is one more entry."""


def bench_workloads(workloads: int) -> list[Workload]:
    """The Deployments and, as the backfill writes them, their ReplicaSet and single pod."""
    names = [(f"bench-{i % NAMESPACES:02d}", f"app-{i:04d}") for i in range(workloads)]
    return [Workload(namespace=ns, name=name, replicaset=f"{name}-5d9c", pods=(f"{name}-5d9c-aaaaa",))
            for ns, name in names]


def create_fleet(api: client.ApiClient, fleet: list[Workload]) -> None:
    core: Any = client.CoreV1Api(api)
    apps: Any = client.AppsV1Api(api)
    for ns in sorted({w.namespace for w in fleet}):
        core.create_namespace({"metadata": {"name": ns}})

    def create(w: Workload) -> None:
        apps.create_namespaced_deployment(w.namespace, {
            "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": w.name, "labels": {"bench": "report"}},
            "spec": {"replicas": 3, "paused": True, "selector": {"matchLabels": {"app": w.name}}, "template": {
                "metadata": {"labels": {"app": w.name}}, "spec": {"containers": [{
                    "name": w.container, "image": "registry.invalid/app:1",
                    "resources": {"requests": {"cpu": "500m", "memory": "512Mi"},
                                  "limits": {"cpu": "1", "memory": "1Gi"}}}]}}}})

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(create, fleet))


@dataclass(frozen=True, slots=True)
class Size:
    """One fleet to measure: workloads, days of history, and the scrape interval and step (5 min both by
    default; a 30 s scrape is read at a 1-minute step)."""

    workloads: int
    days: float
    scrape_s: int = STEP_S

    @property
    def step_s(self) -> int:
        return STEP_S if self.scrape_s == STEP_S else 2 * self.scrape_s

    @property
    def key(self) -> str:
        return f"{self.workloads}x{self.days:g}" + ("" if self.scrape_s == STEP_S else f"@{self.scrape_s}")

    def describe(self) -> str:
        return (f"{self.workloads:,} workloads, {self.days:g} days of history"
                + ("" if self.scrape_s == STEP_S else f", a {self.scrape_s} s scrape read at a {self.step_s} s step"))


def backfill(prom: LocalPrometheus, fleet: list[Workload], days: float, end_s: float, tmp: Path,
             scrape_s: int = STEP_S) -> float:
    rows = [ExportContainer(namespace=w.namespace, pod=w.pods[0], container=w.container, node="n1",
                            model=Daily(cpu_cores=0.1 + (i % 10) * 0.05, cpu_amplitude_cores=0.05,
                                        memory_bytes=(100 + (i % 7) * 40) * MI, memory_amplitude_bytes=20 * MI,
                                        cpu_noise=0.2, seed=i),
                            pod_uid=f"uid-{i}", owner_name=w.replicaset, replicaset_owner_name=w.name,
                            cpu_request_millicores=500, memory_request_bytes=512 * MI, memory_limit_bytes=1024 * MI,
                            cpu_limit_millicores=300 if i % 5 == 0 else None)
            for i, w in enumerate(fleet)]
    path = tmp / "fleet.om"
    with path.open("w") as out:
        write_openmetrics(out, rows, now_s=end_s, days=days, step_s=scrape_s, substeps=2 if scrape_s >= 60 else 1)
    return prom.backfill(path)


@dataclass(frozen=True, slots=True, kw_only=True)
class Servers:
    """A local control plane and Prometheus holding a generated fleet and its backfilled history."""

    kubeconfig: str
    url: str
    fleet: list[Workload]
    create_s: float
    backfill_s: float


@contextmanager
def fleet_servers(tmp: Path, workloads: int, days: float, scrape_s: int = STEP_S) -> Iterator[Servers]:
    """Start both servers in ``tmp``, create ``workloads`` and backfill ``days`` of history; stop both after."""
    cluster, prom = LocalCluster(tmp / "c"), LocalPrometheus(tmp / "p")
    state = cluster.start()
    prom.start()
    try:
        api = config.new_client_from_config(config_file=state.kubeconfig)  # type: ignore[no-untyped-call]
        fleet = bench_workloads(workloads)
        t0 = time.monotonic()
        create_fleet(api, fleet)
        create_s = time.monotonic() - t0
        backfill_s = backfill(prom, fleet, days, time.time() - 60, tmp, scrape_s)
        yield Servers(kubeconfig=state.kubeconfig, url=prom.url, fleet=fleet, create_s=create_s,
                      backfill_s=backfill_s)
    finally:
        prom.stop()
        cluster.stop()


def cli(kubeconfig: str, url: str, fmt: str, out: Path, size: Size) -> tuple[float, float]:
    """The report as a user runs it, in a fresh process: (wall seconds, Prometheus CPU seconds)."""
    code = ("import sys, argparse; from recommender.report.cli import add_report_parser, run_report; "
            "p = argparse.ArgumentParser(); add_report_parser(p.add_subparsers(dest='c')); "
            "sys.exit(run_report(p.parse_args(['report', *sys.argv[1:]])))")
    cpu0, t0 = prometheus_cpu_s(url), time.monotonic()
    done = subprocess.run([sys.executable, "-c", code, "--kubeconfig", kubeconfig, "--prometheus-url", url,
                           "--step", f"{size.step_s}s", "--scrape-interval", f"{size.scrape_s}s",
                           "--history", f"{size.days:g}d", "-o", fmt,
                           "--output-file", str(out), "--no-progress"], capture_output=True, text=True,
                          cwd=REPO_ROOT, check=False, timeout=1800)
    wall = time.monotonic() - t0
    if done.returncode != 0:
        raise RuntimeError(f"report exited {done.returncode}: {done.stderr[-2000:]}")
    return wall, prometheus_cpu_s(url) - cpu0


def stages(kubeconfig: str, url: str, fleet: list[Workload], size: Size, rotate: int) -> dict[str, Any]:
    """One pass over the stages; the history variants run in ``VARIANTS`` order rotated by ``rotate``, so that
    from one repeat to the next none always runs first (or always finds another's pages in the cache)."""
    from recommender.model.registry import get_strategy
    from recommender.report.build import BuildConfig, build_report
    from recommender.report.discovery import Discovery, Filters
    from recommender.report.html import as_html
    from recommender.report.render import as_json

    api = config.new_client_from_config(config_file=kubeconfig)  # type: ignore[no-untyped-call]
    out: dict[str, Any] = {}
    t0 = time.monotonic()
    inventory = Discovery(api).read(Filters())
    out["discovery_s"], out["api_requests"] = time.monotonic() - t0, inventory.api_requests
    now = time.time()
    window = Window(url=url, namespaces=tuple(sorted({w.namespace for w in inventory.workloads})),
                    workloads=tuple(fleet), start_s=now - 120 - size.days * 86400, end_s=now - 120,
                    step_s=size.step_s, scrape_s=size.scrape_s)
    k = rotate % len(VARIANTS)
    got = {v.key: measure(v, window) for v in VARIANTS[k:] + VARIANTS[:k]}
    check(got)
    out["history"] = got
    batches = got[HISTORY].answer
    out["throttled_containers"] = sum(1 for b in batches.values() if (b.cpu_throttled_fraction.values > 0).any())
    t0 = time.monotonic()
    report = build_report(inventory, batches, get_strategy("podtailor"), BuildConfig(
        now_s=now, start_s=window.start_s, end_s=window.end_s, strategy_name="podtailor"))
    out["build_s"] = time.monotonic() - t0
    for fmt, render in (("json", as_json), ("html", as_html)):
        t0 = time.monotonic()
        text = render(report)
        out[f"render_{fmt}_s"], out[f"{fmt}_bytes"] = time.monotonic() - t0, len(text.encode())
    out["workloads"] = len(report.workloads)
    api.close()
    return out


def check(got: dict[str, Measured]) -> None:
    """Every variant with ``same_as`` read what that one read (and sent as many requests if it says so)."""
    for v in VARIANTS:
        if v.same_as is None:
            continue
        mine, theirs = got[v.key], got[v.same_as]
        if _comparable(mine.answer) != _comparable(theirs.answer):
            raise RuntimeError(f"history variant {v.key} read something else than {v.same_as}")
        if v.same_requests and mine.requests != theirs.requests:
            raise RuntimeError(f"history variant {v.key} sent {mine.requests} requests, {v.same_as} {theirs.requests}")


def _comparable(answer: Any) -> Any:
    """Source batches per container as CPU points, their sum, the sums of memory peaks and throttled fractions
    and the OOM kills (equal reads give equal values); any other answer as it is."""
    if not isinstance(answer, dict):
        return answer
    return {k: (len(b.cpu_cores.values), round(float(b.cpu_cores.values.sum()), 6),
                round(float(b.memory_peak_bytes.values.sum()), 0),
                round(float(b.cpu_throttled_fraction.values.sum()), 6), len(b.oom_kills)) for k, b in answer.items()}


def run(size: Size, repeats: int) -> str:
    facts = machine_facts()  # before the run: its load average is the machine's, not the bench's own
    with tempfile.TemporaryDirectory() as tmp, fleet_servers(Path(tmp), size.workloads, size.days,
                                                             size.scrape_s) as sv:
        walls = {fmt: [cli(sv.kubeconfig, sv.url, fmt, Path(tmp) / f"r.{fmt}", size) for _ in range(repeats)]
                 for fmt in ("json", "html")}
        doc = json.loads((Path(tmp) / "r.json").read_text())
        staged = [stages(sv.kubeconfig, sv.url, sv.fleet, size, rotate=i) for i in range(repeats)]
    return table(facts, size, sv.create_s, sv.backfill_s, walls, doc, staged)


def _med(xs: list[float]) -> float:
    return float(statistics.median(xs))


def _runs(xs: list[float]) -> str:
    return ", ".join(f"{x:.2f}" for x in xs)


def goal_lines(wall: dict[str, float], cpu: dict[str, float]) -> list[str]:
    """One line per goal in ``GOALS``: the cold report (``json``) against the floor, its ratio and verdict."""
    return [f"- Goal: cold report ≤ {limit:g} x the {name}: measured {wall['json'] / wall[k]:.3f} x "
            f"({wall['json']:.2f} s against {wall[k]:.2f} s; Prometheus CPU {cpu['json']:.2f} s against "
            f"{cpu[k]:.2f} s): **{'met' if wall['json'] <= limit * wall[k] else 'not met'}**."
            for k, limit, name in GOALS]


def table(facts: str, size: Size, create_s: float, backfill_s: float,
          walls: dict[str, list[tuple[float, float]]], doc: dict[str, Any], staged: list[dict[str, Any]]) -> str:
    def med(key: str) -> float:
        return _med([s[key] for s in staged])

    def hist(key: str) -> list[Measured]:
        return [s["history"][key] for s in staged]

    wall = {v.key: _med([m.wall_s for m in hist(v.key)]) for v in VARIANTS}
    cpu = {v.key: _med([m.prometheus_cpu_s for m in hist(v.key)]) for v in VARIANTS}
    for fmt, runs in walls.items():
        wall[fmt], cpu[fmt] = _med([w for w, _ in runs]), _med([c for _, c in runs])
    rows = [f"| `report -o {fmt}` (fresh process, to a file, default settings) | {wall[fmt]:.2f} s | "
            f"{cpu[fmt]:.2f} s | {doc['requests']['prometheus']} | {_runs([w for w, _ in walls[fmt]])} |"
            for fmt in ("json", "html")]
    rows.append(f"| stage: discovery (list calls) | {med('discovery_s'):.2f} s | | {staged[0]['api_requests']} "
                "to the API server | |")
    for v in VARIANTS:
        notes = [_runs([m.wall_s for m in hist(v.key)])]
        if v.relative_to is not None:
            r = v.relative_to
            notes.append(f"{wall[v.key] / wall[r]:.2f}x the wall of {next(x.short for x in VARIANTS if x.key == r)}, "
                         f"{cpu[v.key] / max(cpu[r], 1e-9):.2f}x its Prometheus CPU")
        if v.describe is not None:
            notes.append(v.describe(staged[0]["history"][v.key].answer))
        rows.append(f"| stage: {v.label} | {wall[v.key]:.2f} s | {cpu[v.key]:.2f} s | "
                    f"{staged[0]['history'][v.key].requests} | {'; '.join(notes)} |")
    rows += [f"| stage: model, costs, disruption, summaries | {med('build_s'):.2f} s | | | |",
             f"| stage: render JSON ({med('json_bytes') / 1e6:.1f} MB) | {med('render_json_s'):.2f} s | | | |",
             f"| stage: render HTML ({med('html_bytes') / 1e6:.1f} MB) | {med('render_html_s'):.2f} s | | | |"]
    floors = (KRR, TOUCH, "touch_5")
    against = [f"| {name} | {wall[k]:.2f} s | {cpu[k]:.2f} s | "
               + " | ".join(f"{wall[k] / wall[f]:.2f}x (CPU {cpu[k] / max(cpu[f], 1e-9):.2f}x)" for f in floors) + " |"
               for name, k in (("cold report (`report -o json`, fresh process)", "json"),
                               ("history-read stage (the report's read, 1 in flight)", HISTORY))]
    with_history = sum(1 for w in doc["workloads"] if w["containers"][0]["usage"])
    krr = staged[0]["history"][KRR].requests
    return "\n".join([
        facts, "",
        f"{size.workloads} Deployments (3 replicas, paused, one container) in {NAMESPACES} namespaces on a private "
        f"control plane; {size.days:g} days of history per workload, one sample every {size.scrape_s} s, read at "
        f"a {size.step_s} s step, in a private Prometheus "
        f"(fleet created in {create_s:.1f} s, backfilled in {backfill_s:.1f} s). {with_history} of "
        f"{len(doc['workloads'])} workloads had history in the report; {staged[0]['throttled_containers']} "
        "containers were throttled at some step.", "",
        f"Requests per report: **{doc['requests']['prometheus']} to Prometheus** (1 runtimeinfo page, 1 remote-read "
        "probe; per group of namespaces (the report reads its namespaces in `--read-groups` groups, 3 by default, "
        "and recommends for one while the next is read) 1 series; per namespace batch 3 owner queries and 1 for "
        "containers with OOM kills; per batch and time chunk 4 remote reads, and 3 range queries for hourly "
        "summaries of older history; none per workload; "
        f"KRR's measured formula 6 + 7 N gives {6 + 7 * size.workloads}; the KRR-shaped floor sends only its {krr} "
        f"= 7 N per-workload queries) and **{doc['requests']['kubernetes']} to the API server** (one list per kind). "
        f"Every history read below ran once per repeat ({len(staged)} repeats), in an order rotated from one "
        "repeat to the next, against the same Prometheus; Prometheus CPU is its own `process_cpu_seconds_total` "
        "before and after.", "",
        "| measurement | median | Prometheus CPU | requests | runs; notes |", "|---|---|---|---|---|", *rows, "",
        "The KRR-shaped floor sends, per workload, KRR 1.29's `simple`-strategy queries for a one-container "
        "Deployment with its pod regex (the pod the backfill wrote), `by (container, pod, job)` although our series "
        "have no `job` label, and a 14 d window over the history there is; on 5-minute samples its 75 s `rate` "
        "window holds at most one sample, so the CPU p95 query answers nothing, but Prometheus still evaluates "
        "every step of its subquery. No `kube_pod_status_phase` series were backfilled, so the running-pods query "
        "answers nothing either.", "",
        "### The report against the floors (medians of this run)", "",
        "| | wall | Prometheus CPU | vs KRR-shaped floor | vs touch floor, 1 in flight | vs touch floor, 5 at once |",
        "|---|---|---|---|---|---|", *against, "", *goal_lines(wall, cpu)])
def _sizes(text: str) -> list[Size]:
    """``--sizes``: comma-separated WORKLOADSxDAYS[@SCRAPE_S], e.g. ``1000x8,10000x2,1000x2@30``."""
    out = []
    try:
        for item in text.split(","):
            head, _, scrape = item.partition("@")
            workloads, days = head.split("x")
            out.append(Size(int(workloads), float(days), int(scrape) if scrape else STEP_S))
    except ValueError:
        raise argparse.ArgumentTypeError(f"want WORKLOADSxDAYS[@SCRAPE_S][,...], e.g. 1000x8, not {text[:40]!r}"
                                         ) from None
    if not out or any(s.workloads < 1 or not 0 < s.days <= 30 or not 1 <= s.scrape_s <= STEP_S for s in out):
        raise argparse.ArgumentTypeError(f"workloads at least 1, days in (0, 30], a scrape interval in [1, {STEP_S}] s")
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", type=_sizes, default=_sizes("1000x8,10000x2,1000x2@30"),
                        help="fleets to measure, WORKLOADSxDAYS[@SCRAPE_S] (default: 1000x8,10000x2,1000x2@30: "
                             "10,000 workloads get 2 days because their 8-day backfill alone would take about an "
                             "hour here; @30 writes a sample every 30 s and reads it at a 1-minute step)")
    parser.add_argument("--repeats", type=int, default=3,
                        help="runs of each measurement (the history variants rotate their order)")
    args = parser.parse_args(argv)
    for size in args.sizes:  # one section each, so that one size can be measured again alone
        print(f"report bench: {size.describe()}", flush=True)
        body = run(size, args.repeats if size.workloads <= 1000 else max(1, args.repeats - 1))
        write_section(f"report-{size.key}", f"Report against its floors: {size.describe()}", body)


if __name__ == "__main__":
    main()
