"""CPU startup boost: the arithmetic, its validation, the webhook's boosted admission and the planner's un-boost.

NOW = 1_700_000_000.0 (tests.builders.policy). Webhook pods default to cpu 500m / limit 1 core, memory 512Mi /
1Gi; their VPA target is cpu 250m, memory 256Mi (tests.builders.webhook).
"""

from __future__ import annotations

import json
from dataclasses import replace
from fractions import Fraction
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from podtailor.resize.boost import (
    ANNOTATION,
    BoostError,
    BoostRecord,
    BoostType,
    CpuBoost,
    annotation_value,
    boosted_cpu,
    parse_boost,
    read_annotation,
)
from podtailor.resize.changes import Constraints, qos_class
from podtailor.resize.types import ContainerTarget, ContainerView, Reason
from podtailor.resources import Resources
from podtailor.vpa import ControlledValues, UpdateMode
from tests.builders import policy as pb
from tests.builders.webhook import apply, container, patch_of, pod, review, snapshot, vpa
from updater.policy.quota import BOOST_REJECTED_ANNOTATION
from updater.policy.types import Action, RolloutPolicy, WorkloadTarget
from updater.webhook import mutation
from updater.webhook.mutation import Outcome, PodResources
from updater.webhook.review import admit

Obj = dict[str, Any]


# ------------------------------------------------------------------------------------------- arithmetic
def test_factor_and_quantity_arithmetic() -> None:
    assert boosted_cpu(250, CpuBoost(type=BoostType.FACTOR, factor=Fraction(2))) == 500
    # 333 x 1.5 = 499.5, rounded up once: 500.
    assert boosted_cpu(333, parse_boost({"cpu": {"type": "Factor", "factor": 1.5}}, "b") or pytest.fail()) == 500
    # 250m + 0.5 core = 750m.
    assert boosted_cpu(250, parse_boost({"cpu": {"type": "Quantity", "quantity": "0.5"}}, "b") or pytest.fail()) == 750


def test_parse_reads_vpa_shape_and_default_duration() -> None:
    boost = parse_boost({"cpu": {"type": "Factor", "factor": 3, "durationSeconds": 30}}, "b")
    assert boost == CpuBoost(type=BoostType.FACTOR, factor=Fraction(3), duration_s=30)
    quantity = parse_boost({"cpu": {"type": "Quantity", "quantity": "250m"}}, "b")
    assert quantity == CpuBoost(type=BoostType.QUANTITY, quantity_millicores=250, duration_s=0)
    assert parse_boost(None, "b") is None and parse_boost({}, "b") is None


@pytest.mark.parametrize(("cpu", "field"), [
    ({"type": "Factor", "factor": 0.5}, "below 1"),
    ({"type": "Factor", "factor": 0}, "below 1"),
    ({"type": "Factor", "factor": 1000}, "above 100"),
    ({"type": "Factor", "factor": "x"}, "not a number"),
    ({"type": "Factor"}, "not a number"),
    ({"type": "Quantity", "quantity": "-1"}, "quantity"),
    ({"type": "Quantity", "quantity": "lots"}, "quantity"),
    ({"type": "Quantity", "quantity": "0"}, "adds nothing"),
    ({"type": "Quantity", "quantity": "1000000"}, "above 256"),
    ({"type": "Percent", "factor": 2}, "type"),
    ({"factor": 2}, "type"),
    ({"type": "Factor", "factor": 2, "durationSeconds": -5}, "durationSeconds"),
    ({"type": "Factor", "factor": 2, "durationSeconds": 1.5}, "durationSeconds"),
    ({"type": "Factor", "factor": 2, "durationSeconds": 10**9}, "durationSeconds"),
])
def test_invalid_boosts_are_rejected_naming_the_field(cpu: Obj, field: str) -> None:
    with pytest.raises(BoostError, match=field):
        parse_boost({"cpu": cpu}, "VPA shop/web")


def test_annotation_round_trips_and_ignores_garbage() -> None:
    records = {"app": BoostRecord(boosted_millicores=1500, target_millicores=750)}
    text = annotation_value(records)
    assert json.loads(text) == {"app": {"boosted": "1500m", "target": "750m"}}
    assert read_annotation(text) == records
    assert read_annotation("not json") == {} and read_annotation('{"app": {"boosted": "-1"}}') == {}


# ---------------------------------------------------------------------------------------------- webhook
def boost_vpa(cpu: Obj, **kw: Any) -> Obj:
    obj = vpa(**kw)
    obj["spec"]["startupBoost"] = {"cpu": cpu}
    return obj


def admitted(obj: Obj, *vpas: Obj) -> tuple[Obj, Outcome, Obj]:
    answer, outcome = admit(review(obj), snapshot(*vpas))
    resp = answer["response"]
    return (apply(obj, patch_of(answer)) if "patch" in resp else obj), outcome, resp


