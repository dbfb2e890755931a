"""Worked examples of the per-container math: proportional limits, RequestsOnly, HPA, LimitRange, QoS."""

from __future__ import annotations

from podtailor.resize.changes import Constraints, container_change, proportional_limit, qos_class
from podtailor.resize.types import LimitRangeView, QoS, Reason
from podtailor.vpa import ControlledValues
from tests.builders.policy import GI, MI, container, ctarget, decide_one, pod, res, wtarget
from updater.policy.types import Action, HpaView


def test_proportional_limit_integer_math() -> None:
    assert proportional_limit(500, 1000, 750) == 1500  # 1000 x 750 / 500
    assert proportional_limit(300, 1000, 100) == 334  # 333.33 rounded up
    assert proportional_limit(None, 1000, 100) == 100  # no request: limit = request
    assert proportional_limit(500, 500, 800) == 800  # request == limit stays equal
    assert proportional_limit(500, None, 800) is None  # no limit stays none


def test_proportional_limits_keep_the_ratio() -> None:
    # cpu 500m/1 core -> target 750m: limit 1000 x 750 / 500 = 1500m; memory 512Mi/1Gi -> 768Mi gives 1.5Gi.
    view = container(cpu=500, cpu_lim=1000, mem=512 * MI, mem_lim=GI)
    change = container_change(view, ctarget(cpu=750, mem=768 * MI), Constraints())
    assert change.new_requests == res(750, 768 * MI)
    assert change.new_limits == res(1500, 1536 * MI)
    assert not change.restarts


