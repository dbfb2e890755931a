"""``resizePolicy`` is read into ``ResizeRestart`` once: by the updater strictly (a value the API does not define
makes the pod malformed, named) and by the report leniently (left out, so no restart is forecast, as before)."""

from __future__ import annotations

import pytest

from podtailor.resize.types import ResizeRestart, resize_restart_policies
from recommender.report.objects import _container
from recommender.report.types import Role


def test_policies_are_enums_and_an_entry_without_a_restart_policy_is_not_required() -> None:
    raw = [{"resourceName": "cpu"}, {"resourceName": "memory", "restartPolicy": "RestartContainer"}]
    assert resize_restart_policies(raw, "c") == {"cpu": ResizeRestart.NOT_REQUIRED,
                                                 "memory": ResizeRestart.RESTART_CONTAINER}
    assert resize_restart_policies(None, "c") == {}


@pytest.mark.parametrize(("raw", "message"), [
    ([{"resourceName": "memory", "restartPolicy": "Sometimes"}], "restartPolicy 'Sometimes'"),
    ({"resourceName": "cpu"}, "not a list of objects"),
    (["cpu"], "not a list of objects"),
])
def test_a_policy_the_api_does_not_define_is_an_error_naming_the_container(raw: object, message: str) -> None:
    with pytest.raises(ValueError, match=rf"pod ns/p container app\.resizePolicy: .*{message}"):
        resize_restart_policies(raw, "pod ns/p container app")


def test_the_report_reads_the_same_enum_and_leaves_out_an_unknown_value() -> None:
    policy = [{"resourceName": "cpu", "restartPolicy": "Sometimes"},
              {"resourceName": "memory", "restartPolicy": "RestartContainer"}]
    spec = _container({"name": "app", "resizePolicy": policy}, Role.CONTAINER)
    assert dict(spec.resize_policy) == {"memory": ResizeRestart.RESTART_CONTAINER}
    assert spec.resize_policy["memory"] is ResizeRestart.RESTART_CONTAINER
