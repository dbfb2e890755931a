"""Benchmark: the recommender's Prometheus read and model at 1,000 and 10,000 containers, 8 days of history.

For each size a fresh local Prometheus (Debian's ``prometheus``) gets 8 days of cAdvisor and
kube-state-metrics history backfilled with ``promtool`` from the node simulator's OpenMetrics exporter, at a
15-minute sample resolution (one sample per series every 900 s, 769 per series: a 60 s grid would be
11,520 per series and 10,000 containers would not backfill in minutes on 2 cores). The source reads it
with ``PrometheusConfig(step_s=900, scrape_interval_s=900)``, so the CPU rate window is 3,600 s.

Measured per size, interleaved in rounds so that load from other work on the machine hits both sides:

* the bare queries: the exact HTTP requests the source sent (captured from its session), replayed with
  plain ``requests`` and timing only the round trips (the floor: no JSON decoding, no model);
* a cold full pass, in a fresh subprocess: ``PrometheusSource.history`` over the 8 days for all namespaces,
  every batch folded into a new ``podtailor`` state, ``recommend`` for every container key;
* in the same subprocess, states kept, an incremental pass over the next step (the last 15 minutes of the
  history) plus ``recommend`` for every key.

Peak RSS is the subprocess's ``VmHWM`` (reset through ``/proc/self/clear_refs`` before the incremental
pass), so it is the pass's own and not the backfill's. VPA objects and the API server are not part of it.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests

from tests.benchmarks.results import machine_facts, write_section
from tests.harness.cluster import REPO_ROOT

DAYS = 8
STEP_S = 900
"""Backfill resolution and query step: one sample per series every 15 minutes."""
NAMESPACES = 20
REPLICAS = 3
MI = 2**20
GIB = 2**30
CHILD_FLAG = "--_child"
PASS_TIMEOUT_S = 1800.0


# ------------------------------------------------------------------------------------------------ history
@dataclass(frozen=True, slots=True)
class Fleet:
    containers: int
    namespaces: int
    workloads: int
    pods: int
    keys: int
    """Workload containers (what the recommender keys history by): pods of a workload are pooled."""


def _fleet(n: int) -> tuple[list[Any], Fleet]:
    """``n`` containers: Deployments of 3 pods round-robin over 20 namespaces; every other Deployment's pods
    have a sidecar (so 1 or 2 containers per pod); half the containers have a CPU limit; no OOM kills."""
    from tests.nodesim.openmetrics import ExportContainer
    from tests.nodesim.usage import Daily

    out: list[ExportContainer] = []
    workloads = pods = keys = 0
    w = 0
    while len(out) < n:
        ns = f"team-{w % NAMESPACES:02d}"
        deploy, rs = f"svc-{w:05d}", f"svc-{w:05d}-7d9f8c6b5"
        names = ["app", "proxy"] if w % 2 else ["app"]
        workloads += 1
        keys += len(names)
        for r in range(REPLICAS):
            if len(out) >= n:
                break
            pod = f"{rs}-{r:05d}"
            pods += 1
            for c, name in enumerate(names):
                if len(out) >= n:
                    break
                i = len(out)
                model = Daily(cpu_cores=0.05 + 0.4 * ((i * 37) % 100) / 100, memory_bytes=(64 + (i * 53) % 512) * MI,
                              cpu_amplitude_cores=0.03 + 0.2 * ((i * 11) % 100) / 100,
                              memory_amplitude_bytes=(8 + (i * 7) % 64) * MI, peak_hour=(i % 24),
                              cpu_noise=0.3, memory_noise=0.05, noise_bucket_s=STEP_S, seed=i)
                out.append(ExportContainer(
                    namespace=ns, pod=pod, container=name, node=f"node-{i % 300:03d}", model=model,
                    pod_uid=f"{w:08x}-{r:04x}", image=f"registry.invalid/{name}:1", owner_name=rs,
                    replicaset_owner_name=deploy, cpu_request_millicores=250 if c == 0 else 50,
                    cpu_limit_millicores=1000 if i % 2 else None, memory_request_bytes=256 * MI,
                    memory_limit_bytes=2 * GIB))
        w += 1
    return out, Fleet(containers=len(out), namespaces=min(NAMESPACES, workloads), workloads=workloads, pods=pods,
                      keys=keys)


@contextmanager
def _ticker(label: str, path: Path | None = None, every_s: float = 20.0) -> Iterator[None]:
    """Print progress (elapsed, and the size of ``path``) every ``every_s`` while the block runs."""
    done = threading.Event()
    t0 = time.monotonic()

    def tick() -> None:
        while not done.wait(every_s):
            size = f", {path.stat().st_size / GIB:.1f} GiB" if path is not None and path.exists() else ""
            print(f"  {label}: {time.monotonic() - t0:.0f} s{size}", file=sys.stderr, flush=True)

    thread = threading.Thread(target=tick, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()


def _du(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


@dataclass(frozen=True, slots=True)
class Backfill:
    end_s: float
    samples: int
    file_bytes: int
    tsdb_bytes: int
    write_s: float
    promtool_s: float
    start_s: float


def _backfill(prom: Any, containers: Sequence[Any], workdir: Path) -> Backfill:
    from tests.nodesim.openmetrics import write_openmetrics

    end_s = float(math.floor(time.time() / STEP_S) * STEP_S - STEP_S)
    path = workdir / "history.om"
    t0 = time.monotonic()
    with _ticker("writing OpenMetrics", path), path.open("w", encoding="utf-8", buffering=1 << 20) as out:
        samples = write_openmetrics(out, containers, now_s=end_s, days=DAYS, step_s=STEP_S)
    write_s = time.monotonic() - t0
    file_bytes = path.stat().st_size
    print(f"  wrote {samples / 1e6:.1f} M samples, {file_bytes / GIB:.2f} GiB in {write_s:.0f} s", file=sys.stderr,
          flush=True)
    with _ticker("promtool backfill"):
        # One block for the 8 days (promtool re-reads the whole file once per block; 486h is a compaction level).
        promtool_s = prom.backfill(path, max_block_duration="486h")
    path.unlink()
    t1 = time.monotonic()
    prom.start()
    return Backfill(end_s=end_s, samples=samples, file_bytes=file_bytes, tsdb_bytes=_du(prom.tsdb),
                    write_s=write_s, promtool_s=promtool_s, start_s=time.monotonic() - t1)


# ------------------------------------------------------------------------------------- the measured pass
def _vm(field: str = "VmHWM") -> int:
    """A memory figure of this process from /proc/self/status, in bytes (VmHWM: peak RSS; VmRSS: now)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) * 1024
    return 0


