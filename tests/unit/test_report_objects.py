"""Discovery's pure half: label selectors, owners, templates, replicas, pools, HPAs, LimitRanges, filtering."""

from __future__ import annotations

from typing import Any

import pytest

from podtailor.resources import Resources
from recommender.report import objects as ob
from recommender.report.discovery import assemble
from recommender.report.types import KINDS, Role

Mi = 2**20


def meta(name: str, ns: str = "a", owner: tuple[str, str] | None = None, **labels: str) -> dict[str, Any]:
    m: dict[str, Any] = {"name": name, "namespace": ns, "labels": labels}
    if owner:
        m["ownerReferences"] = [{"kind": owner[0], "name": owner[1], "controller": True}]
    return m


def template(*names: str, init: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"template": {"spec": {"initContainers": init or [], "containers": [
        {"name": n, "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}} for n in names]}}}


def pod(name: str, owner: tuple[str, str] | None, node: str = "n1", **labels: str) -> dict[str, Any]:
    return {"metadata": meta(name, owner=owner, **labels), "spec": {"nodeName": node, "containers": [
        {"name": "app", "resources": {"requests": {"cpu": "100m"}},
         "resizePolicy": [{"resourceName": "memory", "restartPolicy": "RestartContainer"}]}]}}


@pytest.mark.parametrize("selector, labels, ok", [
    ("", {}, True), ("a=b", {"a": "b"}, True), ("a==b", {"a": "c"}, False), ("a!=b", {}, True),
    ("a", {"a": ""}, True), ("!a", {"a": "x"}, False), ("a in (x, y),b", {"a": "y", "b": "1"}, True),
    ("a notin (x,y)", {"a": "x"}, False), ("a notin (x,y)", {}, True), ("team=a,tier!=batch", {"team": "a"}, True),
])
def test_label_selectors(selector: str, labels: dict[str, str], ok: bool) -> None:
    assert ob.matches(ob.parse_selector(selector), labels) is ok


def test_bad_selector() -> None:
    with pytest.raises(ob.SelectorError):
        ob.parse_selector("a in (b")


def test_containers_sidecars_and_init() -> None:
    spec = {"initContainers": [{"name": "proxy", "restartPolicy": "Always"}, {"name": "setup"}],
            "containers": [{"name": "app", "resources": {"limits": {"memory": "1Gi"}},
                            "resizePolicy": [{"resourceName": "cpu", "restartPolicy": "RestartContainer"}]}]}
    out = ob.containers(spec)
    assert [(c.name, c.role) for c in out] == [("proxy", Role.SIDECAR), ("app", Role.CONTAINER), ("setup", Role.INIT)]
    assert out[1].current.limits == Resources(memory_bytes=1024 * Mi)
    assert out[1].resize_policy == {"cpu": "RestartContainer"}
    assert [c.name for c in ob.containers(spec, with_init=False)] == ["proxy", "app"]


def test_assemble_keeps_top_level_workloads_and_attaches_pods() -> None:
    raw = {
        "Deployment": [{"metadata": meta("web", team="x"), "spec": {"replicas": 3, **template("app")}}],
        "ReplicaSet": [{"metadata": meta("web-1", owner=("Deployment", "web")), "spec": template("app")},
                       {"metadata": meta("lonely", team="x"), "spec": {"replicas": 2, **template("app")}}],
        "CronJob": [{"metadata": meta("nightly"), "spec": {"jobTemplate": {"spec": template("run")}}}],
        "Job": [{"metadata": meta("nightly-1", owner=("CronJob", "nightly")), "spec": template("run")},
                {"metadata": meta("once"), "spec": {"parallelism": 4, **template("run")}}],
        "DaemonSet": [{"metadata": meta("agent"), "spec": template("a"), "status": {"desiredNumberScheduled": 5}}],
        "Rollout": [{"metadata": meta("canary"), "spec": {"replicas": 2, "workloadRef": {
            "kind": "Deployment", "name": "web"}}}],
        "Pod": [pod("web-1-x", ("ReplicaSet", "web-1")), pod("web-1-y", ("ReplicaSet", "web-1"), node="n2"),
                pod("nightly-1-z", ("Job", "nightly-1")), pod("bare", None, team="x"),
                pod("static", ("Node", "n1"))],
        "Node": [{"metadata": {"name": "n1", "labels": {"karpenter.sh/nodepool": "general"}},
                  "status": {"allocatable": {"cpu": "4", "memory": "16Gi"}}}],
        "HorizontalPodAutoscaler": [{"metadata": meta("h"), "spec": {"scaleTargetRef": {"kind": "Deployment",
                                                                                        "name": "web"}}}],
        "LimitRange": [{"metadata": meta("lr"), "spec": {"limits": [
            {"type": "Container", "max": {"cpu": "2"}}, {"type": "Container", "max": {"cpu": "1"}},
            {"type": "Pod", "max": {"cpu": "8"}}]}}],
    }
    inv = assemble(raw, [], frozenset(KINDS), None)
    found = {(w.kind, w.name): w for w in inv.workloads}
    assert set(found) == {("Deployment", "web"), ("ReplicaSet", "lonely"), ("CronJob", "nightly"), ("Job", "once"),
                          ("DaemonSet", "agent"), ("Rollout", "canary"), ("Pod", "bare"), ("Pod", "static")}
    assert [p.name for p in found[("Deployment", "web")].pods] == ["web-1-x", "web-1-y"]
    assert [p.name for p in found[("CronJob", "nightly")].pods] == ["nightly-1-z"]
    assert found[("Deployment", "web")].pods[0].containers[0].resize_policy == {"memory": "RestartContainer"}
    assert [c.name for c in found[("Rollout", "canary")].containers] == ["app"]  # the Deployment's template
    assert (found[("DaemonSet", "agent")].replicas, found[("Job", "once")].replicas) == (5, 4)
    assert inv.nodes["n1"].pool == "general" and inv.nodes["n1"].allocatable.cpu_millicores == 4000
    assert inv.hpa_resources[("a", "Deployment", "web")] == frozenset({"cpu"})  # no metrics: CPU by default
    assert inv.limit_ranges["a"].max.cpu_millicores == 1000  # tightest wins
    selected = assemble(raw, ob.parse_selector("team=x"), frozenset({"Deployment", "ReplicaSet", "Pod"}), None)
    assert {(w.kind, w.name) for w in selected.workloads} == {("Deployment", "web"), ("ReplicaSet", "lonely"),
                                                              ("Pod", "bare")}


def test_hpa_metrics_and_pool_label() -> None:
    hpa = {"metadata": meta("h"), "spec": {"scaleTargetRef": {"kind": "StatefulSet", "name": "db"}, "metrics": [
        {"type": "Resource", "resource": {"name": "memory", "target": {"type": "Utilization"}}},
        {"type": "Resource", "resource": {"name": "cpu", "target": {"type": "AverageValue"}}}]}}
    assert ob.hpa_target(hpa) == (("a", "StatefulSet", "db"), frozenset({"memory"}))
    node = {"metadata": {"name": "n", "labels": {"karpenter.sh/nodepool": "k", "custom/pool": "c"}}}
    assert ob.node_info(node, None).pool == "k" and ob.node_info(node, "custom/pool").pool == "c"
