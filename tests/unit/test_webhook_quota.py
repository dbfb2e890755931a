"""The webhook never mutates a pod into a ResourceQuota violation: such a pod is admitted at its own resources,
with a warning, the ``podtailor.io/admission-held`` annotation (the updater records the Event) and the outcome
``quota-exceeded``.

The default pod (tests/builders/webhook.py) asks cpu 500m / 1 limit, memory 512Mi / 1Gi; the default VPA target is
cpu 250m, memory 256Mi (a decrease). ``grow`` raises cpu to 2 (limit 4 by the 1:2 ratio).
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry

from tests.builders.webhook import NS, apply, owned, patch_of, pod, review, vpa
from updater.policy.quota import HELD_ANNOTATION
from updater.webhook.cache import build_snapshot
from updater.webhook.metrics import WebhookMetrics
from updater.webhook.mutation import Outcome
from updater.webhook.review import admit
from updater.webhook.server import WebhookReadiness, _App

GROW = {"cpu": "2", "memory": "512Mi"}


def quota(hard: dict[str, str], used: dict[str, str], **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": "compute", "namespace": NS}, "spec": {"hard": hard, **spec},
            "status": {"hard": hard, "used": used}}


def cached(*quotas: dict[str, Any], target: dict[str, str] = GROW) -> Any:
    """The webhook's cache: the VPA (target ``target``), the default ReplicaSet of Deployment web, ``quotas``."""
    return build_snapshot({"VerticalPodAutoscaler": [vpa(target=target)], "ReplicaSet": [owned(
        "ReplicaSet", "web-abc", "Deployment", "web")], "ResourceQuota": list(quotas)})


def test_a_target_that_would_exceed_the_quota_leaves_the_pod_as_it_came() -> None:
    # used 3 + the new pod's 2 cores = 5 > hard 4; the pod as it came (500m) fits: 3.5 <= 4.
    obj = pod()
    answer, outcome = admit(review(obj), cached(quota({"requests.cpu": "4"}, {"requests.cpu": "3"})))
    assert outcome == Outcome.QUOTA_EXCEEDED
    warning = answer["response"]["warnings"][0]
    assert "ResourceQuota compute: requests.cpu used 3000m + 2000m > hard 4000m" in warning
    out = apply(obj, patch_of(answer))
    assert out["spec"] == obj["spec"]  # resources untouched
    assert out["metadata"]["annotations"] == {HELD_ANNOTATION: warning}


def test_a_target_that_fits_is_applied() -> None:
    _, outcome = admit(review(pod()), cached(quota({"requests.cpu": "6"}, {"requests.cpu": "3"})))
    assert outcome == Outcome.MUTATED


def test_a_decrease_is_applied_even_in_a_full_namespace() -> None:
    # The target (250m) uses less than the pod as it came (500m): our change is never what a quota refuses.
    answer, outcome = admit(review(pod()), cached(quota({"requests.cpu": "1"}, {"requests.cpu": "1"}),
                                                  target={"cpu": "250m", "memory": "256Mi"}))
    assert outcome == Outcome.MUTATED and patch_of(answer)


def test_limits_quotas_and_scopes_count() -> None:
    # limits.cpu: 1 -> 4 (ratio kept), used 2 + 4 = 6 > 5.
    _, outcome = admit(review(pod()), cached(quota({"limits.cpu": "5"}, {"limits.cpu": "2"})))
    assert outcome == Outcome.QUOTA_EXCEEDED
    # A quota for BestEffort pods does not apply to this Burstable one.
    _, outcome = admit(review(pod()), cached(quota({"requests.cpu": "1"}, {"requests.cpu": "1"},
                                                   scopes=["BestEffort"])))
    assert outcome == Outcome.MUTATED


def test_the_server_counts_the_outcome() -> None:
    registry = CollectorRegistry()
    app = _App(cached(quota({"requests.cpu": "4"}, {"requests.cpu": "3"})), registry, WebhookMetrics(registry),
               WebhookReadiness())
    app.mutate(review(pod()))
    assert registry.get_sample_value("podtailor_webhook_admissions_total", {"outcome": "quota-exceeded"}) == 1.0


def test_the_updater_records_the_held_pod_as_an_event_once() -> None:
    from tests.builders.policy import pod as pod_view
    from updater.rollout.act.executor import Executor

    class Recorder:
        def __init__(self) -> None:
            self.events: list[tuple[str, str, str]] = []

        def record(self, *, namespace: str, kind: str, name: str, uid: str, reason: str, message: str,
                   warning: bool = False) -> None:
            self.events.append((f"{kind}/{name}", reason, message))

    recorder = Recorder()
    executor = Executor(read=lambda: None, planner=lambda **_: None, store=None, resizer=None,  # type: ignore[arg-type]
                        recorder=recorder, policy=lambda _: [])
    held = pod_view("web-1", annotations={HELD_ANNOTATION: "podtailor: VPA web target would exceed ..."})
    executor._note_admission_held([held, pod_view("web-2")])
    executor._note_admission_held([held])
    assert recorder.events == [("Pod/web-1", "TargetExceedsQuota", "podtailor: VPA web target would exceed ...")]
