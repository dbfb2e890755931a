"""Worked examples of admission: the VPA target through the planner's helpers, as JSONPatch on a new pod."""

from __future__ import annotations

from typing import Any

from podtailor.resize.changes import Constraints
from podtailor.resize.types import ContainerTarget, ContainerView
from podtailor.resources import Resources
from podtailor.vpa import UpdateMode
from tests.builders.webhook import NS, apply, container, owned, patch_of, pod, review, snapshot, vpa
from updater.policy.types import WorkloadTarget
from updater.webhook.mutation import AdmissionDecision, Outcome, PodResources, decide, summary
from updater.webhook.review import ANNOTATION, admit

MI = 2**20


def admitted(obj: dict[str, Any], *vpas: dict[str, Any], **kwargs: Any) -> tuple[dict[str, Any], Outcome, Any]:
    """(the pod after the patch, outcome, the response)."""
    answer, outcome = admit(review(obj), snapshot(*vpas, **kwargs))
    resp = answer["response"]
    return (apply(obj, patch_of(answer)) if "patch" in resp else obj), outcome, resp


def res_of(obj: dict[str, Any], i: int = 0, key: str = "containers") -> dict[str, Any]:
    return dict(obj["spec"][key][i]["resources"])


def test_target_keeps_the_limit_ratio() -> None:
    # 500m/1 core with target 250m: limit ceil(1000 x 250 / 500) = 500m; memory 512Mi/1Gi with target 256Mi:
    # limit 1Gi x 256 / 512 = 512Mi.
    out, outcome, resp = admitted(pod(), vpa())
    assert outcome == Outcome.MUTATED and resp["allowed"] is True
    assert res_of(out) == {"requests": {"cpu": "250m", "memory": "256Mi"}, "limits": {"cpu": "500m", "memory": "512Mi"}}
    assert out["metadata"]["annotations"][ANNOTATION] == "web: app cpu 250m memory 256Mi"


def test_guaranteed_stays_guaranteed() -> None:
    # request == limit: the limit follows the request exactly (cpu 1/1 -> 250m/250m).
    g = container(requests={"cpu": "1", "memory": "1Gi"}, limits={"cpu": "1", "memory": "1Gi"})
    out, outcome, _ = admitted(pod(g), vpa())
    assert outcome == Outcome.MUTATED
    assert res_of(out) == {"requests": {"cpu": "250m", "memory": "256Mi"}, "limits": {"cpu": "250m", "memory": "256Mi"}}


def test_qos_change_is_refused_with_a_warning() -> None:
    # RequestsOnly on a Burstable pod (cpu 500m/1, memory 1Gi/1Gi): target cpu 2 is capped at the 1-core limit,
    # so every request would equal its limit: Burstable -> Guaranteed. The pod is admitted as it is.
    b = container(requests={"cpu": "500m", "memory": "1Gi"}, limits={"cpu": "1", "memory": "1Gi"})
    policy = [{"containerName": "*", "controlledValues": "RequestsOnly"}]
    out, outcome, resp = admitted(pod(b), vpa(target={"cpu": "2", "memory": "1Gi"}, policies=policy))
    assert outcome == Outcome.QOS_WOULD_CHANGE and "patch" not in resp and out == pod(b)
    assert "Burstable to Guaranteed" in resp["warnings"][0] and len(resp["warnings"][0]) <= 250


def test_best_effort_pod_is_not_given_requests() -> None:
    _, outcome, resp = admitted(pod(container()), vpa())
    assert outcome == Outcome.QOS_WOULD_CHANGE and "BestEffort to Burstable" in resp["warnings"][0]


def test_requests_only_keeps_limits() -> None:
    policy = [{"containerName": "app", "controlledValues": "RequestsOnly"}]
    out, outcome, _ = admitted(pod(), vpa(policies=policy))
    assert outcome == Outcome.MUTATED
    assert res_of(out) == {"requests": {"cpu": "250m", "memory": "256Mi"}, "limits": {"cpu": "1", "memory": "1Gi"}}


def test_min_and_max_allowed_clamp_the_target() -> None:
    # cpu target 250m < minAllowed 300m -> 300m, limit ceil(1000 x 300 / 500) = 600m; memory 256Mi > max 200Mi
    # -> 200Mi, limit 1Gi x 200 / 512 = 400Mi.
    policy = [{"containerName": "app", "minAllowed": {"cpu": "300m"}, "maxAllowed": {"memory": "200Mi"}}]
    out, _, _ = admitted(pod(), vpa(policies=policy))
    assert res_of(out) == {"requests": {"cpu": "300m", "memory": "200Mi"}, "limits": {"cpu": "600m", "memory": "400Mi"}}


def test_controlled_resources_only_cpu() -> None:
    out, _, _ = admitted(pod(), vpa(policies=[{"containerName": "*", "controlledResources": ["cpu"]}]))
    assert res_of(out) == {"requests": {"cpu": "250m", "memory": "512Mi"}, "limits": {"cpu": "500m", "memory": "1Gi"}}
    assert out["metadata"]["annotations"][ANNOTATION] == "web: app cpu 250m memory 512Mi"