def test_webhook_boosts_request_and_limit_in_proportion() -> None:
    # target 250m x 2 = 500m; the 500m/1 pod keeps its ratio: limit ceil(1000 x 500 / 500) = 1 core.
    # Memory gets its target as usual (256Mi, limit 512Mi).
    out, outcome, _ = admitted(pod(), boost_vpa({"type": "Factor", "factor": 2}))
    assert outcome == Outcome.MUTATED
    assert out["spec"]["containers"][0]["resources"] == {"requests": {"cpu": "500m", "memory": "256Mi"},
                                                        "limits": {"cpu": "1", "memory": "512Mi"}}
    assert json.loads(out["metadata"]["annotations"][ANNOTATION]) == {"app": {"boosted": "500m", "target": "250m"}}


def test_webhook_caps_the_boost_at_max_allowed() -> None:
    # 250m + 2 cores = 2250m, capped at maxAllowed 400m; limit ceil(1000 x 400 / 500) = 800m.
    policies = [{"containerName": "app", "maxAllowed": {"cpu": "400m"}}]
    out, _, _ = admitted(pod(), boost_vpa({"type": "Quantity", "quantity": "2"}, policies=policies))
    assert out["spec"]["containers"][0]["resources"]["requests"]["cpu"] == "400m"
    assert out["spec"]["containers"][0]["resources"]["limits"]["cpu"] == "800m"
    assert json.loads(out["metadata"]["annotations"][ANNOTATION]) == {"app": {"boosted": "400m", "target": "250m"}}


def test_webhook_container_policy_boost_wins_over_the_vpa_one() -> None:
    # VPA-wide factor 4, the container's own factor 2: 250m x 2 = 500m.
    policies = [{"containerName": "app", "startupBoost": {"cpu": {"type": "Factor", "factor": 2}}}]
    out, _, _ = admitted(pod(), boost_vpa({"type": "Factor", "factor": 4}, policies=policies))
    assert out["spec"]["containers"][0]["resources"]["requests"]["cpu"] == "500m"


def test_webhook_no_boost_when_the_target_is_already_at_max_allowed() -> None:
    policies = [{"containerName": "app", "maxAllowed": {"cpu": "250m"}}]
    out, outcome, _ = admitted(pod(), boost_vpa({"type": "Factor", "factor": 2}, policies=policies))
    assert outcome == Outcome.MUTATED and ANNOTATION not in out["metadata"]["annotations"]
    assert out["spec"]["containers"][0]["resources"]["requests"]["cpu"] == "250m"


def test_webhook_boost_never_changes_qos() -> None:
    # RequestsOnly on cpu 500m / limit 1, memory 1Gi / 1Gi: target 500m x 2 = 1 core would equal the limit and
    # make the pod Guaranteed; the boost is dropped, the pod is admitted at its (unchanged) target.
    b = container(requests={"cpu": "500m", "memory": "1Gi"}, limits={"cpu": "1", "memory": "1Gi"})
    policies = [{"containerName": "*", "controlledValues": "RequestsOnly"}]
    out, outcome, _ = admitted(pod(b), boost_vpa({"type": "Factor", "factor": 2},
                                                 target={"cpu": "500m", "memory": "1Gi"}, policies=policies))
    assert outcome == Outcome.UNCHANGED and out["spec"]["containers"][0]["resources"]["requests"]["cpu"] == "500m"
    assert ANNOTATION not in (out["metadata"].get("annotations") or {})


def test_invalid_boost_admits_at_target_with_warning_and_annotation() -> None:
    out, outcome, resp = admitted(pod(), boost_vpa({"type": "Factor", "factor": 0.5}))
    assert outcome == Outcome.MUTATED
    assert out["spec"]["containers"][0]["resources"]["requests"] == {"cpu": "250m", "memory": "256Mi"}
    assert ANNOTATION not in out["metadata"]["annotations"]
    assert "below 1" in out["metadata"]["annotations"][BOOST_REJECTED_ANNOTATION]
    assert any("startupBoost not applied" in w and "below 1" in w for w in resp["warnings"])


# ------------------------------------------------------------------------------------------- un-boosting
BOOSTED = {ANNOTATION: annotation_value({"app": BoostRecord(boosted_millicores=1500, target_millicores=750)})}


def boosted_pod(*, ready_since: float | None = pb.NOW - 10, cpu: int = 1500, **kw: Any) -> Any:
    return pb.pod(containers=[pb.container(cpu=cpu)], annotations=BOOSTED, ready_since_s=ready_since,
                  created_s=pb.NOW - 20, **kw)


def boosted_target(duration: int = 0, **kw: Any) -> Any:
    boost = CpuBoost(type=BoostType.FACTOR, factor=Fraction(2), duration_s=duration)
    return pb.wtarget(pb.ctarget(startup_boost=boost, **kw))


def test_boosted_pod_is_not_above_target_until_due() -> None:
    # Ready 10 s ago, durationSeconds 30: due in 20 s; the 1500m request is not treated as a decrease to make.
    d = pb.decide_one(boosted_pod(), boosted_target(30))
    assert (d.action, d.reason) == (Action.SKIP, Reason.STARTUP_BOOST) and "in 20s" in d.message
    assert pb.decide_one(boosted_pod(ready=False, ready_since=None), boosted_target(30)).reason == Reason.STARTUP_BOOST


