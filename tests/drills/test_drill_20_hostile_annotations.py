"""Drill 20, hostile annotations: workloads annotated with NaN, 1e309, -1, 0, 10Ti, unknown suffixes, huge
values, a request for another namespace and a request to disable gates; junk approvals; junk usage models.

Expected: nothing read from an annotation widens scope or changes a target (the recommender reads none:
targets equal those of a twin without annotations and stay inside the VPA's admin bounds); a hostile VPA
policy is refused with ConfigUnsupported and a warning while the last good target stays; only the exact
value ``"true"`` of ``podtailor.io/approve-restart`` approves; the node simulator's ``parse_model`` rejects
junk usage annotations with ValueError; the controllers keep serving throughout.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from kubernetes import client

from podtailor.units import parse_cpu_millicores, parse_memory_bytes
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
from tests.nodesim.usage import Constant, parse_model
from updater.kube.snapshot import ClusterReader

pytestmark = [pytest.mark.cluster, pytest.mark.prometheus]
HOSTILE = {"podtailor.io/min-cpu": "NaN", "podtailor.io/max-memory": "1e309", "podtailor.io/cpu": "-1",
           "podtailor.io/memory": "0", "podtailor.io/max-cpu": "10Ti", "podtailor.io/min-memory": "5Qi",
           "podtailor.io/namespace": "kube-system", "podtailor.io/target-namespace": "default",
           "podtailor.io/disable-gates": "true", "podtailor.io/skip-analysis": "true",
           "podtailor.io/big": "x" * 200_000}
BOUNDS = {"minAllowed": {"cpu": "50m", "memory": "64Mi"}, "maxAllowed": {"cpu": "300m", "memory": "200Mi"}}
JUNK_APPROVALS = ["True", "TRUE", "yes", "1", "true ", " true", "true\n", "tru\u0435", "true,false", "",
                  "true" + "x" * 1000]
JUNK_USAGE = ['{"kind":"constant","cpu_cores":NaN,"memory_bytes":1}', '{"kind":"constant","cpu_cores":1e309,'
              '"memory_bytes":1}', '{"kind":"constant","cpu_cores":-1,"memory_bytes":1}',
              '{"kind":"constant","cpu_cores":"10Ti","memory_bytes":1}', '{"kind":"constant","cpu_cores":1,'
              '"memory_bytes":"5Qi"}', '{"kind":"constant","cpu_cores":1,"memory_bytes":"' + "9" * 300_000 + '"}',
              '{"kind":"trace","file":"../../etc/passwd","series_id":"x"}', '{"kind":"eval","code":"1"}',
              '{"kind":"constant","cpu_cores":1,"memory_bytes":1,"namespace":"kube-system"}', "[1, 2]", '"x"']


def test_hostile_annotations_change_nothing_and_bad_policies_keep_the_last_target(
    api: client.ApiClient, crds: list[str], namespace: str, prometheus: LocalPrometheus, tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    with drill_row(20, "Hostile annotations", "podtailor.io/* annotations with NaN, 1e309, -1, 0, 10Ti, 5Qi, "
                   "200 KB and 300 KB values, another namespace, gates off; junk approve-restart values; junk "
                   "nodesim usage models; a VPA policy with 1e309") as row:
        apps = client.AppsV1Api(api)
        with pytest.raises(client.ApiException) as too_big:
            make_deployment(api, namespace, "huge", annotations={"podtailor.io/big": "x" * 300_000})
        assert too_big.value.status == 422  # the API server caps annotations at 256 KiB in total
        end_s = grid_now(-120)
        model = Constant(cpu_cores=0.25, memory_bytes=100 * Mi)
        backfill(prometheus, tmp_path, "hostile", [*pods(namespace, "web", "web-3f", 2, model),
                                                   *pods(namespace, "twin", "twin-3f", 2, model)], end_s, days=2)
        make_deployment(api, namespace, "web", annotations={**HOSTILE, "podtailor.io/approve-restart": "yes"})
        make_deployment(api, namespace, "twin")
        for name in ("web", "twin"):
            make_vpa(api, namespace, name, name, policy=BOUNDS)
        engine, _, _ = engine_for(api, prometheus.url, [namespace], history_s=2 * 86400)
        assert engine.run_pass(end_s + LAG_S).written == 2
        found = statuses(api, [namespace])
        web, twin = target(found[(namespace, "web")]), target(found[(namespace, "twin")])
        assert web == twin and web is not None
        assert parse_cpu_millicores("50m") <= web[0] <= parse_cpu_millicores("300m")
        assert parse_memory_bytes("64Mi") <= web[1] <= parse_memory_bytes("200Mi")
        row.proof.append(f"annotated and clean twin: same target {web[0]}m/{web[1] / Mi:.0f}Mi, inside the VPA bounds "
                         "50m-300m / 64Mi-200Mi; 300 KB annotation refused by the API server (422)")

        before = json.dumps(found[(namespace, "web")]["recommendation"], sort_keys=True)
        client.CustomObjectsApi(api).patch_namespaced_custom_object(
            "autoscaling.k8s.io", "v1", namespace, "verticalpodautoscalers", "web",
            {"spec": {"resourcePolicy": {"containerPolicies": [{"containerName": "app",
                                                                "maxAllowed": {"memory": "1e309"}}]}}})
        caplog.set_level(logging.WARNING, logger="podtailor.recommender")
        report = engine.run_pass(end_s + LAG_S + 60)
        assert report.unsupported == 1 and report.served == 1  # the twin is still served
        status = statuses(api, [namespace])[(namespace, "web")]
        refused = condition(status, "ConfigUnsupported")
        assert refused.get("status") == "True" and "absurdly large" in refused.get("message", "")
        assert json.dumps(status["recommendation"], sort_keys=True) == before  # last good kept
        assert any(r.getMessage() == "VPA not served" for r in caplog.records)
        row.proof.append("VPA maxAllowed memory 1e309: ConfigUnsupported=True ('absurdly large'), warning logged, "
                         "last good recommendation byte-identical, the other VPA still served")

        for i, value in enumerate(JUNK_APPROVALS):
            make_deployment(api, namespace, f"junk{i}", annotations={"podtailor.io/approve-restart": value})
        make_deployment(api, namespace, "approved", annotations={"podtailor.io/approve-restart": "true"})
        snapshot = ClusterReader(api).read(namespaces=[namespace])
        assert snapshot.approvals == frozenset({(namespace, "Deployment", "approved")}), snapshot.approvals
        assert len(apps.list_namespaced_deployment(namespace).items) == len(JUNK_APPROVALS) + 3
        row.proof.append(f"{len(JUNK_APPROVALS)} junk approve-restart values (True, yes, 1, 'true ', Cyrillic e, "
                         "...) approve nothing; only the exact 'true' does")

        for raw in JUNK_USAGE:
            with pytest.raises(ValueError):
                parse_model(json.loads(raw))
        row.proof.append(f"{len(JUNK_USAGE)} junk nodesim usage annotations (NaN, 1e309, -1, 10Ti cores, 5Qi, "
                         "300 KB, path traversal, unknown kind/keys, non-objects) rejected with ValueError")
        row.notes.append("the recommender reads no podtailor.io/* annotation, so hostile ones are ignored without an "
                         "Event; no Kubernetes Events are emitted anywhere by the recommender (warnings are logs and "
                         "conditions only)")
