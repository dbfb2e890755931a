"""A restore is verified as an apply is (issue #41): Reverted only once the kubelet reports the recorded values
(observedGeneration caught up, no resize in progress, the status equal to them). One the kubelet cannot apply
(a memory limit below the container's usage) is looked at again a bounded number of times, then journaled
NotRestored with the kubelet's reason and a Warning Event; the pool stays Halted, and a requested rollback
ends Halted (``podtailor-updater rollback`` exits 1), never RolledBack.

Pure tests of the state machine with a fixed time anchor (``NOW``); the issue's pod: 256Mi/512Mi raised to
300Mi/600Mi, its usage then grown to 600Mi, so the restore's 512Mi limit is below usage.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from podtailor.resources import Resources
from tests.builders.rollout import NOW, entry, obs, rollout
from updater.observe import PodObservation
from updater.rollout.machine import lifecycle as machine
from updater.rollout.machine.effects import Purpose
from updater.rollout.machine.journal import (
    BatchPhase,
    ContainerValues,
    EntryState,
    Phase,
    Rollout,
    from_object,
    to_status,
)
from updater.rollout.machine.verify import MAX_RESTORE_CHECKS

Mi = 2**20
SMALL = ContainerValues(name="app", requests=Resources(cpu_millicores=500, memory_bytes=256 * Mi),
                        limits=Resources(cpu_millicores=1000, memory_bytes=512 * Mi))
BIG = ContainerValues(name="app", requests=Resources(cpu_millicores=500, memory_bytes=300 * Mi),
                      limits=Resources(cpu_millicores=1000, memory_bytes=600 * Mi))
TIMEOUTS = machine.Timeouts(verify_s=60.0, deferred_s=10.0)
BELOW_USAGE = "memory limit (536870912) below current usage (629145600)"


def _failed(rollback_all: bool = False) -> Rollout:
    """Batch 1 failed (its canary OOM-looping): rolling back its one Verified pod (generation 2 after the apply)."""
    e = entry("a", 0, state=EntryState.VERIFIED, generation=2, applied_s=NOW, before=(SMALL,), after=(BIG,))
    r = rollout(e, batches=1)
    return replace(r, phase=Phase.ROLLING_BACK, message="batch 1 failed: ns/a: container app restarted unexpectedly",
                   batches=(replace(r.batches[0], phase=BatchPhase.FAILED),), rollback_all=rollback_all)


def _restore_sent(r: Rollout) -> Rollout:
    r, effects = machine.advance(r, {"ns/a": obs("a", BIG, BIG, generation=2, observed=2)}, NOW, timeouts=TIMEOUTS)
    assert [(e.key, e.values) for e in effects if isinstance(e, machine.Resize)] == [("ns/a", (SMALL,))]
    assert r.entries[0].state == EntryState.REVERTING  # the intent, journaled before the send
    return machine.settle(r, "ns/a", Purpose.REVERT, ok=True, generation=3, now_s=NOW)


def _below_usage(observed: int = 3) -> dict[str, PodObservation]:
    """The spec holds the recorded values (generation 3, observed), the kubelet still runs 300Mi/600Mi: Error."""
    return {"ns/a": replace(obs("a", SMALL, BIG, generation=3, observed=observed), resize_in_progress=True,
                            resize_error=BELOW_USAGE)}


def test_an_accepted_restore_is_not_reverted_until_the_kubelet_reports_it() -> None:
    r = _restore_sent(_failed())
    assert r.entries[0].state == EntryState.REVERTING and r.entries[0].generation == 3  # accepted, not landed
    # observedGeneration behind the restore: not yet, whatever the status says.
    r2, _ = machine.advance(r, {"ns/a": obs("a", SMALL, SMALL, generation=3, observed=2)}, NOW + 1,
                            timeouts=TIMEOUTS)
    assert r2.phase == Phase.ROLLING_BACK and r2.entries[0].state == EntryState.REVERTING
    # Caught up but the status still shows the rolled-out values: not yet.
    r3, _ = machine.advance(r2, {"ns/a": obs("a", SMALL, BIG, generation=3, observed=3)}, NOW + 2, timeouts=TIMEOUTS)
    assert r3.phase == Phase.ROLLING_BACK and r3.entries[0].state == EntryState.REVERTING
    # The kubelet reports the recorded values: Reverted, the pool Halted.
    r4, _ = machine.advance(r3, {"ns/a": obs("a", SMALL, SMALL, generation=3, observed=3)}, NOW + 3,
                            timeouts=TIMEOUTS)
    assert r4.phase == Phase.HALTED and r4.entries[0].state == EntryState.REVERTED


def test_a_memory_restore_below_usage_is_journaled_not_restored_and_the_pool_stays_halted() -> None:
    r = _restore_sent(_failed())
    seen = _below_usage()
    looks = 0
    events: list[machine.Event] = []
    now = NOW + 1
    while r.phase == Phase.ROLLING_BACK and now < NOW + 100:
        r, effects = machine.advance(r, seen, now, timeouts=TIMEOUTS)
        assert not [e for e in effects if isinstance(e, machine.Resize)]  # the spec holds the values: not resent
        events += [e for e in effects if isinstance(e, machine.Event) and e.pod]
        looks += 1
        now += 1
    # First look at NOW + 1 sets the wait; a look every deferred timeout (10 s): NOW + 11, + 21, + 31 is the last.
    assert now - 1 == NOW + 1 + MAX_RESTORE_CHECKS * 10
    [e] = r.entries
    assert e.state == EntryState.NOT_RESTORED and e.attempts == MAX_RESTORE_CHECKS and BELOW_USAGE in e.message
    assert r.phase == Phase.HALTED and "not restored: 1 pods (ns/a)" in r.message
    assert [(ev.reason, ev.warning) for ev in events] == [("RestoreNotApplied", True)] * (MAX_RESTORE_CHECKS - 1) + [
        ("RestoreFailed", True)]
    assert BELOW_USAGE in events[-1].message
    # Journaled: the state and its reason survive the round trip through the object's status.
    obj = {"metadata": {"name": "r"}, "spec": {"pool": "p1", "policy": "default"}, "status": to_status(r)}
    assert from_object(obj).entries[0].state == EntryState.NOT_RESTORED
    assert to_status(r)["entries"][0]["state"] == "NotRestored"
    # Halted stays Halted: nothing more is decided or sent.
    assert machine.advance(r, seen, now + 60, timeouts=TIMEOUTS) == (r, [])


def test_a_requested_rollback_that_cannot_restore_a_pod_ends_halted_not_rolled_back() -> None:
    r = _restore_sent(_failed(rollback_all=True))
    now = NOW + 1
    while r.phase == Phase.ROLLING_BACK and now < NOW + 100:
        r, effects = machine.advance(r, _below_usage(), now, timeouts=TIMEOUTS)
        now += 1
    assert r.phase == Phase.HALTED and r.entries[0].state == EntryState.NOT_RESTORED
    [done] = [e for e in effects if isinstance(e, machine.Event) and e.reason == "RolloutRolledBack"]
    assert done.warning and "restore incomplete" in done.message


def test_a_restore_that_lands_between_looks_is_reverted() -> None:
    r = _restore_sent(_failed())
    r, _ = machine.advance(r, _below_usage(), NOW + 1, timeouts=TIMEOUTS)
    r, effects = machine.advance(r, _below_usage(), NOW + 11, timeouts=TIMEOUTS)  # one look missed: an Event
    assert r.entries[0].attempts == 1 and [e.reason for e in effects if isinstance(e, machine.Event)] == [
        "RestoreNotApplied"]
    r, _ = machine.advance(r, {"ns/a": obs("a", SMALL, SMALL, generation=3, observed=3)}, NOW + 12,
                           timeouts=TIMEOUTS)  # usage dropped, the kubelet applied it
    assert r.phase == Phase.HALTED and r.entries[0].state == EntryState.REVERTED


def test_the_journal_counts_a_restore_whose_apply_it_never_saw_answered() -> None:
    # Every write is journaled before it is sent, and its generation after it: the audit counts an entry's writes
    # from its state and generation (Reverted with a generation: the apply and the restore). Here the journal
    # says Applying with no generation (the apply's answer was never written: a 409 on the outcome's save, or a
    # fresh process reading it), the apply did land (generation 2), and the batch's deadline passes.
    e = entry("a", 0, state=EntryState.APPLYING, applied_s=NOW, before=(SMALL,), after=(BIG,))
    r = rollout(e, batches=1)
    r = replace(r, batches=(replace(r.batches[0], phase=BatchPhase.APPLYING, started_s=NOW, deadline_s=NOW + 60),))
    landed = {"ns/a": obs("a", BIG, BIG, generation=2, observed=2)}
    r, _ = machine.advance(r, landed, NOW + 61, timeouts=TIMEOUTS)
    assert r.phase == Phase.ROLLING_BACK
    r, effects = machine.advance(r, landed, NOW + 62, timeouts=TIMEOUTS)
    assert [(z.key, z.values) for z in effects if isinstance(z, machine.Resize)] == [("ns/a", (SMALL,))]
    r = machine.settle(r, "ns/a", Purpose.REVERT, ok=True, generation=3, now_s=NOW + 62)  # the restore: generation 3
    r, _ = machine.advance(r, {"ns/a": obs("a", SMALL, SMALL, generation=3, observed=3)}, NOW + 63,
                           timeouts=TIMEOUTS)
    [done] = r.entries
    assert (done.state, done.generation) == (EntryState.REVERTED, 3)  # 1 + apply + restore == the pod's 3


def test_a_restore_whose_answer_was_lost_takes_the_pods_generation() -> None:
    # The restore reached the pod but its answer did not come back (a timeout): the entry is still Reverting with
    # the apply's generation; the next look finds the recorded values in the spec at generation 3.
    r, _ = machine.advance(_failed(), {"ns/a": obs("a", BIG, BIG, generation=2, observed=2)}, NOW, timeouts=TIMEOUTS)
    assert (r.entries[0].state, r.entries[0].generation) == (EntryState.REVERTING, 2)
    r, _ = machine.advance(r, {"ns/a": obs("a", SMALL, SMALL, generation=3, observed=3)}, NOW + 1, timeouts=TIMEOUTS)
    assert (r.entries[0].state, r.entries[0].generation, r.phase) == (EntryState.REVERTED, 3, Phase.HALTED)


def test_an_infeasible_pods_restore_not_accepted_is_sent_again_while_its_batch_bakes() -> None:
    # "a" was found Infeasible and its restore sent, but the API server answered 409 (its status had moved): the
    # spec still holds the new values while the journal says Infeasible (restore intended; the audit counts
    # apply + restore). The restore is sent again while the batch is verified, baked or rolled back.
    a = entry("a", 0, state=EntryState.INFEASIBLE, generation=2, applied_s=NOW, before=(SMALL,), after=(BIG,))
    b = entry("b", 0, state=EntryState.VERIFIED, generation=2, applied_s=NOW, before=(SMALL,), after=(BIG,))
    r = rollout(a, b, batches=1)
    baking = replace(r, phase=Phase.BAKING, batches=(replace(r.batches[0], phase=BatchPhase.BAKING,
                                                             bake_until_s=NOW + 60),))
    seen = {"ns/a": obs("a", BIG, SMALL, generation=2, observed=2, pending="Infeasible"),
            "ns/b": obs("b", BIG, BIG, generation=2, observed=2)}
    _, effects = machine.advance(baking, seen, NOW + 1, timeouts=TIMEOUTS)
    assert [(z.key, z.values, z.purpose) for z in effects if isinstance(z, machine.Resize)] == [
        ("ns/a", (SMALL,), "revert")]
    failed = replace(baking, phase=Phase.ROLLING_BACK, batches=(replace(baking.batches[0], phase=BatchPhase.FAILED),))
    _, effects = machine.advance(failed, seen, NOW + 1, timeouts=TIMEOUTS)
    assert sorted((z.key, z.values) for z in effects if isinstance(z, machine.Resize)) == [
        ("ns/a", (SMALL,)), ("ns/b", (SMALL,))]
    # Once the spec holds the recorded values, nothing is sent again.
    seen["ns/a"] = obs("a", SMALL, SMALL, generation=3, observed=3)
    _, effects = machine.advance(baking, seen, NOW + 2, timeouts=TIMEOUTS)
    assert not [z for z in effects if isinstance(z, machine.Resize)]


def _fake_wiring(monkeypatch: pytest.MonkeyPatch, r: Rollout) -> list[Rollout]:
    """``rollback``'s wiring (``updater.__main__.build_executor``) as small fakes: a journal store holding ``r``
    (the rollouts saved are returned, in order) and an executor whose reads show the pod above its old memory
    limit and whose writes change nothing."""
    from types import SimpleNamespace

    from updater import __main__ as updater_main

    saved: list[Rollout] = []

    class Store:
        def get(self, name: str) -> Rollout | None:
            return r if name == r.name else None

        def save(self, new: Rollout) -> Rollout:
            saved.append(new)
            return new

    class Executor:
        def read(self) -> SimpleNamespace:
            return SimpleNamespace(observations=_below_usage())

        def perform(self, old: Rollout, new: Rollout, effects: object, obs: object, now_s: float
                    ) -> tuple[Rollout, list[object]]:
            return new, []

    monkeypatch.setattr(updater_main, "build_executor",
                        lambda args: SimpleNamespace(executor=Executor(), store=Store()))
    return saved


def test_the_rollback_command_reports_a_pod_not_restored_and_exits_1(monkeypatch: pytest.MonkeyPatch,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """``podtailor-updater rollback`` on the rollout above, once its pod is NotRestored: the command's own loop
    (``updater.__main__.cmd_rollback``) over the real state machine, with the journal store and the executor's
    reads and writes as small fakes: it ends Halted, names the pod and why, and exits 1 (0 is kept for a rollout
    that is RolledBack)."""
    import argparse

    from updater import __main__ as updater_main

    r = _restore_sent(_failed())
    now = NOW + 1
    while r.phase == Phase.ROLLING_BACK:
        r, _ = machine.advance(r, _below_usage(), now, timeouts=TIMEOUTS)
        now += 1
    assert r.phase == Phase.HALTED and r.entries[0].state == EntryState.NOT_RESTORED
    saved = _fake_wiring(monkeypatch, r)
    assert updater_main.cmd_rollback(argparse.Namespace(rollout=r.name, timeout=30.0)) == 1
    out = capsys.readouterr().out
    assert f"{r.name}: Halted; rollback incomplete: 0 pods restored, 1 not" in out
    assert "ns/a NotRestored" in out and BELOW_USAGE in out
    assert saved and saved[0].rollback_all and saved[0].phase == Phase.ROLLING_BACK  # the request is journaled first
    assert updater_main.cmd_rollback(argparse.Namespace(rollout="nope", timeout=30.0)) == 2


def test_the_rollback_command_says_when_its_timeout_ran_out_with_the_restore_still_under_way(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """A restore sent but not yet seen by the kubelet when ``--timeout`` runs out: the rollout is still
    RollingBack (its pods Reverting, not NotRestored), so the command says the timeout ended the wait and that the
    journaled request carries on, lists the pods still Reverting, and exits 1 (the rollback is not done)."""
    import argparse

    from updater import __main__ as updater_main

    r = _restore_sent(_failed())
    assert r.phase == Phase.ROLLING_BACK and r.entries[0].state == EntryState.REVERTING
    _fake_wiring(monkeypatch, r)
    monkeypatch.setattr(updater_main.time, "sleep", lambda s: None)
    assert updater_main.cmd_rollback(argparse.Namespace(rollout=r.name, timeout=1e-6)) == 1
    out = capsys.readouterr().out
    assert (f"{r.name}: RollingBack; rollback incomplete: 0 pods restored, 1 not"
            " (still RollingBack when --timeout") in out
    assert "ns/a Reverting" in out
