"""The autopilot-ml candidate: scale-free targets, the choice of the cheaper model, bounded state."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from podtailor.resources import CurrentResources, Resources
from recommender.model.argmin_ensemble import ArgminEnsemble, Chunk, EnsembleParams, chunk_costs, level_values
from recommender.model.autopilot_ml import AutopilotMlState, AutopilotMlStrategy
from recommender.model.histogram import BucketScheme
from recommender.model.registry import CANDIDATES, STRATEGIES, get_strategy
from recommender.model.types import ContainerPolicy, Samples, UsageBatch

T0 = 1_699_999_200.0
"""A whole hour (472,222 x 3600 s), so that each hour of samples is one chunk."""
STEP = 300.0
TINY = {"pod_min_cpu_millicores": 0.001, "pod_min_memory_mib": 1e-6}
"""Floors below every container here, so that only the rule itself scales."""


def usage(hours: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Timestamps, CPU (cores) and memory (bytes) of a bursty container: a daily cycle, noise and rare spikes."""
    rng = np.random.default_rng(seed)
    n = hours * 12
    ts = T0 + STEP * np.arange(n)
    day = 1.0 + 0.5 * np.sin(2 * math.pi * ts / 86400.0)
    cpu = 0.2 * day * rng.gamma(4.0, 0.25, n) + (rng.random(n) < 0.01) * 0.6
    mem = 4e8 * day + rng.normal(0.0, 2e7, n).clip(-1e8) + (rng.random(n) < 0.003) * 3e8
    return ts, cpu, mem


def replay_targets(factor: float, hours: int = 96) -> list[tuple[int, int]]:
    """Hour by hour, the (CPU millicores, memory bytes) targets of the strategy fed the series x ``factor``,
    with no current request (so no resize band holds a target back)."""
    strategy = get_strategy("autopilot-ml", **TINY)
    state = strategy.new_state()
    ts, cpu, mem = usage(hours, seed=7)
    out = []
    for h in range(hours):
        part = slice(12 * h, 12 * h + 12)
        state.add(UsageBatch(cpu_cores=Samples(timestamps_s=ts[part], values=cpu[part] * factor),
                             cpu_interval_s=STEP, memory_interval_s=STEP,
                             memory_peak_bytes=Samples(timestamps_s=ts[part], values=mem[part] * factor)))
        rec, state = strategy.recommend(state, now_s=float(ts[part][-1] + STEP), policy=ContainerPolicy(),
                                        current=CurrentResources())
        assert rec.target.cpu_millicores is not None and rec.target.memory_bytes is not None
        out.append((rec.target.cpu_millicores, rec.target.memory_bytes))
    return out


def test_registered_as_a_candidate_not_a_default() -> None:
    assert CANDIDATES == ("autopilot-ml",) and "autopilot-ml" not in STRATEGIES
    strategy = get_strategy("autopilot-ml", cpu_overrun_cost=3.0)
    assert strategy.name == "autopilot-ml" and json.dumps(strategy.parameters())
    assert strategy.parameters()["cpu_overrun_cost"] == 3.0


def test_scaling_a_series_by_10_scales_its_targets_by_10_within_one_bucket() -> None:
    """Every price is a share (of time, of hours, of the level), so x10 usage moves every level by
    log(10) / log(1.02) = 116.3 buckets, the same choice each hour: targets x10 within one 2% bucket, plus
    the 1-unit rounding (1m of a 20m target at 1x is 5%, hence the tolerance on CPU below)."""
    small, large = replay_targets(1.0), replay_targets(10.0)
    assert len(small) == len(large) == 96
    for (cpu1, mem1), (cpu10, mem10) in zip(small, large, strict=True):
        assert cpu10 / 10.0 == pytest.approx(cpu1, rel=0.021, abs=1.0)
        assert mem10 / 10.0 == pytest.approx(mem1, rel=0.021)
    # and not trivially: the targets do move over the four days
    assert len({c for c, _ in small}) > 1


def _ensemble(**kw: object) -> ArgminEnsemble:
    params = {"half_lives_s": (3600.0,), "margins": (0.0, 0.5), "overrun_cost": 2.0, "change_cost": 0.0,
              "switch_cost": 0.0, "selection_half_life_s": 48 * 3600.0, "default_model": 0, **kw}
    scheme = BucketScheme(first_bucket_size=1e-7, ratio=1.02, max_value=1000.0)
    return ArgminEnsemble(scheme, EnsembleParams(**params))  # type: ignore[arg-type]


def _feed(ens: ArgminEnsemble, values: list[np.ndarray]) -> None:
    for i, v in enumerate(values):
        over, under = chunk_costs(ens.scheme, v)
        ens.add(Chunk(overrun=over, underrun=under, hours=1.0, end_s=T0 + 3600.0 * (i + 1)))


