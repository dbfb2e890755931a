"""The recommender at 10,000 and 100,000 containers over a short history: ``bench_recommender --days D --steps ...``.

Owns the scale mode of the recommender bench (issue #40, deliverable 3). Each size gets a fresh local Prometheus
backfilled at the finest query step for ``--days`` (a fraction of a day is allowed: 100,000 containers at a
1-minute resolution make about 12 GiB of OpenMetrics per hour). The OpenMetrics is written in parts of whole
namespaces, each part fed to ``promtool`` and deleted before the next is written, so the disk never holds more
than one part (about ``PART_BYTES``, and as much again in the exporter's spill files); the overlapping blocks are
left to Prometheus' own vertical compaction, which the bench waits for before it measures. Then, in fresh
subprocesses (``bench_recommender``'s child): a cold and an incremental pass per query step over every
namespace, and with ``--shards N`` one pass per shard over the namespaces ``shard_of`` gives that shard, at the
finest step. Per pass: wall time, requests, samples read, peak RSS and the server's own CPU
(``process_cpu_seconds_total`` before and after). The first step's pass also sizes the checkpoints the engine
would write and counts the VPA writes it would send. One round per measurement: a 100,000 pass takes minutes
on the shared 2 cores.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests

from tests.benchmarks import bench_recommender as bench
from tests.benchmarks.results import machine_facts

PART_BYTES = 3 * 2**30
"""Target size of one OpenMetrics part (the exporter spills about as much again to /tmp while writing it)."""
BYTES_PER_SAMPLE = 250
"""Measured: 17.5 GiB for 77.3 M samples at 10,000 containers (labels repeated on every line)."""
SAMPLES_PER_CONTAINER_STEP = 10
"""Series per container, kube-state-metrics' per-pod series included: 77.3 M / (10,000 x 769)."""
COMPACTION_TIMEOUT_S = 900.0


@dataclass(frozen=True, slots=True, kw_only=True)
class ScaleBackfill:
    parts: int
    samples: int
    largest_part_bytes: int
    write_s: float
    promtool_s: float
    compaction_s: float
    blocks: int
    tsdb_bytes: int
    end_s: float


@dataclass(frozen=True, slots=True, kw_only=True)
class ScaleSize:
    n: int
    fleet: bench.Fleet
    backfill: ScaleBackfill
    by_step: dict[int, dict[str, Any]]
    """Query step -> the child's measurements over every namespace."""
    shards: list[dict[str, Any]]
    """Per shard (at the finest step): its namespaces and the child's measurements."""


def _parts(containers: Sequence[Any], samples_per_series: int) -> list[list[Any]]:
    """Whole namespaces per part, so that a pod's series and its kube-state-metrics rows stay in one part."""
    by_ns: dict[str, list[Any]] = {}
    for c in containers:
        by_ns.setdefault(c.namespace, []).append(c)
    estimate = len(containers) * SAMPLES_PER_CONTAINER_STEP * samples_per_series * BYTES_PER_SAMPLE
    count = min(len(by_ns), max(1, math.ceil(estimate / PART_BYTES)))
    names = sorted(by_ns)
    return [[c for ns in names[i::count] for c in by_ns[ns]] for i in range(count)]


def _prom_metric(url: str, name: str) -> float:
    for line in requests.get(f"{url}/metrics", timeout=30).text.splitlines():
        if line.startswith(f"{name} "):
            return float(line.split()[1])
    raise RuntimeError(f"{url}/metrics has no {name}")