def _reset_hwm() -> bool:
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return True


class _RecordingSession(requests.Session):
    """A requests session that records every request it sends and the time spent in them."""

    def __init__(self) -> None:
        super().__init__()
        self.sent: list[tuple[str, Any, dict[str, str]]] = []
        self.http_s = 0.0

    def request(self, method: Any, url: Any, *args: Any, **kwargs: Any) -> Any:
        data = kwargs.get("data") or []
        body = data.hex() if isinstance(data, bytes) else [(str(k), str(v)) for k, v in data]  # a remote read: hex
        headers = {k: str(v) for k, v in (kwargs.get("headers") or {}).items() if k.startswith(("Content-", "X-"))}
        self.sent.append((str(url), body, headers))
        t0 = time.monotonic()
        try:
            return super().request(method, url, *args, **kwargs)
        finally:
            self.http_s += time.monotonic() - t0


def _child(spec: dict[str, Any]) -> dict[str, Any]:
    """One cold pass then one incremental pass, in this (fresh) process; returns the measurements."""
    from prometheus_client import CollectorRegistry

    from podtailor.resources import CurrentResources
    from recommender.model.registry import get_strategy
    from recommender.model.types import ContainerKey, ContainerPolicy, ContainerState
    from recommender.sources.config import PrometheusConfig
    from recommender.sources.prometheus import PrometheusSource

    baseline = _vm()
    session = _RecordingSession()
    step_s = int(spec.get("step_s", STEP_S))
    history_s = float(spec.get("history_s", DAYS * 86400))
    config = PrometheusConfig(url=spec["url"], step_s=step_s, scrape_interval_s=float(spec.get("scrape_s", step_s)),
                              retries=0, timeout_s=spec["timeout_s"])
    source = PrometheusSource(config, registry=CollectorRegistry(), session=session)
    strategy = get_strategy("podtailor")
    states: dict[ContainerKey, ContainerState] = {}
    policy, current = ContainerPolicy(), CurrentResources()
    namespaces: list[str] = spec["namespaces"]
    out: dict[str, Any] = {"baseline_rss": baseline}

    def one_pass(name: str, start_s: float, end_s: float) -> None:
        requests_before, http_before, sent_before = source.request_count, session.http_s, len(session.sent)
        prom_cpu_before = prometheus_cpu_s(spec["url"])
        t0 = time.monotonic()
        batches = source.history(namespaces, start_s, end_s)
        t1 = time.monotonic()
        samples = 0
        for key, batch in batches.items():
            state = states.get(key)
            if state is None:
                state = states[key] = strategy.new_state()
            state.add(batch)
            samples += len(batch.cpu_cores) + len(batch.memory_peak_bytes)
        recommended = sum(1 for state in states.values()
                          if strategy.recommend(state, now_s=end_s, policy=policy, current=current)[0] is not None)
        t2 = time.monotonic()
        out[name] = {"wall_s": t2 - t0, "history_s": t1 - t0, "http_s": session.http_s - http_before,
                     "model_s": t2 - t1, "requests": source.request_count - requests_before,
                     "batches": len(batches), "recommended": recommended, "samples": samples,
                     "peak_rss": _vm(), "sent": session.sent[sent_before:],
                     "prometheus_cpu_s": prometheus_cpu_s(spec["url"]) - prom_cpu_before}

    end_s: float = spec["end_s"]
    one_pass("cold", end_s - history_s, end_s - step_s)
    cold_targets = _targets(strategy, states, end_s - step_s, policy, current)
    if spec.get("checkpoints"):
        out["checkpoints"] = checkpoint_bytes(strategy, states, end_s - step_s)
    out["hwm_reset"] = _reset_hwm()
    out["rss_before_incremental"] = _vm("VmRSS")
    one_pass("incremental", end_s - step_s, end_s)
    out["changed_workloads"] = len({(k.namespace, k.workload_name) for k, target in
                                    _targets(strategy, states, end_s, policy, current).items()
                                    if cold_targets.get(k) != target})
    source.close()
    return out


