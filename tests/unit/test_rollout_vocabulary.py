"""The state machine's vocabulary as enums: journal actions keep their on-the-wire strings (journals written
before still read), an unknown action is refused when read, and a resize effect's purpose picks its values."""

from __future__ import annotations

import json

import pytest

from tests.builders.rollout import NEW, OLD, entry, rollout
from updater.rollout.machine import lifecycle as machine
from updater.rollout.machine.effects import resize_effect
from updater.rollout.machine.journal import EntryAction, EntryState, from_object, to_status


def _object(status: object) -> dict[str, object]:
    return {"metadata": {"name": "r"}, "spec": {"pool": "p1", "policy": "default"}, "status": status}


@pytest.mark.parametrize(("action", "wire"), [(EntryAction.RESIZE, "resize"), (EntryAction.EVICT, "evict"),
                                              (EntryAction.TEMPLATE, "template")])
def test_actions_are_written_as_the_strings_journals_already_hold(action: EntryAction, wire: str) -> None:
    status = to_status(rollout(entry("a", 0, action=action)))
    assert json.loads(json.dumps(status))["entries"][0]["action"] == wire
    read = from_object(_object(status)).entries[0].action
    assert read is action


def test_a_journal_without_an_action_reads_as_a_resize_and_an_unknown_one_is_refused() -> None:
    status = to_status(rollout(entry("a", 0)))
    del status["entries"][0]["action"]
    assert from_object(_object(status)).entries[0].action is EntryAction.RESIZE
    status["entries"][0]["action"] = "replace"
    with pytest.raises(ValueError, match="replace"):
        from_object(_object(status))


def test_a_resize_effect_goes_to_the_new_values_to_apply_and_back_to_revert() -> None:
    e = entry("a", 0)
    apply, revert = resize_effect(e, machine.Purpose.APPLY), resize_effect(e, machine.Purpose.REVERT)
    assert (apply.values, apply.expect, apply.purpose) == ((NEW,), (OLD,), machine.Purpose.APPLY)
    assert (revert.values, revert.expect, revert.purpose) == ((OLD,), (NEW,), machine.Purpose.REVERT)


def test_settle_by_purpose_a_failed_template_patch_is_skipped_and_a_failed_revert_keeps_reverting() -> None:
    r = rollout(entry("a", 0, action=EntryAction.TEMPLATE, state=EntryState.APPLYING))
    failed = machine.settle(r, "ns/a", machine.Purpose.TEMPLATE, ok=False, generation=None, now_s=0.0, error="x")
    assert (failed.entries[0].state, failed.entries[0].message) == (EntryState.SKIPPED, "x")
    r = rollout(entry("a", 0, state=EntryState.REVERTING))
    again = machine.settle(r, "ns/a", machine.Purpose.REVERT, ok=False, generation=None, now_s=0.0, error="503")
    assert (again.entries[0].state, again.entries[0].message) == (EntryState.REVERTING, "503")
