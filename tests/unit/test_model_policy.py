"""Unit tests of the shared post-processing: rounding, capping, controlled resources and limits."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from podtailor.resources import CurrentResources, Resources
from podtailor.vpa import ControlledValues
from recommender.model.policy import (
    MAX_RESOURCE_AMOUNT,
    Estimate,
    LimitRule,
    ResourceEstimate,
    finalize,
    round_up,
    scaled_limit,
)
from recommender.model.types import ContainerPolicy

GIB = 1024**3


def estimate(cpu: tuple[float, float, float] | None = (0.2, 0.1, 0.4),
             memory: tuple[float, float, float] | None = (5e8, 4e8, 9e8), **kw: object) -> Estimate:
    def res(v: tuple[float, float, float] | None) -> ResourceEstimate | None:
        return None if v is None else ResourceEstimate(target=v[0], lower=v[1], upper=v[2])
    return Estimate(cpu=res(cpu), memory=res(memory), confidence=0.5, **kw)  # type: ignore[arg-type]


def test_round_up_once_without_float_noise() -> None:
    assert round_up(0.1, 1000.0, 1) == 100  # 0.1 x 1000 = 100.00000000000001 in floats
    assert round_up(0.1001, 1000.0, 1) == 101
    assert round_up(0.0, 1000.0, 1) == 1  # never 0
    assert round_up(460e6, 1.0, 1024**2) == 439 * 1024**2  # ceil(438.69 MiB)
    assert round_up(math.inf, 1000.0, 1) == MAX_RESOURCE_AMOUNT
    with pytest.raises(ValueError):
        round_up(math.nan, 1.0, 1)


def test_targets_and_bounds_are_rounded_up() -> None:
    rec = finalize(estimate(), policy=ContainerPolicy(), current=CurrentResources())
    assert rec.target == Resources(cpu_millicores=200, memory_bytes=500_000_000)
    assert rec.lower_bound == Resources(cpu_millicores=100, memory_bytes=400_000_000)
    assert rec.upper_bound == Resources(cpu_millicores=400, memory_bytes=900_000_000)
    assert rec.limits == Resources()  # no current limits, none recommended
    assert rec.confidence == 0.5


def test_capping_keeps_uncapped_target() -> None:
    policy = ContainerPolicy(min_allowed=Resources(cpu_millicores=300),
                             max_allowed=Resources(memory_bytes=450_000_000))
    rec = finalize(estimate(), policy=policy, current=CurrentResources())
    assert rec.target == Resources(cpu_millicores=300, memory_bytes=450_000_000)
    assert rec.uncapped_target == Resources(cpu_millicores=200, memory_bytes=500_000_000)
    assert rec.lower_bound == Resources(cpu_millicores=300, memory_bytes=400_000_000)
    assert rec.upper_bound == Resources(cpu_millicores=400, memory_bytes=450_000_000)
    assert "cpu: raised to minAllowed" in rec.reasons and "memory: capped by maxAllowed" in rec.reasons


def test_max_allowed_wins_a_conflict_with_min_allowed() -> None:
    policy = ContainerPolicy(min_allowed=Resources(cpu_millicores=500), max_allowed=Resources(cpu_millicores=300))
    rec = finalize(estimate(), policy=policy, current=CurrentResources())
    assert rec.target.cpu_millicores == 300


def test_uncontrolled_resources_and_mode_off() -> None:
    rec = finalize(estimate(), policy=ContainerPolicy(controlled_resources=frozenset({"cpu"})),
                   current=CurrentResources())
    assert rec.target == Resources(cpu_millicores=200) and rec.upper_bound.memory_bytes is None
    off = finalize(estimate(), policy=ContainerPolicy(mode_off=True), current=CurrentResources())
    assert off.target == Resources() and off.reasons == ("mode Off",)


def test_limits_keep_the_ratio() -> None:
    current = CurrentResources(requests=Resources(cpu_millicores=250, memory_bytes=GIB),
                               limits=Resources(cpu_millicores=1000, memory_bytes=GIB))
    rec = finalize(estimate(cpu=(0.333, 0.3, 0.4)), policy=ContainerPolicy(), current=current)
    # CPU: ceil(1000 x 333 / 250) = ceil(1332.0) = 1332. Memory request == limit: Guaranteed, limit = request.
    assert rec.limits == Resources(cpu_millicores=1332, memory_bytes=500_000_000)


def test_requests_only_leaves_limits_unset() -> None:
    current = CurrentResources(requests=Resources(cpu_millicores=250), limits=Resources(cpu_millicores=1000))
    rec = finalize(estimate(), policy=ContainerPolicy(controlled_values=ControlledValues.REQUESTS_ONLY),
                   current=current)
    assert rec.limits == Resources()


def test_limit_rules() -> None:
    current = CurrentResources(requests=Resources(cpu_millicores=250), limits=Resources(cpu_millicores=1000))
    explicit = Estimate(cpu=ResourceEstimate(target=0.2, lower=0.1, upper=0.4, limit_rule=LimitRule.EXPLICIT,
                                             limit=0.5), memory=None, confidence=1.0)
    assert finalize(explicit, policy=ContainerPolicy(), current=current).limits.cpu_millicores == 500
    none = Estimate(cpu=ResourceEstimate(target=0.2, lower=0.1, upper=0.4, limit_rule=LimitRule.NONE),
                    memory=None, confidence=1.0)
    assert finalize(none, policy=ContainerPolicy(), current=current).limits.cpu_millicores is None
    equal = Estimate(cpu=None, memory=ResourceEstimate(target=3e8, lower=3e8, upper=3e8,
                                                       limit_rule=LimitRule.EQUAL_TO_REQUEST), confidence=1.0)
    assert finalize(equal, policy=ContainerPolicy(), current=CurrentResources()).limits.memory_bytes == 300_000_000


def test_scaled_limit_edge_cases() -> None:
    assert scaled_limit(new_request=300, current_request=None, current_limit=1000) == 300
    assert scaled_limit(new_request=300, current_request=500, current_limit=None) is None
    assert scaled_limit(new_request=300, current_request=500, current_limit=400) == 300  # never below the request


amount = st.floats(min_value=1e-4, max_value=1e6, allow_nan=False)


@given(a=amount, b=amount, c=amount, lo=st.integers(1, 10**6), span=st.integers(0, 10**6))
@settings(max_examples=300, deadline=None)
def test_capping_keeps_order_and_range(a: float, b: float, c: float, lo: int, span: int) -> None:
    low, target, up = sorted((a, b, c))
    hi = lo + span
    est = Estimate(cpu=ResourceEstimate(target=target, lower=low, upper=up), memory=None, confidence=1.0)
    policy = ContainerPolicy(min_allowed=Resources(cpu_millicores=lo), max_allowed=Resources(cpu_millicores=hi))
    rec = finalize(est, policy=policy, current=CurrentResources())
    t, lb, ub = rec.target.cpu_millicores, rec.lower_bound.cpu_millicores, rec.upper_bound.cpu_millicores
    assert t is not None and lb is not None and ub is not None
    assert lb <= t <= ub
    assert all(lo <= v <= hi for v in (lb, t, ub))


@given(request=st.integers(1, 10**9), ratio=st.floats(1.0, 20.0), new=st.integers(1, 10**9))
@settings(max_examples=300, deadline=None)
def test_limits_keep_ratio_within_one_unit(request: int, ratio: float, new: int) -> None:
    limit = max(int(request * ratio), request + 1)
    got = scaled_limit(new_request=new, current_request=request, current_limit=limit)
    assert got is not None and got >= new
    exact = limit * new / request  # the ratio rule before rounding up
    assert exact <= got < exact + 1 or got == new