def test_sidecar_is_mutated_and_plain_init_container_untouched() -> None:
    sidecar = container("proxy", requests={"cpu": "100m", "memory": "64Mi"}, restartPolicy="Always")
    setup = container("setup", requests={"cpu": "100m", "memory": "64Mi"})
    obj = pod(pod()["spec"]["containers"][0], init=(setup, sidecar))
    target = vpa(extra=[{"containerName": "proxy", "target": {"cpu": "50m", "memory": "32Mi"}},
                        {"containerName": "setup", "target": {"cpu": "1m", "memory": "1Mi"}}])
    out, outcome, _ = admitted(obj, target)
    assert outcome == Outcome.MUTATED
    assert res_of(out, 0, "initContainers") == {"requests": {"cpu": "100m", "memory": "64Mi"}}
    assert res_of(out, 1, "initContainers") == {"requests": {"cpu": "50m", "memory": "32Mi"}}
    assert res_of(out)["requests"] == {"cpu": "250m", "memory": "256Mi"}
    assert out["metadata"]["annotations"][ANNOTATION] == "web: proxy cpu 50m memory 32Mi; app cpu 250m memory 256Mi"


def test_off_mode_and_per_container_off_are_untouched() -> None:
    for target in (vpa(mode="Off"), vpa(policies=[{"containerName": "app", "mode": "Off"}])):
        out, outcome, resp = admitted(pod(), target)
        assert "patch" not in resp and out == pod()
        assert outcome in (Outcome.MODE_OFF, Outcome.UNCHANGED)


def test_every_acting_mode_mutates_at_admission() -> None:
    for mode in ("Initial", "Recreate", "InPlaceOrRecreate", "InPlace", "Auto"):
        assert admitted(pod(), vpa(mode=mode))[1] == Outcome.MUTATED, mode


def test_stale_target_is_applied_as_is_even_when_lower() -> None:
    out, outcome, _ = admitted(pod(), vpa(stale=True))
    assert outcome == Outcome.MUTATED and res_of(out)["requests"]["cpu"] == "250m"  # below the pod's 500m


def test_malformed_quantity_in_vpa_or_pod_gives_no_patch_and_a_warning() -> None:
    _, outcome, resp = admitted(pod(), vpa(target={"cpu": "lots", "memory": "1Gi"}))
    assert outcome == Outcome.MALFORMED and "patch" not in resp and "lots" in resp["warnings"][0]
    bad = container(requests={"cpu": "-1", "memory": "1Gi"})
    _, outcome, resp = admitted(pod(bad), vpa())
    assert outcome == Outcome.MALFORMED and "patch" not in resp and resp["allowed"] is True


def test_no_vpa_or_no_owner_is_allowed_unchanged() -> None:
    assert admitted(pod(), vpa(workload="other"))[1] == Outcome.NO_VPA
    assert admitted(pod(owner=None), vpa())[1] == Outcome.NO_VPA


def test_limit_range_bounds_the_request_like_the_updater() -> None:
    lr = {"metadata": {"name": "lr", "namespace": NS},
          "spec": {"limits": [{"type": "Container", "min": {"cpu": "400m"}}]}}
    out, _, _ = admitted(pod(), vpa(), limit_ranges=(lr,))
    assert res_of(out)["requests"]["cpu"] == "400m"  # 250m raised to the LimitRange min


def test_hpa_resource_keeps_its_request() -> None:
    hpa = {"metadata": {"name": "h", "namespace": NS}, "spec": {
        "scaleTargetRef": {"kind": "Deployment", "name": "web"},
        "metrics": [{"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization"}}}]}}
    out, _, _ = admitted(pod(), vpa(), hpas=(hpa,))
    assert res_of(out)["requests"] == {"cpu": "500m", "memory": "256Mi"}


def test_cronjob_pod_through_its_job_and_a_new_replicaset_by_template_hash() -> None:
    job_pod = pod(owner=("Job", "nightly-29001"), labels={})
    target = vpa("nightly", kind="CronJob")
    assert admitted(job_pod, target, jobs=(owned("Job", "nightly-29001", "CronJob", "nightly"),))[1] == Outcome.MUTATED
    assert admitted(job_pod, target)[1] == Outcome.MUTATED  # Job not listed yet: the CronJob naming rule
    fresh = pod(owner=("ReplicaSet", "web-xyz"), labels={"pod-template-hash": "xyz"})
    assert admitted(fresh, vpa(), replicasets=())[1] == Outcome.MUTATED


def test_other_resources_are_kept_verbatim() -> None:
    c = container(requests={"cpu": "500m", "memory": "512Mi", "nvidia.com/gpu": "1"},
                  limits={"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "1"})
    out, _, _ = admitted(pod(c), vpa(target={"cpu": "250m", "memory": "512Mi"}))
    assert res_of(out) == {"requests": {"cpu": "250m", "memory": "512Mi", "nvidia.com/gpu": "1"},
                           "limits": {"cpu": "500m", "memory": "1Gi", "nvidia.com/gpu": "1"}}


def test_pod_level_resources_are_left_alone() -> None:
    obj = pod()
    obj["spec"]["resources"] = {"requests": {"cpu": "1"}}
    assert admitted(obj, vpa())[1] == Outcome.POD_LEVEL


def test_decide_directly_and_the_summary_bound() -> None:
    view = ContainerView(name="a", requests=Resources(cpu_millicores=100), limits=Resources())
    t = ContainerTarget(name="a", target=Resources(cpu_millicores=200), lower_bound=Resources(),
                        upper_bound=Resources())
    wt = WorkloadTarget(namespace=NS, workload_kind="Deployment", workload_name="w", vpa_name="v",
                        update_mode=UpdateMode.AUTO, containers={"a": t})
    d = decide(PodResources(containers=(view,)), wt, Constraints())
    assert d.outcome == Outcome.MUTATED and d.changes[0].new_requests == Resources(cpu_millicores=200)
    many = AdmissionDecision(outcome=Outcome.MUTATED, vpa_name="v", changes=d.changes * 100)
    assert len(summary(many)) == 512 and summary(many).endswith("...")
    assert decide(PodResources(containers=(view,)), None, Constraints()).outcome == Outcome.NO_VPA
