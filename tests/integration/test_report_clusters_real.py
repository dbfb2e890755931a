"""One ``report`` over two real control planes whose history sits in one store (issue #40).

The session's control plane is context ``eu``; a second ``LocalCluster`` started here is context ``us``. Both
hold the same namespace with the same workloads (web, api; VPAs updateMode Off), so only the cluster label
tells their series apart in the one store: ``eu``'s history is the backend tests' (``tests/backend_history``),
``us``'s their distractor (3 cores, 900 MiB on every pod), under ``cluster="eu"`` and ``cluster="us-1"``: in
one VictoriaMetrics, in the two Prometheus of one Thanos Query (each sidecar's external label), and in the
session's Prometheus with the label on every series (read through remote read). The two-context report must
list each cluster's workloads from its own API server, recommend each from its own usage exactly as a
one-context report of that cluster does, and send no more requests to the store than one one-context report:
one query per metric over both clusters, split by the label. A checkpoint of ``eu``'s web VPA (two cores over
the six hours before its time) must be restored by the two-context report as by ``eu``'s own report, from
``eu``'s API server; ``us`` has no RecommenderCheckpoint CRD, which one warning names.
"""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from kubernetes import client, config

from recommender.kube.checkpoint import checkpoint_spec
from recommender.model.registry import get_strategy
from recommender.model.types import Samples, UsageBatch
from tests.backend_history import history_files, make_workloads
from tests.harness.cluster import ClusterState, LocalCluster
from tests.harness.prometheus import LocalPrometheus
from tests.harness.thanos import LocalThanos
from tests.harness.victoriametrics import LocalVictoriaMetrics

pytestmark = [pytest.mark.cluster, pytest.mark.prometheus]
REPO = Path(__file__).resolve().parents[2]
CRDS = REPO / "manifests" / "crds" / "autoscaling.k8s.io_verticalpodautoscalers.yaml"


def install_vpa_crd(api: client.ApiClient) -> None:
    ext = client.ApiextensionsV1Api(api)
    body = yaml.safe_load(CRDS.read_text())
    ext.create_custom_resource_definition(body)
    deadline = time.monotonic() + 30
    while not any(c.type == "Established" and c.status == "True"
                  for c in ext.read_custom_resource_definition(body["metadata"]["name"]).status.conditions or []):
        assert time.monotonic() < deadline, "VPA CRD not established"
        time.sleep(0.1)


def merged_kubeconfig(path: Path, states: dict[str, ClusterState]) -> Path:
    """One kubeconfig with a context per cluster, named as the report shows them."""
    doc: dict[str, Any] = {"apiVersion": "v1", "kind": "Config", "clusters": [], "users": [], "contexts": [],
                           "current-context": next(iter(states))}
    for name, state in states.items():
        doc["clusters"].append({"name": name, "cluster": {"server": state.server,
                                                          "certificate-authority": state.ca_cert}})
        doc["users"].append({"name": name, "user": {"client-certificate": state.admin_cert,
                                                    "client-key": state.admin_key}})
        doc["contexts"].append({"name": name, "context": {"cluster": name, "user": name}})
    path.write_text(yaml.safe_dump(doc))
    path.chmod(0o600)
    return path


