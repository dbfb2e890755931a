"""Canary analyses of a batch (pure): which checks a batch runs, when each measures, and when one fails it.

Owns the checks of one batch, one per analysis and workload of the batch: the policy's analyses apply to every
workload, a workload's own analyses (its annotation) to that workload alone, each rendered with the workload's
namespace and name and the batch's pods of it (``policy.analysis``). A workload whose annotation cannot be
used, or whose query cannot be rendered, is a ``problem``: the batch fails before anything is sent. The
timing: a baseline before the batch is sent (re-taken on every pass while the batch waits, so it is the
newest before the first resize), then a measurement every ``interval`` from the start of the bake, and one
at its end if none was taken during it. The counting follows Argo Rollouts' ``failureLimit``: the check fails
the batch at failure ``failure_limit + 1``. The executor measures (``rollout.act.analysis``) and hands the
first failure to the state machine (``advance(gate_failure=...)``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from updater.policy.analysis import Analysis, Verdict, WorkloadAnalyses, failed
from updater.policy.selectors import QueryError
from updater.rollout.machine.journal import BatchRecord, Rollout

WorkloadKey = tuple[str, str, str]


@dataclass(frozen=True, slots=True, kw_only=True)
class Check:
    """One analysis for one workload of a batch, its query rendered."""

    analysis: Analysis
    workload: WorkloadKey
    query: str

    @property
    def key(self) -> str:
        namespace, kind, name = self.workload
        return f"{self.analysis.name} on {kind} {namespace}/{name}"

    @property
    def source(self) -> str:
        """workload (its own annotation) or policy: a bounded metric label."""
        return "workload" if self.analysis.namespaced else "policy"


@dataclass(frozen=True, slots=True, kw_only=True)
class Tally:
    """A check's measurements in one batch so far."""

    baseline: float | None = None
    failures: int = 0
    measured: int = 0
    last_s: float | None = None
    """When the last measurement of the bake was taken (None: none yet)."""


def checks_for(r: Rollout, batch: int, policy_analyses: tuple[Analysis, ...],
               own: Mapping[WorkloadKey, WorkloadAnalyses]) -> tuple[list[Check], list[str]]:
    """The batch's checks, and the problems that keep it from being sent (one line each)."""
    pods: dict[WorkloadKey, list[str]] = {}
    for e in r.entries_of(batch):
        pods.setdefault(e.workload, []).append(e.pod)
    return checks_of(pods, policy_analyses, own)


def checks_of(pods: Mapping[WorkloadKey, list[str]], policy_analyses: tuple[Analysis, ...],
              own: Mapping[WorkloadKey, WorkloadAnalyses]) -> tuple[list[Check], list[str]]:
    """The checks of a batch of ``pods`` by workload (also what ``plan`` lists), and the problems."""
    checks: list[Check] = []
    problems: list[str] = []
    for workload in sorted(pods):
        mine = own.get(workload, WorkloadAnalyses())
        if mine.error:
            problems.append(mine.error)
            continue
        for analysis in (*policy_analyses, *mine.analyses):
            try:
                query = analysis.render(namespace=workload[0], workload=workload[2], pods=pods[workload])
            except QueryError as err:
                problems.append(f"analysis {analysis.name} on {workload[1]} {workload[0]}/{workload[2]}: {err}")
                continue
            checks.append(Check(analysis=analysis, workload=workload, query=query))
    return checks, problems


def bake_start_s(batch: BatchRecord) -> float | None:
    return None if batch.bake_until_s is None else batch.bake_until_s - batch.bake_s


def due(check: Check, tally: Tally, batch: BatchRecord, now_s: float) -> bool:
    """A measurement is due: an interval after the bake's start or the last measurement, or the bake is over
    and none was taken during it."""
    start = bake_start_s(batch)
    if start is None or batch.bake_until_s is None:
        return False
    if now_s >= batch.bake_until_s and tally.measured == 0:
        return True
    last = tally.last_s if tally.last_s is not None else start
    return now_s - last >= check.analysis.interval_s


def record(tally: Tally, verdict: Verdict, now_s: float) -> Tally:
    """The tally after one measurement: a failed one counts; a skipped one (onError Skip) only moves the clock."""
    return replace(tally, failures=tally.failures + (verdict.passed is False), measured=tally.measured + 1,
                   last_s=now_s)


def has_failed(check: Check, tally: Tally) -> bool:
    return failed(check.analysis, tally.failures)


def failure_text(check: Check, verdict: Verdict, tally: Tally) -> str:
    """The reason a failed check gives the journal and the Events: the query, the value and the bound."""
    value = "no value" if verdict.value is None else f"{verdict.value:g}"
    bound = "no bound" if verdict.bound is None else f"{verdict.bound:g}"
    return (f"analysis {check.key} failed: {verdict.reason}; value {value}, threshold "
            f"{check.analysis.condition.text()} = {bound}; {tally.failures} failed measurements > failureLimit "
            f"{check.analysis.failure_limit}; query: {check.query}")
