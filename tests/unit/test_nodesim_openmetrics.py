"""Unit tests for tests.nodesim.openmetrics: the backfill file parses, has the right values and shape."""

from __future__ import annotations

import io

import numpy as np
import pytest
from prometheus_client.metrics_core import Metric
from prometheus_client.openmetrics.parser import text_string_to_metric_families as _untyped_parse

from tests.nodesim.openmetrics import ExportContainer, time_grid, write_openmetrics
from tests.nodesim.usage import Constant, Daily

NOW = 1_700_000_030.0  # floored to the 60 s grid: 28_333_333 * 60 = 1_699_999_980 is the last point
GI = 2**30


def text_string_to_metric_families(text: str) -> list[Metric]:
    """Typed wrapper: the OpenMetrics parser (strict: TYPE names, _total, # EOF, ordering) is untyped."""
    return list(_untyped_parse(text))  # type: ignore[no-untyped-call]


def _containers() -> list[ExportContainer]:
    hot = ExportContainer(
        namespace="shop", pod="web-7c9-a", container="app", node="node-1", pod_uid="u-a",
        owner_kind="ReplicaSet", owner_name="web-7c9", replicaset_owner_name="web",
        model=Constant(cpu_cores=1.5, memory_bytes=2 * GI),  # above both limits
        cpu_request_millicores=500, cpu_limit_millicores=1000, memory_request_bytes=GI, memory_limit_bytes=GI,
    )
    calm = ExportContainer(
        namespace="shop", pod="web-7c9-b", container="app", node="node-1", pod_uid="u-b",
        owner_kind="ReplicaSet", owner_name="web-7c9", replicaset_owner_name="web",
        model=Daily(cpu_cores=0.25, memory_bytes=100 * 2**20, cpu_noise=0.1, seed=1),
        cpu_request_millicores=250,
    )
    return [hot, calm]


def _render() -> tuple[str, int]:
    out = io.StringIO()
    written = write_openmetrics(out, _containers(), now_s=NOW, days=1 / 24, step_s=60.0)
    return out.getvalue(), written


def test_time_grid() -> None:
    grid = time_grid(1000.0, 1 / 24, 60.0)
    # end = floor(1000 / 60) * 60 = 960; 3600 / 60 + 1 = 61 points, oldest 960 - 3600 = -2640
    assert grid.shape == (61,) and grid[-1] == 960.0 and grid[0] == -2640.0
    with pytest.raises(ValueError):
        time_grid(1000.0, 0.0, 60.0)


def test_openmetrics_structure() -> None:
    text, written = _render()
    assert text.endswith("# EOF\n")
    types = [line for line in text.splitlines() if line.startswith("# TYPE")]
    assert types[0] == "# TYPE container_cpu_usage_seconds counter"
    assert "# TYPE container_memory_working_set_bytes gauge" in types
    assert len(types) == len(set(types)) == 10
    # 61 points; container families: 5 for the hot pod, 3 for the calm one (no CPU limit: no CFS series);
    # requests: hot cpu+mem, calm cpu = 3; limits: hot 2; kube_pod_owner 2, kube_replicaset_owner 1,
    # kube_pod_info 2 -> (8 + 3 + 2 + 2 + 1 + 2) * 61
    assert written == 18 * 61
    families = list(text_string_to_metric_families(text))
    assert sum(len(f.samples) for f in families) == written
    # Families are contiguous: a family's sample name never reappears after another family started.
    seen: list[str] = []
    for line in text.splitlines():
        if not line.startswith("#"):
            name = line.split("{", 1)[0]
            if not seen or seen[-1] != name:
                assert name not in seen
                seen.append(name)


def _series(text: str, family: str, pod: str) -> tuple[np.ndarray, np.ndarray]:
    for f in text_string_to_metric_families(text):
        if f.name == family:
            samples = [s for s in f.samples if s.labels["pod"] == pod]
            return (np.array([float(str(s.timestamp)) for s in samples]), np.array([s.value for s in samples]))
    raise AssertionError(family)


def test_openmetrics_values() -> None:
    text, _ = _render()
    ts, cpu = _series(text, "container_cpu_usage_seconds", "web-7c9-a")
    assert ts[-1] == 1_699_999_980.0 and ts[0] == 1_699_999_980.0 - 3600.0
    assert ts.tolist() == time_grid(NOW, 1 / 24, 60.0).tolist()
    assert np.all(np.diff(ts) == 60.0)
    # demand 1.5 cores capped at the 1-core limit: 60 cpu-seconds per 60 s step, from 0
    assert cpu.tolist() == [60.0 * k for k in range(61)]
    _, periods = _series(text, "container_cpu_cfs_periods", "web-7c9-a")
    _, throttled = _series(text, "container_cpu_cfs_throttled_periods", "web-7c9-a")
    assert periods[-1] == 600 * 60 and throttled[-1] == 600 * 60  # 600 periods per step, all throttled
    _, memory = _series(text, "container_memory_working_set_bytes", "web-7c9-a")
    assert set(memory.tolist()) == {float(GI)}  # 2 GiB demand capped at the 1 GiB limit
    _, ooms = _series(text, "container_oom_events", "web-7c9-a")
    assert ooms.tolist() == [1.0] * 61  # one rising edge at the first point, then constant
    _, calm_cpu = _series(text, "container_cpu_usage_seconds", "web-7c9-b")
    assert np.all(np.diff(calm_cpu) > 0)  # counters monotone
    # 0.25 cores +/- 10 % noise, no limit: 60 steps of 60 s -> between 0.225*3600 and 0.275*3600
    assert 0.225 * 3600 <= calm_cpu[-1] <= 0.275 * 3600
    # No CPU limit, no CFS quota: cAdvisor exports no CFS series for it (metrics/prometheus.go's condition).
    for family in ("container_cpu_cfs_throttled_periods", "container_cpu_cfs_periods"):
        assert _series(text, family, "web-7c9-b")[1].size == 0


