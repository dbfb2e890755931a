"""Unit tests of the replay and its scores, on tiny synthetic series with hand-worked numbers."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from recommender.backtest.replay import Plan, ReplayConfig, fleet_of, make_grid, oracle, replay
from recommender.backtest.runner import (
    UNSCORED_SHORT,
    UNSCORED_WARMUP,
    StrategySpec,
    run_series,
    series_from_history,
)
from recommender.backtest.scoring import metrics, score
from recommender.backtest.trace import Series
from recommender.model.registry import get_strategy
from recommender.model.types import ContainerKey, FleetScale, Samples, UsageBatch

HOUR, DAY, STEP = 3600.0, 86400.0, 300.0
GIB = float(1024**3)
T0 = 1_700_006_400.0  # a whole hour (and day) in epoch seconds


def make(cpu: np.ndarray, mem: np.ndarray | None, *, prov_cpu: float = 2.0, prov_mem: float = 8 * GIB) -> Series:
    n = cpu.size
    return Series(series_id="s-1", timestamps_s=T0 + STEP * np.arange(n), cpu_cores=cpu.astype(float),
                  memory_bytes=None if mem is None else mem.astype(float),
                  cpu_provisioned_cores=np.full(n, prov_cpu), memory_provisioned_bytes=np.full(n, prov_mem))


def test_constant_usage_gives_the_oracle_zero_slack_and_no_changes() -> None:
    s = make(np.full(3 * 288, 0.5), np.full(3 * 288, GIB))  # 3 days of 5-minute samples
    cfg = ReplayConfig()
    grid = make_grid(s, cfg)
    assert grid.steps == 72 and grid.first_scored_step == 24
    m = metrics(score(s, oracle(s, cfg, grid), grid))
    assert m.cpu_slack_cores == 0.0 and m.memory_slack_gib == 0.0
    assert m.ooms_per_series_day == 0.0 and m.oom_free_days == 1.0 and m.changes_per_series_day == 0.0
    assert m.series_days == 2  # 48 scored hours


def test_score_of_a_fixed_plan_by_hand() -> None:
    # 2 days, 1 GiB memory limit; usage 0.5 GiB except two excursions to 2 GiB: hours 30-31 (one run over
    # two hours = 2 OOM-equivalents, one per hour) and hour 40 (1). Scored from hour 24 (warm-up 1 day).
    n = 2 * 288
    mem = np.full(n, 0.5 * GIB)
    mem[30 * 12 + 6:32 * 12] = 2 * GIB
    mem[40 * 12:40 * 12 + 1] = 2 * GIB
    mem[25 * 12] = np.nan  # a missing reading is neither slack nor OOM
    cpu = np.full(n, 0.2)
    cpu[26 * 12:26 * 12 + 3] = 1.5  # 3 samples = 15 minutes above the request (1.0) and the limit (1.2)
    s = make(cpu, mem)
    grid = make_grid(s, ReplayConfig())
    steps = grid.steps
    plan = Plan(cpu_request=np.full(steps, 1.0), cpu_limit=np.full(steps, 1.2),
                memory_request=np.full(steps, GIB), memory_limit=np.full(steps, GIB),
                changed=np.zeros(steps))
    m = metrics(score(s, plan, grid))
    assert m.series_days == 1  # 24 scored hours
    assert m.ooms_per_series_day == 3.0 and m.oom_free_days == 0.0
    assert m.cpu_over_limit_min_per_day == pytest.approx(15.0)
    assert m.cpu_over_request_min_per_day == pytest.approx(15.0)
    # CPU slack: 285 samples x 0.8 core + 3 x 0 over 288 samples = 0.79167 core.
    assert m.cpu_slack_cores == pytest.approx(285 * 0.8 / 288)
    # Memory slack over 287 readings: 18 + 1 over the limit (slack 0), 268 at 0.5 GiB -> 134/287 GiB.
    assert m.memory_slack_gib == pytest.approx(268 * 0.5 / 287)
    assert m.memory_slack_rel == pytest.approx(268 * 0.5 / 287)


def test_memory_step_up_under_krr_costs_exactly_four_ooms() -> None:
    # krr-simple: memory limit = 1.15 x the max reading of 14 days. Memory steps from 1 to 2 GiB at hour 36.
    # Censored readings equal the limit, so each OOM hour raises the limit x1.15: 1.15, 1.32, 1.52, 1.75 GiB
    # are all below 2 GiB (hours 36-39 OOM), and 1.15^5 = 2.01 GiB at hour 40 holds.
    n = 3 * 288
    mem = np.where(np.arange(n) < 36 * 12, GIB, 2 * GIB)
    s = make(np.full(n, 0.1), mem)
    cfg = ReplayConfig()
    grid = make_grid(s, cfg)
    plan = replay(s, get_strategy("krr-simple"), cfg, grid)
    assert plan.memory_limit[40] >= 2 * GIB > plan.memory_limit[39]
    m = metrics(score(s, plan, grid))
    assert m.ooms_per_series_day == pytest.approx(4 / 2)  # 4 OOMs over 2 scored days
    assert m.oom_free_days == pytest.approx(0.5)
    assert m.cpu_over_limit_min_per_day == 0.0  # krr sets no CPU limit


def test_vpa_keeps_its_start_limit_ratio_and_runner_sums_subsets() -> None:
    s = make(np.full(2 * 288, 0.3), np.full(2 * 288, GIB))
    cfg = ReplayConfig()
    plan = replay(s, get_strategy("vpa"), cfg)
    # Start: limit 2 cores, request 1 core (ratio 2); VPA's proportional rule keeps limit = 2 x request.
    assert plan.cpu_limit[30] == pytest.approx(2 * plan.cpu_request[30], abs=0.002)
    assert plan.memory_limit[30] == plan.memory_request[30]  # memory started Guaranteed (1:1)
    specs = [StrategySpec(name="vpa"), StrategySpec(name="oracle")]
    result = run_series([s, Series(series_id="s-2", timestamps_s=s.timestamps_s, cpu_cores=s.cpu_cores,
                                   memory_bytes=None)], specs, cfg)
    assert result.totals["all"]["vpa"].series == 2
    assert result.totals["odd"]["vpa"].series == 1 and result.totals["even"]["vpa"].series == 1
    assert result.totals["even"]["vpa"].memory_seconds == 0.0  # the CPU-only series has no memory score


def test_prometheus_style_history_becomes_series() -> None:
    ts = T0 + 300.0 * np.arange(4)
    key = ContainerKey(namespace="ns", workload_kind="Deployment", workload_name="web", container="app")
    batch = UsageBatch(cpu_cores=Samples(timestamps_s=ts, values=np.array([0.1, 0.2, 0.3, 0.4])),
                       cpu_interval_s=300.0,
                       memory_peak_bytes=Samples(timestamps_s=ts[1::2], values=np.array([5.0, 7.0])),
                       memory_interval_s=600.0)
    (s,) = series_from_history({key: batch})
    assert s.series_id == "ns/Deployment/web/app"
    assert s.memory_bytes is not None
    np.testing.assert_array_equal(s.memory_bytes[1:], [5.0, 5.0, 7.0])  # latest reading at or before
    assert np.isnan(s.memory_bytes[0])


def test_a_workloads_replicas_are_replayed_as_its_busiest_one() -> None:
    # Two pods at the same four timestamps (as Prometheus returns a Deployment's replicas), interleaved.
    ts = np.repeat(T0 + 300.0 * np.arange(4), 2)
    key = ContainerKey(namespace="ns", workload_kind="Deployment", workload_name="web", container="app")
    batch = UsageBatch(cpu_cores=Samples(timestamps_s=ts, values=np.array([0.1, 0.5, 0.6, 0.2, 0.3, 0.3, 0.4, 0.9])),
                       cpu_interval_s=300.0,
                       memory_peak_bytes=Samples(timestamps_s=ts, values=np.array([5, 9, 8, np.nan, 7, 6, np.nan,
                                                                                    np.nan])),
                       memory_interval_s=300.0)
    (s,) = series_from_history({key: batch})
    np.testing.assert_array_equal(s.timestamps_s, T0 + 300.0 * np.arange(4))  # one value per timestamp
    np.testing.assert_array_equal(s.cpu_cores, [0.5, 0.6, 0.3, 0.9])
    assert s.memory_bytes is not None
    np.testing.assert_array_equal(s.memory_bytes[:3], [9.0, 8.0, 7.0])
    assert np.isnan(s.memory_bytes[3])  # every pod's reading missing: missing, not zero


def test_series_that_are_not_scored_are_counted_per_reason_and_series_n_stops_reading() -> None:
    day = make(np.full(2 * 288, 0.3), np.full(2 * 288, GIB))
    short = make(np.full(100, 0.3), np.full(100, GIB))  # 8.3 h: nothing after the 24 h warm-up
    single = make(np.full(1, 0.3), np.full(1, GIB))
    read: list[str] = []

    def stream() -> Iterator[Series]:
        for i, s in enumerate([day, short, single, day, day]):
            read.append(f"s-{i}")
            yield Series(series_id=f"s-{i}", timestamps_s=s.timestamps_s, cpu_cores=s.cpu_cores,
                         memory_bytes=s.memory_bytes)

    result = run_series(stream(), [StrategySpec(name="vpa"), StrategySpec(name="oracle")], ReplayConfig(),
                        limit=4)
    assert read == ["s-0", "s-1", "s-2", "s-3"]  # the fifth series is never read
    assert result.totals["all"]["vpa"].series == 2
    assert result.unscored == {UNSCORED_WARMUP: 1, UNSCORED_SHORT: 1}


def test_the_fleets_sizes_come_from_every_series_warm_up_and_scale_with_it() -> None:
    # Two series: CPU 0.2 then 0.6 cores, memory 1 then 3 GiB in the first day; after it, bursts the warm-up
    # never saw (they are scored, so they must not set the prices).
    n = 3 * 288
    late = np.arange(n) >= 288
    a = make(np.where(late, 5.0, 0.2), np.where(late, 40 * GIB, GIB))
    b = make(np.full(n, 0.6), np.full(n, 3 * GIB))
    fleet = fleet_of([a, b], ReplayConfig())
    assert fleet is not None and (fleet.cpu_cores, fleet.memory_bytes) == pytest.approx((0.4, 2 * GIB))
    tenfold = [Series(series_id=s.series_id, timestamps_s=s.timestamps_s, cpu_cores=s.cpu_cores * 10,
                      memory_bytes=None if s.memory_bytes is None else s.memory_bytes * 10) for s in (a, b)]
    ten = fleet_of(tenfold, ReplayConfig())
    assert ten is not None and (ten.cpu_cores, ten.memory_bytes) == pytest.approx((4.0, 20 * GIB))
    # CPU-only series give no memory size; no samples at all, no fleet.
    cpu_only = fleet_of([make(np.full(n, 0.3), None)], ReplayConfig())
    assert cpu_only is not None and (cpu_only.cpu_cores, cpu_only.memory_bytes) == pytest.approx((0.3, 0.0))
    assert fleet_of([make(np.full(n, np.nan), None)], ReplayConfig()) is None
    # The runner gives the replay the fleet of the series it replays (shown in the result's config), unless told.
    assert run_series([a, b], [StrategySpec(name="vpa")], ReplayConfig()).config.fleet == fleet
    told = FleetScale(cpu_cores=1.0, memory_bytes=GIB)
    assert run_series([a, b], [StrategySpec(name="vpa")], ReplayConfig(fleet=told)).config.fleet == told
