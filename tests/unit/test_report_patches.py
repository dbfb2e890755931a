"""``report -o patches``: the strategic-merge patch per workload, its file names, the skips and the usage errors.

The report comes from ``tests.builders.report`` (the krr-simple strategy on synthetic usage, through the
report's own build) or, where the numbers must be chosen exactly, from a hand-made ``WorkloadReport``.
Quantities are checked two ways: as the literal strings Kubernetes prints for chosen amounts, and, for built
reports, parsed back (``podtailor.units``' parser) to the report's planned amounts.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from podtailor.resources import CurrentResources, Resources
from podtailor.units import parse_cpu_millicores, parse_memory_bytes
from recommender.kube.served import VpaSpec, read_vpa
from recommender.model.registry import get_strategy
from recommender.model.types import Recommendation
from recommender.report.build import BuildConfig, build_report
from recommender.report.cli import EXIT_FAILED, EXIT_USAGE, run_report
from recommender.report.disruption import pod_level_plan
from recommender.report.patches import Skip, file_name, skip_reason, workload_patch, write_patches
from recommender.report.types import (
    ContainerReport,
    Cost,
    Disruption,
    PodLevelPlan,
    Report,
    Role,
    UsageSummary,
    WorkloadReport,
)
from tests.builders.report import DAY, NOW, Gi, Mi, batch, cur, key, sample_inputs, sample_report, spec, workload
from tests.unit.test_report_cli import kubeconfig, parse


def rec(target: Resources, limits: Resources | None = None) -> Recommendation:
    return Recommendation(target=target, lower_bound=target, upper_bound=target, uncapped_target=target,
                          limits=limits or Resources(), confidence=1.0)


def container(name: str, planned: CurrentResources, recommendation: Recommendation | None, *,
              role: Role = Role.CONTAINER, usage: bool = True) -> ContainerReport:
    return ContainerReport(name=name, role=role, current=planned, recommendation=recommendation, planned=planned,
                           usage=UsageSummary(cpu_millicores=None, memory_bytes=None) if usage else None,
                           cost=Cost())


def wl(containers: tuple[ContainerReport, ...], *, kind: str = "Deployment", ns: str = "shop",
       name: str = "web") -> WorkloadReport:
    return WorkloadReport(namespace=ns, kind=kind, name=name, pool="", replicas=1, running_pods=1,
                          pod_hours_per_month=730.0, containers=containers, qos_current="Burstable",
                          qos_planned="Burstable", disruption=Disruption.NONE, disruption_reason="",
                          disruption_message="", risks=(), cost=Cost())


def pod_spec(patch: dict[str, Any] | None, *path: str) -> Any:
    assert patch is not None
    node: Any = patch
    for step in path:
        node = node[step]
    return node


def by_name(report: Report) -> dict[str, WorkloadReport]:
    return {w.name: w for w in report.workloads}


def test_containers_and_sidecars_by_name_with_the_planned_amounts_exactly() -> None:
    web = by_name(sample_report())["web"]
    patch = workload_patch(web)
    assert patch is not None
    assert (patch["apiVersion"], patch["kind"], patch["metadata"]) == (
        "apps/v1", "Deployment", {"name": "web", "namespace": "shop"})
    spec_ = pod_spec(patch, "spec", "template", "spec")
    # app is a container, proxy a native sidecar (an init container), setup a plain init container: no
    # recommendation, no entry
    assert [c["name"] for c in spec_["containers"]] == ["app"]
    assert [c["name"] for c in spec_["initContainers"]] == ["proxy"]
    planned = {c.name: c.planned for c in web.containers}
    for entry in [*spec_["containers"], *spec_["initContainers"]]:
        res, want = entry["resources"], planned[entry["name"]]
        assert parse_cpu_millicores(res["requests"]["cpu"]) == want.requests.cpu_millicores
        assert parse_memory_bytes(res["requests"]["memory"]) == want.requests.memory_bytes
        # krr-simple sets a memory limit and no CPU limit: only memory is written, at the planned amount
        assert set(res["limits"]) == {"memory"}
        assert parse_memory_bytes(res["limits"]["memory"]) == want.limits.memory_bytes


def test_quantities_are_kubernetes_canonical_strings_not_rounded_text() -> None:
    exact = CurrentResources(requests=Resources(cpu_millicores=1500, memory_bytes=1536 * Mi),
                             limits=Resources(cpu_millicores=2000, memory_bytes=1_234_567))
    c = container("app", exact, rec(exact.requests, exact.limits))
    spec_ = pod_spec(workload_patch(wl((c,))), "spec", "template", "spec")
    # 1500m stays millicores, 2000m is "2"; 1536Mi is not rounded to "1.5Gi"; 1234567 bytes has no exact suffix
    assert spec_["containers"][0]["resources"] == {"requests": {"cpu": "1500m", "memory": "1536Mi"},
                                                   "limits": {"cpu": "2", "memory": "1234567"}}


def test_limits_only_where_the_recommendation_sets_them() -> None:
    planned = cur(250, 256 * Mi, 500, 512 * Mi)
    no_limits = container("a", planned, rec(planned.requests))
    cpu_only = container("b", planned, rec(planned.requests, Resources(cpu_millicores=500)))
    spec_ = pod_spec(workload_patch(wl((no_limits, cpu_only))), "spec", "template", "spec")
    assert spec_["containers"] == [
        {"name": "a", "resources": {"requests": {"cpu": "250m", "memory": "256Mi"}}},
        {"name": "b", "resources": {"requests": {"cpu": "250m", "memory": "256Mi"}, "limits": {"cpu": "500m"}}}]
    memory_only = container("c", planned, rec(Resources(memory_bytes=256 * Mi)))
    assert pod_spec(workload_patch(wl((memory_only,))), "spec", "template", "spec")["containers"] == [
        {"name": "c", "resources": {"requests": {"memory": "256Mi"}}}]


def requests_only(kind: str, name: str) -> VpaSpec:
    vpa = read_vpa({"apiVersion": "autoscaling.k8s.io/v1", "kind": "VerticalPodAutoscaler",
                    "metadata": {"name": name, "namespace": "shop"},
                    "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": kind, "name": name},
                             "resourcePolicy": {"containerPolicies": [
                                 {"containerName": "*", "controlledValues": "RequestsOnly"}]}}})
    assert isinstance(vpa, VpaSpec)
    return vpa


def test_requests_only_vpa_writes_no_limits_and_no_request_above_the_kept_limit() -> None:
    inv, batches = sample_inputs()
    # "hot" uses more than its limits: 0.5 cores and 300Mi against 200m and 128Mi.
    hot = workload("shop", "hot", (spec("app", cur(100, 64 * Mi, 200, 128 * Mi)),))
    inv = replace(inv, workloads=(*inv.workloads, hot), vpas={
        ("shop", "StatefulSet", "db"): requests_only("StatefulSet", "db"),
        ("shop", "Deployment", "hot"): requests_only("Deployment", "hot")})
    batches[key(hot, "app")] = batch(0.5, 300 * Mi)
    cfg = BuildConfig(now_s=NOW, start_s=NOW - DAY, end_s=NOW, strategy_name="krr-simple")
    report = by_name(build_report(inv, batches, get_strategy("krr-simple"), cfg))
    db, hot_report = report["db"], report["hot"]
    [entry] = pod_spec(workload_patch(db), "spec", "template", "spec")["containers"]
    assert set(entry["resources"]) == {"requests"}
    # The updater keeps a RequestsOnly container's limits (1 core, 1Gi): the report plans the same.
    assert db.containers[0].planned.limits == Resources(cpu_millicores=1000, memory_bytes=1024 * Mi)
    want = db.containers[0].planned.requests
    assert parse_memory_bytes(entry["resources"]["requests"]["memory"]) == want.memory_bytes
    # krr-simple's target for hot is above its limits (p95 500m, 300Mi x 1.15 = 345Mi); with the limits kept,
    # the updater caps the requests at them, and so does the patch: a request above its limit is invalid.
    target = hot_report.containers[0].recommendation
    assert target is not None and target.target.memory_bytes == 345 * Mi
    assert pod_spec(workload_patch(hot_report), "spec", "template", "spec")["containers"] == [
        {"name": "app", "resources": {"requests": {"cpu": "200m", "memory": "128Mi"}}}]


def test_cronjob_job_and_bare_pod_paths() -> None:
    c = container("run", cur(100, 64 * Mi), rec(Resources(cpu_millicores=100, memory_bytes=64 * Mi)))
    want = [{"name": "run", "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}]
    cron = workload_patch(wl((c,), kind="CronJob"))
    assert cron is not None and cron["apiVersion"] == "batch/v1"
    assert pod_spec(cron, "spec", "jobTemplate", "spec", "template", "spec", "containers") == want
    job = workload_patch(wl((c,), kind="Job"))
    assert job is not None and job["apiVersion"] == "batch/v1"
    assert pod_spec(job, "spec", "template", "spec", "containers") == want
    pod = workload_patch(wl((c,), kind="Pod"))
    assert pod is not None and pod["apiVersion"] == "v1" and pod["spec"] == {"containers": want}
    # the built report's CronJob takes the same path
    nightly = workload_patch(by_name(sample_report())["nightly"])
    assert [e["name"] for e in pod_spec(nightly, "spec", "jobTemplate", "spec", "template", "spec",
                                        "containers")] == ["run"]


def test_no_recommendation_mode_off_and_custom_kinds_are_skipped_with_a_reason() -> None:
    amounts = cur(100, 64 * Mi)
    assert skip_reason(wl((container("a", amounts, None, usage=False),))) is Skip.NO_HISTORY
    target_free = rec(Resources())
    assert skip_reason(wl((container("a", amounts, target_free, usage=False),))) is Skip.NO_HISTORY
    assert skip_reason(wl((container("a", amounts, None),))) is Skip.MODE_OFF
    # A plain init container is recommended like the others: with usage and no recommendation it was switched off.
    only_init = container("setup", amounts, None, role=Role.INIT)
    assert skip_reason(wl((only_init,))) is Skip.MODE_OFF
    assert skip_reason(wl((container("setup", amounts, None, role=Role.INIT, usage=False),))) is Skip.NO_HISTORY
    ok = container("a", amounts, rec(amounts.requests))
    assert skip_reason(wl((ok,), kind="Rollout")) is Skip.UNSUPPORTED_KIND
    assert workload_patch(wl((ok,), kind="Rollout")) is None
    assert skip_reason(wl((ok,))) is None


@pytest.mark.parametrize(("ns", "name"), [("shop", "../../etc/passwd"), ("shop", "a/b"), ("..", "web"),
                                          ("shop", "Web"), ("shop", ".hidden"), ("sh_op", "web"), ("", "web"),
                                          ("shop", "x" * 254), ("shop", "web\n"), ("shop", "wéb")])
def test_hostile_names_get_no_file(tmp_path: Path, ns: str, name: str) -> None:
    ok = container("a", cur(100, 64 * Mi), rec(Resources(cpu_millicores=100)))
    report = replace(sample_report(), workloads=(wl((ok,), ns=ns, name=name),))
    out = tmp_path / "out"
    done = write_patches(report, out)
    assert done.files == () and done.skipped == {Skip.UNSAFE_NAME: 1}
    assert list(tmp_path.rglob("*.yaml")) == []


def test_file_names_are_stable_distinct_and_short_enough() -> None:
    ok = container("a", cur(100, 64 * Mi), rec(Resources(cpu_millicores=100)))
    assert file_name(wl((ok,), ns="shop", name="web.v2")) == "shop_deployment_web.v2.yaml"
    assert file_name(wl((ok,), kind="StatefulSet")) == "shop_statefulset_web.yaml"
    long_a, long_b = "a" * 253, "a" * 252 + "b"
    names = [file_name(wl((ok,), ns="n" * 63, name=n)) for n in (long_a, long_b, long_a)]
    assert all(len(n.encode()) <= 255 and n.endswith(".yaml") for n in names)
    assert names[0] == names[2] != names[1]


def test_write_creates_the_directory_replaces_only_its_own_files_and_counts_skips(tmp_path: Path) -> None:
    inv, batches = sample_inputs()
    idle = workload("shop", "idle", (spec("app", cur(100, 64 * Mi)),))
    inv = replace(inv, workloads=(*inv.workloads, idle))
    cfg = BuildConfig(now_s=NOW, start_s=NOW - DAY, end_s=NOW, strategy_name="krr-simple")
    report = build_report(inv, batches, get_strategy("krr-simple"), cfg)
    out = tmp_path / "a" / "b"
    out.mkdir(parents=True)
    (out / "shop_deployment_web.yaml").write_text("stale\n")
    (out / "kustomization.yaml").write_text("mine\n")
    done = write_patches(report, out)
    assert sorted(p.name for p in done.files) == ["jobs_cronjob_nightly.yaml", "shop_deployment_web.yaml",
                                                  "shop_statefulset_db.yaml"]
    assert done.skipped == {Skip.NO_HISTORY: 1}
    assert (out / "kustomization.yaml").read_text() == "mine\n"
    assert yaml.safe_load((out / "shop_deployment_web.yaml").read_text()) == workload_patch(by_name(report)["web"])
    fresh = tmp_path / "new" / "dir"
    assert len(write_patches(report, fresh).files) == 3 and fresh.is_dir()


def test_usage_errors_are_exit_2_before_anything_is_contacted(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    cfg = str(kubeconfig(tmp_path))
    base = ("--kubeconfig", cfg, "--prometheus-url", "http://p")
    for argv, message in ((["-o", "patches"], "-o patches needs --output-dir DIR"),
                          (["-o", "patches", "--output-dir", str(tmp_path), "--output-file", str(tmp_path / "f")],
                           "not --output-file"),
                          (["-o", "json", "--output-dir", str(tmp_path / "d")], "--output-dir is for -o patches")):
        assert run_report(parse(*base, *argv)) == EXIT_USAGE
        err = capsys.readouterr().err
        assert message in err and "unreachable" not in err
    assert not (tmp_path / "d").exists()



def test_the_command_writes_a_file_per_workload_and_counts_the_skips_on_stderr(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from tests.unit.test_report_cli import _fleet

    inv, batches = _fleet(monkeypatch, fail_on=None)
    idle = next(w for w in inv.workloads if w.namespace == "ns4" and w.name == "w2")
    del batches[next(k for k in batches if (k.namespace, k.workload_name) == ("ns4", "w2"))]  # no history
    out = tmp_path / "patches"
    args = parse("--kubeconfig", str(kubeconfig(tmp_path)), "--prometheus-url", "http://p", "-o", "patches",
                 "--output-dir", str(out), "--no-progress")
    assert run_report(args) == 0
    captured = capsys.readouterr()
    assert captured.out == ""
    assert f"wrote 14 patch files to {out}" in captured.err
    assert "skipped 1 workload without a patch: 1 no usage history" in captured.err
    assert len(list(out.iterdir())) == 14 and not (out / f"{idle.namespace}_deployment_{idle.name}.yaml").exists()
    # a directory that cannot be made: exit 1, named
    blocker = tmp_path / "file"
    blocker.write_text("")
    args = parse("--kubeconfig", str(kubeconfig(tmp_path)), "--prometheus-url", "http://p", "-o", "patches",
                 "--output-dir", str(blocker / "sub"), "--no-progress")
    assert run_report(args) == EXIT_FAILED
    assert f"cannot write the patches to {blocker / 'sub'}" in capsys.readouterr().err


def test_init_containers_and_pod_level_requests_are_written_from_the_built_report() -> None:
    inv, batches = sample_inputs()
    web = inv.workloads[0]
    # setup (a plain init container) now has 200 one-minute samples (krr-simple wants 100), and web's pods declare
    # pod-level requests 1 core / 1Gi (limits 4 cores / 4Gi).
    web = replace(web, pod_level=cur(1000, 1 * Gi, 4000, 4 * Gi))
    inv = replace(inv, workloads=(web, *inv.workloads[1:]))
    batches = {**batches, key(web, "setup"): batch(0.3, 200 * Mi, points=200)}
    cfg = BuildConfig(now_s=NOW, start_s=NOW - DAY, end_s=NOW, strategy_name="krr-simple")
    report = by_name(build_report(inv, batches, get_strategy("krr-simple"), cfg))["web"]
    patch = workload_patch(report)
    spec_ = pod_spec(patch, "spec", "template", "spec")
    assert [c["name"] for c in spec_["initContainers"]] == ["proxy", "setup"]
    setup = next(c for c in spec_["initContainers"] if c["name"] == "setup")
    # krr-simple: p95 of 0.3 cores at the upper edge of a 1% bucket (300m..304m); 200Mi x 1.15 = 230Mi; setup
    # has no limit, so none is written.
    assert 300 <= parse_cpu_millicores(setup["resources"]["requests"]["cpu"]) <= 304
    assert setup["resources"] == {"requests": {"cpu": setup["resources"]["requests"]["cpu"], "memory": "230Mi"}}
    # The pod-level requests: the build's plan, written exactly, and only requests (the limits are left alone).
    assert report.pod_level is not None and report.pod_level.refused is None
    planned = report.pod_level.planned_requests
    assert list(spec_["resources"]) == ["requests"]
    written = spec_["resources"]["requests"]
    assert (parse_cpu_millicores(written["cpu"]), parse_memory_bytes(written["memory"])) == (
        planned.cpu_millicores, planned.memory_bytes)
    # They moved with the containers: the aggregate went from 600m (proxy 100m + app 500m) to setup + proxy
    # (about 303m + 51m), so the pod-level CPU request is about 1000m x 354 / 600, well below 1 core.
    assert planned.cpu_millicores is not None and 580 <= planned.cpu_millicores <= 600


def test_pod_level_plan_scales_with_the_aggregate_and_says_when_the_limits_refuse() -> None:
    specs = (spec("proxy", cur(100, 64 * Mi), Role.SIDECAR), spec("app", cur(500, 256 * Mi, 1000, 512 * Mi)),
             spec("setup", cur(1000, 32 * Mi), Role.INIT))
    plans = (cur(100, 64 * Mi), cur(750, 256 * Mi, 1500, 512 * Mi), cur(400, 32 * Mi))
    current = cur(2000, 1 * Gi, 4000, 4 * Gi)
    plan = pod_level_plan(specs, plans, current)
    # Aggregate CPU before: max(proxy + app = 600m, setup + proxy = 1100m) = 1100m; after: max(850m, 500m) = 850m.
    # 2000m x 850 / 1100 = 1545.45m, rounded up: 1546m. Memory: max(320Mi, 96Mi) both times: 1Gi kept.
    assert plan == PodLevelPlan(current=current, planned_requests=Resources(cpu_millicores=1546, memory_bytes=Gi))
    assert pod_level_plan(specs, plans, None) is None
    tight = cur(2000, 1 * Gi, 1200, 4 * Gi)  # app's planned 1500m limit is above the pod-level 1200m
    refused = pod_level_plan(specs, plans, tight)
    assert refused is not None and refused.refused is not None and "above the pod-level limit 1200" in refused.refused
    ok = container("app", plans[1], rec(plans[1].requests))
    assert skip_reason(replace(wl((ok,)), pod_level=refused)) is Skip.POD_LEVEL_LIMIT
    assert workload_patch(replace(wl((ok,)), pod_level=refused)) is None
