"""Drill 11, thin history: Deployments with one hour of history (no fault: the bad input is too little data).

Expected with the podtailor strategy (``no_decrease_on_thin_history``, thin below one day): no target below
the current request while confidence is low, whatever the usage says; increases only with evidence: OOM
kills raise memory, CFS throttling raises CPU. A control workload with the same low usage and two days of
history does get a decrease, so the hold comes from the thin history and not from anything else.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from kubernetes import client

from tests.drills._recommender_fixtures import (
    LAG_S,
    Mi,
    backfill,
    condition,
    drill_row,
    engine_for,
    grid_now,
    make_deployment,
    make_vpa,
    pods,
    statuses,
    target,
)
from tests.harness.prometheus import LocalPrometheus
from tests.nodesim.usage import Constant, Spikes

pytestmark = [pytest.mark.cluster, pytest.mark.prometheus]


def test_one_hour_of_history_never_lowers_requests_and_raises_only_on_evidence(
    api: client.ApiClient, crds: list[str], namespace: str, prometheus: LocalPrometheus, tmp_path: Path,
) -> None:
    with drill_row(11, "Thin history", "Deployments with 1 h of history: low usage, OOM kills, CFS throttling; "
                   "a 2-day control with the same low usage") as row:
        end_s = grid_now(-120)
        low = Constant(cpu_cores=0.1, memory_bytes=100 * Mi)
        # Memory 200Mi with a 200Mi spike for 2 of every 20 minutes: above the 300Mi limit, 3 OOM kills an hour.
        ooming = Spikes(cpu_cores=0.1, memory_bytes=200 * Mi, spike_cpu_cores=0.0, spike_memory_bytes=200 * Mi,
                        period_s=1200, duration_s=120)
        thin = [*pods(namespace, "low", "low-1a", 2, low),
                *pods(namespace, "oom", "oom-1a", 1, ooming, memory_limit_bytes=300 * Mi),
                *pods(namespace, "throttled", "throttled-1a", 1, Constant(cpu_cores=1.0, memory_bytes=100 * Mi),
                      cpu_limit_millicores=500)]
        backfill(prometheus, tmp_path, "thin", thin, end_s, days=1 / 24)
        backfill(prometheus, tmp_path, "control", pods(namespace, "control", "control-1a", 2, low), end_s, days=2)
        make_deployment(api, namespace, "low")
        make_deployment(api, namespace, "oom", limits={"memory": "300Mi"})
        make_deployment(api, namespace, "throttled", limits={"cpu": "500m", "memory": "1Gi"})
        make_deployment(api, namespace, "control")
        for name in ("low", "oom", "throttled", "control"):
            make_vpa(api, namespace, name, name)
        engine, _, _ = engine_for(api, prometheus.url, [namespace], history_s=3 * 86400)
        report = engine.run_pass(end_s + LAG_S)
        assert report.served == 4
        found = {vpa: status for (_, vpa), status in statuses(api, [namespace]).items()}
        current = (500, 256 * Mi)  # every Deployment requests 500m and 256Mi
        # Usage 0.1 cores / 100Mi would give 110m / 115Mi: with one hour of history both stay at the request.
        assert target(found["low"]) == current
        assert condition(found["low"], "LowConfidence").get("status") == "True"
        reasons = report.recommendations[(namespace, "low", "app")].reasons
        assert "cpu: low confidence: no decrease" in reasons and "memory: low confidence: no decrease" in reasons
        # OOM kills at the 300Mi limit: memory rises above the request (bump of the limit x 1.2 = 360Mi at least);
        # CPU is not lowered.
        oom = target(found["oom"])
        assert oom is not None and oom[0] == 500 and oom[1] >= 360 * Mi, oom
        assert any("OOM" in r for r in report.recommendations[(namespace, "oom", "app")].reasons)
        # Demand of 1 core under a 500m limit: throttled half the time; CPU rises above 500m, memory stays.
        throttled = target(found["throttled"])
        assert throttled is not None and throttled[0] > 500 and throttled[1] == 256 * Mi, throttled
        # Control: two days of the same low usage is enough confidence, so the decrease happens.
        control = target(found["control"])
        assert control is not None and control[0] < 150 and control[1] < 130 * Mi, control
        row.proof += [
            f"1 h, usage 0.1 cores/100Mi: target stays at the request {current[0]}m/{current[1] // Mi}Mi, "
            "LowConfidence=True, reasons 'low confidence: no decrease'",
            f"1 h with OOM kills at a 300Mi limit: memory {oom[1] // Mi}Mi (increase), cpu unchanged",
            f"1 h throttled under a 500m limit: cpu {throttled[0]}m (increase), memory unchanged",
            f"control, 2 days of the same low usage: {control[0]}m/{control[1] // Mi}Mi (the decrease thin history "
            "held back)",
        ]