@pytest.fixture(scope="module")
def world(cluster: ClusterState, api: client.ApiClient, crds: list[str],
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """Both control planes, the namespace with its workloads in each, their kubeconfig, and the history files."""
    tmp = tmp_path_factory.mktemp("clusters")
    ns = f"fleet-{secrets.token_hex(3)}"
    second = LocalCluster(tmp / "us")
    us_state = second.start()
    us_api = config.new_client_from_config(config_file=us_state.kubeconfig)
    try:
        install_vpa_crd(us_api)
        make_workloads(api, ns)
        make_workloads(us_api, ns)
        t2_s = float(int(time.time()) // 60 * 60)
        yield {"ns": ns, "tmp": tmp, "history": {"eu": history_files(tmp, ns, t2_s),
                                                  "us-1": history_files(tmp, ns, t2_s, distractor=True)},
               "kubeconfig": merged_kubeconfig(tmp / "kubeconfig", {"eu": cluster, "us": us_state})}
    finally:
        us_api.close()
        second.stop()
        client.CoreV1Api(api).delete_namespace(ns)


@pytest.fixture(scope="module")
def victoria_metrics(world: dict[str, Any]) -> Iterator[str]:
    """One VictoriaMetrics holding both clusters' history, each under its ``cluster`` label."""
    vm = LocalVictoriaMetrics(world["tmp"] / "vm")
    vm.start()
    try:
        for value, paths in world["history"].items():
            for path in paths:
                vm.import_openmetrics(path, extra_labels={"cluster": value})
        yield vm.url
    finally:
        vm.stop()


@pytest.fixture(scope="module")
def thanos(world: dict[str, Any]) -> Iterator[str]:
    """One Thanos Query over two Prometheus (external label ``cluster``), one per cluster's history."""
    store = LocalThanos(world["tmp"] / "thanos", clusters=tuple(world["history"]))
    for value, paths in world["history"].items():  # before the sidecars start (see test_backends_real)
        for path in paths:
            store.prometheus[value].backfill(path)
    store.start()
    try:
        yield store.url
    finally:
        store.stop()


def labelled(openmetrics_file: Path, value: str) -> Path:
    """A copy of a history file with ``cluster="value"`` on every series (a cluster's external label)."""
    out = openmetrics_file.with_name(f"{openmetrics_file.stem}-{value}.om")
    with openmetrics_file.open() as src, out.open("w") as dst:
        for line in src:
            dst.write(line if line.startswith("#") else line.replace("{", f'{{cluster="{value}",', 1))
    return out


@pytest.fixture(scope="module")
def prometheus_store(world: dict[str, Any], prometheus: LocalPrometheus) -> str:
    """The session's Prometheus holding both clusters' history, each series with its ``cluster`` label: the
    full-resolution samples then go through remote read, whose answers are split and filtered client-side."""
    for value, paths in world["history"].items():
        for path in paths:
            prometheus.backfill(labelled(path, value))
    return prometheus.url


@pytest.fixture(params=["victoria_metrics", "thanos", "prometheus_store"],
                ids=["victoria-metrics", "thanos", "prometheus-remote-read"])
def fleet(request: pytest.FixtureRequest, world: dict[str, Any]) -> dict[str, Any]:
    url: str = request.getfixturevalue(request.param)
    return {**world, "url": url}


def report(fleet: dict[str, Any], *flags: str) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "recommender", "report", "--kubeconfig", str(fleet["kubeconfig"]),
           "--prometheus-url", fleet["url"], "--scrape-interval", "60s", "--history", "2d", "-n", fleet["ns"],
           "-o", "json", "--strategy", "krr-simple", "--cluster-label", "cluster", *flags]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False, cwd=REPO)
    assert done.returncode == 0, done.stderr[-3000:]
    doc: dict[str, Any] = json.loads(done.stdout)
    return doc


def targets(doc: dict[str, Any], cluster: str | None = None) -> dict[str, Any]:
    return {w["name"]: [c["recommendation"] for c in w["containers"]] for w in doc["workloads"]
            if cluster is None or w.get("cluster") == cluster}


def test_one_report_covers_two_clusters_from_one_store(fleet: dict[str, Any]) -> None:
    both = report(fleet, "--context", "eu", "--context", "us", "--cluster-value", "us=us-1")
    eu = report(fleet, "--context", "eu", "--cluster-value", "eu")
    us = report(fleet, "--context", "us", "--cluster-value", "us-1")

    assert sorted((w["cluster"], w["namespace"], w["name"]) for w in both["workloads"]) == [
        (c, fleet["ns"], name) for c in ("eu", "us") for name in ("api", "web")]
    # Each cluster recommended from its own usage, exactly as its own report does.
    assert targets(both, "eu") == targets(eu) and targets(both, "us") == targets(us)
    assert all(recs[0] is not None for recs in targets(both).values())
    web_cpu = {c: targets(both, c)["web"][0]["target"]["cpuMillicores"] for c in ("eu", "us")}
    assert web_cpu["us"] >= 2900 > web_cpu["eu"], web_cpu  # us runs at 3 cores; eu's web peaks at 1.2
    # Summed per cluster, as each cluster's own total.
    clusters = {g["name"]: g for g in both["summary"]["clusters"]}
    assert clusters["eu"]["cost"] == eu["summary"]["total"]["cost"]
    assert clusters["us"]["cost"] == us["summary"]["total"]["cost"]
    assert [g["name"] for g in both["summary"]["namespaces"]] == [f"eu/{fleet['ns']}", f"us/{fleet['ns']}"]
    # Both clusters' history in the requests of one cluster's: one query per metric, split by the label.
    assert both["requests"]["prometheus"] == eu["requests"]["prometheus"] == us["requests"]["prometheus"]
    assert both["settings"]["clusters"] == [{"context": "eu", "clusterValue": "eu"},
                                            {"context": "us", "clusterValue": "us-1"}]
    assert "clusters" not in eu["summary"] and all("cluster" not in w for w in eu["workloads"])


