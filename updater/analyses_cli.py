"""The updater's command line for canary analyses: the Prometheus flags, the startup check and what ``plan`` lists.

Owns ``--prometheus-url`` (and its timeout), building the ``AnalysisRunner`` from them, refusing at startup
(exit 2, before the first pass) a ResizePolicy whose analyses do not parse and analyses declared (by a policy
or a workload's annotation) while no ``--prometheus-url`` was given, and the analyses of each planned batch as
``plan`` shows them: their names, the workload, and the query as it would be sent.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping

from podtailor.runtime.cli import UsageError, duration_s
from updater.metrics import UpdaterMetrics
from updater.policy.analysis import WorkloadAnalyses
from updater.policy.types import Batch, Plan, RolloutPolicy
from updater.rollout.act.analysis import AnalysisRunner
from updater.rollout.act.ports import PassSnapshot
from updater.rollout.machine.analysis import checks_of

WorkloadKey = tuple[str, str, str]


def add_prometheus_flags(g: argparse._ArgumentGroup) -> None:
    g.add_argument("--prometheus-url", metavar="URL",
                   help="Prometheus the canary analyses query (its base URL, with any path prefix); required when "
                        "a ResizePolicy or a workload declares analyses")
    g.add_argument("--prometheus-timeout", type=duration_s, default=10.0, metavar="DURATION",
                   help="timeout of one analysis query (default: 10s)")


def runner_for(args: argparse.Namespace, metrics: UpdaterMetrics | None) -> AnalysisRunner | None:
    from podtailor.promquery import InstantQueries

    url = getattr(args, "prometheus_url", None)
    if not url:
        return None
    try:
        return AnalysisRunner(InstantQueries(url, timeout_s=args.prometheus_timeout), metrics)
    except ValueError as err:
        raise UsageError(f"--prometheus-url: {err}") from None


def check_at_startup(snap: PassSnapshot, has_prometheus: bool) -> None:
    """UsageError for a ResizePolicy whose analyses do not parse, or for analyses without a Prometheus."""
    bad = [e for e in snap.policy_errors if ": spec.analyses" in e]
    if bad:
        raise UsageError("ResizePolicy analyses cannot be used: " + "; ".join(bad))
    declared = [f"ResizePolicy {p.name}" for p in snap.policies if p.analyses]
    declared += [f"{kind} {ns}/{name}" for (ns, kind, name), w in sorted(snap.analyses.items()) if w.analyses]
    if declared and not has_prometheus:
        raise UsageError(f"canary analyses are declared ({', '.join(declared[:5])}) but no --prometheus-url was "
                         "given: the updater would have nothing to measure them with")


def batch_analyses(policy: RolloutPolicy, plan: Plan, batch: Batch,
                   own: Mapping[WorkloadKey, WorkloadAnalyses]) -> list[dict[str, str]]:
    """The analyses ``batch`` would run (name, workload, query as sent), and its problems (``error``)."""
    workload = {d.key: (d.namespace, d.workload_kind, d.workload_name) for d in plan.decisions}
    pods: dict[WorkloadKey, list[str]] = {}
    for key in batch.pods:
        if key in workload:
            pods.setdefault(workload[key], []).append(key.split("/", 1)[1])
    checks, problems = checks_of(pods, policy.analyses, own)
    rows = [{"name": c.analysis.name, "source": c.source, "workload": f"{c.workload[1]}/{c.workload[2]}",
             "condition": c.analysis.condition.text(), "query": c.query} for c in checks]
    return rows + [{"error": p} for p in problems]