def _backfill(prom: Any, containers: Sequence[Any], workdir: Path, days: float, step_s: int) -> ScaleBackfill:
    from tests.nodesim.openmetrics import write_openmetrics

    end_s = float(math.floor(time.time() / step_s) * step_s - step_s)
    parts = _parts(containers, int(days * 86400 / step_s) + 1)
    samples = largest = 0
    write_s = promtool_s = 0.0
    for i, part in enumerate(parts):
        path = workdir / f"history-{i:02d}.om"
        t0 = time.monotonic()
        with bench._ticker(f"writing part {i + 1}/{len(parts)}", path), \
                path.open("w", encoding="utf-8", buffering=1 << 20) as out:
            samples += write_openmetrics(out, part, now_s=end_s, days=days, step_s=step_s)
        write_s += time.monotonic() - t0
        largest = max(largest, path.stat().st_size)
        with bench._ticker(f"promtool part {i + 1}/{len(parts)}"):
            promtool_s += prom.backfill(path, max_block_duration="486h")
        path.unlink()
    print(f"  {samples / 1e6:.1f} M samples in {len(parts)} parts: write {write_s:.0f} s, promtool {promtool_s:.0f} s",
          file=sys.stderr, flush=True)
    prom.start()
    t0 = time.monotonic()
    blocks = int(_prom_metric(prom.url, "prometheus_tsdb_blocks_loaded"))
    while blocks > 1 and time.monotonic() - t0 < COMPACTION_TIMEOUT_S:  # overlapping blocks: wait for the merge
        time.sleep(5)
        blocks = int(_prom_metric(prom.url, "prometheus_tsdb_blocks_loaded"))
    return ScaleBackfill(parts=len(parts), samples=samples, largest_part_bytes=largest, write_s=write_s,
                         promtool_s=promtool_s, compaction_s=time.monotonic() - t0, blocks=blocks,
                         tsdb_bytes=bench._du(prom.tsdb), end_s=end_s)


def _measure(n: int, days: float, steps: Sequence[int], shards: int, timeout_s: float) -> ScaleSize:
    from podtailor.runtime.shards import shard_of
    from tests.harness.prometheus import LocalPrometheus

    containers, fleet = bench._fleet(n)
    namespaces = sorted({c.namespace for c in containers})
    finest = min(steps)
    print(f"size {n}: {fleet.keys} workload containers, {fleet.workloads} Deployments", file=sys.stderr, flush=True)
    with tempfile.TemporaryDirectory(prefix=f"bench-fleet-{n}-") as tmp:
        prom = LocalPrometheus(Path(tmp) / "prometheus", scrape_interval_s=float(finest))
        try:
            backfill = _backfill(prom, containers, Path(tmp), days, finest)
            del containers
            common = {"scrape_s": finest, "history_s": days * 86400}
            by_step: dict[int, dict[str, Any]] = {}
            for i, step in enumerate(steps):
                print(f"  pass at step {step} s", file=sys.stderr, flush=True)
                by_step[step] = bench._run_child(prom.url, namespaces, backfill.end_s, timeout_s, step_s=step,
                                                 checkpoints=i == 0, **common)
            out: list[dict[str, Any]] = []
            for shard in range(shards if shards > 1 else 0):
                mine = [ns for ns in namespaces if shard_of(ns, shards) == shard]
                print(f"  shard {shard}: {len(mine)} namespaces", file=sys.stderr, flush=True)
                child = bench._run_child(prom.url, mine, backfill.end_s, timeout_s, step_s=finest, **common) \
                    if mine else None
                out.append({"namespaces": len(mine), "child": child})
        finally:
            prom.stop()
    return ScaleSize(n=n, fleet=fleet, backfill=backfill, by_step=by_step, shards=out)


def _slim(child: dict[str, Any]) -> dict[str, Any]:
    """The child's measurements without the request bodies (kept: how many went to each endpoint)."""
    for name in ("cold", "incremental"):
        sent = child[name].pop("sent")
        endpoints = [str(item[0]).rsplit("/", 1)[-1] for item in sent]
        child[name]["endpoints"] = {e: endpoints.count(e) for e in sorted(set(endpoints))}
    return child


