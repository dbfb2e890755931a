"""Drill 9, bad query results: the real Prometheus behind a loopback proxy that answers every query with
empty vectors, then with NaN for every sample, then with the series of only half the pods.

Expected: a missing or NaN series is never read as low usage (no batch carries a zero that the data did
not have, no target decreases), and the gap is recorded: ``podtailor_source_missing_series`` and
``podtailor_source_samples_dropped{reason="nan"}`` count it and a warning says so. History is longer than
the thin-history limit, so a decrease would be allowed if the recommender believed one.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from kubernetes import client

from tests.drills._recommender_fixtures import (
    Mi,
    PromProxy,
    Sampler,
    backfill,
    drill_row,
    engine_for,
    grid_now,
    make_deployment,
    make_vpa,
    no_decrease_from,
    pods,
    statuses,
    target,
)
from tests.harness.prometheus import LocalPrometheus
from tests.nodesim.usage import Constant

pytestmark = [pytest.mark.cluster, pytest.mark.prometheus]
USAGE_CORES = (0.30, 0.40, 0.50, 0.60)
HIDDEN = {"w0-5c-p0", "w0-5c-p1", "w1-5c-p0", "w2-5c-p0"}
"""Half of the eight pods: all of w0, one of w1 and one of w2."""


def empty(endpoint: str, form: list[tuple[str, str]], body: dict[str, Any]) -> dict[str, Any]:
    if endpoint in ("query", "query_range", "read"):
        body["data"]["result"] = []
    return body


def nan(endpoint: str, form: list[tuple[str, str]], body: dict[str, Any]) -> dict[str, Any]:
    if endpoint in ("query_range", "read"):
        for series in body["data"]["result"]:
            series["values"] = [[t, "NaN"] for t, _ in series["values"]]
    return body


def half(endpoint: str, form: list[tuple[str, str]], body: dict[str, Any]) -> dict[str, Any]:
    if endpoint in ("query", "query_range", "read"):
        body["data"]["result"] = [s for s in body["data"]["result"] if s["metric"].get("pod") not in HIDDEN]
    return body


def test_empty_nan_and_half_results_are_never_read_as_low_usage(
    api: client.ApiClient, crds: list[str], namespace: str, prometheus: LocalPrometheus, tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    with drill_row(9, "Bad query results", "proxy rewrites answers: empty vectors, all samples NaN, series of "
                   "half the pods removed (one pass each), then passthrough") as row, \
            PromProxy(lambda: prometheus.url) as proxy:
        end_s = grid_now(-120)
        t0 = end_s - 3600
        containers = [c for i, cores in enumerate(USAGE_CORES) for c in pods(
            namespace, f"w{i}", f"w{i}-5c", 2, Constant(cpu_cores=cores, memory_bytes=(100 + 20 * i) * Mi))]
        backfill(prometheus, tmp_path, "badresults", containers, end_s, days=33 / 24)
        for i in range(len(USAGE_CORES)):
            make_deployment(api, namespace, f"w{i}", cpu="1", memory="512Mi")  # usage is well below: decreases
            make_vpa(api, namespace, f"w{i}", f"w{i}")
        engine, source, registry = engine_for(api, proxy.url, [namespace], history_s=30 * 3600)
        assert engine.run_pass(t0).written == len(USAGE_CORES)
        before = {k: target(s) for k, s in statuses(api, [namespace]).items()}
        # 30 h of history (confidence above the 1-day thin limit): w0 at 0.3 cores -> 330m, a real decrease
        # from the 1-core request, so the recommender is free to lower targets when it believes it should.
        w0 = before[(namespace, "w0")]
        assert w0 is not None and 330 <= w0[0] <= 347, before

        def missing_total() -> float:
            return registry.get_sample_value("podtailor_source_missing_series_total") or 0.0

        caplog.set_level(logging.WARNING, logger="recommender.sources.prometheus")
        with Sampler(api, [namespace], no_decrease_from(before)) as sampler:
            seen = {}
            for k, (mode, rewrite) in enumerate((("empty", empty), ("nan", nan), ("half", half)), start=1):
                proxy.faults.rewrite = rewrite
                gap_before = missing_total()
                report = engine.run_pass(t0 + 600 * k)
                assert report.stale == 0  # the source answered: not an outage
                seen[mode] = (source.results[-1], missing_total() - gap_before)
            proxy.faults.rewrite = None
            engine.run_pass(t0 + 600 * 4)
        sampler.assert_held()

        # Empty and NaN answers produce no batch at all (never a batch of zeros); the gap is counted.
        assert seen["empty"][0] == {} and seen["empty"][1] == 8
        assert seen["nan"][0] == {} and seen["nan"][1] == 8
        assert (registry.get_sample_value("podtailor_source_samples_dropped_total", {"reason": "nan"}) or 0) > 0
        # Half the pods: w0 (both pods hidden) gets no batch; the others only real samples, no zeros.
        batches, gap = seen["half"]
        assert gap == len(HIDDEN)
        by_workload = {key.workload_name: b for key, b in batches.items()}
        assert sorted(by_workload) == ["w1", "w2", "w3"], sorted(by_workload)
        for name, batch in by_workload.items():
            cores = USAGE_CORES[int(name[1])]
            assert np.allclose(batch.cpu_cores.values, cores, rtol=1e-6), (name, batch.cpu_cores.values)
        messages = [r.getMessage() for r in caplog.records]
        assert messages.count("containers listed by the series index returned no usage samples") >= 3
        assert "invalid samples dropped" in messages
        after = {k: target(s) for k, s in statuses(api, [namespace]).items()}
        assert after == before, (before, after)
        row.proof += [
            f"{sampler.readings} status readings across the three faulty passes and one clean pass: no target "
            "decreased or vanished; final targets equal the pre-fault targets",
            "empty and NaN passes returned no batch (never zeros); missing_series_total +8 each, "
            "samples_dropped{reason=nan} > 0, warnings logged",
            f"half the pods hidden: w0 no batch, w1/w2/w3 batches hold only the modelled usage; "
            f"missing_series_total +{gap}",
        ]
        row.notes.append("found: empty and partial answers were silent (no log, no metric); fixed by counting "
                         "containers listed by the series index that return no sample (podtailor_source_missing_series "
                         "+ a warning)")
