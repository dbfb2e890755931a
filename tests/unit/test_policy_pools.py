"""A DaemonSet's pod is resized to its own pool's value (``podtailor.poolrecs``), else to the status value;
an unusable per-pool annotation is refused whole, with the reason kept for the log."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from podtailor.poolrecs import ANNOTATION, PoolRecommendations, encode
from podtailor.resources import Resources
from podtailor.vpa import RecommendedContainerResources
from tests.builders.policy import MI, ctarget, node, pod, res, run, wtarget
from updater.kube.objects import convert_vpa


def vpa(annotation: str | None) -> dict[str, Any]:
    meta: dict[str, Any] = {"namespace": "sys", "name": "agent-vpa", "uid": "u1", "generation": 1}
    if annotation is not None:
        meta["annotations"] = {ANNOTATION: annotation}
    return {"metadata": meta, "spec": {"targetRef": {"kind": "DaemonSet", "name": "agent"},
                                       "updatePolicy": {"updateMode": "InPlaceOrRecreate"}},
            "status": {"recommendation": {"containerRecommendations": [
                {"containerName": "app", "target": {"cpu": "250m", "memory": "128Mi"}}]}}}


LARGE = encode(PoolRecommendations(pools={"large": {"app": RecommendedContainerResources(
    container_name="app", target=Resources(cpu_millicores=1600, memory_bytes=256 * MI))}}))


def test_the_annotation_becomes_per_pool_targets_with_the_containers_policy() -> None:
    target = convert_vpa(vpa(LARGE), replicas=2)
    assert target.pool_problem == ""
    large = target.pools["large"]["app"]
    assert large.target == res(1600, 256 * MI) and large.lower_bound == large.upper_bound == large.target
    assert target.for_pool("large").containers["app"] == large
    assert target.for_pool("small") is target  # no value for the pool: the status one
    assert target.containers["app"].target == res(250, 128 * MI)


def test_a_hostile_annotation_is_refused_and_the_status_value_serves_every_pool() -> None:
    for bad in ('{"version": 1, "pools": {"large": {"containerRecommendations": [{"containerName": "app", '
                '"target": {"cpu": "1e400"}}]}}}', "x" * 20000, '{"version": 9, "pools": {}}', "[" * 3000):
        target = convert_vpa(vpa(bad), replicas=2)
        assert target.pools == {} and target.pool_problem.startswith(f"annotation {ANNOTATION} refused")
        assert target.for_pool("large").containers["app"].target == res(250, 128 * MI)
    assert convert_vpa(vpa(None), replicas=2).pool_problem == ""


def test_each_pod_is_resized_to_its_own_pools_value() -> None:
    # both pods request 500m / 512Mi; the status says 750m, the large pool 2000m
    status = wtarget(ctarget(cpu=750), ns="sys", workload="agent", kind="DaemonSet", replicas=2)
    target = replace(status, pools={"large": {"app": ctarget(cpu=2000)}})
    pods = [pod("agent-s", ns="sys", workload="agent", kind="DaemonSet", node="s1", pool="small"),
            pod("agent-l", ns="sys", workload="agent", kind="DaemonSet", node="l1", pool="large")]
    nodes = [node("s1", pool="small", cpu=2000), node("l1", pool="large", cpu=32000)]
    decisions = {d.pod: d for d in run(pods, [target], nodes=nodes).decisions}
    assert decisions["agent-s"].changes[0].new_requests == res(750, 512 * MI)
    assert decisions["agent-l"].changes[0].new_requests == res(2000, 512 * MI)
