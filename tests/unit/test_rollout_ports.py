"""The executor reads a snapshot only through ``PassSnapshot``: the quotas and the server's features it plans
with, and the policy errors that stop a pass, are declared fields handed on as they are."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from updater.answers import ServerFeatures, features_for
from updater.kube.policy_crd import PolicyError
from updater.observe import PodObservation
from updater.policy.analysis import WorkloadAnalyses
from updater.policy.types import Plan, PodView, QuotaView, RolloutPolicy
from updater.rollout.act.executor import Executor
from updater.rollout.act.grouping import group_by_policy
from updater.rollout.machine.journal import Rollout


@dataclass(frozen=True, slots=True, kw_only=True)
class Snap:
    pods: tuple[PodView, ...] = ()
    observations: dict[str, PodObservation] = field(default_factory=dict)
    targets: tuple[()] = ()
    hpas: tuple[()] = ()
    limit_ranges: tuple[()] = ()
    nodes: tuple[()] = ()
    approvals: frozenset[tuple[str, str, str]] = frozenset()
    analyses: dict[tuple[str, str, str], WorkloadAnalyses] = field(default_factory=dict)
    pod_level_resize_supported: bool = True
    policies: tuple[RolloutPolicy, ...] = (RolloutPolicy(name="default"),)
    policy_errors: tuple[str, ...] = ()
    quotas: tuple[QuotaView, ...] = ()
    features: ServerFeatures | None = None


class NoJournals:
    def list(self) -> list[Rollout]:
        return []

    def create(self, r: Rollout) -> Rollout:
        raise AssertionError("nothing is planned, so nothing is created")

    def save(self, r: Rollout) -> Rollout:
        raise AssertionError("nothing is planned, so nothing is saved")

    def retry_requested(self, name: str) -> bool:
        return False


def test_the_planner_gets_the_snapshots_quotas_and_features() -> None:
    quota = QuotaView(namespace="ns", name="compute", hard={"requests.cpu": 2000}, used={"requests.cpu": 1500})
    features = features_for(1, 37)
    seen: list[dict[str, Any]] = []

    def planner(**kw: Any) -> Plan:
        seen.append(kw)
        return Plan(decisions=(), batches=())

    ex = Executor(read=lambda: Snap(quotas=(quota,), features=features), planner=planner, store=NoJournals(),
                  resizer=None, recorder=None, policy=group_by_policy)  # type: ignore[arg-type]
    ex.plan(0.0)
    assert [(kw["quotas"], kw["features"]) for kw in seen] == [((quota,), features)]


def test_a_policy_that_did_not_parse_stops_the_grouping() -> None:
    with pytest.raises(PolicyError, match="1 ResizePolicy object"):
        group_by_policy(Snap(policy_errors=("policy broken: bad steps",)))
    assert [p.name for p, _ in group_by_policy(Snap())] == ["default"]