def _targets(strategy: Any, states: dict[Any, Any], now_s: float, policy: Any, current: Any) -> dict[Any, Any]:
    """Each key's recommendation (what the engine would write into its VPA's status)."""
    return {key: strategy.recommend(state, now_s=now_s, policy=policy, current=current)[0]
            for key, state in states.items()}


def prometheus_cpu_s(url: str) -> float:
    """The server's own ``process_cpu_seconds_total`` from its ``/metrics`` (user + system CPU since start)."""
    text = requests.get(f"{url}/metrics", timeout=30).text
    for line in text.splitlines():
        if line.startswith("process_cpu_seconds_total "):
            return float(line.split()[1])
    raise RuntimeError(f"{url}/metrics has no process_cpu_seconds_total")


def checkpoint_bytes(strategy: Any, states: dict[Any, Any], history_until_s: float) -> dict[str, int]:
    """The RecommenderCheckpoint objects the engine would write, one per VPA (one VPA per Deployment here),
    built with the engine's own ``checkpoint_spec`` in the body ``KubeAdapter.save_checkpoint`` sends, and
    serialised as compact JSON (what the API server stores, before its own metadata such as managedFields)."""
    from podtailor.vpa import GROUP, VERSION
    from recommender.kube.checkpoint import checkpoint_spec
    from recommender.kube.cluster import CHECKPOINT_GROUP, CHECKPOINT_VERSION

    by_vpa: dict[tuple[str, str], dict[str, Any]] = {}
    for key, state in states.items():
        by_vpa.setdefault((key.namespace, key.workload_name), {})[key.container] = state
    total = largest = 0
    for (namespace, name), vpa_states in by_vpa.items():
        body = {"apiVersion": f"{CHECKPOINT_GROUP}/{CHECKPOINT_VERSION}", "kind": "RecommenderCheckpoint",
                "metadata": {"name": name, "namespace": namespace, "ownerReferences": [
                    {"apiVersion": f"{GROUP}/{VERSION}", "kind": "VerticalPodAutoscaler", "name": name,
                     "uid": "00000000-0000-0000-0000-000000000000"}]},
                "spec": checkpoint_spec(strategy, vpa_states, history_until_s)}
        size = len(json.dumps(body, separators=(",", ":")).encode())
        total, largest = total + size, max(largest, size)
    return {"objects": len(by_vpa), "keys": len(states), "bytes": total, "largest": largest}


