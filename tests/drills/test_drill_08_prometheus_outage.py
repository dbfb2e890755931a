"""Drill 8, Prometheus outage: 50 workloads with steady targets, the real Prometheus down for two hours of
recommender passes, then back.

Expected: the last good targets are kept byte for byte (never a zero, never the floor) and marked Stale;
no decrease; the failure is counted (the alert's metric); on recovery one pass reads the whole missed
window in one history call with the same request count as a normal pass (no burst).

The two hours are simulated time: passes run with ``now_s`` five minutes apart while the server is really
stopped, and the history they would have read is backfilled, so recovery reads real data.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from kubernetes import client

from tests.drills._recommender_fixtures import (
    LAG_S,
    Mi,
    Sampler,
    backfill,
    condition,
    drill_row,
    engine_for,
    grid_now,
    make_deployment,
    make_vpa,
    pods,
    recommendation_bytes,
    statuses,
    target,
)
from tests.harness.prometheus import LocalPrometheus
from tests.nodesim.usage import Constant

pytestmark = [pytest.mark.cluster, pytest.mark.prometheus]
WORKLOADS = 50
PASS_EVERY_S = 300
OUTAGE_S = 2 * 3600


def test_prometheus_outage_keeps_targets_byte_identical_and_recovery_reads_one_window(
    api: client.ApiClient, crds: list[str], namespace: str, prometheus: LocalPrometheus, tmp_path: Path,
) -> None:
    with drill_row(8, "Prometheus outage", "real Prometheus stopped for 24 passes (2 h simulated, 5 min "
                   f"apart) with {WORKLOADS} workloads served, then started again") as row:
        end_s = grid_now(-120)
        t0 = end_s - OUTAGE_S - 600  # the recovery pass still reads backfilled data
        # Workload i uses 0.2 + 0.01 i cores and 100 + i Mi; requests are below usage (100m, 64Mi) so the
        # targets are increases, which thin history allows: target = usage x 1.1 (cpu), x 1.15 (memory).
        containers = [c for i in range(WORKLOADS) for c in pods(
            namespace, f"w{i:02d}", f"w{i:02d}-7d4f", 1,
            Constant(cpu_cores=0.2 + 0.01 * i, memory_bytes=(100 + i) * Mi),
            cpu_request_millicores=100, memory_request_bytes=64 * Mi)]
        backfill(prometheus, tmp_path, "outage", containers, end_s, days=9 / 24)
        for i in range(WORKLOADS):
            make_deployment(api, namespace, f"w{i:02d}", cpu="100m", memory="64Mi")
            make_vpa(api, namespace, f"w{i:02d}", f"w{i:02d}")
        engine, source, registry = engine_for(api, prometheus.url, [namespace], history_s=6 * 3600)

        steady = engine.run_pass(t0)
        steady_requests = source.inner.request_count
        assert steady.written == WORKLOADS
        before = statuses(api, [namespace])
        targets = {k: target(s) for k, s in before.items()}
        assert all(t is not None and min(t) > 0 for t in targets.values()), targets
        # Spot check against the model: w10 uses 0.3 cores -> 330m; 110Mi -> 126.5Mi, rounded up.
        w10 = targets[(namespace, "w10")]
        assert w10 is not None and 330 <= w10[0] <= 347 and 126 * Mi <= w10[1] <= 133 * Mi
        frozen = {k: recommendation_bytes(s) for k, s in before.items()}

        def identical(now: dict[tuple[str, str], dict[str, object]]) -> list[str]:
            return [f"{k}: recommendation changed during the outage" for k in frozen
                    if recommendation_bytes(now.get(k, {})) != frozen[k]]

        passes = OUTAGE_S // PASS_EVERY_S
        prometheus.stop()
        try:
            with Sampler(api, [namespace], identical) as sampler:
                reports = [engine.run_pass(t0 + k * PASS_EVERY_S) for k in range(1, passes + 1)]
            during = statuses(api, [namespace])
        finally:
            prometheus.start()
        sampler.assert_held()
        assert all(r.stale == WORKLOADS and r.written == 0 and not r.recommendations for r in reports)
        assert all(condition(s, "Stale").get("status") == "True" for s in during.values())
        assert registry.get_sample_value("podtailor_recommender_source_failures_total") == passes
        row.proof.append(f"{sampler.readings} status readings during the outage: all {WORKLOADS} recommendations "
                         f"byte-identical, Stale=True on all, source_failures_total={passes}")

        outage_requests = source.inner.request_count - steady_requests
        calls_before = len(source.calls)
        recovery_now = t0 + (passes + 1) * PASS_EVERY_S
        recovered = engine.run_pass(recovery_now)
        recovery_requests = source.inner.request_count - steady_requests - outage_requests
        # One history call for the whole missed window, from the last good end: 2 h 05 min, one chunk.
        assert source.calls[calls_before:] == [((namespace,), t0 - LAG_S, recovery_now - LAG_S)]
        # Request budget of a pass: 1 series + 3 owner queries + 1 for OOM counters above zero + 4 remote reads
        # (CPU, working set, two CFS counters) per scope and chunk = 9, the same as the steady pass: no burst.
        assert recovery_requests == steady_requests == 9, (recovery_requests, steady_requests)
        assert outage_requests == passes  # one refused connection per pass (retries=0), no hot loop
        assert recovered.written == WORKLOADS and recovered.stale == 0
        after = statuses(api, [namespace])
        for key, old in targets.items():
            new = target(after[key])
            assert old is not None and new is not None and new[0] >= old[0] and new[1] >= old[1], (key, old, new)
            assert new[0] <= old[0] * 1.05 and new[1] <= old[1] * 1.05, (key, old, new)  # same usage, same target
            assert condition(after[key], "Stale").get("status") == "False"
        row.proof.append(f"recovery: one history call over ({t0 - LAG_S:.0f}, {recovery_now - LAG_S:.0f}], "
                         f"{recovery_requests} requests (steady pass {steady_requests}); no target decreased; "
                         "Stale=False again")