def test_due_boost_is_taken_back_in_place_despite_age_and_threshold() -> None:
    # Ready 10 s ago, duration 0: due. The pod is 20 s old (minimum age 300 s) and the policy threshold is 90%:
    # the un-boost 1500m -> 750m (-50%) goes ahead anyway, as an online resize, into a batch.
    result = pb.run([boosted_pod()], [boosted_target()], policy=RolloutPolicy(change_threshold=0.9))
    d = pb.only(result)
    assert (d.action, d.reason) == (Action.RESIZE_ONLINE, Reason.UNBOOST)
    assert d.changes[0].new_requests.cpu_millicores == 750
    assert [b.pods for b in result.batches] == [(d.key,)]


def test_unboost_honours_resize_policy() -> None:
    p = pb.pod(containers=[pb.container(cpu=1500, policy={"cpu": "RestartContainer"})], annotations=BOOSTED,
               ready_since_s=pb.NOW - 10)
    d = pb.decide_one(p, boosted_target())
    assert (d.action, d.reason) == (Action.RESIZE_RESTART, Reason.UNBOOST) and d.changes[0].restarts


def test_infeasible_unboost_leaves_pod_boosted_never_evicted() -> None:
    d = pb.decide_one(boosted_pod(resize_pending="Infeasible"), boosted_target())
    assert (d.action, d.reason) == (Action.SKIP, Reason.STARTUP_BOOST) and "never evicted" in d.message


def test_once_resized_the_annotation_no_longer_boosts() -> None:
    # The spec request 750m is not the recorded boosted 1500m: the pod is planned as any other, so the normal
    # minimum age applies again (20 s old < 300 s).
    d = pb.decide_one(boosted_pod(cpu=750), boosted_target())
    assert d.reason == Reason.TOO_YOUNG


# ------------------------------------------------------------------------------------------- properties
@settings(max_examples=300, deadline=None)
@given(req=st.integers(1, 8000), ratio=st.sampled_from([None, 1, 2, 4]), mem_guaranteed=st.booleans(),
       target=st.integers(1, 8000), factor=st.fractions(min_value=1, max_value=100, max_denominator=10),
       cap=st.one_of(st.none(), st.integers(1, 16000)), requests_only=st.booleans())
def test_boosted_admission_is_capped_never_below_target_and_keeps_qos(
        req: int, ratio: int | None, mem_guaranteed: bool, target: int, factor: Fraction, cap: int | None,
        requests_only: bool) -> None:
    # Invariants of a boosted admission: the CPU request is at least the unboosted target and at most
    # maxAllowed; the recorded target is what the pod would get unboosted; the QoS class never changes.
    mem = 256 * 2**20
    view = ContainerView(name="app", requests=Resources(cpu_millicores=req, memory_bytes=mem),
                         limits=Resources(cpu_millicores=None if ratio is None else req * ratio,
                                          memory_bytes=mem if mem_guaranteed else None))
    boost = CpuBoost(type=BoostType.FACTOR, factor=factor)
    ct = ContainerTarget(name="app", target=Resources(cpu_millicores=target, memory_bytes=mem),
                         lower_bound=Resources(), upper_bound=Resources(), startup_boost=boost,
                         max_allowed=Resources(cpu_millicores=cap),
                         controlled_values=ControlledValues.REQUESTS_ONLY if requests_only
                         else ControlledValues.REQUESTS_AND_LIMITS)
    wt = WorkloadTarget(namespace="shop", workload_kind="Deployment", workload_name="web", vpa_name="web",
                        update_mode=UpdateMode.AUTO, containers={"app": ct})
    pod_res = PodResources(containers=(view,))
    d = mutation.decide(pod_res, wt, Constraints())
    plain = mutation.decide(pod_res, replace(wt, containers={"app": replace(ct, startup_boost=None)}), Constraints())
    if "app" not in d.boosts:
        assert d == plain
        return
    # No change at all when the pod already asks for the boosted values (boosted, recorded all the same).
    new_requests, new_limits = (d.changes[0].new_requests, d.changes[0].new_limits) if d.changes else (
        view.requests, view.limits)
    record = d.boosts["app"]
    cpu = new_requests.cpu_millicores
    assert cpu == record.boosted_millicores and cpu is not None and cpu > record.target_millicores
    assert cap is None or cpu <= cap
    unboosted = plain.changes[0].new_requests.cpu_millicores if plain.changes else req
    assert record.target_millicores == unboosted
    assert qos_class([(new_requests, new_limits)]) == qos_class([(view.requests, view.limits)])


def test_boost_is_taken_back_whatever_the_update_mode() -> None:
    # The webhook boosts in Initial mode too; the updater, which otherwise leaves Initial pods alone, takes the
    # boost back (as VPA's updater does for any VPA with a startupBoost).
    boost = CpuBoost(type=BoostType.FACTOR, factor=Fraction(2))
    initial = pb.wtarget(pb.ctarget(startup_boost=boost), mode=UpdateMode.INITIAL)
    assert pb.decide_one(boosted_pod(), initial).reason == Reason.UNBOOST
    assert pb.decide_one(pb.pod(), initial).reason == Reason.UPDATE_MODE
