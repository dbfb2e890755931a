"""An Event is best effort and does not hold its caller through an API server outage (``podtailor.kube.events``)."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from kubernetes import client
from urllib3.exceptions import ReadTimeoutError

from podtailor.kube.events import QUIET_S, EventRecorder, ObjectRef

POD = ObjectRef(api_version="v1", kind="Pod", name="web-0", namespace="shop", uid="u-1")


class Core:
    """CoreV1Api's ``create_namespaced_event`` answering from a list: an exception to raise, or None to land."""

    def __init__(self, answers: list[BaseException | None]) -> None:
        self.answers = answers
        self.posted: list[dict[str, Any]] = []

    def create_namespaced_event(self, namespace: str, body: dict[str, Any], **_: Any) -> None:
        answer = self.answers.pop(0) if self.answers else None
        if answer is not None:
            raise answer
        self.posted.append(body)


def recorder(answers: list[BaseException | None]) -> tuple[EventRecorder, Core, list[float]]:
    now = [100.0]
    rec = EventRecorder(client.ApiClient(), "podtailor-updater", clock=lambda: now[0])
    core = Core(answers)
    rec.core = core
    return rec, core, now


def test_after_a_timeout_the_next_events_are_dropped_not_each_waited_for(caplog: pytest.LogCaptureFixture) -> None:
    rec, core, now = recorder([ReadTimeoutError(None, "/api/v1/namespaces/shop/events", "timed out")])
    caplog.set_level(logging.WARNING, "podtailor.kube.events")
    rec.record(POD, "Resized", "cpu 250m -> 500m")  # times out: quiet from now on
    tried = len(core.answers)
    for _ in range(3):
        rec.record(POD, "Verified", "cgroup holds 500m")
    assert len(core.answers) == tried and core.posted == []  # not one of the three was sent
    now[0] += QUIET_S
    rec.record(POD, "Baked", "batch 1 healthy")
    assert [b["reason"] for b in core.posted] == ["Baked"]
    assert [(r.getMessage(), getattr(r, "dropped", None)) for r in caplog.records] == [
        ("event not recorded", None), ("events dropped while the API server was failing", 3)]


def test_a_server_asking_for_longer_is_given_its_retry_after() -> None:
    busy = client.ApiException(status=429, reason="Too Many Requests")
    busy.headers = {"Retry-After": "90"}
    rec, core, now = recorder([busy])
    rec.record(POD, "Resized", "cpu 250m -> 500m")
    now[0] += QUIET_S + 1
    rec.record(POD, "Verified", "")
    assert core.posted == []
    now[0] += 90 - QUIET_S
    rec.record(POD, "Verified", "")
    assert [b["reason"] for b in core.posted] == ["Verified"]


@pytest.mark.parametrize("status", [403, 409, 422])
def test_a_refusal_that_will_not_pass_drops_only_its_own_event(status: int) -> None:
    rec, core, _ = recorder([client.ApiException(status=status, reason="refused")])
    rec.record(POD, "Resized", "cpu 250m -> 500m")
    rec.record(POD, "Verified", "")
    assert [b["reason"] for b in core.posted] == ["Verified"]
