"""Tests every strategy must pass: registry, strict input, no-history, ordering, checkpoints, scale."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from podtailor.resources import CurrentResources, Resources
from recommender.model.registry import CANDIDATES, STRATEGIES, get_strategy
from recommender.model.types import ContainerPolicy, OomKill, Recommendation, Samples, UsageBatch

NOW = 1_700_000_000.0
STEP = 300.0
EVERY = STRATEGIES + CANDIDATES
"""The candidates under study pass the same tests as the strategies on offer."""
CURRENT = CurrentResources(requests=Resources(cpu_millicores=300, memory_bytes=2**29),
                           limits=Resources(cpu_millicores=900, memory_bytes=2**30))


def make_batch(cpu: np.ndarray, mem: np.ndarray, end: float = NOW, ooms: tuple[OomKill, ...] = (),
               throttled: np.ndarray | None = None) -> UsageBatch:
    cpu_ts = end - STEP * np.arange(cpu.size)[::-1]
    mem_ts = end - STEP * np.arange(mem.size)[::-1]
    th = Samples.empty() if throttled is None else Samples(timestamps_s=cpu_ts.copy(), values=throttled)
    return UsageBatch(cpu_cores=Samples(timestamps_s=cpu_ts, values=cpu), cpu_interval_s=STEP,
                      memory_peak_bytes=Samples(timestamps_s=mem_ts, values=mem), memory_interval_s=STEP,
                      oom_kills=ooms, cpu_throttled_fraction=th)


def random_batch(seed: int, n: int = 300, end: float = NOW) -> UsageBatch:
    rng = np.random.default_rng(seed)
    ooms = (OomKill(timestamp_s=end - 600.0, memory_request_bytes=2**29),) if seed % 3 == 0 else ()
    return make_batch(rng.gamma(2.0, 0.1, n), rng.normal(3e8, 3e7, n).clip(1e6), end=end, ooms=ooms,
                      throttled=rng.uniform(0, 0.3, n))


def recommend(name: str, *batches: UsageBatch) -> Recommendation:
    strategy = get_strategy(name)
    state = strategy.new_state()
    for b in batches:
        state.add(b)
    return strategy.recommend(state, now_s=NOW, policy=ContainerPolicy(), current=CURRENT)[0]


def test_registry() -> None:
    assert STRATEGIES == ("vpa", "krr-simple", "podtailor")
    for name in STRATEGIES:
        strategy = get_strategy(name)
        assert strategy.name == name
        params = strategy.parameters()
        assert params and json.dumps(params)  # reports print them
    assert get_strategy("vpa", target_percentile=0.95).parameters()["target_percentile"] == 0.95
    with pytest.raises(ValueError):
        get_strategy("goldilocks")
    with pytest.raises(ValueError):
        get_strategy("vpa", no_such_parameter=1)


@pytest.mark.parametrize("name", EVERY)
def test_no_history_recommends_nothing(name: str) -> None:
    strategy = get_strategy(name)
    state = strategy.new_state()
    assert state.first_sample_s is None and state.last_sample_s is None
    rec, _ = strategy.recommend(state, now_s=NOW, policy=ContainerPolicy(), current=CURRENT)
    assert rec.target == Resources() and rec.upper_bound == Resources() and rec.limits == Resources()
    assert rec.reasons == ("no history",) and rec.confidence == 0.0


@pytest.mark.parametrize("name", EVERY)
@pytest.mark.parametrize("bad", [math.nan, math.inf, -1.0])
def test_bad_values_raise(name: str, bad: float) -> None:
    state = get_strategy(name).new_state()
    with pytest.raises(ValueError):
        state.add(make_batch(np.array([0.1, bad]), np.array([1e8, 1e8])))
    with pytest.raises(ValueError):
        state.add(make_batch(np.array([0.1, 0.1]), np.array([1e8, bad])))
    with pytest.raises(ValueError):
        state.add(make_batch(np.array([0.1, 0.1]), np.array([1e8, 1e8]), throttled=np.array([0.1, 1.5])))
    assert state.first_sample_s is None  # nothing was taken in


@pytest.mark.parametrize("name", EVERY)
def test_out_of_order_batch_equals_sorted(name: str) -> None:
    ordered = random_batch(1)
    perm = np.random.default_rng(2).permutation(300)

    def shuffle(s: Samples) -> Samples:
        return Samples(timestamps_s=s.timestamps_s[perm], values=s.values[perm])

    shuffled = UsageBatch(cpu_cores=shuffle(ordered.cpu_cores), cpu_interval_s=STEP,
                          memory_peak_bytes=shuffle(ordered.memory_peak_bytes), memory_interval_s=STEP,
                          cpu_throttled_fraction=shuffle(ordered.cpu_throttled_fraction))
    a, b = recommend(name, ordered), recommend(name, shuffled)
    assert a.target == b.target and a.lower_bound == b.lower_bound and a.upper_bound == b.upper_bound
    assert a.target.cpu_millicores is not None and a.target.memory_bytes is not None


@pytest.mark.parametrize("name", EVERY)
def test_outputs_are_positive_and_ordered(name: str) -> None:
    rec = recommend(name, random_batch(4), random_batch(5, end=NOW + 300 * STEP))
    for field in ("cpu_millicores", "memory_bytes"):
        low, mid, up = (getattr(r, field) for r in (rec.lower_bound, rec.target, rec.upper_bound))
        assert 0 < low <= mid <= up


@given(seeds=st.lists(st.integers(0, 10**6), min_size=1, max_size=3), name=st.sampled_from(EVERY))
@settings(max_examples=40, deadline=None)
def test_checkpoint_round_trip_gives_identical_recommendations(seeds: list[int], name: str) -> None:
    strategy = get_strategy(name)
    state = strategy.new_state()
    for i, seed in enumerate(seeds):
        state.add(random_batch(seed, end=NOW - (len(seeds) - i) * 400 * STEP))
    restored = strategy.restore(json.loads(json.dumps(state.to_checkpoint())))
    assert restored.first_sample_s == state.first_sample_s and restored.last_sample_s == state.last_sample_s
    for s in (state, restored):  # and they keep agreeing after more data
        s.add(random_batch(seeds[0] + 1))
    args = {"now_s": NOW, "policy": ContainerPolicy(), "current": CURRENT}
    (rec_restored, after_restored), (rec, after) = (strategy.recommend(s, **args)  # type: ignore[arg-type]
                                                    for s in (restored, state))
    assert rec_restored == rec and after_restored.to_checkpoint() == after.to_checkpoint()


@pytest.mark.parametrize("name", EVERY)
def test_recommend_leaves_the_given_state_as_it_was(name: str) -> None:
    """Recommending is a read of the given state: its checkpoint is the same before and after, and recommending
    again from it gives the same answer; what the strategy remembers goes into the state it returns."""
    strategy = get_strategy(name, **{"budget.cpu_over_share": 0.05}) if name == "podtailor" else get_strategy(name)
    state = strategy.new_state()
    state.add(random_batch(3, end=NOW - 400 * STEP))  # seed 3: with an OOM kill
    later = CurrentResources(requests=Resources(cpu_millicores=600, memory_bytes=2**30))
    for now_s, current in ((NOW - 300 * STEP, CURRENT), (NOW - 200 * STEP, later), (NOW, CURRENT)):
        before = json.dumps(state.to_checkpoint(), sort_keys=True)
        rec, after = strategy.recommend(state, now_s=now_s, policy=ContainerPolicy(), current=current)
        assert json.dumps(state.to_checkpoint(), sort_keys=True) == before
        again, _ = strategy.recommend(state, now_s=now_s, policy=ContainerPolicy(), current=current)
        assert again == rec and rec.target.cpu_millicores is not None
        if name == "podtailor":  # it notes the applied values in the state it returns, not in the given one
            req, lim = current.requests, current.limits
            assert after.to_checkpoint()["applied"] == [req.cpu_millicores, lim.cpu_millicores, req.memory_bytes,
                                                        lim.memory_bytes]
            assert state.to_checkpoint()["applied"] != after.to_checkpoint()["applied"]
        state = after
        state.add(random_batch(4, n=100, end=now_s + 100 * STEP))


def test_many_containers_scale() -> None:
    """Sanity, not a timed assertion: 10,000 containers x 2,304 samples (8 days at 5 min) each fold in within
    a few seconds with the default strategy (about 3 s on a laptop core)."""
    rng = np.random.default_rng(0)
    batch = make_batch(rng.gamma(2.0, 0.1, 2304), rng.normal(3e8, 3e7, 2304).clip(1e6))
    strategy = get_strategy("podtailor")
    states = [strategy.new_state() for _ in range(10_000)]
    for state in states:
        state.add(batch)
    assert all(s.last_sample_s == NOW for s in states)
