"""The ``podtailor`` strategy replayed on a training subset equals the targets recorded before its refactoring.

Three series of the demo trace (Bitbrains Rnd, August 2013: VMs 1, 3 and 8, their first 10 days) are replayed hour
by hour (``backtest.replay``) with the default strategy, with and without a fleet, and with three non-default modes
(the fleet-wide absolute prices; no price, Autopilot's "low" class, the proportional CPU limit). Every applied
request and limit of every step must equal ``tests/data/golden/podtailor_replay.json``. That file holds values, not
logic: its first three variants were written at commit 9d9308b (the 52-field ``PodtailorParams``, before the
estimator was composed from parts) by running ``replay_all`` of this module for every variant of ``VARIANTS`` (with
the flat names of that commit, given in a comment beside each variant) and dumping the result with ``json.dumps``;
the fourth was written the same way when the CPU percentile calibration was folded into the risk budget
(2026-12-07), which changed that variant alone. A difference means the estimator's numbers changed, which a
refactoring must not do. A checkpoint written by that commit must also restore to the same recommendation.
"""

from __future__ import annotations

import json
from itertools import islice
from pathlib import Path
from typing import Any

import pytest

from podtailor.resources import CurrentResources, Resources
from recommender.backtest.replay import ReplayConfig, fleet_of, replay
from recommender.backtest.trace import Series, read_trace
from recommender.model.registry import get_strategy
from recommender.model.types import ContainerPolicy, FloatArray

DATA = Path(__file__).resolve().parents[1] / "data"
TRACE = DATA / "traces" / "bitbrains_rnd_2013-08_demo.csv.gz"
GOLDEN = DATA / "golden" / "podtailor_replay.json"
SERIES = 3
DAYS = 10.0

_RECORDED_LIMIT = {"cpu_limit.keep_ratio": False}
"""The percentile CPU limit as recorded: before its floor at the container's own limit:request ratio became the
default (``CpuLimit.keep_ratio``, issue #39 item 3), which changes the applied limits and, through what the
container may use, the requests; ``test_model_podtailor_cpu_limit.py`` tests that floor."""

VARIANTS: dict[str, tuple[dict[str, Any], bool]] = {
    "default, fleet": (_RECORDED_LIMIT, True),
    "default, no fleet": (_RECORDED_LIMIT, False),
    # recorded with cpu_over_request_cost_ratio, cpu_over_request_cost_fleet_ratio, memory_oom_cost_peak_hours,
    # memory_oom_cost_fleet_hours and memory_margin_jump_quantile at 0
    "absolute prices, fixed margin, fleet": ({"cpu_price.mode": "absolute", "memory_price.mode": "absolute",
                                              "memory_margin.mode": "fixed", **_RECORDED_LIMIT}, True),
    # recorded at the commit that removed the CPU percentile calibration (2026-12-07; the variant before,
    # "calibrated, ...", also had cpu_calibration.budget 0.002, whose recorded values no code can give now)
    "no price, low class, proportional limit, fleet": ({"cpu_price.mode": "off",
                                                          "memory.statistic": "low",
                                                          "cpu_limit.rule": "proportional"}, True),
}
"""Per variant: the strategy's overrides and whether the replay knows the fleet (the backtest does, the report
does not)."""


def _first_days(s: Series) -> Series:
    keep = s.timestamps_s < s.timestamps_s[0] + DAYS * 86400.0

    def cut(values: FloatArray | None) -> FloatArray | None:
        return None if values is None else values[keep]
    return Series(series_id=s.series_id, timestamps_s=s.timestamps_s[keep], cpu_cores=s.cpu_cores[keep],
                  memory_bytes=cut(s.memory_bytes), cpu_provisioned_cores=cut(s.cpu_provisioned_cores),
                  memory_provisioned_bytes=cut(s.memory_provisioned_bytes))


def replay_all(overrides: dict[str, Any], with_fleet: bool) -> dict[str, dict[str, list[float]]]:
    """Per series: the applied CPU/memory request and limit of every step (cores, bytes; inf: no limit)."""
    series = [_first_days(s) for s in islice(read_trace(TRACE), SERIES)]
    cfg = ReplayConfig()
    cfg = ReplayConfig(fleet=fleet_of(series, cfg)) if with_fleet else cfg
    out: dict[str, dict[str, list[float]]] = {}
    for s in series:
        plan = replay(s, get_strategy("podtailor", **overrides), cfg)
        out[s.series_id] = {"cpu_request": plan.cpu_request.tolist(), "cpu_limit": plan.cpu_limit.tolist(),
                            "memory_request": plan.memory_request.tolist(),
                            "memory_limit": plan.memory_limit.tolist()}
    return out


def _first_difference(got: list[float], want: list[float]) -> str:
    if len(got) != len(want):
        return f"{len(got)} steps, recorded {len(want)}"
    step = next((i for i, (a, b) in enumerate(zip(got, want, strict=True)) if a != b), None)
    return "equal" if step is None else f"step {step}: {got[step]!r}, recorded {want[step]!r}"


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_replay_equals_the_targets_recorded_before_the_refactoring(variant: str) -> None:
    recorded = json.loads(GOLDEN.read_text())[variant]
    got = replay_all(*VARIANTS[variant])
    assert sorted(got) == sorted(recorded) and len(got) == SERIES
    for series_id, values in recorded.items():
        assert sorted(got[series_id]) == sorted(values)
        for name, want in values.items():
            assert len(want) >= DAYS * 24 - 1  # a whole replay was recorded, not an empty one
            assert got[series_id][name] == want, f"{variant}, {series_id}, {name}: " \
                                                 f"{_first_difference(got[series_id][name], want)}"


CHECKPOINT = DATA / "golden" / "podtailor_checkpoint_v1.json"
"""A state written at commit 9d9308b (before the parameters were parts): 96 hourly samples ending at
1_700_000_000 (CPU 0.2 cores, 1.0 every fifth hour, + 0.01 x (i mod 7); memory 2 GiB, 4 GiB every 19th hour,
+ 1e6 x (i mod 11)), an OOM kill 10 h before the end at a 3 GiB limit, one recommendation made at the end with
requests 500m / 3Gi and limits 1 / 3Gi, then ``to_checkpoint()`` dumped with ``json.dumps``."""


def test_a_checkpoint_written_before_restores_to_the_same_recommendation() -> None:
    # Expected: what that commit's code recommended from this checkpoint an hour later, with the same current
    # resources (run by hand there: restore, then recommend at 1_700_003_600).
    strategy = get_strategy("podtailor")
    state = strategy.restore(json.loads(CHECKPOINT.read_text()))
    current = CurrentResources(requests=Resources(cpu_millicores=500, memory_bytes=3 * 2**30),
                               limits=Resources(cpu_millicores=1000, memory_bytes=3 * 2**30))
    rec, _ = strategy.recommend(state, now_s=1_700_003_600.0, policy=ContainerPolicy(), current=current)
    assert rec.target == Resources(cpu_millicores=292, memory_bytes=4520215661)
    assert rec.lower_bound == Resources(cpu_millicores=266, memory_bytes=2267566081)
    assert rec.upper_bound == Resources(cpu_millicores=1445, memory_bytes=4520215661)
    assert rec.limits == Resources(cpu_millicores=1231, memory_bytes=4520215661)
    assert rec.confidence == pytest.approx(0.5654761904761905, rel=1e-12)  # 3.958 days / 7
