"""The report as a versioned document: the dict behind the JSON and YAML formats (docs/report-schema.json).

Owns ``to_document`` and ``SCHEMA_VERSION``. Amounts are integers in their unit (``cpuMillicores``,
``memoryBytes``; null when unset), money is integer micro-units of ``prices.currency`` (``...Micros``), so
sums are exact; times are RFC 3339 UTC. Bump ``SCHEMA_VERSION`` (and the schema's ``$id``) on any change
that is not adding an optional field.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import asdict
from typing import Any

from podtailor.resources import CurrentResources, Resources
from recommender import __version__
from recommender.model.types import Recommendation
from recommender.report.types import (
    ContainerReport,
    Cost,
    Distribution,
    GroupSummary,
    PodLevelPlan,
    Report,
    UsageSummary,
    WorkloadReport,
)

SCHEMA_VERSION = "podtailor.io/report/v1"


def rfc3339(seconds: float) -> str:
    return dt.datetime.fromtimestamp(seconds, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def resources(res: Resources) -> dict[str, int | None]:
    return {"cpuMillicores": res.cpu_millicores, "memoryBytes": res.memory_bytes}


def current(res: CurrentResources) -> dict[str, Any]:
    return {"requests": resources(res.requests), "limits": resources(res.limits)}


def cost(c: Cost) -> dict[str, int]:
    return {"currentMicros": c.current, "recommendedMicros": c.recommended, "savingsMicros": c.savings,
            "increasesMicros": c.increases, "netMicros": c.net}


def _recommendation(rec: Recommendation | None) -> dict[str, Any] | None:
    if rec is None:
        return None
    return {"target": resources(rec.target), "lowerBound": resources(rec.lower_bound),
            "upperBound": resources(rec.upper_bound), "uncappedTarget": resources(rec.uncapped_target),
            "limits": resources(rec.limits), "confidence": round(rec.confidence, 4), "reasons": list(rec.reasons)}


def _distribution(d: Distribution | None) -> dict[str, Any] | None:
    if d is None:
        return None
    return {"samples": d.samples, "p50": d.p50, "p90": d.p90, "p95": d.p95, "p99": d.p99, "max": d.max,
            "histogram": {"top": d.top, "counts": list(d.counts)}}


def _usage(u: UsageSummary | None) -> dict[str, Any] | None:
    if u is None:
        return None
    return {"cpuMillicores": _distribution(u.cpu_millicores), "memoryBytes": _distribution(u.memory_bytes),
            "oomKills": u.oom_kills, "throttledFraction": u.throttled_fraction,
            "observedPodHours": round(u.observed_pod_hours, 6)}


def container(c: ContainerReport) -> dict[str, Any]:
    return {"name": c.name, "role": c.role.value, "current": current(c.current),
            "recommendation": _recommendation(c.recommendation), "planned": current(c.planned),
            "usage": _usage(c.usage), "cost": cost(c.cost),
            **({} if c.budget is None else {"riskBudget": asdict(c.budget)})}


def workload(w: WorkloadReport) -> dict[str, Any]:
    return {**({"cluster": w.cluster} if w.cluster else {}), "namespace": w.namespace, "kind": w.kind,
            "name": w.name, "pool": w.pool, "replicas": w.replicas,
            "runningPods": w.running_pods, "podHoursPerMonth": round(w.pod_hours_per_month, 6),
            "qos": {"current": w.qos_current, "planned": w.qos_planned},
            "disruption": {"action": w.disruption.value, "reason": w.disruption_reason,
                           "message": w.disruption_message},
            "risks": [{"flag": r.risk.value, "message": r.message} for r in w.risks],
            "cost": cost(w.cost), "vpa": w.vpa, "containers": [container(c) for c in w.containers],
            **({} if w.pod_level is None else {"podLevel": pod_level(w.pod_level)})}


def pod_level(p: PodLevelPlan) -> dict[str, Any]:
    """The template's pod-level resources, and the requests the updater would derive from the planned
    containers (the limits are left alone; ``refused`` says why the API server would refuse the plan)."""
    return {"current": current(p.current), "plannedRequests": resources(p.planned_requests), "refused": p.refused}


def group(g: GroupSummary) -> dict[str, Any]:
    return {"name": g.name, "workloads": g.workloads, "containers": g.containers, "cost": cost(g.cost)}


def _counts(values: list[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for v in values:
        out[v] = out.get(v, 0) + 1
    return dict(sorted(out.items()))


def to_document(report: Report) -> dict[str, Any]:
    return {
        "schemaVersion": SCHEMA_VERSION,
        "generator": {"name": "podtailor-recommender report", "version": __version__},
        "generatedAt": rfc3339(report.generated_s),
        "window": {"start": rfc3339(report.start_s), "end": rfc3339(report.end_s),
                   "seconds": round(report.end_s - report.start_s, 3)},
        "strategy": report.strategy,
        "settings": dict(report.settings),
        "prices": dict(report.prices),
        "workloads": [workload(w) for w in report.workloads],
        "summary": {
            "total": group(report.total),
            "namespaces": [group(g) for g in report.namespaces],
            "pools": [group(g) for g in report.pools],
            **({"clusters": [group(g) for g in report.clusters]} if report.clusters else {}),
            "disruption": _counts([w.disruption.value for w in report.workloads]),
            "risks": _counts([r.risk.value for w in report.workloads for r in w.risks]),
        },
        "requests": {"prometheus": report.prometheus_requests, "kubernetes": report.api_requests},
        "warnings": list(report.warnings),
    }
