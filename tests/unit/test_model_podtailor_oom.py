"""The OOM bump of ``podtailor``: its settings (``OomHandling``; a bad value is refused before any replay or run),
and under an OOM budget its hold and the escalation of repeated kills (``RiskBudget.oom_hold_s``, ``oom_repeat``)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from podtailor.resources import CurrentResources, Resources
from recommender.model.podtailor import PodtailorStrategy
from recommender.model.podtailor_budget import OOM_HOLD_MAX_S, RiskBudget
from recommender.model.podtailor_memory_parts import OomHandling
from recommender.model.podtailor_params import PodtailorParams
from recommender.model.podtailor_state import PodtailorState
from recommender.model.registry import get_strategy
from recommender.model.types import ContainerPolicy, OomKill, Samples, UsageBatch


@pytest.mark.parametrize("bad", [{"bump_ratio": 0.9}, {"bump_ratio": math.nan}, {"bump_ratio": math.inf},
                                 {"min_bump_bytes": -1.0}, {"min_bump_bytes": math.inf}, {"window_s": math.nan}])
def test_bad_settings_are_refused(bad: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="oom:"):
        OomHandling(**bad)
    with pytest.raises(ValueError, match="oom:"):
        get_strategy("podtailor", **{f"oom.{k}": v for k, v in bad.items()})


def test_the_defaults_and_vpas_bump_are_accepted() -> None:
    assert OomHandling() == OomHandling(min_bump_bytes=100.0 * 1024 * 1024, bump_ratio=1.2, window_s=86400.0)
    assert OomHandling(min_bump_bytes=0.0, bump_ratio=1.0, window_s=0.0).bump_ratio == 1.0  # the edges: no bump


# Under an OOM budget (``RiskBudget.oom_hold_s``, ``oom_repeat_ratio``): a kill's bump is held for the budget's
# interval between kills, and a kill that follows others within that hold bumps further.

DAY, GIB, NOW = 86400.0, float(1024**3), 1_700_006_400.0


def _killed(strategy: PodtailorStrategy, kills_at_days: list[float], limit_gib: float = 4.0) -> PodtailorState:
    """A container using 1 GiB for 30 days, OOM-killed at a limit of ``limit_gib`` on each of the days given."""
    state = strategy.new_state()
    assert isinstance(state, PodtailorState)
    ts = NOW + 300.0 * np.arange(30 * 288)
    kills = tuple(OomKill(timestamp_s=NOW + d * DAY, memory_limit_bytes=int(limit_gib * GIB)) for d in kills_at_days)
    state.add(UsageBatch(cpu_cores=Samples(timestamps_s=ts, values=np.full(ts.size, 0.2)), cpu_interval_s=300.0,
                         memory_peak_bytes=Samples(timestamps_s=ts, values=np.full(ts.size, GIB)),
                         memory_interval_s=300.0, oom_kills=kills))
    return state


def test_the_hold_is_the_budgets_interval_between_kills_within_the_bumps_day_and_90_days() -> None:
    assert RiskBudget().oom_hold_s(DAY) == DAY  # no OOM budget: the bump's own window
    assert RiskBudget(cpu_over_share=0.01).oom_hold_s(DAY) == DAY
    assert RiskBudget(oom_per_month=0.5).oom_hold_s(DAY) == pytest.approx(60 * DAY)  # 1 / 0.5 months
    assert RiskBudget(oom_per_month=2.0).oom_hold_s(DAY) == pytest.approx(15 * DAY)
    assert RiskBudget(oom_per_month=0.1).oom_hold_s(DAY) == OOM_HOLD_MAX_S == 90 * DAY  # 300 days: capped
    assert RiskBudget(oom_per_month=100.0).oom_hold_s(DAY) == DAY  # 7.2 hours: never shorter than the bump's
    assert RiskBudget(oom_per_month=0.5, oom_hold_factor=0.0).oom_hold_s(DAY) == DAY
    assert RiskBudget(oom_per_month=0.5).oom_repeat() == 1.5 and RiskBudget(cpu_over_share=0.01).oom_repeat() == 1.0


@pytest.mark.parametrize("bad", [{"oom_repeat_ratio": 0.9}, {"oom_repeat_ratio": math.nan},
                                 {"oom_repeat_ratio": math.inf}, {"oom_hold_factor": -1.0},
                                 {"oom_hold_factor": math.nan}])
def test_bad_hold_and_repeat_settings_are_refused(bad: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="budget:"):
        RiskBudget(oom_per_month=1.0, **bad)  # type: ignore[arg-type]


def test_repeated_kills_within_the_hold_escalate_the_bump_up_to_four_times() -> None:
    state = _killed(PodtailorStrategy(PodtailorParams()), [1.0, 3.0, 5.0, 7.0])
    bump = 1.2 * 4 * GIB  # VPA's ratio on the 4 GiB limit each kill was at
    assert state.oom_floor(NOW + 1.5 * DAY) == pytest.approx(bump)  # the bump's own day, as before
    assert state.oom_floor(NOW + 2.5 * DAY) is None
    hold = 60 * DAY
    # within a 60-day hold the first kill's bump is still in force at day 2.5, and each later kill follows
    # 1, 2, 3 others: x1.5, x2.25, x3.375
    assert state.oom_floor(NOW + 2.5 * DAY, hold_s=hold, repeat_ratio=1.5) == pytest.approx(bump)
    assert state.oom_floor(NOW + 4 * DAY, hold_s=hold, repeat_ratio=1.5) == pytest.approx(bump * 1.5)
    assert state.oom_floor(NOW + 20 * DAY, hold_s=hold, repeat_ratio=1.5) == pytest.approx(bump * 1.5**3)
    assert state.oom_floor(NOW + 20 * DAY, hold_s=hold, repeat_ratio=2.0) == pytest.approx(bump * 4)  # 8: capped
    assert state.oom_floor(NOW + 20 * DAY, hold_s=hold) == pytest.approx(bump)  # ratio 1: the largest bump alone
    assert state.oom_floor(NOW + 67.5 * DAY, hold_s=hold, repeat_ratio=1.5) is None  # past the last kill's hold
    # kills 2 days apart held 1 day only: none follows another within its hold
    assert state.oom_floor(NOW + 7.5 * DAY, hold_s=DAY, repeat_ratio=1.5) == pytest.approx(bump)


def test_the_state_keeps_the_newest_bumps_of_the_longest_hold() -> None:
    state = _killed(PodtailorStrategy(PodtailorParams()), [0.01 * i for i in range(100)])
    assert len(state.oom_bumps) == 64 and state.oom_bumps[0][0] == pytest.approx(NOW + 0.36 * DAY)
    later = PodtailorState(PodtailorParams())
    for day in (0.0, 50.0, 100.0):  # separate batches: each prunes what is older than 90 days before its kill
        later.add(UsageBatch(cpu_cores=Samples(timestamps_s=np.array([NOW + day * DAY]), values=np.array([0.1])),
                             cpu_interval_s=300.0, memory_peak_bytes=Samples(
                                 timestamps_s=np.array([NOW + day * DAY]), values=np.array([GIB])),
                             memory_interval_s=300.0, oom_kills=(OomKill(timestamp_s=NOW + day * DAY),)))
    assert [round((t - NOW) / DAY) for t, _ in later.oom_bumps] == [50, 100]


def test_under_an_oom_budget_the_target_keeps_the_bump_for_the_hold() -> None:
    policy, cur = ContainerPolicy(), CurrentResources(requests=Resources(cpu_millicores=200, memory_bytes=int(GIB)),
                                                      limits=Resources(cpu_millicores=400, memory_bytes=int(GIB)))
    held = PodtailorStrategy(PodtailorParams(budget=RiskBudget(oom_per_month=0.5)))
    alone = PodtailorStrategy(PodtailorParams(budget=RiskBudget(cpu_over_share=0.01)))
    targets = {}
    for name, strategy in (("held", held), ("alone", alone)):
        state = _killed(strategy, [20.0])
        rec, _ = strategy.recommend(state, now_s=NOW + 29.9 * DAY, policy=policy, current=cur)
        targets[name] = rec.target.memory_bytes, rec.reasons
    # 10 days after the kill at 4 GiB: under 0.5 kills a month still the bump's 4.8 GiB; without an OOM budget
    # the bump's day is long past and the 1 GiB of usage sets the target
    assert targets["held"][0] == pytest.approx(4.8 * GIB, rel=0.01) and "memory: OOM bump" in targets["held"][1]
    assert targets["alone"][0] is not None and targets["alone"][0] < 2 * GIB
    assert "memory: OOM bump" not in targets["alone"][1]


def test_a_checkpoints_bumps_are_kept_finite_sorted_and_bounded() -> None:
    state = _killed(PodtailorStrategy(PodtailorParams()), [1.0])
    data = state.to_checkpoint()
    data["oom_bumps"] = [[NOW + 2 * DAY, 2 * GIB], [math.nan, GIB], [NOW, math.inf], [NOW, -1.0], [NOW, 0.0],
                         [NOW + DAY, GIB]]
    restored = PodtailorState(PodtailorParams())
    restored.restore_from(data)
    assert restored.oom_bumps == [(NOW + DAY, GIB), (NOW + 2 * DAY, 2 * GIB)]  # the sizes alone, in time order
    data["oom_bumps"] = [[NOW + i, GIB + i] for i in range(1000)]
    restored.restore_from(data)
    assert len(restored.oom_bumps) == 64 and restored.oom_bumps[0] == (NOW + 936, GIB + 936)
    assert restored.oom_floor(NOW + 999) == GIB + 999
    # and, as a kill's own bookkeeping keeps them, only those within the longest hold (90 days) of the newest
    data["oom_bumps"] = [[NOW, 3 * GIB], [NOW + 91 * DAY, GIB]]
    restored.restore_from(data)
    assert restored.oom_bumps == [(NOW + 91 * DAY, GIB)]
