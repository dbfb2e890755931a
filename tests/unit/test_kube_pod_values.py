"""The pod adapter turns the API's own strings into enums at the first line that reads them: the
PodResizePending reason, the PodResizeInProgress Error reason and ``spec.restartPolicy``. A value the API does
not define is a malformed pod, named, never a string passed on."""

from __future__ import annotations

from typing import Any

import pytest

from podtailor.resize.types import PodRestartPolicy
from updater.answers import PendingReason
from updater.kube.fields import MalformedObject
from updater.kube.pods import convert_pod


def raw_pod(*, conditions: list[dict[str, Any]] | None = None, restart_policy: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"nodeName": "n1", "containers": [{"name": "app", "resources": {"requests": {"cpu": "1"}}}]}
    if restart_policy is not None:
        spec["restartPolicy"] = restart_policy
    return {"metadata": {"namespace": "ns", "name": "p", "uid": "u", "generation": 2,
                         "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": spec, "status": {"phase": "Running", "observedGeneration": 2, "conditions": conditions or []}}


def convert(raw: dict[str, Any]) -> Any:
    return convert_pod(raw, {}, lambda *_: ("Pod", "p"))


@pytest.mark.parametrize(("reason", "expected"), [(None, PendingReason.DEFERRED), ("Deferred", PendingReason.DEFERRED),
                                                  ("Infeasible", PendingReason.INFEASIBLE)])
def test_the_pending_reason_is_an_enum_and_a_condition_without_one_is_deferred(
        reason: str | None, expected: PendingReason) -> None:
    cond = {"type": "PodResizePending", "status": "True"} | ({"reason": reason} if reason else {})
    view, observation = convert(raw_pod(conditions=[cond]))
    assert view.resize_pending is expected and observation.resize_pending is expected


def test_no_pending_condition_is_none_and_an_unknown_reason_is_a_malformed_pod() -> None:
    view, observation = convert(raw_pod())
    assert view.resize_pending is None and observation.resize_pending is None
    bad = raw_pod(conditions=[{"type": "PodResizePending", "status": "True", "reason": "Later"}])
    with pytest.raises(MalformedObject, match=r"pod ns/p\.PodResizePending: .*'Later'"):
        convert(bad)


def test_an_in_progress_error_carries_its_message_and_plain_progress_does_not() -> None:
    error = {"type": "PodResizeInProgress", "status": "True", "reason": "Error", "message": "runtime said no"}
    _, observation = convert(raw_pod(conditions=[error]))
    assert observation.resize_in_progress and observation.resize_error == "runtime said no"
    _, observation = convert(raw_pod(conditions=[{"type": "PodResizeInProgress", "status": "True"}]))
    assert observation.resize_in_progress and observation.resize_error is None


@pytest.mark.parametrize(("raw", "expected"), [(None, PodRestartPolicy.ALWAYS), ("Never", PodRestartPolicy.NEVER),
                                               ("OnFailure", PodRestartPolicy.ON_FAILURE)])
def test_restart_policy_is_an_enum_and_unset_means_always(raw: str | None, expected: PodRestartPolicy) -> None:
    view, _ = convert(raw_pod(restart_policy=raw))
    assert view.restart_policy is expected


def test_an_unknown_restart_policy_is_a_malformed_pod() -> None:
    with pytest.raises(MalformedObject, match=r"restartPolicy: 'Sometimes'"):
        convert(raw_pod(restart_policy="Sometimes"))