def test_the_cheaper_model_is_chosen() -> None:
    """Two models share one level (1 h half-life), one with no margin, one with 50%. Usage grows 3% an hour:
    the level covers the last hour (its top bucket edge is at most 2% above it), so the margin-free model is
    over the request for all of every next hour (realised cost 2 x 1 an hour), while the 50% model never is
    and pays slack only (about 1 - 1.03 / 1.5 = 0.31 of its level): it is the cheaper model and is chosen."""
    ens = _ensemble()
    _feed(ens, [np.full(12, 1.03**i) for i in range(30)])
    mean = ens.realised / ens.realised_w
    assert mean[0] == pytest.approx(2.0, rel=0.05)
    assert mean[1] == pytest.approx(0.31, abs=0.02)
    assert ens.chosen == 1
    assert ens.recommendation() == pytest.approx(float(level_values(ens.scheme)[ens.recs[1]]))

    flat = _ensemble()  # and on a flat series the margin is pure slack: the margin-free model wins
    _feed(flat, [np.full(12, 1.0) for _ in range(30)])
    assert flat.chosen == 0
    assert flat.recommendation() == pytest.approx(1.0, rel=0.021)


def test_switch_cost_keeps_the_standing_model() -> None:
    """The same growing series with a switch cost above any difference of mean hourly cost (at most 2 + 1):
    the default model (margin-free) stays chosen although the other is cheaper."""
    ens = _ensemble(switch_cost=10.0)
    _feed(ens, [np.full(12, 1.03**i) for i in range(30)])
    assert ens.chosen == 0


def test_change_cost_holds_a_level_against_small_savings() -> None:
    """A level moves only when the move saves more than ``change_cost`` of mean hourly cost. Usage steps down
    3% after the first hour and stays there for 9 hours: the first level then carries about 3% of slack
    (under the 0.05 change cost), so it holds; without a change cost the level follows the step down (the
    first hour weighs 2^-9 by then: overrun 2 x 0.002 against 3% of slack)."""
    step = [np.full(12, 1.0)] + [np.full(12, 0.97) for _ in range(9)]
    held, free, first = _ensemble(change_cost=0.05), _ensemble(), _ensemble()
    _feed(held, step)
    _feed(free, step)
    _feed(first, step[:1])
    assert held.levels[0] == first.levels[0]
    assert level_values(free.scheme)[free.levels[0]] == pytest.approx(0.97, rel=0.021)
    assert free.levels[0] < first.levels[0]


def test_state_stays_bounded() -> None:
    """A month of 5-minute samples leaves arrays of the same shapes as a day, and a checkpoint as large: the
    state is per bucket and per model, never per sample."""
    strategy = AutopilotMlStrategy()

    def fold(hours: int) -> AutopilotMlState:
        state = strategy.new_state()
        ts, cpu, mem = usage(hours, seed=3)
        for h in range(0, hours, 24):
            part = slice(12 * h, 12 * (h + 24))
            state.add(UsageBatch(cpu_cores=Samples(timestamps_s=ts[part], values=cpu[part]), cpu_interval_s=STEP,
                                 memory_peak_bytes=Samples(timestamps_s=ts[part], values=mem[part]),
                                 memory_interval_s=STEP))
        return state

    day, month = fold(24), fold(30 * 24)
    for name in ("overrun", "underrun", "weight", "levels", "recs", "realised"):
        for resource in ("cpu", "memory"):
            a, b = getattr(getattr(day, resource), name), getattr(getattr(month, resource), name)
            assert a.shape == b.shape
    assert month.cpu.overrun.shape == (3, month.cpu.scheme.num_buckets)
    assert len(json.dumps(month.to_checkpoint())) < 1.5 * len(json.dumps(day.to_checkpoint())) + 50_000


def test_an_oom_raises_memory_above_the_killed_limit() -> None:
    """A kill at a 1 GiB limit floors the memory target at 1.2 GiB (the bump) for the next day."""
    strategy = get_strategy("autopilot-ml", **TINY)
    state = strategy.new_state()
    ts, cpu, mem = usage(24, seed=5)
    from recommender.model.types import OomKill

    kill = OomKill(timestamp_s=float(ts[-1]), memory_limit_bytes=2**30, memory_request_bytes=2**30)
    state.add(UsageBatch(cpu_cores=Samples(timestamps_s=ts, values=cpu), cpu_interval_s=STEP,
                         memory_peak_bytes=Samples(timestamps_s=ts, values=np.minimum(mem, 2**30)),
                         memory_interval_s=STEP, oom_kills=(kill,)))
    rec, _ = strategy.recommend(state, now_s=float(ts[-1] + STEP), policy=ContainerPolicy(),
                                current=CurrentResources(requests=Resources(memory_bytes=2**30),
                                                         limits=Resources(memory_bytes=2**30)))
    assert rec.target.memory_bytes is not None and rec.target.memory_bytes >= 1.2 * 2**30