def run(sizes: Sequence[int], days: float, steps: Sequence[int], shards: int, timeout_s: float,
        raw: Path | None = None) -> dict[str, Any]:
    """Measure every size; the raw measurements (also written to ``raw``, as JSON) for ``report``."""
    load_before = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    facts = machine_facts()
    out: dict[str, Any] = {"machine": facts, "load_before": load_before, "days": days, "steps": sorted(steps),
                           "shards": shards, "sizes": []}
    for n in sizes:
        size = _measure(n, days, sorted(steps, reverse=True), shards, timeout_s)
        out["sizes"].append({
            "n": size.n, "fleet": dataclasses.asdict(size.fleet), "backfill": dataclasses.asdict(size.backfill),
            "by_step": {str(step): _slim(child) for step, child in size.by_step.items()},
            "shards": [{**s, "child": _slim(s["child"]) if s["child"] else None} for s in size.shards],
            "load_after": os.getloadavg()[0]})
        if raw is not None:
            raw.write_text(json.dumps(out, indent=1))
    return out


# ----------------------------------------------------------------------------------------------- report
def _mib(b: float) -> str:
    return f"{b / 2**20:,.0f} MiB"


def _ok(met: bool) -> str:
    return "met" if met else "**not met**"


def _pass_rows(sizes: list[dict[str, Any]]) -> list[str]:
    rows = ["| containers | step | cold pass (HTTP / model) | incremental pass (HTTP / model) | incremental / cold | "
            "requests cold, incremental | samples read cold | peak RSS cold, incremental | Prometheus CPU cold, "
            "incremental |",
            "|---|---|---|---|---|---|---|---|---|"]
    for s in sizes:
        for step, c in sorted(s["by_step"].items(), key=lambda kv: -int(kv[0])):
            cold, inc = c["cold"], c["incremental"]
            rows.append(f"| {s['n']:,} | {int(step) // 60} min | {cold['wall_s']:.1f} s ({cold['http_s']:.1f} / "
                        f"{cold['model_s']:.1f}) | {inc['wall_s']:.1f} s ({inc['http_s']:.1f} / "
                        f"{inc['model_s']:.1f}) | "
                        f"{inc['wall_s'] / cold['wall_s']:.1%} | "
                        f"{cold['requests']}, {inc['requests']} | {cold['samples'] / 1e6:.1f} M | "
                        f"{_mib(cold['peak_rss'])}, {_mib(inc['peak_rss'])} | {cold['prometheus_cpu_s']:.1f} s, "
                        f"{inc['prometheus_cpu_s']:.2f} s |")
    return rows


def _writes_rows(raw: dict[str, Any]) -> list[str]:
    from recommender.engine import EngineConfig

    every_s = EngineConfig().checkpoint_every_s
    coarse = str(max(raw["steps"]))
    rows = ["| containers | VPAs (workload containers) | checkpoints' bytes (largest object) | per workload "
            "container, per container | writes, cold pass | writes per incremental pass |", "|---|---|---|---|---|---|"]
    for s in raw["sizes"]:
        if coarse not in s["by_step"]:
            continue
        c = s["by_step"][coarse]
        cp, vpas = c["checkpoints"], c["checkpoints"]["objects"]
        per_pass = {int(step): vpas * min(1.0, int(step) / every_s) for step in raw["steps"]}
        rows.append(
            f"| {s['n']:,} | {vpas:,} ({cp['keys']:,}) | {cp['bytes'] / 2**20:.1f} MiB ({cp['largest']:,} B) | "
            f"{cp['bytes'] / cp['keys']:,.0f} B, {cp['bytes'] / s['n']:,.0f} B | {2 * vpas:,} ({vpas:,} status + "
            f"{vpas:,} checkpoints) | {c['changed_workloads']:,} status (VPAs whose target changed) + checkpoints "
            + ", ".join(f"{v:,.0f} at a {k // 60}-min pass interval" for k, v in sorted(per_pass.items())) + " |")
    return rows


def _part(value: float, whole: float | None, unit: str, digits: int) -> str:
    """``value`` with its share of the whole pass (no share when the whole pass was not measured)."""
    share = f" ({value / whole:.0%})" if whole else ""
    return f"{value:.{digits}f}{unit}{share}"