def test_guaranteed_pod_stays_guaranteed() -> None:
    # cpu 500m = limit, memory 1Gi = limit; target 750m / 1.5Gi: limits follow the requests exactly.
    p = pod(containers=[container(cpu=500, cpu_lim=500, mem=GI, mem_lim=GI)])
    assert p.qos == QoS.GUARANTEED
    d = decide_one(p, wtarget(ctarget(cpu=750, mem=3 * GI // 2)))
    assert d.action == Action.RESIZE_ONLINE and d.reason == Reason.CHANGE
    (c,) = d.changes
    assert c.new_requests == c.new_limits == res(750, 3 * GI // 2)


def test_burstable_becoming_guaranteed_falls_back() -> None:
    # RequestsOnly: cpu 500m/1000m, memory 1Gi/1Gi; target 2000m is capped at the 1000m limit, so every
    # request would equal its limit: Burstable -> Guaranteed, which the API refuses in place.
    p = pod(containers=[container(cpu=500, cpu_lim=1000, mem=GI, mem_lim=GI)])
    d = decide_one(p, wtarget(ctarget(cpu=2000, mem=GI, controlled_values=ControlledValues.REQUESTS_ONLY)))
    assert d.action == Action.FALLBACK and d.reason == Reason.QOS_WOULD_CHANGE
    assert "Burstable -> Guaranteed" in d.message


def test_requests_only_caps_at_the_limit_and_keeps_limits() -> None:
    # cpu 500m/1000m -> target 1500m: request capped at 1000m, limit stays 1000m; memory 512Mi/1Gi untouched
    # by the target (512Mi), so the pod stays Burstable.
    view = container(cpu=500, cpu_lim=1000, mem=512 * MI, mem_lim=GI)
    change = container_change(view, ctarget(cpu=1500, controlled_values=ControlledValues.REQUESTS_ONLY), Constraints())
    assert change.new_requests == res(1000, 512 * MI)
    assert change.new_limits == res(1000, GI)
    assert any("capped at the limit" in n for n in change.notes)


def test_hpa_on_cpu_keeps_cpu() -> None:
    # HPA scales on cpu utilization: cpu stays 500m/1000m; memory 512Mi -> 1Gi (limit 1Gi -> 2Gi).
    p = pod(containers=[container(cpu=500, cpu_lim=1000, mem=512 * MI, mem_lim=GI)])
    hpa = HpaView(namespace="shop", workload_kind="Deployment", workload_name="web",
                  utilization_resources=frozenset({"cpu"}))
    d = decide_one(p, wtarget(ctarget(cpu=2000, mem=GI)), hpas=[hpa])
    assert d.action == Action.RESIZE_ONLINE
    (c,) = d.changes
    assert c.new_requests == res(500, GI) and c.new_limits == res(1000, 2 * GI)
    assert "cpu request kept: HPA scales on cpu utilization" in c.notes


def test_limit_range_clamps_request_and_limit() -> None:
    # cpu 500m/1000m -> target 1000m gives limit 2000m; LimitRange max cpu 1500m clamps the limit to 1500m.
    lr = LimitRangeView(namespace="shop", max=res(cpu=1500))
    change = container_change(container(cpu=500, cpu_lim=1000), ctarget(cpu=1000), Constraints(limit_range=lr))
    assert change.new_requests.cpu_millicores == 1000 and change.new_limits.cpu_millicores == 1500
    # target 2000m: request clamped to 1500m too, limit = 1500m (never below the request).
    change = container_change(container(cpu=500, cpu_lim=1000), ctarget(cpu=2000), Constraints(limit_range=lr))
    assert change.new_requests.cpu_millicores == 1500 and change.new_limits.cpu_millicores == 1500
    assert any("LimitRange" in n for n in change.notes)


def test_limit_range_min_and_ratio() -> None:
    # min cpu 200m lifts a 100m target; maxLimitRequestRatio 1.5 caps a 3x limit: 200m -> limit 300m.
    lr = LimitRangeView(namespace="shop", min=res(cpu=200), max_limit_request_ratio_cpu=1.5)
    change = container_change(container(cpu=500, cpu_lim=1500), ctarget(cpu=100), Constraints(limit_range=lr))
    assert change.new_requests.cpu_millicores == 200 and change.new_limits.cpu_millicores == 300


def test_vpa_min_max_clamped_again() -> None:
    change = container_change(container(cpu=500), ctarget(cpu=5000, max_allowed=res(cpu=2000)), Constraints())
    assert change.new_requests.cpu_millicores == 2000


def test_uncontrolled_and_mode_off_resources_stay() -> None:
    view = container(cpu=500, mem=512 * MI)
    change = container_change(view, ctarget(cpu=900, mem=GI, controlled_resources=frozenset({"memory"})),
                              Constraints())
    assert change.new_requests == res(500, GI)
    change = container_change(view, ctarget(cpu=900, mem=GI, mode_off=True), Constraints())
    assert change.new_requests == view.requests


def test_restart_only_when_a_changed_resource_says_so() -> None:
    view = container(cpu=500, mem=512 * MI, policy={"memory": "RestartContainer"})
    assert not container_change(view, ctarget(cpu=900, mem=512 * MI), Constraints()).restarts
    assert container_change(view, ctarget(cpu=900, mem=GI), Constraints()).restarts


def test_qos_class_like_kubernetes() -> None:
    assert qos_class([(res(), res())]) == QoS.BEST_EFFORT
    assert qos_class([(res(100, 10), res(100, 10))]) == QoS.GUARANTEED
    assert qos_class([(res(None, None), res(100, 10))]) == QoS.GUARANTEED  # requests default to limits
    assert qos_class([(res(100, 10), res(100, 10)), (res(), res())]) == QoS.BURSTABLE
    assert qos_class([(res(100, None), res(200, None))]) == QoS.BURSTABLE


def test_without_keep_limit_ratio_limits_stay() -> None:
    # cpu 500m/2000m -> 750m: limit stays 2000m; 500m/500m -> 750m: the equal limit follows (750m);
    # 500m/600m -> 900m: a limit below the new request is raised to it.
    cons = Constraints(keep_limit_ratio=False)
    assert container_change(container(cpu_lim=2000), ctarget(), cons).new_limits.cpu_millicores == 2000
    assert container_change(container(cpu_lim=500), ctarget(), cons).new_limits.cpu_millicores == 750
    assert container_change(container(cpu_lim=600), ctarget(cpu=900), cons).new_limits.cpu_millicores == 900
