"""The disruption column: the updater's planner math on each pod, outcome by outcome."""

from __future__ import annotations

from podtailor.resize import changes as ch
from podtailor.resources import CurrentResources, Resources
from podtailor.vpa import ControlledValues
from recommender.report.disruption import plan_pod, plan_workload, planned, target_of
from recommender.report.types import ContainerSpec, Disruption, NodeInfo, PodInfo, Role

Mi, Gi = 2**20, 2**30
NODE = NodeInfo(name="n1", pool="p", allocatable=Resources(cpu_millicores=4000, memory_bytes=16 * Gi))
NONE = ch.Constraints()


def c(name: str, cpu: int | None, mem: int | None, cpu_lim: int | None = None, mem_lim: int | None = None,
      memory_policy: str | None = None) -> ContainerSpec:
    return ContainerSpec(name=name, role=Role.CONTAINER, current=CurrentResources(
        requests=Resources(cpu_millicores=cpu, memory_bytes=mem), limits=Resources(cpu_millicores=cpu_lim,
                                                                                  memory_bytes=mem_lim)),
        resize_policy={"memory": memory_policy} if memory_policy else {})


def pod(*containers: ContainerSpec, restart_policy: str = "Always", name: str = "p-0") -> PodInfo:
    return PodInfo(name=name, node="n1", restart_policy=restart_policy, containers=containers)


def t(name: str, cpu: int | None, mem: int | None) -> dict[str, ch.ContainerTarget]:
    res = Resources(cpu_millicores=cpu, memory_bytes=mem)
    return {name: target_of(name, res, res, res)}


def outcome(p: PodInfo, targets: dict[str, ch.ContainerTarget], cons: ch.Constraints = NONE) -> tuple[str, str]:
    o = plan_pod(p, targets, cons, NODE, 0.10)
    return o.disruption.value, o.reason


def test_cpu_only_change_is_online_even_with_restart_on_memory() -> None:
    p = pod(c("app", 500, 256 * Mi, 1000, 512 * Mi, "RestartContainer"))
    assert outcome(p, t("app", 250, 256 * Mi)) == ("in-place", "change")


def test_memory_change_on_a_restart_container_restarts() -> None:
    p = pod(c("app", 500, 256 * Mi, 1000, 512 * Mi, "RestartContainer"))
    assert outcome(p, t("app", 500, 384 * Mi)) == ("in-place-restart", "change")


def test_hpa_on_memory_keeps_memory_so_only_cpu_moves() -> None:
    p = pod(c("app", 500, 256 * Mi, 1000, 512 * Mi, "RestartContainer"))
    cons = ch.Constraints(hpa_resources=frozenset({"memory"}))
    assert outcome(p, t("app", 250, 384 * Mi), cons) == ("in-place", "change")


def test_guaranteed_stays_guaranteed_and_in_place() -> None:
    spec = c("app", 500, 512 * Mi, 500, 512 * Mi)
    target = t("app", 200, 345 * Mi)
    assert outcome(pod(spec), target) == ("in-place", "change")
    new = planned(spec, target["app"], NONE)
    assert new.requests == new.limits == Resources(cpu_millicores=200, memory_bytes=345 * Mi)


def test_qos_change_means_replacement() -> None:
    # Guaranteed with limits following the requests stays Guaranteed; with RequestsOnly the limits stay put,
    # requests drop below them, and the pod would become Burstable: the updater replaces it instead.
    a = c("a", 500, 512 * Mi, 500, 512 * Mi)
    p = pod(a, c("b", 100, 64 * Mi, 100, 64 * Mi))
    targets = t("a", 200, 345 * Mi)
    assert outcome(p, targets) == ("in-place", "change")  # limits follow: still Guaranteed
    burstable_to_be = {"a": ch.ContainerTarget(name="a", target=Resources(cpu_millicores=200, memory_bytes=345 * Mi),
                                               lower_bound=Resources(), upper_bound=Resources(),
                                               controlled_values=ControlledValues.REQUESTS_ONLY)}
    assert outcome(p, burstable_to_be) == ("replacement", "qos-would-change")


def test_above_node_allocatable_means_replacement() -> None:
    p = pod(c("app", 500, 256 * Mi, None, 512 * Mi))
    assert outcome(p, t("app", 6000, 256 * Mi)) == ("replacement", "above-node-allocatable")


def test_restart_policy_never_with_a_restarting_change_means_replacement() -> None:
    p = pod(c("app", 500, 256 * Mi, 1000, 512 * Mi, "RestartContainer"), restart_policy="Never")
    assert outcome(p, t("app", 500, 384 * Mi)) == ("replacement", "restart-policy-never-needs-restart")


def test_best_effort_is_left_alone_and_small_changes_are_none() -> None:
    assert outcome(pod(c("app", None, None)), t("app", 100, 100 * Mi))[0] == "left-alone"
    p = pod(c("app", 500, 256 * Mi, 1000, 512 * Mi))
    assert outcome(p, t("app", 520, 256 * Mi)) == ("none", "below-threshold")  # 4% < 10%
    assert outcome(p, t("app", 500, 256 * Mi)) == ("none", "no-change")


def test_the_workload_takes_its_most_disruptive_pod() -> None:
    online = pod(c("app", 500, 256 * Mi, 1000, 512 * Mi), name="a")
    never = pod(c("app", 500, 256 * Mi, 1000, 512 * Mi, "RestartContainer"), restart_policy="Never", name="b")
    o = plan_workload([online, never], t("app", 500, 384 * Mi), NONE, {"n1": NODE}, 0.10)
    assert (o.disruption, o.pods) == (Disruption.REPLACEMENT, 1) and "(1 of 2 pods)" in o.message
    assert plan_workload([], t("app", 1, 1), NONE, {}, 0.1).disruption == Disruption.NONE
