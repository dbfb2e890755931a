"""Every batch has a deadline (issue #41): a batch whose resizes are never answered, or whose pod never becomes
Ready after its resize (a crash loop, an OOM loop), fails its gate at the policy's timeout, is restored and
halts the pool; it is never left Applying.

Pure tests of the state machine with a fixed time anchor; the deadline is the batch's ``deadline_s``, set when
the batch starts to its start + the policy's ``inProgressTimeout`` (``Timeouts.verify_s``).
"""

from __future__ import annotations

from dataclasses import replace

from tests.builders.rollout import NEW, NOW, OLD, entry, obs, rollout
from updater.rollout.machine import lifecycle as machine
from updater.rollout.machine.journal import BatchPhase, EntryState, Phase, Rollout

TIMEOUTS = machine.Timeouts(verify_s=60.0, deferred_s=10.0)


def _started(r: Rollout, phase: BatchPhase) -> Rollout:
    return replace(r, batches=(replace(r.batches[0], phase=phase, started_s=NOW, deadline_s=NOW + 60),
                               *r.batches[1:]))


def test_a_batch_starts_with_the_policys_deadline() -> None:
    r, _ = machine.advance(rollout(entry("a", 0), batches=1), {"ns/a": obs("a", OLD)}, NOW, timeouts=TIMEOUTS)
    assert r.batches[0].phase == BatchPhase.APPLYING and r.batches[0].deadline_s == NOW + 60  # NOW + verify_s


def test_a_batch_whose_resize_is_never_answered_fails_at_its_deadline() -> None:
    # The resize of "a" is journaled (Applying) but every try comes back 409 (the pod's status moves on every
    # crash of a crash loop): the entry stays Applying and is sent again each pass, until the deadline.
    r = _started(rollout(entry("a", 0, state=EntryState.APPLYING, applied_s=NOW), batches=1), BatchPhase.APPLYING)
    seen = {"ns/a": obs("a", OLD)}
    before, effects = machine.advance(r, seen, NOW + 59, timeouts=TIMEOUTS)
    assert before.phase == Phase.PROGRESSING and [e.key for e in effects if isinstance(e, machine.Resize)] == ["ns/a"]
    failed, effects = machine.advance(r, seen, NOW + 61, timeouts=TIMEOUTS)
    assert failed.phase == Phase.ROLLING_BACK and failed.batches[0].phase == BatchPhase.FAILED
    assert failed.message == "batch 1 failed: not applied within the timeout: ns/a"
    assert not [e for e in effects if isinstance(e, machine.Resize)]  # nothing more is sent after the deadline
    assert [e.reason for e in effects if isinstance(e, machine.Event)] == ["RolloutGateFailed"]
    halted, _ = machine.advance(failed, seen, NOW + 62, timeouts=TIMEOUTS)
    assert halted.phase == Phase.HALTED and [e.state for e in halted.entries] == [EntryState.REVERTED]


def test_a_crash_looping_pod_fails_the_batch_at_its_deadline_and_is_restored() -> None:
    # The resize landed (observed, status NEW) but the container sits in CrashLoopBackOff: never Ready. Its
    # restart count has not moved since the plan (a long back-off), so no restart or OOM gate fires.
    r = _started(rollout(entry("a", 0, state=EntryState.APPLIED, generation=2, applied_s=NOW), batches=1),
                 BatchPhase.VERIFYING)
    looping = {"ns/a": obs("a", NEW, NEW, generation=2, observed=2, ready=False)}
    waiting, _ = machine.advance(r, looping, NOW + 59, timeouts=TIMEOUTS)
    assert waiting.phase == Phase.PROGRESSING and waiting.entries[0].state == EntryState.APPLIED
    failed, _ = machine.advance(r, looping, NOW + 61, timeouts=TIMEOUTS)
    assert failed.phase == Phase.ROLLING_BACK and "not verified within the timeout: ns/a" in failed.message
    _, effects = machine.advance(failed, looping, NOW + 62, timeouts=TIMEOUTS)
    assert [(e.key, e.values) for e in effects if isinstance(e, machine.Resize)] == [("ns/a", (OLD,))]
