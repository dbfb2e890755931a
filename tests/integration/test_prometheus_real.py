"""The local Prometheus is real: backfilled history comes back from PromQL with the values written.

Uses ``promtool tsdb create-blocks-from openmetrics`` (through the harness) and queries with
``prometheus-api-client``, the client the recommender uses.
"""

from __future__ import annotations

import datetime as dt
import time
from pathlib import Path

import pytest
from prometheus_api_client import PrometheusConnect

from tests.harness.prometheus import LocalPrometheus

pytestmark = pytest.mark.prometheus


def _write_history(path: Path, start_s: int, steps: int, step_s: int) -> None:
    """A gauge rising 0, 1.5, 3, ... and a counter growing 0.25 core-seconds per second."""
    lines = ["# TYPE demo_working_set_bytes gauge"]
    lines += [f'demo_working_set_bytes{{namespace="ns",pod="p-1",container="app"}} {i * 1.5} '
              f"{start_s + i * step_s}" for i in range(steps)]
    lines.append("# TYPE demo_cpu_usage_seconds counter")
    lines += [f'demo_cpu_usage_seconds_total{{namespace="ns",pod="p-1",container="app"}} {i * step_s * 0.25} '
              f"{start_s + i * step_s}" for i in range(steps)]
    lines.append("# EOF")
    path.write_text("\n".join(lines) + "\n")


def test_backfilled_samples_come_back_from_promql(prometheus: LocalPrometheus, tmp_path: Path) -> None:
    step_s, steps = 60, 6 * 60  # six hours of one-minute samples, three days ago
    start_s = (int(time.time()) - 3 * 86400) // step_s * step_s
    history = tmp_path / "history.om"
    _write_history(history, start_s, steps, step_s)
    prometheus.backfill(history)

    prom = PrometheusConnect(url=prometheus.url, disable_ssl=True)
    series = prom.custom_query_range(
        'demo_working_set_bytes{namespace="ns"}',
        start_time=dt.datetime.fromtimestamp(start_s, dt.UTC),
        end_time=dt.datetime.fromtimestamp(start_s + 10 * step_s, dt.UTC),
        step=str(step_s),
    )
    assert len(series) == 1
    assert series[0]["metric"]["pod"] == "p-1"
    # Sample i was written as i * 1.5 at start + i * 60 s.
    assert [(int(t), float(v)) for t, v in series[0]["values"]] == [
        (start_s + i * step_s, i * 1.5) for i in range(11)
    ]
    # rate() over the counter: 0.25 core-seconds per second, exactly, in the middle of the history.
    at = start_s + 3 * 3600
    rate = prom.custom_query("rate(demo_cpu_usage_seconds_total[10m])", params={"time": at})
    assert float(rate[0]["value"][1]) == pytest.approx(0.25, rel=1e-9)
    # And the backfill survived the restart that made it visible: the server is up and ready.
    assert prom.check_prometheus_connection()


def test_usage_model_history_backfills_into_prometheus(prometheus: LocalPrometheus, tmp_path: Path) -> None:
    from tests.nodesim.openmetrics import ExportContainer, write_openmetrics
    from tests.nodesim.usage import Daily

    model = Daily(cpu_cores=0.5, memory_bytes=200 * 2**20, cpu_amplitude_cores=0.2,
                  memory_amplitude_bytes=50 * 2**20, peak_hour=14)
    container = ExportContainer(namespace="hist", pod="web-7d9f-abcde", container="app", node="n1", model=model,
                                owner_name="web-7d9f", replicaset_owner_name="web", cpu_request_millicores=500,
                                memory_request_bytes=256 * 2**20, memory_limit_bytes=512 * 2**20)
    now_s = float(int(time.time()) // 60 * 60)
    path = tmp_path / "history.om"
    with path.open("w") as out:
        written = write_openmetrics(out, [container], now_s=now_s, days=2, step_s=60)
    assert written > 2 * 1440
    prometheus.backfill(path)
    prom = PrometheusConnect(url=prometheus.url, disable_ssl=True)
    at = now_s - 86400 - 3600  # a grid point a day and an hour ago
    sel = '{namespace="hist",pod="web-7d9f-abcde",container="app"}'
    memory = prom.custom_query(f"container_memory_working_set_bytes{sel}", params={"time": at})
    assert float(memory[0]["value"][1]) == model.sample(at).memory_bytes
    # The counter integrates the model: its 10-minute rate is the model's mean over those 10 minutes.
    rate = prom.custom_query(f"rate(container_cpu_usage_seconds_total{sel}[10m])", params={"time": at})
    expected = sum(model.sample(at - 600 + 5 + 10 * k).cpu_cores for k in range(60)) / 60
    assert float(rate[0]["value"][1]) == pytest.approx(expected, rel=0.02)  # 6 sub-samples/min vs 60 here
    owner = prom.custom_query('kube_replicaset_owner{namespace="hist"}', params={"time": at})
    assert owner[0]["metric"]["owner_name"] == "web"