def test_openmetrics_ksm_series() -> None:
    text, _ = _render()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    requests = {(s.labels["pod"], s.labels["resource"]): s.value
                for s in families["kube_pod_container_resource_requests"].samples}
    assert requests == {("web-7c9-a", "cpu"): 0.5, ("web-7c9-a", "memory"): float(GI), ("web-7c9-b", "cpu"): 0.25}
    rs = {tuple(sorted(s.labels.items())) for s in families["kube_replicaset_owner"].samples}
    assert rs == {(("namespace", "shop"), ("owner_is_controller", "true"), ("owner_kind", "Deployment"),
                   ("owner_name", "web"), ("replicaset", "web-7c9"))}
    owners = {s.labels["pod"]: s.labels["owner_name"] for s in families["kube_pod_owner"].samples}
    assert owners == {"web-7c9-a": "web-7c9", "web-7c9-b": "web-7c9"}
    info_nodes = {s.labels["node"] for s in families["kube_pod_info"].samples}
    assert info_nodes == {"node-1"}


def test_label_values_are_escaped() -> None:
    odd = ExportContainer(namespace="ns", pod='p"\\\nq', container="c", node="n", owner_kind="Job",
                          owner_name="j", model=Constant(cpu_cores=0.1, memory_bytes=1))
    out = io.StringIO()
    write_openmetrics(out, [odd], now_s=600.0, days=300 / 86400, step_s=60.0)
    pods = {s.labels["pod"] for f in text_string_to_metric_families(out.getvalue()) for s in f.samples
            if "pod" in s.labels}
    assert pods == {'p"\\\nq'}
    assert "kube_replicaset_owner{" not in out.getvalue()  # Job-owned pods have no ReplicaSet


def test_a_finished_init_container_leaves_cadvisor_series_only_while_it_ran() -> None:
    # The hot pod's init container ran for the ten minutes from 20 minutes before the last grid point.
    last = 1_699_999_980.0
    setup = ExportContainer(namespace="shop", pod="web-7c9-a", container="setup", node="node-1", pod_uid="u-a",
                            owner_kind="ReplicaSet", owner_name="web-7c9", replicaset_owner_name="web",
                            model=Constant(cpu_cores=0.5, memory_bytes=GI // 4), init=True,
                            ran_s=(last - 1200.0, last - 600.0), cpu_request_millicores=100,
                            memory_limit_bytes=GI // 2)
    out = io.StringIO()
    write_openmetrics(out, [*_containers(), setup], now_s=NOW, days=1 / 24, step_s=60.0)
    text = out.getvalue()
    ts, cpu = _series(text, "container_cpu_usage_seconds", "web-7c9-a")
    setup_cpu = [(t, v) for t, v, s in zip(ts, cpu, _container_labels(text, "container_cpu_usage_seconds",
                                                                         "web-7c9-a"), strict=True) if s == "setup"]
    # 11 grid points in the closed 10-minute interval, the counter from 0 at 0.5 core-s per s: 30 per step.
    assert [t for t, _ in setup_cpu] == [last - 1200.0 + 60.0 * k for k in range(11)]
    assert [v for _, v in setup_cpu] == [30.0 * k for k in range(11)]
    families = {f.name: f for f in text_string_to_metric_families(text)}
    init_requests = {(s.labels["container"], s.labels["resource"], s.labels["unit"]): s.value
                     for s in families["kube_pod_init_container_resource_requests"].samples}
    init_limits = {(s.labels["container"], s.labels["resource"]) for s in
                   families["kube_pod_init_container_resource_limits"].samples}
    assert init_requests == {("setup", "cpu", "core"): 0.1} and init_limits == {("setup", "memory")}
    # ... for the whole window (kube-state-metrics reads the pod's spec), and never in the regular family.
    assert len(families["kube_pod_init_container_resource_requests"].samples) == 61
    assert "setup" not in {s.labels["container"] for s in families["kube_pod_container_resource_requests"].samples}


def _container_labels(text: str, family: str, pod: str) -> list[str]:
    for f in text_string_to_metric_families(text):
        if f.name == family:
            return [s.labels["container"] for s in f.samples if s.labels["pod"] == pod]
    raise AssertionError(family)