def backtest(fleet: dict[str, Any], *flags: str) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "recommender", "backtest", "--prometheus", "--kubeconfig", str(fleet["kubeconfig"]),
           "--prometheus-url", fleet["url"], "--scrape-interval", "60s", "--history", "2d", "-n", fleet["ns"],
           "--strategies", "krr-simple", "--workers", "1", "--quiet", "--json", "-", "--cluster-label", "cluster",
           *flags]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False, cwd=REPO)
    assert done.returncode == 0, done.stderr[-3000:]
    doc: dict[str, Any] = json.loads(done.stdout)
    return doc


def test_backtest_replays_both_clusters_series_apart(fleet: dict[str, Any]) -> None:
    both = backtest(fleet, "--context", "eu", "--context", "us", "--cluster-value", "us=us-1")
    eu = backtest(fleet, "--cluster-value", "eu")
    us = backtest(fleet, "--cluster-value", "us-1")
    oracle = {name: doc["subsets"]["all"]["oracle"] for name, doc in (("both", both), ("eu", eu), ("us", us))}
    # web and api of each cluster: four series, not the two that pooling the same names would give.
    assert (oracle["eu"]["series"], oracle["us"]["series"], oracle["both"]["series"]) == (2, 2, 4)
    assert oracle["both"]["series_days"] == pytest.approx(oracle["eu"]["series_days"] + oracle["us"]["series_days"])


def hot_checkpoint(api: client.ApiClient, ns: str, vpa_name: str, until_s: float) -> dict[str, Any]:
    """A krr-simple checkpoint of the VPA, owned by it: its app container at 2 cores and 800 MiB for the six
    hours up to ``until_s``, more than eu's web ever uses (1.2 cores at most), so restoring it shows."""
    vpa = client.CustomObjectsApi(api).get_namespaced_custom_object("autoscaling.k8s.io", "v1", ns,
                                                                    "verticalpodautoscalers", vpa_name)
    ts = until_s - 60.0 * np.arange(360)[::-1]
    strategy = get_strategy("krr-simple")
    state = strategy.new_state()
    state.add(UsageBatch(cpu_cores=Samples(timestamps_s=ts, values=np.full(360, 2.0)), cpu_interval_s=60.0,
                         memory_peak_bytes=Samples(timestamps_s=ts, values=np.full(360, 800.0 * 2**20)),
                         memory_interval_s=60.0))
    owner = {"apiVersion": "autoscaling.k8s.io/v1", "kind": "VerticalPodAutoscaler", "name": vpa_name,
             "uid": vpa["metadata"]["uid"]}
    return {"apiVersion": "podtailor.io/v1alpha1", "kind": "RecommenderCheckpoint",
            "metadata": {"name": vpa_name, "namespace": ns, "ownerReferences": [owner]},
            "spec": checkpoint_spec(strategy, {"app": state}, until_s)}


def test_each_cluster_restores_its_own_checkpoints(world: dict[str, Any], victoria_metrics: str,
                                                   api: client.ApiClient) -> None:
    fleet, ns = {**world, "url": victoria_metrics}, world["ns"]
    custom = client.CustomObjectsApi(api)
    body = hot_checkpoint(api, ns, "web", float(int(time.time()) - 3 * 3600))
    custom.create_namespaced_custom_object("podtailor.io", "v1alpha1", ns, "recommendercheckpoints", body)
    try:  # removed after, so the other tests of the module see eu without it
        both = report(fleet, "--context", "eu", "--context", "us", "--cluster-value", "us=us-1")
        eu = report(fleet, "--context", "eu", "--cluster-value", "eu")
        fresh = report(fleet, "--context", "eu", "--cluster-value", "eu", "--no-checkpoints")
    finally:
        custom.delete_namespaced_custom_object("podtailor.io", "v1alpha1", ns, "recommendercheckpoints", "web")
    # eu's web from its checkpoint (2 cores) plus eu's history after it, as eu's own report has it; from fresh
    # state over the window it peaks at 1.2 cores: the agreement is the restore's doing.
    assert targets(both, "eu") == targets(eu) != targets(fresh)
    assert targets(both, "eu")["web"][0]["target"]["cpuMillicores"] >= 1900 > targets(fresh)["web"][0]["target"][
        "cpuMillicores"]
    assert both["settings"]["checkpoints"] is True
    # us has no RecommenderCheckpoint CRD: one warning, named by its context, and fresh state there.
    said = [w for w in both["warnings"] if "RecommenderCheckpoint CRD" in w]
    assert len(said) == 1 and said[0].startswith("us: the cluster has no RecommenderCheckpoint CRD"), said
    assert not any("checkpoint" in w for w in eu["warnings"]), eu["warnings"]
