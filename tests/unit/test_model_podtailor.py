"""Unit tests of the ``podtailor`` strategy: real-interval confidence, throttling, memory classes, OOM caps."""

from __future__ import annotations

import numpy as np
import pytest

from podtailor.resources import CurrentResources, Resources
from recommender.model.common import fleet_from_samples
from recommender.model.peaks import cost_level
from recommender.model.podtailor_state import PodtailorState
from recommender.model.registry import get_strategy
from recommender.model.types import (
    ContainerPolicy,
    FleetScale,
    OomKill,
    Recommendation,
    Samples,
    Strategy,
    UsageBatch,
)
from recommender.model.vpa import VpaParams, VpaState

NOW = 1_700_000_000.0
HOUR, DAY = 3600.0, 86400.0
MIB = 1024**2
GIB = 1024 * MIB


def series(values: np.ndarray, step: float, end: float = NOW) -> Samples:
    return Samples(timestamps_s=end - step * np.arange(values.size)[::-1], values=values.astype(np.float64))


def hourly(n: int, cpu: float, mem: float, end: float = NOW, **kw: object) -> UsageBatch:
    return UsageBatch(cpu_cores=series(np.full(n, cpu), HOUR, end), cpu_interval_s=HOUR,
                      memory_peak_bytes=series(np.full(n, mem), HOUR, end), memory_interval_s=HOUR,
                      **kw)  # type: ignore[arg-type]


def run(strategy: Strategy, *batches: UsageBatch, policy: ContainerPolicy | None = None,
        current: CurrentResources | None = None) -> Recommendation:
    state = strategy.new_state()
    for b in batches:
        state.add(b)
    return strategy.recommend(state, now_s=NOW, policy=policy or ContainerPolicy(),
                              current=current or CurrentResources())[0]


def test_hourly_history_counts_in_full_unlike_vpa() -> None:
    data = hourly(192, 0.5, 5e8)  # 8 days of 1-hour Prometheus samples
    vpa_state = get_strategy("vpa").new_state()
    vpa_state.add(data)
    assert isinstance(vpa_state, VpaState)
    assert vpa_state.confidence_days(VpaParams()) == pytest.approx(0.1333, abs=1e-4)  # 192 / 1440
    pod_state = get_strategy("podtailor").new_state()
    pod_state.add(data)
    assert isinstance(pod_state, PodtailorState)
    # c = min(span 191 h / 24 = 7.958, 192 x 3600 / 86400 = 8.0) = 7.958 days.
    assert pod_state.cpu_seen.days() == pytest.approx(7.958, abs=1e-3)
    rec, _ = get_strategy("podtailor").recommend(pod_state, now_s=NOW, policy=ContainerPolicy(),
                                                 current=CurrentResources())
    assert rec.confidence == pytest.approx(1.0)  # 7.958 / 7 full days, clipped
    vpa_rec = run(get_strategy("vpa"), data)
    assert vpa_rec.confidence == pytest.approx(0.1333 / 8, abs=1e-4)
    # podtailor's upper bound multiplier is 1 + 1/7.958 = 1.126, VPA's 8.5.
    assert rec.upper_bound.cpu_millicores is not None and vpa_rec.upper_bound.cpu_millicores is not None
    assert rec.upper_bound.cpu_millicores * 5 < vpa_rec.upper_bound.cpu_millicores


def test_constant_cpu_target() -> None:
    rec = run(get_strategy("podtailor"), hourly(192, 0.5, 5e8))
    # 0.5 core in 2% buckets of first width 1m: upper edge in [0.5, 0.5 x 1.02 + 0.001 = 0.511], x1.10 margin
    # -> [550m, 562.1m].
    assert rec.target.cpu_millicores is not None and 550 <= rec.target.cpu_millicores <= 563
    # Memory "cost" class: every hour at 5e8, so the level is that peak; no hour rises above the day before
    # it, so the jump margin is its 5% floor: 5e8 x 1.05 = 525e6 exactly (slot maxima are exact, not bucketed).
    assert rec.target.memory_bytes == 525_000_000


def test_throttling_raises_recorded_usage() -> None:
    throttled = series(np.full(192, 0.5), HOUR)
    data = hourly(192, 0.5, 5e8, cpu_throttled_fraction=throttled)
    # Recorded as 0.5 x (1 + 0.5) = 0.75: target in [0.75 x 1.1, (0.75 x 1.02 + 0.001) x 1.1] = [825m, 843m].
    rec = run(get_strategy("podtailor"), data)
    assert rec.target.cpu_millicores is not None and 825 <= rec.target.cpu_millicores <= 843
    off = run(get_strategy("podtailor", **{"cpu.throttle_correction": False}), data)
    assert off.target.cpu_millicores is not None and off.target.cpu_millicores <= 563


def test_cost_level_worked_numbers() -> None:
    peaks = np.array([2.0] * 9 + [10.0])  # nine slots at 2, one at 10 (share above 2: 1/10)
    # b = 10: 10 x 1.15 + 0 = 11.5.  b = 2: 2 x 1.15 + overrun_cost x 1/10 = 2.3 + overrun_cost / 10.
    assert cost_level(peaks, margin_fraction=0.15, overrun_cost=50.0) == 2.0  # 2.3 + 5 = 7.3 < 11.5
    assert cost_level(peaks, margin_fraction=0.15, overrun_cost=100.0) == 10.0  # 2.3 + 10 = 12.3 > 11.5
    assert cost_level(peaks, margin_fraction=0.15, overrun_cost=92.0) == 10.0  # tie (11.5 both): the higher
    assert cost_level(np.array([np.nan]), margin_fraction=0.15, overrun_cost=1.0) is None