def _shard_rows(raw: dict[str, Any]) -> list[str]:
    finest = str(min(raw["steps"]))
    rows = [f"| containers | shard of {raw['shards']} | namespaces | requests | samples read (M) | Prometheus CPU | "
            "cold pass | peak RSS |", "|---|---|---|---|---|---|---|---|"]
    for s in raw["sizes"]:
        whole = s["by_step"].get(finest, {}).get("cold") or {}
        for i, sh in enumerate(s["shards"]):
            if sh["child"] is None:
                rows.append(f"| {s['n']:,} | {i} | 0 | - | - | - | - | - |")
                continue
            c = sh["child"]["cold"]
            rss = max(c["peak_rss"], sh["child"]["incremental"]["peak_rss"])
            timed = ("not isolated (ran beside the bench's own passes) | not isolated" if sh.get("concurrent") else
                     f"{_part(c['prometheus_cpu_s'], whole.get('prometheus_cpu_s'), ' s', 1)} | "
                     f"{_part(c['wall_s'], whole.get('wall_s'), ' s', 1)}")
            requests_cell = _part(c["requests"], whole.get("requests"), "", 0)
            rows.append(f"| {s['n']:,} | {i} | {sh['namespaces']} | {requests_cell}"
                        f" | {_part(c['samples'] / 1e6, (whole.get('samples') or 0) / 1e6, '', 2)} | {timed} | "
                        f"{_mib(rss)} |")
        for i in range(len(s["shards"]), raw["shards"] if s["shards"] else 0):
            rows.append(f"| {s['n']:,} | {i} | not measured: the run was stopped at its deadline | | | | | |")
    return rows


_MISSING = "not measured: the run was stopped at its deadline | not known"


def _linear_rows(sizes: dict[int, dict[str, Any]], steps: list[int]) -> list[str]:
    lo, hi = min(sizes), max(sizes)
    rows = []
    for step in sorted(steps, reverse=True):
        a, b = (sizes[n]["by_step"].get(str(step), {}).get("cold", {}).get("wall_s") for n in (lo, hi))
        goal = f"| cold pass grows no faster than linearly, {lo:,} -> {hi:,}, {step // 60}-min step | "
        rows.append(goal + (f"{a:.1f} s -> {b:.1f} s: {b / a:.1f}x for {hi / lo:.0f}x the containers | "
                            f"{_ok(b / a <= hi / lo)} |" if a and b else _MISSING + " |"))
    return rows


def _goal_rows(raw: dict[str, Any]) -> list[str]:
    sizes = {s["n"]: s for s in raw["sizes"]}
    finest = str(min(raw["steps"]))
    rows = ["| goal | measured | verdict |", "|---|---|---|"]
    hi = max(sizes)
    rows += _linear_rows(sizes, raw["steps"]) if len(sizes) > 1 else []
    big = sizes[hi]
    goal = f"| peak RSS at {hi:,}, {int(finest) // 60}-min step, one process, at most 2 GiB | "
    if finest in big["by_step"]:
        rss = max(big["by_step"][finest][p]["peak_rss"] for p in ("cold", "incremental"))
        rows.append(goal + f"{_mib(rss)} | {_ok(rss <= 2**30 * 2)} |")
    else:
        rows.append(goal + _MISSING + " |")
    if big["shards"]:
        shard_rss = max(max(sh["child"][p]["peak_rss"] for p in ("cold", "incremental"))
                        for sh in big["shards"] if sh["child"])
        measured = len(big["shards"])
        rows.append(f"| peak RSS at {hi:,}, {int(finest) // 60}-min step, per replica with {raw['shards']} shards "
                    f"(the largest shard), at most 1 GiB | {_mib(shard_rss)}"
                    + ("" if measured == raw["shards"] else f", {measured} of {raw['shards']} shards measured")
                    + f" | {_ok(shard_rss <= 2**30)} |")
    for n, s in sizes.items():
        for step in sorted(raw["steps"], reverse=True):
            goal = f"| incremental pass at most 10% of the cold pass, {n:,}, {step // 60}-min step | "
            c = s["by_step"].get(str(step))
            ratio = c["incremental"]["wall_s"] / c["cold"]["wall_s"] if c else None
            rows.append(goal + (f"{ratio:.1%} | {_ok(ratio <= 0.10)} |" if ratio is not None else _MISSING + " |"))
    for n, s in sizes.items():
        c = s["by_step"].get(str(max(raw["steps"])))
        goal = f"| checkpoint bytes per container below 2 KiB, {n:,} | "
        if c is None:
            rows.append(goal + _MISSING + " |")
            continue
        per = c["checkpoints"]["bytes"] / c["checkpoints"]["keys"]
        rows.append(goal + f"{per:,.0f} B per workload container | {_ok(per < 2048)} |")
    return rows


