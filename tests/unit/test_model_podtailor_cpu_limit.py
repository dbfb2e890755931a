"""Unit tests of the ``podtailor`` CPU limit's proportional floor (``CpuLimit.keep_ratio``, issue #39 item 3).

The percentile limit is at least the request x the container's own limit:request ratio, the first one seen,
as VPA's proportional rule keeps it; the user's other limit rules, Guaranteed QoS and bad input are checked
beside it.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from podtailor.resources import CurrentResources, Resources
from podtailor.vpa import ControlledValues
from recommender.model.podtailor_cpu_parts import CpuLimit, CpuLimitRule
from recommender.model.podtailor_state import PodtailorState
from recommender.model.registry import get_strategy
from recommender.model.types import ContainerPolicy, Samples, Strategy, UsageBatch

NOW = 1_700_000_000.0
HOUR = 3600.0


def hourly(n: int, cpu: float) -> UsageBatch:
    ts = NOW - HOUR * np.arange(n, dtype=np.float64)[::-1]
    return UsageBatch(cpu_cores=Samples(timestamps_s=ts, values=np.full(n, cpu)), cpu_interval_s=HOUR,
                      memory_peak_bytes=Samples(timestamps_s=ts, values=np.full(n, 5e8)), memory_interval_s=HOUR)


def recommend(strategy: Strategy, state: object, current: CurrentResources) -> tuple[Resources, Resources]:
    rec, _ = strategy.recommend(state, now_s=NOW, policy=ContainerPolicy(),  # type: ignore[arg-type]
                                current=current)
    return rec.target, rec.limits


def burstable(request_m: int, limit_m: int) -> CurrentResources:
    return CurrentResources(requests=Resources(cpu_millicores=request_m), limits=Resources(cpu_millicores=limit_m))


def test_the_limit_keeps_the_containers_own_ratio_where_the_percentile_is_lower() -> None:
    strategy = get_strategy("podtailor")
    state = strategy.new_state()
    state.add(hourly(192, 0.5))
    target, limits = recommend(strategy, state, burstable(250, 500))
    # request [550m, 562.1m] (p85 of a flat 0.5 core, one 2% bucket, x 1.1); the percentile rule gives
    # max(p99 ~0.5..0.511 x 1.15, request x 1.1) <= 619m, the 2:1 ratio request x 2 = [1100m, 1125m]: the ratio wins.
    assert target.cpu_millicores is not None and limits.cpu_millicores is not None
    assert 550 <= target.cpu_millicores <= 563
    assert limits.cpu_millicores == pytest.approx(2 * target.cpu_millicores, abs=1)


def test_the_ratio_is_the_first_one_seen_so_our_own_limits_never_ratchet_it() -> None:
    strategy = get_strategy("podtailor")
    state = strategy.new_state()
    state.add(hourly(192, 0.5))
    _, first = recommend(strategy, state, burstable(250, 500))
    assert isinstance(state, PodtailorState) and state.cpu_limit_ratio is None  # recommend works on a successor
    rec, after = strategy.recommend(state, now_s=NOW, policy=ContainerPolicy(), current=burstable(250, 500))
    assert isinstance(after, PodtailorState) and after.cpu_limit_ratio == 2.0
    # A later 3:1 (a limit someone else set) does not replace the first ratio: the limit stays ~2 x the request.
    _, later = recommend(strategy, after, burstable(562, 1686))
    assert first.cpu_millicores is not None and later.cpu_millicores is not None
    assert later.cpu_millicores <= first.cpu_millicores + 1 and rec.limits == first
    restored = strategy.restore(after.to_checkpoint())
    assert isinstance(restored, PodtailorState) and restored.cpu_limit_ratio == 2.0


def test_the_percentile_still_wins_where_bursts_outgrow_the_ratio() -> None:
    strategy = get_strategy("podtailor")
    state = strategy.new_state()
    # One hour in 20 at 4 cores, the newest 5 h ago: about 5% of the decayed weight, so p85 stays at 0.5 core
    # and p99 is the 4-core bucket.
    values = np.where((199 - np.arange(200)) % 20 == 5, 4.0, 0.5)
    ts = NOW - HOUR * np.arange(200, dtype=np.float64)[::-1]
    state.add(UsageBatch(cpu_cores=Samples(timestamps_s=ts, values=values), cpu_interval_s=HOUR,
                         memory_peak_bytes=Samples(timestamps_s=ts, values=np.full(200, 5e8)), memory_interval_s=HOUR))
    target, limits = recommend(strategy, state, burstable(250, 500))
    # p99 >= 4 cores x 1.15 = 4600m, far above request x 2 (< 1.2 cores).
    assert target.cpu_millicores is not None and target.cpu_millicores < 600
    assert limits.cpu_millicores is not None and limits.cpu_millicores >= 4600


def test_the_users_stated_limit_rules_are_unchanged() -> None:
    data = hourly(192, 0.5)
    for overrides, expect in (({"cpu_limit.rule": "none"}, None), ({"cpu_limit.keep_ratio": False}, (605, 619))):
        strategy = get_strategy("podtailor", **overrides)
        state = strategy.new_state()
        state.add(data)
        _, limits = recommend(strategy, state, burstable(250, 500))
        if expect is None:
            assert limits.cpu_millicores is None
        else:  # max(p99 x 1.15, request x cpu_limit.min_ratio 1.1): [605m, 619m], no ratio floor
            assert limits.cpu_millicores is not None and expect[0] <= limits.cpu_millicores <= expect[1]
    proportional = get_strategy("podtailor", **{"cpu_limit.rule": "proportional", "cpu_limit.keep_ratio": False})
    state = proportional.new_state()
    state.add(data)
    target, limits = recommend(proportional, state, burstable(250, 750))
    assert target.cpu_millicores is not None and limits.cpu_millicores == 3 * target.cpu_millicores  # VPA's 3:1


def test_a_vpa_that_controls_requests_only_gets_no_limit() -> None:
    strategy = get_strategy("podtailor")
    state = strategy.new_state()
    state.add(hourly(192, 0.5))
    rec, _ = strategy.recommend(state, now_s=NOW, current=burstable(250, 500),
                                policy=ContainerPolicy(controlled_values=ControlledValues.REQUESTS_ONLY))
    assert rec.target.cpu_millicores is not None and rec.limits.cpu_millicores is None


def test_guaranteed_and_limitless_containers_keep_their_class() -> None:
    strategy = get_strategy("podtailor")
    for current, same in ((burstable(250, 250), True), (CurrentResources(requests=Resources(cpu_millicores=250)),
                                                         False)):
        state = strategy.new_state()
        state.add(hourly(192, 0.5))
        target, limits = recommend(strategy, state, current)
        assert limits.cpu_millicores == (target.cpu_millicores if same else None)


def test_the_floor_arithmetic_and_bad_input() -> None:
    assert CpuLimit().floor(0.5, 2.0) == 1.0
    assert CpuLimit().floor(0.5, None) == 0.0  # no ratio known yet: no floor
    assert CpuLimit(keep_ratio=False).floor(0.5, 2.0) == 0.0
    for bad in (0.5, math.nan, math.inf):
        with pytest.raises(ValueError, match="limit:request ratio must be finite and >= 1"):
            CpuLimit().floor(0.5, bad)
    with pytest.raises(ValueError, match="keep_ratio must be true or false"):
        CpuLimit(keep_ratio="yes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="keep_ratio must be true or false"):
        get_strategy("podtailor", **{"cpu_limit.keep_ratio": 1})
    assert CpuLimit(rule=CpuLimitRule.NONE).keep_ratio  # the setting is there; the rule decides whether it is used


def test_a_checkpoint_with_an_absurd_ratio_is_refused_whole() -> None:
    strategy = get_strategy("podtailor")
    state = strategy.new_state()
    state.add(hourly(192, 0.5))
    _, after = strategy.recommend(state, now_s=NOW, policy=ContainerPolicy(), current=burstable(250, 500))
    good = after.to_checkpoint()
    assert isinstance(strategy.restore(good), PodtailorState)
    for bad in (math.nan, math.inf, 0.5, 1e9, "2x"):
        with pytest.raises(ValueError):
            strategy.restore({**good, "cpu_limit_ratio": bad})