FIXED_MARGIN: dict[str, str] = {"memory_margin.mode": "fixed"}
"""The fixed 15% memory margin (the default before the held jump margin), so that worked numbers are the
statistic's alone."""
ABSOLUTE: dict[str, str] = {"cpu_price.mode": "absolute", "memory_price.mode": "absolute", **FIXED_MARGIN}
"""The fleet-wide prices, 1 core per unit share over the request and 100 GiB-hours per OOM, with the fixed
margin (the default before #18)."""


def test_memory_cost_class_sizes_large_containers_below_rare_peaks() -> None:
    shape = np.array([8.0] * 2 + [2.0] * 40 + [1.0] * 150)  # hourly peaks, 8 days, oldest first
    strategy = get_strategy("podtailor", **ABSOLUTE)  # "cost" class, 100 GiB-hours per OOM

    def target(scale: float) -> int | None:
        data = UsageBatch(cpu_cores=series(np.full(192, 0.1), HOUR), cpu_interval_s=HOUR,
                          memory_peak_bytes=series(shape * scale, HOUR), memory_interval_s=HOUR)
        return run(strategy, data).target.memory_bytes

    # 1e8 scale (800 MB peaks): b = 8e8 costs 9.2e8; b = 2e8 costs 2.3e8 + 100 GiB x 2/192 = 2.3e8 + 1.118e9.
    # The two rare peaks are cheap to cover: the max, as the "minimal" class.
    assert target(1e8) == 920_000_000
    # 1e10 scale (80 GB peaks): b = 8e10 costs 9.2e10; b = 2e10 costs 2.3e10 + 1.118e9 = 2.41e10; b = 1e10
    # costs 1.15e10 + 100 GiB x 42/192 = 3.5e10. The 2e10 level wins: 2e10 x 1.15 = 2.3e10.
    assert target(1e10) == 23_000_000_000


def test_memory_oom_tolerance_classes() -> None:
    mem = np.array([8e8] * 2 + [2e8] * 40 + [1e8] * 150)  # hourly peaks, 8 days, oldest first
    data = UsageBatch(cpu_cores=series(np.full(192, 0.1), HOUR), cpu_interval_s=HOUR,
                      memory_peak_bytes=series(mem, HOUR), memory_interval_s=HOUR)
    minimal = run(get_strategy("podtailor", **{"memory.statistic": "minimal"}, **FIXED_MARGIN),
                  data).target.memory_bytes
    assert minimal == 920_000_000  # max 8e8 x 1.15
    low = run(get_strategy("podtailor", **{"memory.statistic": "low"}, **FIXED_MARGIN), data).target.memory_bytes
    # p98 of decayed hourly peaks lands in the 2e8 group (the 8e8 peaks are the newest, about 1% of weight
    # each... their share of decayed weight is small): upper edge <= 2e8 x 1.02 + 1 MiB, x1.15.
    assert low is not None and 2e8 * 1.15 <= low <= (2e8 * 1.02 + MIB) * 1.15
    inter = run(get_strategy("podtailor", **{"memory.statistic": "intermediate"}, **FIXED_MARGIN),
                data).target.memory_bytes
    # max(p60 in the 1e8 bucket, 0.5 x 8e8 = 4e8) = 4e8 x 1.15 = 460e6.
    assert inter == 460_000_000


def test_oom_bump_is_capped_and_does_not_feed_itself() -> None:
    policy = ContainerPolicy(max_allowed=Resources(memory_bytes=GIB))
    strategy = get_strategy("podtailor")
    state = strategy.new_state()
    state.add(hourly(48, 0.1, 9e8))
    for i in range(5):  # the capped container keeps OOM-ing at its 1 GiB limit
        oom = OomKill(timestamp_s=NOW - 10 * HOUR + i * HOUR, memory_limit_bytes=GIB, memory_request_bytes=GIB)
        state.add(UsageBatch(cpu_cores=Samples.empty(), cpu_interval_s=HOUR, memory_peak_bytes=Samples.empty(),
                             memory_interval_s=HOUR, oom_kills=(oom,)))
    rec, _ = strategy.recommend(state, now_s=NOW, policy=policy, current=CurrentResources())
    # bump = max(1 GiB + 100 MiB, 1.2 GiB) = 1.2 GiB, capped at maxAllowed 1 GiB before it is used.
    assert rec.target.memory_bytes == GIB and rec.uncapped_target.memory_bytes == GIB
    assert "memory: OOM bump" in rec.reasons


def test_vpa_oom_loop_inflates_uncapped_target() -> None:
    # The same scenario under VPA (#9521): the bump goes into the histogram, uncappedTarget exceeds the cap.
    policy = ContainerPolicy(max_allowed=Resources(memory_bytes=GIB))
    ooms = tuple(OomKill(timestamp_s=NOW - d * DAY, memory_request_bytes=GIB) for d in range(7, -1, -1))
    rec = run(get_strategy("vpa"), hourly(192, 0.1, 9e8, oom_kills=ooms), policy=policy)
    assert rec.target.memory_bytes == GIB
    assert rec.uncapped_target.memory_bytes is not None and rec.uncapped_target.memory_bytes > 1.2 * GIB


