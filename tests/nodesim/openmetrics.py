"""Backfill exporter: the live /metrics series for N days before ``now``, as OpenMetrics text.

This module owns ``write_openmetrics``, which streams, for a list of containers with usage models and spec
resources, the cAdvisor-style counters and gauges (CPU usage integrated from the model and capped at the
limit, working set, CFS periods/throttled periods, OOM events) and the kube-state-metrics series (requests,
limits, kube_pod_owner, kube_replicaset_owner, kube_pod_info, and kube_pod_labels for pods with labels) on a
fixed time grid, in the form ``promtool tsdb create-blocks-from openmetrics`` reads: one contiguous block per
family, counter TYPE names without ``_total`` and samples with it, timestamps in seconds and increasing within
each series, a final ``# EOF``. Container families are computed once per container with numpy and spilled to
temporary files so that families stay contiguous without holding the output in memory. A plain init container
(``init``) leaves what a finished one leaves in a real cluster: cAdvisor series only while it ran (``ran_s``;
its cgroup, and so its series, are gone once it completes), under the same metric names and labels as any
container, and kube-state-metrics requests and limits as ``kube_pod_init_container_resource_requests`` and
``_limits`` (labels as the regular containers' families) for as long as the pod exists. Differences from a real
scrape: every series starts at its first grid point with counters at 0, resources and owners never change over
the window, the working set is capped at the memory limit and an OOM event is counted at each grid point where
modelled memory rises above the limit, and there are no ``_created`` samples.
"""

from __future__ import annotations

import contextlib
import math
import shutil
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import IO, TextIO

import numpy as np

from tests.nodesim.cadvisor import sanitize_label_name, throttle_many
from tests.nodesim.trace import FloatArray, IntArray
from tests.nodesim.usage import UsageModel

__all__ = ["ContainerHistory", "ExportContainer", "compute_history", "time_grid", "write_openmetrics"]

# (family name, OpenMetrics type, sample name)
_CONTAINER_FAMILIES: tuple[tuple[str, str, str], ...] = (
    ("container_cpu_usage_seconds", "counter", "container_cpu_usage_seconds_total"),
    ("container_memory_working_set_bytes", "gauge", "container_memory_working_set_bytes"),
    ("container_cpu_cfs_periods", "counter", "container_cpu_cfs_periods_total"),
    ("container_cpu_cfs_throttled_periods", "counter", "container_cpu_cfs_throttled_periods_total"),
    ("container_oom_events", "counter", "container_oom_events_total"),
)


_OPTIONAL_FAMILIES = frozenset({"kube_pod_labels", "kube_pod_init_container_resource_requests",
                                "kube_pod_init_container_resource_limits"})
"""Families written only when some row has them (the others are written, perhaps empty, always)."""


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class ExportContainer:
    """One container to backfill. The pod is owned by ``owner_kind/owner_name`` (usually a ReplicaSet),
    which is itself owned by ``replicaset_owner_kind/replicaset_owner_name`` when the owner is a ReplicaSet."""

    namespace: str
    pod: str
    container: str
    node: str
    model: UsageModel
    pod_uid: str = ""
    image: str = "registry.k8s.io/pause:3.10"
    container_id: str = ""
    owner_kind: str = "ReplicaSet"
    owner_name: str = ""
    replicaset_owner_kind: str = "Deployment"
    replicaset_owner_name: str = ""
    cpu_request_millicores: int | None = None
    cpu_limit_millicores: int | None = None
    memory_request_bytes: int | None = None
    memory_limit_bytes: int | None = None
    pod_labels: Mapping[str, str] = field(default_factory=dict)
    """The pod's labels, written as kube-state-metrics' ``kube_pod_labels`` (``label_<key>``); a pod without
    any gets no such series (VPA's Prometheus history provider reads pods' labels from it)."""
    init: bool = False
    """A plain (non-sidecar) init container: its requests and limits go to kube-state-metrics'
    ``kube_pod_init_container_resource_*`` families instead of ``kube_pod_container_resource_*``."""
    ran_s: tuple[float, float] | None = None
    """(start, end) in seconds: the container's cAdvisor series exist only at grid points in this closed interval
    (a finished init container's); None: over the whole window."""


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class ContainerHistory:
    """Per-grid-point values of the container families (counters cumulative from 0)."""

    cpu_usage_seconds_total: FloatArray
    memory_working_set_bytes: IntArray
    cfs_periods_total: IntArray
    cfs_throttled_periods_total: IntArray
    oom_events_total: IntArray


