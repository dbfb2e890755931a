"""Unit tests of the ``RecommenderCheckpoint`` spec the engine writes and the engine and ``report`` restore
(``recommender.kube.checkpoint``), and of ``recommend.fold_new``, how restored states grow."""

from __future__ import annotations

import numpy as np
import pytest

from podtailor.resources import CurrentResources
from recommender.kube.checkpoint import (
    CHECKPOINT_VERSION,
    UnusableCheckpoint,
    checkpoint_spec,
    owned_by,
    read_start,
    restore,
)
from recommender.model.registry import get_strategy
from recommender.model.types import ContainerKey, ContainerPolicy, Samples, UsageBatch
from recommender.recommend import fold_new

NOW = 1_700_000_000.0
HOUR = 3600.0
GIB = float(2**30)
KEY = ContainerKey(namespace="ns", workload_kind="Deployment", workload_name="web", container="app")


def hours(n: int, end_s: float, cores: float, memory_bytes: float) -> UsageBatch:
    ts = (end_s - HOUR * np.arange(n)[::-1]).astype(np.float64)
    return UsageBatch(cpu_cores=Samples(timestamps_s=ts, values=np.full(n, cores)), cpu_interval_s=HOUR,
                      memory_peak_bytes=Samples(timestamps_s=ts, values=np.full(n, memory_bytes)),
                      memory_interval_s=HOUR)


def test_a_written_checkpoint_restores_the_states_and_the_history_time() -> None:
    strategy = get_strategy("podtailor")
    state = strategy.new_state()
    state.add(hours(48, NOW, 0.3, 1 * GIB))
    spec = checkpoint_spec(strategy, {"app": state}, NOW - 120.0)
    assert spec["strategy"] == "podtailor" and spec["version"] == CHECKPOINT_VERSION
    assert spec["historyUntil"] == "2023-11-14T22:11:20Z"  # 1_700_000_000 - 120 s, in UTC

    restored = restore({"spec": spec}, strategy)
    assert restored.history_until_s == NOW - 120.0 and set(restored.states) == {"app"}
    policy, current = ContainerPolicy(containers_in_pod=1), CurrentResources()
    before, _ = strategy.recommend(state, now_s=NOW, policy=policy, current=current)
    after, _ = strategy.recommend(restored.states["app"], now_s=NOW, policy=policy, current=current)
    assert after == before and after.target.memory_bytes is not None


@pytest.mark.parametrize(("change", "stale"), [
    ({"strategy": "vpa"}, True),
    ({"version": "0"}, True),
    ({"containers": [{"name": "app"}]}, False),  # no state
    ({"containers": "app"}, False),
    ({"historyUntilSeconds": "soon"}, False),
    ({"historyUntilSeconds": True}, False),
    ({"historyUntilSeconds": None}, False),
])
def test_a_checkpoint_of_another_strategy_or_version_or_unreadable_is_not_used(change: dict[str, object],
                                                                               stale: bool) -> None:
    strategy = get_strategy("podtailor")
    spec = {**checkpoint_spec(strategy, {"app": strategy.new_state()}, NOW), **change}
    with pytest.raises(UnusableCheckpoint) as caught:
        restore({"spec": spec}, strategy)
    assert caught.value.stale is stale


def test_a_checkpoint_without_a_history_time_reads_the_whole_window_again() -> None:
    strategy = get_strategy("podtailor")
    spec = checkpoint_spec(strategy, {}, NOW)
    del spec["historyUntilSeconds"]
    assert restore({"spec": spec}, strategy).history_until_s is None
    assert read_start(None, NOW, 8 * 86400.0) == NOW - 8 * 86400.0
    assert read_start(NOW - 600.0, NOW, 8 * 86400.0) == NOW - 600.0


def test_only_the_vpa_that_owns_a_checkpoint_restores_it() -> None:
    obj = {"metadata": {"ownerReferences": [{"kind": "VerticalPodAutoscaler", "uid": "u-1"}]}}
    assert owned_by(obj, "u-1")
    assert not owned_by(obj, "u-2")  # an earlier VPA of the same name
    assert not owned_by({"metadata": {}}, "u-1")


def test_fold_new_grows_a_restored_state_and_starts_one_for_a_new_container() -> None:
    strategy = get_strategy("podtailor")
    restored = strategy.new_state()
    restored.add(hours(24, NOW - 2 * HOUR, 0.3, 1 * GIB))
    states = {"app": restored}
    sidecar = ContainerKey(namespace="ns", workload_kind="Deployment", workload_name="web", container="proxy")
    fold_new(strategy, states, {"app": KEY, "proxy": sidecar}, {KEY: hours(2, NOW, 0.3, 1 * GIB)})
    assert states["app"] is restored and restored.last_sample_s == NOW
    assert set(states) == {"app", "proxy"} and states["proxy"].last_sample_s is None  # no samples yet
