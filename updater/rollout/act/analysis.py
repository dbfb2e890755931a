"""Running canary analyses during a pass: baselines before a batch is sent, measurements during its bake.

Owns the measuring half of ``rollout.machine.analysis``: for an open rollout whose batch waits to be sent, the
baseline of each ratio check; for a baking batch, each due measurement, judged (``policy.analysis.judge``)
and counted. It returns the first failure (for ``advance(gate_failure=...)``) and the Events to record: a
Warning ``AnalysisFailed`` on the workload with the query, the value and the threshold; a Warning
``AnalysisSkipped`` when an error or an empty answer is skipped by the analysis' onError policy (never a
silent pass). Queries go through ``podtailor.promquery`` (``InstantQueries``) behind the ``Prometheus`` port.
A batch's baselines are taken while it waits to be sent, and when the bake before it ends (the state machine
then sends it in the same step). The tallies are kept in memory by rollout and batch: an updater restarted
during a bake starts counting again, and a ratio check of a batch whose baseline it did not take follows its
onError policy.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Protocol

from podtailor.promquery import QueryFailed, Sample
from updater.metrics import UpdaterMetrics
from updater.policy.analysis import Measurement, WorkloadAnalyses, baseline_of, judge
from updater.policy.types import RolloutPolicy
from updater.rollout.machine.analysis import Check, Tally, checks_for, due, failure_text, has_failed, record
from updater.rollout.machine.effects import Event
from updater.rollout.machine.journal import BatchPhase, Phase, Rollout

log = logging.getLogger("podtailor.updater")


class Prometheus(Protocol):
    """``podtailor.promquery.InstantQueries``."""

    def query(self, text: str, at_s: float | None = None) -> tuple[Sample, ...]: ...


class AnalysisRunner:
    def __init__(self, prometheus: Prometheus, metrics: UpdaterMetrics | None = None) -> None:
        self.prometheus = prometheus
        self.metrics = metrics
        self._tallies: dict[tuple[str, int, str], Tally] = {}

    def measure(self, check: Check) -> Measurement:
        try:
            return Measurement(values=tuple(s.value for s in self.prometheus.query(check.query)))
        except QueryFailed as err:
            return Measurement(error=str(err))

    def gate(self, r: Rollout, policy: RolloutPolicy | None, own: Mapping[tuple[str, str, str], WorkloadAnalyses],
             now_s: float) -> tuple[str, list[Event]]:
        """The rollout's current batch: a failure reason ("" for none) and the Events to record."""
        if r.phase not in (Phase.PROGRESSING, Phase.BAKING) or r.current_batch >= len(r.batches):
            return "", []
        batch = r.batches[r.current_batch]
        if batch.phase not in (BatchPhase.PENDING, BatchPhase.BAKING):
            return "", []
        analyses = policy.analyses if policy else ()
        checks, problems = checks_for(r, batch.index, analyses, own)
        if problems:
            return f"analyses cannot be used: {'; '.join(problems)}", []
        if batch.phase == BatchPhase.PENDING:
            self._baselines(r, batch.index, checks)
            return "", []
        failure, events = self._bake(r, batch.index, checks, now_s)
        nxt = batch.index + 1
        if failure or batch.bake_until_s is None or now_s < batch.bake_until_s or nxt >= len(r.batches):
            return failure, events
        # The bake is over: the state machine sends the next batch in this same step, so its baselines now.
        checks, problems = checks_for(r, nxt, analyses, own)
        if problems:
            return f"batch {nxt + 1}: analyses cannot be used: {'; '.join(problems)}", events
        self._baselines(r, nxt, checks)
        return "", events

    def _bake(self, r: Rollout, index: int, checks: list[Check], now_s: float) -> tuple[str, list[Event]]:
        """The due measurements of a baking batch: the first failure ("" for none), and the Events."""
        batch = r.batches[index]
        events: list[Event] = []
        for check in checks:
            key = (r.name, batch.index, check.key)
            tally = self._tallies.get(key, Tally())
            if not due(check, tally, batch, now_s):
                continue
            verdict = judge(check.analysis, self.measure(check), tally.baseline)
            tally = self._tallies[key] = record(tally, verdict, now_s)
            self._count(check, "pass" if verdict.passed else "fail" if verdict.passed is False else "skip")
            namespace, kind, name = check.workload
            fields = {"rollout": r.name, "batch": batch.index, "analysis": check.key, "reason": verdict.reason,
                      "failures": tally.failures}
            log.info("analysis measured", extra=fields)
            if verdict.passed is None:
                events.append(Event(namespace=namespace, pod=None, kind=kind, name=name, warning=True,
                                    reason="AnalysisSkipped", message=f"analysis {check.key}: {verdict.reason}; "
                                    f"measured again in {check.analysis.interval_s:.0f}s"))
            if has_failed(check, tally):
                why = failure_text(check, verdict, tally)
                if self.metrics is not None:
                    self.metrics.analysis_failed.labels(source=check.source).inc()
                events.append(Event(namespace=namespace, pod=None, kind=kind, name=name, warning=True,
                                    reason="AnalysisFailed", message=f"{why}; batch {batch.index + 1} of {r.name} "
                                    "is rolled back and its pool halted"))
                return why, events
        return "", events

    def _baselines(self, r: Rollout, batch: int, checks: list[Check]) -> None:
        """Each ratio check's value now, before the batch is sent (a fixed threshold needs none)."""
        for check in checks:
            if check.analysis.condition.baseline_ratio is None:
                continue
            baseline = baseline_of(check.analysis, self.measure(check))
            self._tallies[(r.name, batch, check.key)] = Tally(baseline=baseline)
            log.info("analysis baseline", extra={"rollout": r.name, "batch": batch, "analysis": check.key,
                                                 "baseline": baseline})

    def _count(self, check: Check, outcome: str) -> None:
        if self.metrics is not None:
            self.metrics.analysis_measurements.labels(source=check.source, outcome=outcome).inc()

    def forget(self, open_names: set[str]) -> None:
        """Drop the tallies of rollouts no longer open."""
        self._tallies = {k: v for k, v in self._tallies.items() if k[0] in open_names}