def test_thin_history_never_lowers_the_request() -> None:
    current = CurrentResources(requests=Resources(cpu_millicores=500, memory_bytes=GIB))
    thin = run(get_strategy("podtailor"), hourly(6, 0.1, 1e8), current=current)  # 5h span: c = 0.21 days
    assert thin.target == Resources(cpu_millicores=500, memory_bytes=GIB)
    assert "cpu: low confidence: no decrease" in thin.reasons
    enough = run(get_strategy("podtailor"), hourly(48, 0.1, 1e8), current=current)  # c = 47/24 = 1.96 days
    assert enough.target.cpu_millicores is not None and enough.target.cpu_millicores < 500
    allowed = run(get_strategy("podtailor", **{"confidence.no_decrease_on_thin_history": False}), hourly(6, 0.1, 1e8),
                  current=current)
    assert allowed.target.cpu_millicores is not None and allowed.target.cpu_millicores < 500


def test_a_request_held_at_its_value_keeps_its_limit_too() -> None:
    # Thin history holds both requests at their current values; the limits stay the current ones as well
    # (a limit recomputed from the fresh estimate would resize the pod for nothing).
    current = CurrentResources(requests=Resources(cpu_millicores=500, memory_bytes=GIB),
                               limits=Resources(cpu_millicores=1700, memory_bytes=3 * GIB))
    thin = run(get_strategy("podtailor"), hourly(6, 0.1, 1e8), current=current)
    assert thin.target == current.requests and thin.limits == current.limits
    assert not any("kept at" in r for r in thin.reasons)  # the no-decrease rule says why, once


def test_cpu_rises_fast_and_falls_slowly() -> None:
    low = hourly(99, 0.1, 1e8, end=NOW - HOUR)
    high = hourly(1, 1.0, 1e8)
    rise = run(get_strategy("podtailor"), low, high).target.cpu_millicores
    slow_only = run(get_strategy("podtailor", **{"cpu.fast_half_life_s": 0.0}), low, high).target.cpu_millicores
    assert rise is not None and slow_only is not None
    # The newest hour's share of the decayed weight: 1 - 2^(-1) = 50% with the 1h half-life (p85 in the
    # 1-core bucket: >= 1.0 x 1.1 = 1100m) but 1 - 2^(-1/12) = 5.6% with the 12h one (p85 in the 0.1 bucket:
    # <= (0.1 x 1.02 + 0.001) x 1.1 = 113.3m).
    assert rise >= 1100 and slow_only <= 114


def test_cpu_limit_rules_keep_qos() -> None:
    data = hourly(192, 0.5, 5e8)
    burstable = CurrentResources(requests=Resources(cpu_millicores=250), limits=Resources(cpu_millicores=2000))
    rec = run(get_strategy("podtailor", **{"cpu_limit.keep_ratio": False}), data, current=burstable)
    # percentile rule without the ratio floor (test_model_podtailor_cpu_limit.py has it):
    # max(p99 (~0.5..0.511) x 1.15, request x 1.1) with the request [550m, 562.1m]: the
    # cpu_limit.min_ratio floor (added so rounding never yields limit == request, which the QoS rule would
    # then keep forever) wins: [605m, 619m], above the request.
    assert rec.target.cpu_millicores is not None and rec.limits.cpu_millicores is not None
    assert 605 <= rec.limits.cpu_millicores <= 619 and rec.limits.cpu_millicores > rec.target.cpu_millicores
    guaranteed = CurrentResources(requests=Resources(cpu_millicores=250), limits=Resources(cpu_millicores=250))
    rec = run(get_strategy("podtailor"), data, current=guaranteed)
    assert rec.limits.cpu_millicores == rec.target.cpu_millicores
    none = CurrentResources(requests=Resources(cpu_millicores=250))
    assert run(get_strategy("podtailor"), data, current=none).limits.cpu_millicores is None
    no_limit = run(get_strategy("podtailor", **{"cpu_limit.rule": "none"}), data, current=burstable)
    assert no_limit.limits.cpu_millicores is None


def test_invalid_parameter_values_are_rejected() -> None:
    with pytest.raises(ValueError, match=r"memory\.statistic must be one of cost, low, minimal, intermediate"):
        get_strategy("podtailor", **{"memory.statistic": "reckless"})
    with pytest.raises(ValueError, match=r"cpu_limit\.rule must be one of"):
        get_strategy("podtailor", **{"cpu_limit.rule": "tight"})
    with pytest.raises(ValueError, match=r"unknown parameter.*cpu_price\.colour, memory_oom_tolerance"):
        get_strategy("podtailor", **{"cpu_price.colour": "red", "memory_oom_tolerance": "low"})


