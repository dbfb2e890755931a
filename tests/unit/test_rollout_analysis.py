"""Unit tests for canary analyses during a rollout: the checks of a batch, the baseline before it is sent,
the measurements during the bake, the failure limit and the error policy, and what a failure does to the
rollout (``advance(gate_failure=...)``: the batch fails, its pods are restored, the pool halts)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from prometheus_client import CollectorRegistry

from podtailor.promquery import QueryFailed, Sample
from tests.builders.rollout import NEW, NOW, OLD, entry, obs, rollout
from updater.metrics import UpdaterMetrics
from updater.policy.analysis import Analysis, Condition, OnError, Operator, WorkloadAnalyses
from updater.policy.types import RolloutPolicy
from updater.rollout.act.analysis import AnalysisRunner
from updater.rollout.machine import lifecycle as machine
from updater.rollout.machine.analysis import checks_for
from updater.rollout.machine.journal import BatchPhase, EntryState, Phase, Rollout

LATENCY = Analysis(name="p99", query="max(latency{namespace={{namespace}}, pod=~{{pods}}})",
                   condition=Condition(operator=Operator.LE, baseline_ratio=1.5), interval_s=30.0)
WEB = ("ns", "Deployment", "web")


class FakePrometheus:
    """Answers each query with the next value of a script (a float, None for no series, or an error)."""

    def __init__(self, *answers: float | QueryFailed | None) -> None:
        self.answers = list(answers)
        self.queries: list[str] = []

    def query(self, text: str, at_s: float | None = None) -> tuple[Sample, ...]:
        self.queries.append(text)
        answer = self.answers.pop(0)
        if isinstance(answer, QueryFailed):
            raise answer
        return () if answer is None else (Sample(labels={}, value=answer),)


def pending() -> Rollout:
    return rollout(entry("a", 0), entry("b", 1))


def baking(r: Rollout, bake_start: float) -> Rollout:
    """Batch 0 verified, baking 60 s from ``bake_start``."""
    b = replace(r.batches[0], phase=BatchPhase.BAKING, bake_until_s=bake_start + 60.0)
    entries = tuple(replace(e, state=EntryState.VERIFIED, applied_s=NOW) if e.batch == 0 else e for e in r.entries)
    return replace(r, phase=Phase.BAKING, batches=(b, *r.batches[1:]), entries=entries)


def policy(*analyses: Analysis) -> RolloutPolicy:
    return RolloutPolicy(name="default", analyses=analyses)


def test_a_batch_runs_the_policys_and_the_workloads_own_analyses_rendered_for_its_pods() -> None:
    own = Analysis(name="errors", query="sum(rate(errors_total[1m]))", namespaced=True,
                   condition=Condition(operator=Operator.LT, threshold=0.01))
    checks, problems = checks_for(pending(), 0, (LATENCY,), {WEB: WorkloadAnalyses(analyses=(own,))})
    assert problems == []
    assert [(c.key, c.query, c.source) for c in checks] == [
        ("p99 on Deployment ns/web", 'max(latency{namespace="ns", pod=~"a"})', "policy"),
        ("errors on Deployment ns/web", 'sum(rate(errors_total{namespace="ns"}[1m]))', "workload")]


def test_a_workload_whose_annotation_is_unusable_fails_its_batch_before_anything_is_sent() -> None:
    runner = AnalysisRunner(FakePrometheus())
    why, _ = runner.gate(pending(), policy(), {WEB: WorkloadAnalyses(error="Deployment ns/web: not JSON")}, NOW)
    assert why == "analyses cannot be used: Deployment ns/web: not JSON"
    r, effects = machine.advance(pending(), {"ns/a": obs("a", OLD)}, NOW, gate_failure=why)
    assert r.phase == Phase.ROLLING_BACK and r.batches[0].phase == BatchPhase.FAILED
    assert not any(isinstance(e, machine.Resize) for e in effects)  # nothing sent
    r, _ = machine.advance(r, {"ns/a": obs("a", OLD)}, NOW + 1)
    assert r.phase == Phase.HALTED and "not JSON" in r.message


def test_baseline_before_the_batch_then_a_rise_fails_the_batch_with_query_value_and_threshold() -> None:
    prom = FakePrometheus(0.100, 0.140, 0.160)  # baseline, then at +30 s and +60 s of the bake
    registry = CollectorRegistry()
    runner = AnalysisRunner(prom, UpdaterMetrics(registry))
    assert runner.gate(pending(), policy(LATENCY), {}, NOW) == ("", [])  # PENDING: the baseline, 0.100
    r = baking(pending(), NOW + 10)
    assert runner.gate(r, policy(LATENCY), {}, NOW + 20) == ("", [])  # not due before an interval
    assert runner.gate(r, policy(LATENCY), {}, NOW + 40) == ("", [])  # 0.140 <= 1.5 x 0.100 = 0.150
    why, events = runner.gate(r, policy(LATENCY), {}, NOW + 70)  # 0.160 > 0.150: the first failure, limit 0
    assert "analysis p99 on Deployment ns/web failed" in why
    assert "value 0.16" in why and "threshold <= 1.5 x baseline = 0.15" in why
    assert 'query: max(latency{namespace="ns", pod=~"a"})' in why
    assert [(e.reason, e.kind, e.name, e.warning) for e in events] == [("AnalysisFailed", "Deployment", "web", True)]
    assert len(prom.queries) == 3
    assert registry.get_sample_value("podtailor_updater_analysis_failed_total", {"source": "policy"}) == 1
    for outcome, n in (("pass", 1), ("fail", 1)):
        assert registry.get_sample_value("podtailor_updater_analysis_measurements_total",
                                         {"source": "policy", "outcome": outcome}) == n
    failed, _ = machine.advance(r, {"ns/a": obs("a", NEW)}, NOW + 70, gate_failure=why)
    assert failed.phase == Phase.ROLLING_BACK and why in failed.message


def test_failure_limit_tolerates_that_many_failed_measurements() -> None:
    lenient = replace(LATENCY, condition=Condition(operator=Operator.LE, threshold=0.1), failure_limit=1)
    runner = AnalysisRunner(FakePrometheus(0.2, 0.2))
    r = baking(pending(), NOW)
    assert runner.gate(r, policy(lenient), {}, NOW + 30)[0] == ""  # 1 failure, limit 1: tolerated
    assert "2 failed measurements > failureLimit 1" in runner.gate(r, policy(lenient), {}, NOW + 60)[0]


@pytest.mark.parametrize("answer", [None, QueryFailed("prometheus answered 400: bad_data: parse error",
                                                      temporary=False)])
def test_error_or_no_data_fails_under_fail_and_warns_under_skip(answer: QueryFailed | None) -> None:
    fixed = replace(LATENCY, condition=Condition(operator=Operator.LE, threshold=1.0))
    r = baking(pending(), NOW)
    why, _ = AnalysisRunner(FakePrometheus(answer)).gate(r, policy(fixed), {}, NOW + 30)
    assert "(onError Fail)" in why and "value no value" in why
    skipping = replace(fixed, on_error=OnError.SKIP)
    why, events = AnalysisRunner(FakePrometheus(answer)).gate(r, policy(skipping), {}, NOW + 30)
    assert why == ""
    assert [e.reason for e in events] == ["AnalysisSkipped"] and "onError Skip" in events[0].message


def test_a_ratio_check_without_its_baseline_is_not_a_pass() -> None:
    runner = AnalysisRunner(FakePrometheus(0.1))  # e.g. an updater restarted during the bake
    why, _ = runner.gate(baking(pending(), NOW), policy(LATENCY), {}, NOW + 30)
    assert "no baseline value from before the batch" in why


def test_a_bake_shorter_than_the_interval_still_measures_once_at_its_end() -> None:
    runner = AnalysisRunner(FakePrometheus(5.0))
    slow = replace(LATENCY, condition=Condition(operator=Operator.LE, threshold=1.0), interval_s=600.0)
    r = baking(pending(), NOW)
    assert runner.gate(r, policy(slow), {}, NOW + 30)[0] == ""  # not due yet
    assert "failed" in runner.gate(r, policy(slow), {}, NOW + 60)[0]  # the bake's end: measured


def test_flat_series_passes_and_the_next_batch_gets_its_baseline_before_it_is_sent() -> None:
    prom = FakePrometheus(0.100, 0.101, 0.099, 0.098, 0.100)  # the last two: batch 2's baseline, then its bake
    runner = AnalysisRunner(prom)
    runner.gate(pending(), policy(LATENCY), {}, NOW)
    r = baking(pending(), NOW)
    assert runner.gate(r, policy(LATENCY), {}, NOW + 30) == ("", [])
    # The bake is over: advance sends batch 2 in this same step, so its baseline is taken now.
    assert runner.gate(r, policy(LATENCY), {}, NOW + 60) == ("", [])
    assert prom.queries[-1] == 'max(latency{namespace="ns", pod=~"b"})'
    nxt, effects = machine.advance(r, {"ns/a": obs("a", NEW), "ns/b": obs("b", OLD)}, NOW + 60)
    assert nxt.batches[0].phase == BatchPhase.DONE and nxt.current_batch == 1
    assert [e.key for e in effects if isinstance(e, machine.Resize)] == ["ns/b"]
    b2 = replace(nxt.batches[1], phase=BatchPhase.BAKING, bake_until_s=NOW + 160)
    second = replace(nxt, phase=Phase.BAKING, batches=(nxt.batches[0], b2))
    assert runner.gate(second, policy(LATENCY), {}, NOW + 130) == ("", [])  # 0.100 <= 1.5 x 0.098
