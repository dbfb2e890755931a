"""The AdmissionReview contract: response shape, the JSONPatch itself, and failing open on anything odd."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from tests.builders.webhook import patch_of, pod, review, snapshot, vpa
from updater.webhook.mutation import Outcome, Resolution
from updater.webhook.review import ANNOTATION, admit


def test_response_shape_echoes_the_uid_with_a_json_patch() -> None:
    answer, outcome = admit(review(pod(), uid="abc-123"), snapshot(vpa()))
    assert outcome == Outcome.MUTATED
    assert answer["apiVersion"] == "admission.k8s.io/v1" and answer["kind"] == "AdmissionReview"
    resp = answer["response"]
    assert resp["uid"] == "abc-123" and resp["allowed"] is True and resp["patchType"] == "JSONPatch"
    assert "warnings" not in resp


def test_json_patch_content() -> None:
    ops = patch_of(admit(review(pod()), snapshot(vpa()))[0])
    assert ops == [
        {"op": "add", "path": "/spec/containers/0/resources",
         "value": {"requests": {"cpu": "250m", "memory": "256Mi"}, "limits": {"cpu": "500m", "memory": "512Mi"}}},
        {"op": "add", "path": "/metadata/annotations", "value": {ANNOTATION: "web: app cpu 250m memory 256Mi"}},
    ]


def test_existing_annotations_get_an_escaped_member_path() -> None:
    ops = patch_of(admit(review(pod(annotations={"a": "b"})), snapshot(vpa()))[0])
    assert ops[-1] == {"op": "add", "path": "/metadata/annotations/podtailor.io~1admitted-resources",
                       "value": "web: app cpu 250m memory 256Mi"}


def test_unchanged_pod_gets_no_patch() -> None:
    answer, outcome = admit(review(pod()), snapshot(vpa(target={"cpu": "500m", "memory": "512Mi"})))
    assert outcome == Outcome.UNCHANGED and set(answer["response"]) == {"uid", "allowed"}


def test_not_a_pod_create_is_allowed_as_is() -> None:
    answer, outcome = admit(review(pod(), operation="UPDATE"), snapshot(vpa()))
    assert outcome == Outcome.IGNORED and answer["response"] == {"uid": "7f0c-uid", "allowed": True}


class Exploding:
    def resolve(self, namespace: str, meta: Mapping[str, Any]) -> Resolution:
        raise RuntimeError("cache on fire")


def test_every_exception_fails_open_with_the_uid() -> None:
    answer, outcome = admit(review(pod(), uid="u-1"), Exploding())
    assert outcome == Outcome.ERROR and answer["response"] == {"uid": "u-1", "allowed": True}


def test_garbage_bodies_fail_open() -> None:
    for body in (b"", b"\xff\xfe", b"[]", b"{}", b'{"kind": "AdmissionReview", "request": {"uid": "x"}}',
                 json.dumps({"kind": "AdmissionReview", "request": {
                     "uid": "x", "operation": "CREATE", "resource": {"group": "", "resource": "pods"},
                     "object": {"spec": {"containers": "nope"}}}}).encode()):
        answer, outcome = admit(body, snapshot(vpa()))
        assert answer["response"]["allowed"] is True
        assert outcome in (Outcome.ERROR, Outcome.IGNORED, Outcome.MALFORMED, Outcome.NO_VPA)


def test_reinvocation_is_idempotent() -> None:
    # reinvocationPolicy IfNeeded: a second pass over our own output changes nothing.
    from tests.builders.webhook import apply

    once = apply(pod(), patch_of(admit(review(pod()), snapshot(vpa()))[0]))
    answer, outcome = admit(review(once), snapshot(vpa()))
    assert outcome == Outcome.UNCHANGED and "patch" not in answer["response"]
