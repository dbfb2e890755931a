"""Worked examples of canary batching: step arithmetic, ordering, disruption budget, per-pool cap, summary."""

from __future__ import annotations

from typing import Any

from podtailor.resize.types import QoS
from tests.builders.policy import GI, NOW, container, node, pod, run, wtarget
from updater.policy.batching import step_counts
from updater.policy.planner import plan, summary
from updater.policy.types import Action, CanaryStep, PodView, RolloutPolicy

LADDER = (0.0, 0.05, 0.25, 1.0)


def test_step_counts() -> None:
    assert step_counts(LADDER, 100) == [1, 5, 25, 100]
    assert step_counts(LADDER, 10) == [1, 2, 3, 10]  # ceil(0.5) = 1 -> at least one more than 1 -> 2
    assert step_counts(LADDER, 1) == [1, 1, 1, 1]
    assert step_counts((0.1,), 30) == [3]  # the rest goes into an extra batch (see below)
    assert step_counts((0.1, 1.0), 30) == [3, 30]  # 0.1 x 30 = 3.0000000000000004 in floats, still 3
    assert step_counts(LADDER, 0) == [0, 0, 0, 0]


def _pods(n: int, **kw: Any) -> list[PodView]:
    return [pod(f"web-{i}", created_s=NOW - 3600 - i, **kw) for i in range(n)]


def test_default_ladder_on_twenty_pods() -> None:
    # 20 pods: 1, then ceil(5% x 20) = 1 -> 2 total, then 25% = 5 total, then 20: batches 1, 1, 3, 15.
    result = run(_pods(20), [wtarget(replicas=20)])
    assert [len(b.pods) for b in result.batches] == [1, 1, 3, 15]
    assert [b.step for b in result.batches] == [0, 1, 2, 3]
    assert [b.bake_s for b in result.batches] == [300.0, 300.0, 600.0, 0.0]
    # Oldest pod first (web-19 was created first).
    assert result.batches[0].pods == ("shop/web-19",)


def test_ladder_ending_below_one_gets_an_extra_batch() -> None:
    # steps 0 and 0.25 on 8 pods: 1, then 2 total, then the other 6 in a batch repeating step 1.
    policy = RolloutPolicy(steps=(CanaryStep(fraction=0.0, bake_s=10.0), CanaryStep(fraction=0.25, bake_s=20.0)))
    result = run(_pods(8), [wtarget(replicas=8)], policy=policy)
    assert [(len(b.pods), b.step, b.bake_s) for b in result.batches] == [(1, 0, 10.0), (1, 1, 20.0), (6, 1, 20.0)]


def test_one_pod_gives_one_batch() -> None:
    result = run()
    assert len(result.batches) == 1 and result.batches[0].step == 0


def test_order_least_critical_first() -> None:
    guaranteed = [container(cpu=500, cpu_lim=500, mem=GI, mem_lim=GI)]
    pods = [pod("high", priority=1000), pod("guaranteed", containers=guaranteed),
            pod("young", created_s=NOW - 400), pod("old", created_s=NOW - 9000)]
    assert pods[1].qos == QoS.GUARANTEED
    policy = RolloutPolicy(steps=(CanaryStep(fraction=1.0, bake_s=0.0),))
    result = run(pods, [wtarget(replicas=4)], policy=policy)
    assert result.batches[0].pods == ("shop/old", "shop/young", "shop/guaranteed", "shop/high")


def test_disruption_budget_moves_restarts_to_later_batches() -> None:
    # 8 restarting pods of one 8-replica workload, budget 0.25: at most floor(0.25 x 8) = 2 restart at once.
    # Steps [0, 1.0]: 1 pod, then 7 pods -> 2 + 2 + 2 + 1, the extra batches repeat step 1.
    pods = _pods(8, containers=[container(policy={"cpu": "RestartContainer"})])
    policy = RolloutPolicy(steps=(CanaryStep(fraction=0.0, bake_s=60.0), CanaryStep(fraction=1.0, bake_s=120.0)))
    result = run(pods, [wtarget(replicas=8)], policy=policy)
    assert all(d.action == Action.RESIZE_RESTART for d in result.decisions)
    assert [len(b.pods) for b in result.batches] == [1, 2, 2, 2, 1]
    assert [b.step for b in result.batches] == [0, 1, 1, 1, 1]
    # Online pods are not limited by the budget.
    online = run(_pods(8), [wtarget(replicas=8)], policy=policy)
    assert [len(b.pods) for b in online.batches] == [1, 7]


def test_max_concurrent_per_pool_splits_a_step() -> None:
    # 5 online pods in one step with a cap of 2: pieces 2, 2, 1; only the last piece bakes.
    policy = RolloutPolicy(steps=(CanaryStep(fraction=1.0, bake_s=90.0),), max_concurrent_per_pool=2)
    result = run(_pods(5), [wtarget(replicas=5)], policy=policy)
    assert [len(b.pods) for b in result.batches] == [2, 2, 1]
    assert [b.step for b in result.batches] == [0, 0, 0]
    assert [b.bake_s for b in result.batches] == [0.0, 0.0, 90.0]


def test_pools_are_batched_separately_and_fallbacks_are_in_no_batch() -> None:
    pods = [pod("a-0", pool="a", node="na"), pod("a-1", pool="a", node="na", resize_pending="Infeasible"),
            pod("b-0", pool="b", node="nb")]
    result = run(pods, [wtarget(replicas=3)], nodes=[node("na", pool="a"), node("nb", pool="b")])
    assert [(b.pool, b.pods) for b in result.batches] == [("a", ("shop/a-0",)), ("b", ("shop/b-0",))]
    counts = summary(result)
    assert counts["pods"] == 3 and counts["batches"] == 2
    assert counts["actions"] == {"fallback": 1, "resize-online": 2}
    assert counts["pools"]["a"]["reasons"] == {"change": 1, "infeasible": 1}


def test_empty_snapshot() -> None:
    result = plan(pods=[], targets=[], hpas=[], limit_ranges=[], nodes=[], policy=RolloutPolicy(), now_s=NOW)
    assert result.decisions == () and result.batches == ()
    assert summary(result)["pods"] == 0