def test_no_decrease_within_the_dwell_time_after_a_change() -> None:
    strategy = get_strategy("podtailor")
    state = strategy.new_state()
    state.add(hourly(48, 0.1, 1e8))
    before = CurrentResources(requests=Resources(cpu_millicores=300, memory_bytes=GIB))
    after = CurrentResources(requests=Resources(cpu_millicores=500, memory_bytes=GIB))
    policy = ContainerPolicy()
    _, state = strategy.recommend(state, now_s=NOW - 2 * HOUR, policy=policy, current=before)  # first sight
    _, state = strategy.recommend(state, now_s=NOW - HOUR, policy=policy, current=after)  # the applied values changed
    # One hour after the change: the 500m / 1 GiB requests stay although the targets (about 113m and 115 MiB)
    # are far below them. A drop of d waits 20 h x 0.2 / d: about 5.2 h for CPU's 78%, 4.5 h for memory's 89%.
    held, state = strategy.recommend(state, now_s=NOW, policy=policy, current=after)
    assert held.target == Resources(cpu_millicores=500, memory_bytes=GIB)
    # Each kept value says why, in quantities as kubectl prints them.
    cpu_reason = next(r for r in held.reasons if r.startswith("cpu: kept at 500m: target 1"))
    assert "is a decrease of 78%, and such a decrease waits 5.2h after the last change (4.2h to go)" in cpu_reason
    assert any(r.startswith("memory: kept at 1Gi: target 1") and "is a decrease of 89%" in r
               and "waits 4.5h after the last change" in r for r in held.reasons), held.reasons
    # Thirteen hours after it the decrease goes out.
    later, state = strategy.recommend(state, now_s=NOW + 12 * HOUR, policy=policy, current=after)
    assert later.target.cpu_millicores is not None and later.target.cpu_millicores < 200
    # Increases are never delayed: the same history against a 50m request rises at once.
    low = CurrentResources(requests=Resources(cpu_millicores=50, memory_bytes=GIB))
    _, state = strategy.recommend(state, now_s=NOW + 13 * HOUR, policy=policy, current=low)
    rise, _ = strategy.recommend(state, now_s=NOW + 13 * HOUR, policy=policy, current=low)
    assert rise.target.cpu_millicores is not None and rise.target.cpu_millicores > 100