def report(raw: dict[str, Any]) -> str:
    """The RESULTS.md section from ``run``'s raw measurements."""
    days, finest = raw["days"], min(raw["steps"])
    backfill = ["| containers (pods, Deployments, workload containers) | samples | OpenMetrics parts (largest) | "
                "write, promtool | compaction wait (blocks left) | TSDB |", "|---|---|---|---|---|---|"]
    for s in raw["sizes"]:
        f, b = s["fleet"], s["backfill"]
        backfill.append(f"| {s['n']:,} ({f['pods']:,}, {f['workloads']:,}, {f['keys']:,}) | {b['samples'] / 1e6:.1f} M "
                        f"| {b['parts']} ({b['largest_part_bytes'] / 2**30:.1f} GiB) | {b['write_s']:.0f} s, "
                        f"{b['promtool_s']:.0f} s | {b['compaction_s']:.0f} s ({b['blocks']}) | "
                        f"{_mib(b['tsdb_bytes'])} |")
    intro = (
        f"History: **{days * 24:g} hour{'' if round(days * 24) == 1 else 's'}** (not 8 days: 100,000 containers "
        f"at a {finest // 60}-minute resolution make "
        "about 12 GiB of OpenMetrics per hour of history on a machine with ~50 GiB free and 2 cores shared by six "
        f"engineers), backfilled at a {finest // 60}-minute resolution with `promtool tsdb create-blocks-from "
        "openmetrics` in parts of whole namespaces, each part deleted once read; Prometheus then merged the "
        "overlapping blocks before anything was measured. The fleet is the recommender bench's (Deployments of 3 "
        "pods over 20 namespaces, every other one with a sidecar). Each pass runs in a fresh subprocess (peak RSS = "
        "its VmHWM, interpreter and imports included; reset before the incremental pass), reading with "
        f"`PrometheusConfig(step_s=STEP, scrape_interval_s={finest})`: the cold pass reads the whole history, the "
        "incremental pass the next step with the cold pass's states kept. Prometheus CPU = its "
        "`process_cpu_seconds_total` after the pass minus before. **One round** per figure (a 100,000 pass takes "
        f"minutes); 1-minute load before the run {raw['load_before']}, after each size "
        + ", ".join(f"{s['load_after']:.1f}" for s in raw["sizes"]) + ".")
    shards = (f"Shards: one pass per shard of {raw['shards']} (`shard_of`, podtailor/runtime/shards.py) over that "
              f"shard's namespaces only, at the {finest // 60}-minute step; fractions are of the whole pass above. "
              "With 20 namespaces the hash does not split the fleet evenly, and a replica's share follows its "
              "namespaces.")
    writes = ("Checkpoints: the RecommenderCheckpoint objects the engine would write after the cold pass, one per "
              "VPA (one VPA per Deployment), built with the engine's own `checkpoint_spec` "
              "(recommender/kube/checkpoint.py) in the body `KubeAdapter.save_checkpoint` sends, as compact JSON "
              "(no API server in this bench: etcd adds its own metadata, such as managedFields, on top). Writes: "
              "the engine reads each VPA and writes its status when it changed, and writes a checkpoint every "
              "`checkpoint_every_s` (600 s); the cold pass writes both for every VPA.")
    return "\n".join([raw["machine"], "", intro, "", *backfill, "", *_pass_rows(raw["sizes"]), "", writes, "",
                      *_writes_rows(raw), "", shards, "", *_shard_rows(raw), "", *_goal_rows(raw)])