def time_grid(now_s: float, days: float, step_s: float) -> FloatArray:
    """Grid points ``end - k*step`` for the ``days`` before ``now_s``; ``end`` is ``now_s`` floored to
    a multiple of ``step_s``. Oldest first."""
    if not (math.isfinite(now_s) and math.isfinite(days) and math.isfinite(step_s)):
        raise ValueError("now_s, days and step_s must be finite")
    if step_s <= 0 or days <= 0:
        raise ValueError("step_s and days must be positive")
    count = int(days * 86400.0 // step_s) + 1
    end = math.floor(now_s / step_s) * step_s
    grid: FloatArray = end - step_s * np.arange(count - 1, -1, -1, dtype=np.float64)
    return grid


def compute_history(c: ExportContainer, ts: FloatArray, substeps: int) -> ContainerHistory:
    """Integrate the container's model over the grid; CPU demand is sampled at ``substeps`` midpoints
    of every interval and passed through the CFS throttling model of ``cadvisor.throttle_many``."""
    step = float(ts[1] - ts[0]) if ts.shape[0] > 1 else 1.0
    offsets = (np.arange(substeps, dtype=np.float64) + 0.5) * step / substeps
    sub_times = (ts[:-1, None] + offsets[None, :]).ravel()
    demand = c.model.sample_many(sub_times).cpu_cores.reshape(-1, substeps)
    used, periods, throttled = throttle_many(demand, c.cpu_limit_millicores, step)
    memory = c.model.sample_many(ts).memory_bytes
    limit = c.memory_limit_bytes
    over = memory > limit if limit is not None else np.zeros(memory.shape, dtype=bool)
    rising = over & ~np.concatenate(([False], over[:-1]))
    return ContainerHistory(
        cpu_usage_seconds_total=np.concatenate(([0.0], np.cumsum(used))),
        memory_working_set_bytes=np.minimum(memory, limit) if limit is not None else memory,
        cfs_periods_total=np.concatenate(([0], np.cumsum(periods))).astype(np.int64),
        cfs_throttled_periods_total=np.concatenate(([0], np.cumsum(throttled))).astype(np.int64),
        oom_events_total=np.cumsum(rising).astype(np.int64),
    )


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels(pairs: Iterable[tuple[str, str]]) -> str:
    return ",".join(f'{name}="{_escape(value)}"' for name, value in pairs)


def _format_times(ts: FloatArray) -> list[str]:
    if np.all(ts == np.round(ts)):
        return [str(int(t)) for t in ts.tolist()]
    return [repr(t) for t in ts.tolist()]


def _write_series(out: IO[str], sample: str, labels: str, values: list[object], times: list[str]) -> int:
    prefix = f"{sample}{{{labels}}} "
    out.write("".join(f"{prefix}{v!r} {t}\n" for v, t in zip(values, times, strict=True)))
    return len(times)


def _cadvisor_labels(c: ExportContainer) -> str:
    uid = c.pod_uid.replace("-", "_")
    return _labels((
        ("namespace", c.namespace), ("pod", c.pod), ("container", c.container), ("image", c.image),
        ("name", f"k8s_{c.container}_{c.pod}_{c.namespace}_{c.pod_uid}_0"),
        ("id", f"/kubepods.slice/kubepods-pod{uid}.slice/cri-containerd-{c.container_id}.scope"),
        ("node", c.node),
    ))


def _spill_container_families(
    spills: Sequence[IO[str]], containers: Sequence[ExportContainer], ts: FloatArray, substeps: int
) -> int:
    written = 0
    for c in containers:
        own = ts if c.ran_s is None else ts[(ts >= c.ran_s[0]) & (ts <= c.ran_s[1])]
        if own.size == 0:
            continue
        times = _format_times(own)
        h = compute_history(c, own, substeps)
        arrays = (h.cpu_usage_seconds_total, h.memory_working_set_bytes, h.cfs_periods_total,
                  h.cfs_throttled_periods_total, h.oom_events_total)
        labels = _cadvisor_labels(c)
        for spill, (_, _, sample), values in zip(spills, _CONTAINER_FAMILIES, arrays, strict=True):
            if "_cfs_" in sample and c.cpu_limit_millicores is None:
                continue  # no CPU quota, no CFS families (cAdvisor's condition, ``cadvisor.has_cfs_quota``)
            written += _write_series(spill, sample, labels, values.tolist(), times)
    return written


def _constant_series(name: str, rows: Iterable[tuple[str, float]], times: list[str]) -> Iterable[str]:
    yield f"# TYPE {name} gauge\n"
    for labels, value in rows:
        prefix = f"{name}{{{labels}}} {value!r} "
        yield "".join(f"{prefix}{t}\n" for t in times)


def _resource_rows(containers: Sequence[ExportContainer], limits: bool) -> Iterable[tuple[str, float]]:
    for c in containers:
        cpu = c.cpu_limit_millicores if limits else c.cpu_request_millicores
        memory = c.memory_limit_bytes if limits else c.memory_request_bytes
        base = (("namespace", c.namespace), ("pod", c.pod), ("container", c.container), ("node", c.node))
        if cpu is not None:
            yield _labels((*base, ("resource", "cpu"), ("unit", "core"))), cpu / 1000.0
        if memory is not None:
            yield _labels((*base, ("resource", "memory"), ("unit", "byte"))), float(memory)


def _unique_pods(containers: Sequence[ExportContainer]) -> list[ExportContainer]:
    seen: dict[tuple[str, str], ExportContainer] = {}
    for c in containers:
        seen.setdefault((c.namespace, c.pod), c)
    return list(seen.values())


def _owner_rows(pods: Sequence[ExportContainer]) -> Iterable[tuple[str, float]]:
    for p in pods:
        yield _labels((("namespace", p.namespace), ("pod", p.pod), ("uid", p.pod_uid),
                       ("owner_kind", p.owner_kind), ("owner_name", p.owner_name),
                       ("owner_is_controller", "true"))), 1.0


def _replicaset_rows(pods: Sequence[ExportContainer]) -> Iterable[tuple[str, float]]:
    seen: set[tuple[str, str]] = set()
    for p in pods:
        key = (p.namespace, p.owner_name)
        if p.owner_kind != "ReplicaSet" or key in seen:
            continue
        seen.add(key)
        yield _labels((("namespace", p.namespace), ("replicaset", p.owner_name),
                       ("owner_kind", p.replicaset_owner_kind), ("owner_name", p.replicaset_owner_name),
                       ("owner_is_controller", "true"))), 1.0


def _info_rows(pods: Sequence[ExportContainer]) -> Iterable[tuple[str, float]]:
    for p in pods:
        yield _labels((("namespace", p.namespace), ("pod", p.pod), ("uid", p.pod_uid), ("node", p.node),
                       ("created_by_kind", p.owner_kind), ("created_by_name", p.owner_name))), 1.0


def _pod_label_rows(pods: Sequence[ExportContainer]) -> Iterable[tuple[str, float]]:
    for p in pods:
        if p.pod_labels:
            yield _labels((("namespace", p.namespace), ("pod", p.pod), ("uid", p.pod_uid),
                           *sorted((f"label_{sanitize_label_name(k)}", v) for k, v in p.pod_labels.items()))), 1.0


def _write_constant_families(out: TextIO, containers: Sequence[ExportContainer], times: list[str]) -> int:
    pods = _unique_pods(containers)
    regular, init = [c for c in containers if not c.init], [c for c in containers if c.init]
    families = (
        ("kube_pod_container_resource_requests", list(_resource_rows(regular, limits=False))),
        ("kube_pod_container_resource_limits", list(_resource_rows(regular, limits=True))),
        ("kube_pod_init_container_resource_requests", list(_resource_rows(init, limits=False))),
        ("kube_pod_init_container_resource_limits", list(_resource_rows(init, limits=True))),
        ("kube_pod_owner", list(_owner_rows(pods))),
        ("kube_replicaset_owner", list(_replicaset_rows(pods))),
        ("kube_pod_info", list(_info_rows(pods))),
        ("kube_pod_labels", list(_pod_label_rows(pods))),
    )
    for name, rows in families:
        if rows or name not in _OPTIONAL_FAMILIES:
            out.writelines(_constant_series(name, rows, times))
    return sum(len(rows) for _, rows in families) * len(times)


def write_openmetrics(
    out: TextIO,
    containers: Sequence[ExportContainer],
    *,
    now_s: float,
    days: float,
    step_s: float = 60.0,
    substeps: int = 6,
) -> int:
    """Stream the history to ``out``; returns the number of samples written."""
    if not 1 <= substeps <= 1000:
        raise ValueError("substeps must be in [1, 1000]")
    ts = time_grid(now_s, days, step_s)
    with contextlib.ExitStack() as stack:
        spills = [stack.enter_context(tempfile.TemporaryFile(mode="w+", encoding="utf-8"))
                  for _ in _CONTAINER_FAMILIES]
        written = _spill_container_families(spills, containers, ts, substeps)
        for spill, (family, kind, _) in zip(spills, _CONTAINER_FAMILIES, strict=True):
            out.write(f"# TYPE {family} {kind}\n")
            spill.seek(0)
            shutil.copyfileobj(spill, out, 1 << 20)
    written += _write_constant_families(out, containers, _format_times(ts))
    out.write("# EOF\n")
    return written