def _run_child(url: str, namespaces: Sequence[str], end_s: float, timeout_s: float, **extra: Any) -> dict[str, Any]:
    """``extra``: step_s, scrape_s and history_s (default: this bench's 15-minute step over 8 days) and
    checkpoints (True: also size the checkpoints the cold pass would write)."""
    spec = {"url": url, "namespaces": list(namespaces), "end_s": end_s, "timeout_s": timeout_s, **extra}
    done = subprocess.run([sys.executable, "-m", "tests.benchmarks.bench_recommender", CHILD_FLAG, json.dumps(spec)],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=PASS_TIMEOUT_S, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"measured pass failed (exit {done.returncode}):\n{done.stderr.strip()[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _bare(sent: Sequence[Sequence[Any]], timeout_s: float) -> tuple[float, int]:
    """Replay the captured requests with plain requests (one keep-alive session, in order, like the source):
    seconds spent in the HTTP round trips (bodies read, not decoded) and bytes received."""
    total, received = 0.0, 0
    with requests.Session() as session:
        for url, form, headers in sent:
            t0 = time.monotonic()
            data = bytes.fromhex(form) if isinstance(form, str) else [tuple(pair) for pair in form]
            response = session.post(url, data=data, headers=headers, timeout=timeout_s)
            body = response.content
            total += time.monotonic() - t0
            if response.status_code != 200:
                raise RuntimeError(f"bare replay of {url} answered {response.status_code}: {body[:300]!r}")
            received += len(body)
    return total, received


# --------------------------------------------------------------------------------------------- a size
@dataclass(frozen=True, slots=True)
class SizeResult:
    fleet: Fleet
    backfill: Backfill
    rounds: list[dict[str, Any]]
    """Per round: bare_s, bare_bytes, and the child's measurements."""


def _measure_size(n: int, rounds: int, timeout_s: float) -> SizeResult:
    from tests.harness.prometheus import LocalPrometheus

    containers, fleet = _fleet(n)
    namespaces = sorted({c.namespace for c in containers})
    print(f"size {n}: {fleet.containers} containers, {fleet.pods} pods, {fleet.workloads} Deployments, "
          f"{fleet.keys} workload containers in {fleet.namespaces} namespaces", file=sys.stderr, flush=True)
    with tempfile.TemporaryDirectory(prefix=f"bench-recommender-{n}-") as tmp:
        prom = LocalPrometheus(Path(tmp) / "prometheus", scrape_interval_s=float(STEP_S))
        try:
            backfill = _backfill(prom, containers, Path(tmp))
            del containers
            print(f"  backfill done: promtool {backfill.promtool_s:.0f} s, TSDB {backfill.tsdb_bytes / MI:.0f} MiB",
                  file=sys.stderr, flush=True)
            print("  warm-up pass", file=sys.stderr, flush=True)
            warm = _run_child(prom.url, namespaces, backfill.end_s, timeout_s)
            sent = warm["cold"]["sent"]
            _bare(sent, timeout_s)
            results: list[dict[str, Any]] = []
            for r in range(rounds):
                # Alternate the order so that a trend in the machine's load does not favour one side.
                if r % 2 == 0:
                    bare_s, bare_bytes = _bare(sent, timeout_s)
                    child = _run_child(prom.url, namespaces, backfill.end_s, timeout_s)
                else:
                    child = _run_child(prom.url, namespaces, backfill.end_s, timeout_s)
                    bare_s, bare_bytes = _bare(sent, timeout_s)
                if child["cold"]["sent"] != sent:
                    raise RuntimeError("the source sent different requests in two cold passes")
                results.append({"bare_s": bare_s, "bare_bytes": bare_bytes, "load": os.getloadavg()[0], **child})
                print(f"  round {r + 1}/{rounds}: bare {bare_s:.2f} s, cold {child['cold']['wall_s']:.2f} s, "
                      f"incremental {child['incremental']['wall_s']:.2f} s, "
                      f"peak RSS {child['cold']['peak_rss'] / MI:.0f} MiB, load {os.getloadavg()[0]:.2f}",
                      file=sys.stderr, flush=True)
        finally:
            prom.stop()
    return SizeResult(fleet=fleet, backfill=backfill, rounds=results)


# ---------------------------------------------------------------------------------------------- report
def _med(values: Sequence[float]) -> float:
    return statistics.median(values)


def _ok(met: bool) -> str:
    return "met" if met else "**not met**"


def _report(sizes: dict[int, SizeResult], load_before: str) -> str:
    from recommender.sources.config import PrometheusConfig

    per_series, steps = DAYS * 86400 // STEP_S + 1, DAYS * 86400 // STEP_S - 1
    intro = (
        f"History: {DAYS} days backfilled with `promtool tsdb create-blocks-from openmetrics` (one block) from the "
        f"node simulator's exporter at a **{STEP_S // 60}-minute sample resolution** ({per_series} samples per "
        "series; cAdvisor CPU, working set, CFS periods, throttled periods, OOM events, and kube-state-metrics "
        "requests, limits, pod owner, ReplicaSet owner, pod info). Source configured to match: "
        f"`PrometheusConfig(step_s={STEP_S}, scrape_interval_s={STEP_S})`, so the CPU rate window is {4 * STEP_S} s "
        f"and the cold pass reads {steps} steps per series, cut in time so that one response holds at most "
        f"`max_points_per_query` = {PrometheusConfig(url='http://x').max_points_per_query:,} series x steps; "
        "`max_series_per_query` is the default 5,000. The source sends its requests one at a time, in order, and "
        "decodes each answer, one series at a time, while the next query runs. "
        f"Fleet: Deployments of {REPLICAS} pods round-robin over {NAMESPACES} namespaces, every other one "
        "with a sidecar (1 or 2 containers per pod), half the containers with a CPU limit, no OOM kills. Each "
        "measured pass runs in a fresh subprocess (peak RSS = its VmHWM, interpreter and imports included); the "
        f"incremental pass reads the next {STEP_S // 60}-minute step with the cold pass's states kept. Bare = the "
        "same HTTP requests replayed with plain `requests`, bodies read but not decoded. Warm-up pass first, then "
        f"rounds alternating bare/pass order; medians shown. Load average before the first size: {load_before}.")
    lines = [machine_facts(), "", intro, "",
             "| containers (pods, Deployments, workload containers) | backfill: samples, OpenMetrics file, write, "
             "promtool, TSDB |", "|---|---|"]
    for n, s in sizes.items():
        f, b = s.fleet, s.backfill
        lines.append(f"| {n:,} ({f.pods:,}, {f.workloads:,}, {f.keys:,}) | {b.samples / 1e6:.1f} M, "
                     f"{b.file_bytes / GIB:.1f} GiB, {b.write_s:.0f} s, {b.promtool_s:.0f} s, "
                     f"{b.tsdb_bytes / MI:.0f} MiB |")
    lines += ["", "| containers | rounds | bare queries (floor) | cold pass (HTTP / model) | incremental pass | "
              "cold / bare | incremental / cold | requests cold, incremental | peak RSS cold (after imports), "
              "incremental (held at its start) | response bytes |", "|---|---|---|---|---|---|---|---|---|---|"]
    for n, s in sizes.items():
        rs = s.rounds
        bare = _med([r["bare_s"] for r in rs])
        cold = _med([r["cold"]["wall_s"] for r in rs])
        http = _med([r["cold"]["http_s"] for r in rs])
        model = _med([r["cold"]["model_s"] for r in rs])
        incr = _med([r["incremental"]["wall_s"] for r in rs])
        ratio_cold = _med([r["cold"]["wall_s"] / r["bare_s"] for r in rs])
        ratio_incr = _med([r["incremental"]["wall_s"] / r["cold"]["wall_s"] for r in rs])
        rss = max(r["cold"]["peak_rss"] for r in rs)
        rss_incr = max(r["incremental"]["peak_rss"] for r in rs)
        base = max(r["baseline_rss"] for r in rs)
        held = max(r["rss_before_incremental"] for r in rs)
        lines.append(
            f"| {n:,} | {len(rs)} | {bare:.2f} s | {cold:.2f} s ({http:.2f} / {model:.2f}) | {incr:.3f} s | "
            f"{ratio_cold:.2f}x | {ratio_incr:.1%} | {rs[0]['cold']['requests']}, {rs[0]['incremental']['requests']}"
            f" | {rss / MI:.0f} MiB ({base / MI:.0f}), {rss_incr / MI:.0f} MiB ({held / MI:.0f}) | "
            f"{rs[0]['bare_bytes'] / MI:.0f} MiB |")
    for n, s in sizes.items():
        lines.append("")
        lines.append(f"Rounds at {n:,} (bare s / cold s / incremental s, cold/bare, 1-min load after the round): "
                     + "; ".join(f"{r['bare_s']:.1f} / {r['cold']['wall_s']:.1f} / {r['incremental']['wall_s']:.2f}, "
                                 f"{r['cold']['wall_s'] / r['bare_s']:.2f}x, load {r['load']:.1f}" for r in s.rounds)
                     + ".")
    lines += ["", "| goal | measured | verdict |", "|---|---|---|"]
    for n, s in sizes.items():
        rs = s.rounds
        ratio_cold = _med([r["cold"]["wall_s"] / r["bare_s"] for r in rs])
        ratio_incr = _med([r["incremental"]["wall_s"] / r["cold"]["wall_s"] for r in rs])
        lines.append(f"| {n:,}: cold pass within 1.5x the bare queries | {ratio_cold:.2f}x | "
                     f"{_ok(ratio_cold <= 1.5)} |")
        lines.append(f"| {n:,}: incremental pass within 10% of the cold pass | {ratio_incr:.1%} | "
                     f"{_ok(ratio_incr <= 0.10)} |")
    if 10_000 in sizes:
        rss = max(max(r["cold"]["peak_rss"], r["incremental"]["peak_rss"]) for r in sizes[10_000].rounds)
        lines.append(f"| 10,000: peak RSS under 1 GiB | {rss / MI:.0f} MiB | {_ok(rss < GIB)} |")
    counts = {n: s.rounds[0]["cold"]["requests"] for n, s in sizes.items()}
    if len(counts) > 1:
        shapes = {n: _shape(s.rounds[0]["cold"]["sent"]) for n, s in sizes.items()}
        workloads = {n: s.fleet.workloads for n, s in sizes.items()}
        same = len(set(counts.values())) == 1
        lines.append(
            "| request count does not grow with workloads | "
            + ", ".join(f"{c} at {workloads[n]:,} Deployments" for n, c in counts.items()) + " | "
            + ("met: equal |" if same else
               ("met by the formula, not equal" if all(c == 1 for _, c in shapes.values()) else "**not met**")
               + ": requests = 1 remote-read probe + 1 series + S scopes x (4 instant + 4 remote reads x C time "
               "chunks), (S, C) = "
               + ", ".join(f"({shapes[n][0]}, {shapes[n][1]})" for n in counts)
               + ": S follows containers / 5,000 (namespace batches under `max_series_per_query`, which caps a "
               "query's length), C the containers of the biggest scope x steps / "
               f"{PrometheusConfig(url='http://x').max_points_per_query:,} (the points budget that bounds a "
               "response's size); neither follows the number of workloads or pods as such |"))
    return "\n".join(lines)


def _shape(sent: Sequence[Sequence[Any]]) -> tuple[int, int]:
    """(scopes, time chunks) of a cold pass from the requests it sent: 3 owner queries and 1 for OOM counters
    above zero per scope, 4 remote reads per scope and chunk after one probe read (no OOM kills in this fleet,
    so no OOM follow-ups)."""
    endpoints = [str(item[0]).rsplit("/", 1)[-1] for item in sent]
    scopes = endpoints.count("query") // 4
    return scopes, (endpoints.count("read") - 1) // (4 * max(1, scopes))


def run(sizes: Sequence[int], rounds: int, timeout_s: float) -> str:
    for tool in ("prometheus", "promtool"):
        if shutil.which(tool) is None:
            raise SystemExit(f"{tool} not found on PATH; run `make setup` (installs Debian's prometheus)")
    load_before = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    measured = {n: _measure_size(n, rounds, timeout_s) for n in sizes}
    return _report(measured, load_before)


def main(argv: list[str] | None = None, *, write: Callable[[str, str, str], None] = write_section) -> None:
    args_in = sys.argv[1:] if argv is None else argv
    if args_in[:1] == [CHILD_FLAG]:
        print(json.dumps(_child(json.loads(args_in[1]))))
        return
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=lambda s: [int(x) for x in s.split(",")], default=[1000, 10000],
                        help="comma-separated container counts (default 1000,10000)")
    parser.add_argument("--rounds", type=int, default=3, help="measured rounds per size after a warm-up")
    parser.add_argument("--timeout", type=float, default=600.0, help="per-request timeout in seconds")
    parser.add_argument("--no-write", action="store_true", help="print the table only, do not touch RESULTS.md")
    parser.add_argument("--days", type=float, default=None,
                        help="scale mode (tests/benchmarks/fleet_scale.py): backfill this many days (0.25: 6 hours) "
                             "at the finest of --steps and measure each step, the checkpoints and the shards")
    parser.add_argument("--steps", type=lambda s: [int(x) for x in s.split(",")], default=[300, 60],
                        help="scale mode: comma-separated query steps in seconds (default 300,60)")
    parser.add_argument("--shards", type=int, default=4, help="scale mode: one pass per shard of this many")
    parser.add_argument("--raw", type=Path, default=None, help="scale mode: also keep the raw measurements here")
    parser.add_argument("--report-from", type=Path, default=None,
                        help="scale mode: write the section from raw measurements kept by --raw, measuring nothing")
    args = parser.parse_args(args_in)
    if args.days is not None or args.report_from is not None:
        from tests.benchmarks import fleet_scale

        raw = (json.loads(args.report_from.read_text()) if args.report_from is not None else
               fleet_scale.run(args.sizes, args.days, args.steps, args.shards, args.timeout, args.raw))
        body = fleet_scale.report(raw)
        print(body)
        if not args.no_write:
            write("recommender-fleet", "Recommender at 100,000 containers", body)
        return
    body = run(args.sizes, args.rounds, args.timeout)
    print(body)
    if not args.no_write:
        write("recommender", "Recommender at scale", body)


if __name__ == "__main__":
    main()