def test_deeper_decreases_wait_less() -> None:
    """A decrease waits dwell.decrease_s x (resize.down_fraction / its depth) ^ dwell.power after
    the last change: the same targets (about 113m CPU; memory held at its own target, so it does not move and
    take CPU along) leave a 500m request 8 h after a change and keep a 160m one until its longer wait is over."""
    memory = 125 * MIB  # the memory target (about 112-115 MiB) is inside its band: memory stays

    def requests_after(cpu_m: int, hours: float, **params: float | str) -> tuple[int | None, tuple[str, ...]]:
        strategy = get_strategy("podtailor", **params)
        state = strategy.new_state()
        state.add(hourly(48, 0.1, 1e8))
        current = CurrentResources(requests=Resources(cpu_millicores=cpu_m, memory_bytes=memory))
        first = CurrentResources(requests=Resources(cpu_millicores=cpu_m // 2, memory_bytes=memory))
        _, state = strategy.recommend(state, now_s=NOW - 2 * HOUR, policy=ContainerPolicy(), current=first)
        _, state = strategy.recommend(state, now_s=NOW - HOUR, policy=ContainerPolicy(), current=current)  # the change
        rec, _ = strategy.recommend(state, now_s=NOW - HOUR + hours * HOUR, policy=ContainerPolicy(),
                                    current=current)
        return rec.target.cpu_millicores, rec.reasons

    deep, _ = requests_after(500, 8)  # a 78% drop waits about 5.2 h
    assert deep is not None and deep < 130
    shallow, reasons = requests_after(160, 8)  # 112m / 160m: a 30% drop waits 20 x 0.2 / 0.3 = 13.3 h
    assert shallow == 160
    assert any(r.startswith("cpu: kept at 160m") and "is a decrease of 30%" in r and "waits 13.3h" in r
               for r in reasons), reasons
    later, _ = requests_after(160, 14)
    assert later is not None and later < 130
    # Power 0: every decrease waits the whole dwell, however deep (the rule before 2026-12-06).
    flat, _ = requests_after(500, 8, **{"dwell.power": 0.0})
    assert flat == 500
    assert requests_after(500, 21, **{"dwell.power": 0.0})[0] == deep
    with pytest.raises(ValueError, match="dwell: power"):
        get_strategy("podtailor", **{"dwell.power": float("nan")})


def test_cpu_grows_only_beyond_its_up_band() -> None:
    data = hourly(192, 0.5, 5e8)  # CPU target in [550m, 563m] (test_constant_cpu_target); memory 525e6
    mem = 525_000_000  # memory at its target: it does not move, so CPU decides alone

    def cpu_after(request_m: int, **overrides: float | str) -> int | None:
        current = CurrentResources(requests=Resources(cpu_millicores=request_m, memory_bytes=mem))
        return run(get_strategy("podtailor", **overrides), data, current=current).target.cpu_millicores

    # 520m: target / request <= 563 / 520 = 1.083, inside the 10% band: held, and the reason says so.
    assert cpu_after(520) == 520
    held = run(get_strategy("podtailor"), data, current=CurrentResources(
        requests=Resources(cpu_millicores=520, memory_bytes=mem)))
    assert any(r.startswith("cpu: kept at 520m: target 5") and r.endswith(
        "is within the resize band (-20% .. +10% of the current request)") for r in held.reasons), held.reasons
    assert not any(r.startswith("memory:") for r in held.reasons)  # its target is the request: nothing kept
    moved = run(get_strategy("podtailor"), data, current=CurrentResources(
        requests=Resources(cpu_millicores=480, memory_bytes=mem)))
    assert not any("kept at" in r for r in moved.reasons), moved.reasons  # coordinated: nothing is held
    # 480m: target / request >= 550 / 480 = 1.146, beyond it: resized to the target.
    after = cpu_after(480)
    assert after is not None and 550 <= after <= 563
    # Without the band any growth resizes.
    no_band = cpu_after(520, **{"resize.cpu_up_fraction": 0.0})
    assert no_band is not None and 550 <= no_band <= 563


def test_a_target_raised_to_the_pod_minimum_says_so() -> None:
    tiny = run(get_strategy("podtailor"), hourly(192, 0.001, 10 * MIB))
    assert tiny.target == Resources(cpu_millicores=10, memory_bytes=64 * MIB)
    assert "cpu: raised to the minimum 10m (per container, of the pod's minimum)" in tiny.reasons
    assert "memory: raised to the minimum 64Mi (per container, of the pod's minimum)" in tiny.reasons
    usual = run(get_strategy("podtailor"), hourly(192, 0.5, 5e8))
    assert not any("minimum" in r for r in usual.reasons)


def test_resizes_are_coordinated() -> None:
    data = hourly(48, 1.0, 1e8)  # CPU target about 1.1 cores; memory 1e8 x 1.05 = 105e6 (flat: the 5% margin)
    # CPU must rise (500m -> ~1.1 cores); memory (125e6) sits inside its band (target/request = 0.84 > 0.8).
    current = CurrentResources(requests=Resources(cpu_millicores=500, memory_bytes=125_000_000))
    both = run(get_strategy("podtailor"), data, current=current)
    # Coordinated: the resize happens anyway, so memory takes its fresh target in the same update.
    assert both.target.memory_bytes == 105_000_000 and (both.target.cpu_millicores or 0) >= 1100
    alone = run(get_strategy("podtailor", **{"resize.coordinate": False}), data, current=current)
    assert alone.target.memory_bytes == 125_000_000 and (alone.target.cpu_millicores or 0) >= 1100


FIXED_P85: dict[str, float | str] = {"cpu_price.mode": "off"}
"""No price: both histograms at p85."""


def test_a_checkpoint_of_the_percentile_calibration_restores_without_it() -> None:
    """The CPU percentile calibration (``cpu_calibration``) was folded into the risk budget: its three fields in
    checkpoints written before are not read, and the restored state recommends as one without them."""
    strategy = get_strategy("podtailor")
    state = strategy.new_state()
    state.add(alternating(48))
    data = state.to_checkpoint()
    assert not {"cpu_level", "pending_cpu", "pending_cpu_s"} & set(data)
    old = {**data, "cpu_level": 0.31, "pending_cpu": [0.6, 0.2], "pending_cpu_s": 3600.0}
    current = CurrentResources(requests=Resources(cpu_millicores=2000, memory_bytes=575_000_000))
    want, _ = strategy.recommend(strategy.restore(data), now_s=NOW, policy=ContainerPolicy(), current=current)
    got, after = strategy.recommend(strategy.restore(old), now_s=NOW, policy=ContainerPolicy(), current=current)
    assert got == want and want.target.cpu_millicores is not None
    assert "cpu_level" not in after.to_checkpoint()
    with pytest.raises(ValueError, match="unknown parameter"):
        get_strategy("podtailor", **{"cpu_calibration.budget": 0.002})


def test_the_request_percentile_floor_is_checked() -> None:
    with pytest.raises(ValueError, match="min_request_percentile"):
        get_strategy("podtailor", **{"cpu.min_request_percentile": 0.9})


def alternating(n: int) -> UsageBatch:
    cpu = np.where(np.arange(n) % 2 == 1, 1.0, 0.2)  # ends on 1.0 (n even)
    return UsageBatch(cpu_cores=series(cpu, HOUR), cpu_interval_s=HOUR,
                      memory_peak_bytes=series(np.full(n, 5e8), HOUR), memory_interval_s=HOUR)


def every_fifth_hour(base: float, burst: float, every: int = 5) -> UsageBatch:
    """8 days of hourly CPU at ``base`` with ``burst`` every ``every`` hours (the last one 4 hours ago)."""
    cpu = np.where(np.arange(192) % every == 2, burst, base)
    return UsageBatch(cpu_cores=series(cpu, HOUR), cpu_interval_s=HOUR,
                      memory_peak_bytes=series(np.full(192, 5e8), HOUR), memory_interval_s=HOUR)


def cpu_request_m(batch: UsageBatch, **params: float | str) -> int:
    rec = run(get_strategy("podtailor", **params), batch)
    assert rec.target.cpu_millicores is not None
    return rec.target.cpu_millicores


def test_cpu_cost_level_prices_time_over_the_request() -> None:
    bursty = every_fifth_hour(0.1, 2.0)  # 20% of the hours at 2 cores: a long thin tail
    flat = every_fifth_hour(0.5, 0.55, every=10)  # 10% of the hours 10% higher
    # Both histograms at p85: the bursty container's p85 is the 2-core bucket, (<= 2 x 1.02 + 0.001) x 1.1 =
    # 2.2 to 2.245 cores; the flat one's is the 0.5 bucket, 0.55 to 0.562.
    p85 = cpu_request_m(bursty, **FIXED_P85)
    assert 2200 <= p85 <= 2245
    assert 550 <= cpu_request_m(flat, **FIXED_P85) <= 562
    # The fleet-wide price, 1 core per unit share: leaving the bursty tail uncovered costs 1 x 0.18 (its decayed
    # share) and saves (2.0 - 0.1) x 1.1 cores, so the slow level is the 0.1 bucket, a percentile below p85; the
    # fast histogram's p85 is there too (its last burst, 4 hours ago, weighs 3%): 110 to 113m.
    assert 110 <= cpu_request_m(bursty, **ABSOLUTE) <= 113
    # For the flat one, leaving its top 10% uncovered saves only 0.05 x 1.1 cores for 0.1 x 1 = 0.1 core of
    # risk: the level is its max, the 0.55 bucket (605 to 618m), a percentile above p85.
    assert 605 <= cpu_request_m(flat, **ABSOLUTE) <= 618
    # The default per-container price, 2 x p95 per unit share: the bursty one's p95 is the 2-core bucket, so
    # the tail costs 4 x 0.18 = 0.72 against 2.09 cores saved (dropped, the same 110 to 113m); the flat one's
    # top costs 2 x 0.55 x 0.1 = 0.11 against 0.055 saved (covered, the same 605 to 618m).
    assert 110 <= cpu_request_m(bursty) <= 113 and 605 <= cpu_request_m(flat) <= 618
    # A price beyond every saving covers the max; the floor percentile holds under a lower level (p85 here).
    assert cpu_request_m(bursty, **ABSOLUTE, **{"cpu_price.cores": 1e9}) == p85
    assert cpu_request_m(bursty, **{"cpu_price.container_ratio": 1e9}) == p85
    assert cpu_request_m(bursty, **{"cpu.min_request_percentile": 0.85}) == p85


def test_cpu_cost_level_stops_at_its_ceiling_percentile() -> None:
    # 4% of the hours at 0.52 cores, the rest at 0.5: covering the top saves 0.02 x 1.1 cores for a risk of
    # about 0.04 core, so the price alone would take the max (the 0.52 bucket: 574m). The ceiling, p95, keeps
    # the 0.5 bucket (562m), as for a small flat container whose top the price never reaches.
    rare = every_fifth_hour(0.5, 0.52, every=25)
    assert cpu_request_m(rare, **{"cpu.max_request_percentile": 1.0}) == 574
    assert cpu_request_m(rare) == 562
    with pytest.raises(ValueError, match="max_request_percentile"):
        get_strategy("podtailor", **{"cpu.max_request_percentile": 0.2})  # under the floor, p30
    with pytest.raises(ValueError, match="max_request_percentile"):
        get_strategy("podtailor", **{"cpu.max_request_percentile": float("nan")})


def test_cpu_cost_level_share_of_a_histogram() -> None:
    state = get_strategy("podtailor").new_state()
    assert isinstance(state, PodtailorState)
    state.add(every_fifth_hour(0.1, 2.0))
    # With a 12 h half-life the bursts, 1 hour in 5 and the last 4 hours ago, hold 17.8% of the weight.
    share = state.cpu.cost_share(margin_fraction=0.1, overrun_cost=1.0)
    assert share is not None and share == pytest.approx(0.8224, abs=1e-4)
    assert state.cpu.cost_share(margin_fraction=0.1, overrun_cost=1e9) == 1.0


def test_cpu_cost_parameter_is_checked() -> None:
    for bad in (-1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="cpu_price: cores"):
            get_strategy("podtailor", **{"cpu_price.cores": bad})


SCALE_FREE: dict[str, float | str] = {"cpu_price.container_ratio": 1.2, "memory_price.peak_hours": 12.0,
                                "floors.pod_cpu_millicores": 0.01, "floors.pod_memory_mib": 0.01, **FIXED_MARGIN}


def test_the_per_container_prices_choose_the_same_level_whatever_the_size() -> None:
    # The memory shape above: two 8x peaks, forty 2x hours, the rest 1x. At 12 peak-hours per OOM, leaving
    # the two top hours uncovered costs 12 x 8s x 2/192 = 1.0s and saves (8s - 2s) x 1.15 = 6.9s; leaving the
    # 2x hours too costs 12 x 8s x 42/192 = 21s for 1.15s more saved: the 2x level, 2s x 1.15, at every s.
    shape = np.array([8.0] * 2 + [2.0] * 40 + [1.0] * 150)
    # The default, 24 peak-hours, is the same here (2.0s against 6.3s, then 42s against 1.05s) above its
    # 64 MiB floor, with its jump margin: the peaks only fall, so its 5% floor.
    for strategy, scales, margin in ((get_strategy("podtailor", **SCALE_FREE), (1e7, 1e8, 1e10), 1.15),
                                     (get_strategy("podtailor"), (1e8, 1e10), 1.05)):
        for scale in scales:
            data = UsageBatch(cpu_cores=series(np.full(192, 0.1), HOUR), cpu_interval_s=HOUR,
                              memory_peak_bytes=series(shape * scale, HOUR), memory_interval_s=HOUR)
            assert run(strategy, data).target.memory_bytes == pytest.approx(2 * scale * margin, rel=1e-6)
    # The fleet-wide price is not: at 1e8 it covers the two top hours (100 GiB-hours is 13 times those peaks).
    assert run(get_strategy("podtailor", **ABSOLUTE), UsageBatch(
        cpu_cores=series(np.full(192, 0.1), HOUR), cpu_interval_s=HOUR, memory_peak_bytes=series(shape * 1e8, HOUR),
        memory_interval_s=HOUR)).target.memory_bytes == 920_000_000
    # CPU: the flat shape (10% of the hours 10% higher) at 0.5 and 50 cores. Per container, leaving its top
    # hours uncovered is worth the same at both sizes: the 0.5 level (its bucket, x 1.1) at either, 100 times
    # apart within the 2% buckets. The absolute 1-core price covers the max of the small one (0.55 x 1.1) and
    # not of the large one, where the same share of time over the request saves 100 times more cores.
    flat_small, flat_large = every_fifth_hour(0.5, 0.55, every=10), every_fifth_hour(50.0, 55.0, every=10)
    small, large = cpu_request_m(flat_small, **SCALE_FREE), cpu_request_m(flat_large, **SCALE_FREE)
    assert 550 <= small <= 562 and large / small == pytest.approx(100, rel=0.03)
    assert 605 <= cpu_request_m(flat_small, **ABSOLUTE) <= 618 and cpu_request_m(flat_large, **ABSOLUTE) == large
    # The default ratio, 2 (covering the top 10% costs 2 x 0.55 x 0.1 = 0.11 per 0.055 saved): the max at
    # both sizes, 100 times apart.
    small, large = cpu_request_m(flat_small), cpu_request_m(flat_large)
    assert 605 <= small <= 618 and large / small == pytest.approx(100, rel=0.03)


@pytest.mark.parametrize("name", ["cpu_price.container_ratio", "memory_price.peak_hours", "memory_price.gib_hours",
                                  "cpu_price.fleet_ratio", "memory_price.fleet_hours", "memory_price.min_peak_hours"])
@pytest.mark.parametrize("bad", [-1.0, float("nan"), float("inf")])
def test_the_prices_must_be_finite_and_not_negative(name: str, bad: float) -> None:
    with pytest.raises(ValueError, match=name.replace(".", ": ")):
        get_strategy("podtailor", **{name: bad})


# ------------------------------------------------------------------------------------- summaries (#22)
def _usage(ts: np.ndarray, cpu: np.ndarray, interval: float, summary: UsageBatch | None = None) -> UsageBatch:
    return UsageBatch(cpu_cores=Samples(timestamps_s=ts, values=cpu), cpu_interval_s=interval,
                      memory_peak_bytes=Samples(timestamps_s=ts, values=cpu * 2**30), memory_interval_s=interval,
                      summary=summary)


@pytest.mark.parametrize("name", ["podtailor", "vpa", "krr-simple"])
def test_a_summary_sample_weighs_the_steps_it_stands_for(name: str) -> None:
    """An hourly summary of CPU equal to its 12 five-minute steps folds into the histograms as those 12 steps
    at its time would: the same recommendation and, for VPA, the same sample count."""
    rng = np.random.default_rng(7)
    t0 = 1_700_000_000.0 - 1_700_000_000.0 % 3600
    hours = rng.uniform(0.1, 2.0, 48)
    fine_ts = t0 + 48 * 3600 + 300 * np.arange(1, 289)
    fine = rng.uniform(0.1, 2.0, fine_ts.size)
    hour_ts = t0 + 3600 * np.arange(1, 49) - 300
    strategy = get_strategy(name)
    summarized, repeated = strategy.new_state(), strategy.new_state()
    summarized.add(_usage(fine_ts, fine, 300.0, summary=_usage(hour_ts, hours, 3600.0)))
    repeated.add(_usage(np.repeat(hour_ts, 12), np.repeat(hours, 12), 300.0))
    repeated.add(_usage(fine_ts, fine, 300.0))
    current = CurrentResources(requests=Resources(cpu_millicores=500, memory_bytes=2**30),
                               limits=Resources(cpu_millicores=1000, memory_bytes=2**31))
    recs = [strategy.recommend(s, now_s=float(fine_ts[-1]), policy=ContainerPolicy(), current=current)[0]
            for s in (summarized, repeated)]
    assert recs[0] == recs[1] and recs[0].target.cpu_millicores is not None
    if name == "vpa":
        assert summarized.total_samples == repeated.total_samples == 48 * 12 + 288  # type: ignore[attr-defined]


def test_a_summary_may_not_hold_a_summary() -> None:
    ts, one = np.array([1.0]), np.array([1.0])
    nested = _usage(ts + 10, one, 300.0, summary=_usage(ts, one, 3600.0, summary=_usage(ts - 1, one, 3600.0)))
    with pytest.raises(ValueError, match="summary"):
        get_strategy("podtailor").new_state().add(nested)


def test_history_plans_follow_each_strategys_half_life() -> None:
    assert get_strategy("podtailor").history_plan().full_resolution_s == 3 * 86400
    assert get_strategy("podtailor", **{"cpu.half_life_s": 3600.0, "cpu.fast_half_life_s": 7200.0}
                        ).history_plan().full_resolution_s == 12 * 3600
    assert get_strategy("vpa").history_plan().full_resolution_s == 6 * 86400
    assert get_strategy("krr-simple").history_plan().full  # an unweighted 14-day percentile: all of it


def test_fleet_prices_put_the_risk_on_containers_larger_than_the_fleet_and_scale_with_it() -> None:
    # The memory shape above (two 8x peaks, forty 2x hours, the rest 1x), fixed margin, an OOM at 40 x the
    # fleet's mean peak F, at least 4 x the container's own 8s. Levels cost: 8s: 9.2s; 2s: 2.3s + P x 2/192;
    # 1s: 1.15s + P x 42/192. A fleet of containers 10 times larger (F = 80s, P = 3200s) covers the max; at
    # its own size (F = 8s), the 2x level; 80 times smaller (F = 0.1s), the floor holds P at 32s: the 2x
    # level still, where the fleet's price alone (4s) would leave the 2x hours uncovered too (2.03s against
    # 2.34s). The same at 1e8 and 1e10: the fleet scales with the container.
    shape = np.array([8.0] * 2 + [2.0] * 40 + [1.0] * 150)
    floored, unfloored = (get_strategy("podtailor", **FIXED_MARGIN),
                          get_strategy("podtailor", **{"memory_price.min_peak_hours": 0.0}, **FIXED_MARGIN))
    for scale in (1e8, 1e10):
        data = UsageBatch(cpu_cores=series(np.full(192, 0.1), HOUR), cpu_interval_s=HOUR,
                          memory_peak_bytes=series(shape * scale, HOUR), memory_interval_s=HOUR)
        for strategy, fleet_peak, level in ((floored, 80.0, 8.0), (floored, 8.0, 2.0), (floored, 0.1, 2.0),
                                            (unfloored, 0.1, 1.0)):
            policy = ContainerPolicy(fleet=FleetScale(cpu_cores=0.0, memory_bytes=fleet_peak * scale))
            assert run(strategy, data, policy=policy).target.memory_bytes == pytest.approx(level * scale * 1.15,
                                                                                          rel=1e-6)
    # CPU, the flat shape (10% of the hours 10% higher): dropping the top hours saves 0.05 x 1.1 per 0.1 of
    # the time over the request, priced at 2.5 x the fleet's p95: a fleet at the container's size (0.55)
    # covers them, one at 0.1 cores does not; 100 times larger, the same, 100 times apart.
    def cpu_m(batch: UsageBatch, fleet_cores: float) -> int:
        rec = run(get_strategy("podtailor"), batch, policy=ContainerPolicy(
            fleet=FleetScale(cpu_cores=fleet_cores, memory_bytes=0.0)))
        assert rec.target.cpu_millicores is not None
        return rec.target.cpu_millicores
    flat_small, flat_large = every_fifth_hour(0.5, 0.55, every=10), every_fifth_hour(50.0, 55.0, every=10)
    covered, dropped = cpu_m(flat_small, 0.55), cpu_m(flat_small, 0.1)
    assert 605 <= covered <= 618 and 550 <= dropped <= 562
    assert cpu_m(flat_large, 55.0) / covered == pytest.approx(100, rel=0.03)
    assert cpu_m(flat_large, 10.0) / dropped == pytest.approx(100, rel=0.03)
    # Without a fleet, or with the fleet prices at 0, the per-container prices decide (they cover both).
    assert cpu_request_m(flat_small) == covered
    no_fleet_price = get_strategy("podtailor", **{"cpu_price.mode": "container"})
    rec = run(no_fleet_price, flat_small, policy=ContainerPolicy(fleet=FleetScale(cpu_cores=0.1, memory_bytes=0.0)))
    assert rec.target.cpu_millicores == covered


def test_the_fleet_scale_of_states_and_of_samples() -> None:
    strategy = get_strategy("podtailor")
    states = [strategy.new_state(), strategy.new_state(), strategy.new_state()]
    states[0].add(hourly(192, 0.2, 1 * GIB))
    states[1].add(hourly(192, 0.6, 3 * GIB))  # the third has no history and does not count
    fleet = strategy.fleet_scale(states, NOW)
    assert fleet is not None
    assert fleet.cpu_cores == pytest.approx(0.4, rel=0.03)  # p95s within the 2% buckets
    assert fleet.memory_bytes == pytest.approx(2 * GIB, rel=0.03)
    assert strategy.fleet_scale([states[2]], NOW) is None
    assert get_strategy("vpa").fleet_scale(states, NOW) is None  # VPA prices nothing by the fleet
    samples = fleet_from_samples([(np.array([0.1, 0.2, np.nan]), None), (np.array([1.0]), np.array([np.nan, 5.0]))])
    assert samples is not None and (samples.cpu_cores, samples.memory_bytes) == pytest.approx((0.5975, 5.0))
    for bad in (-1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="memory_bytes"):
            FleetScale(cpu_cores=1.0, memory_bytes=bad)
