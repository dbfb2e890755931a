"""The rollout state machine: crash-safe application, verification, baking, gates and rollback.

Pure tests with a fixed time anchor; observations are built the way the adapter builds them from Pods.
"""

from __future__ import annotations

from dataclasses import replace

from podtailor.resources import Resources
from tests.builders.rollout import NEW, NOW, OLD, entry, obs, rollout
from updater.rollout.machine import lifecycle as machine
from updater.rollout.machine.journal import (
    BatchPhase,
    Entry,
    EntryState,
    Phase,
    Rollout,
    from_object,
    to_status,
)


def test_a_batch_records_intent_then_resizes_only_its_pods() -> None:
    r = rollout(entry("a", 0), entry("b", 1))
    r2, effects = machine.advance(r, {"ns/a": obs("a", OLD), "ns/b": obs("b", OLD)}, NOW)
    resizes = [e for e in effects if isinstance(e, machine.Resize)]
    assert [z.key for z in resizes] == ["ns/a"] and resizes[0].values == (NEW,)
    assert r2.entries[0].state == EntryState.APPLYING and r2.entries[1].state == EntryState.PLANNED
    assert r2.batches[0].phase == BatchPhase.APPLYING


def test_resume_after_a_crash_never_resizes_twice() -> None:
    # The journal says Applying (intent written), the crash came after the resize reached the server:
    # the spec already has the new values, so no resize is sent and the entry becomes Applied.
    r = rollout(entry("a", 0, state=EntryState.APPLYING), batches=1)
    r = replace(r, batches=(replace(r.batches[0], phase=BatchPhase.APPLYING),))
    r2, effects = machine.advance(r, {"ns/a": obs("a", NEW, OLD, generation=2)}, NOW)
    assert not [e for e in effects if isinstance(e, machine.Resize)]
    assert r2.entries[0].state == EntryState.APPLIED and r2.entries[0].generation == 2
    # The crash came before the resize: the spec still has the old values, so it is sent (once).
    _, effects = machine.advance(r, {"ns/a": obs("a", OLD)}, NOW)
    assert [e.key for e in effects if isinstance(e, machine.Resize)] == ["ns/a"]


def test_someone_elses_change_is_not_overwritten() -> None:
    other = replace(OLD, requests=Resources(cpu_millicores=900, memory_bytes=256 * 2**20))
    r2, effects = machine.advance(rollout(entry("a", 0), batches=1), {"ns/a": obs("a", other)}, NOW)
    assert r2.entries[0].state == EntryState.SKIPPED and not [e for e in effects if isinstance(e, machine.Resize)]


def verifying(*entries: Entry, bake_s: float = 60.0) -> Rollout:
    r = rollout(*entries, batches=1, bake_s=bake_s)
    return replace(r, batches=(replace(r.batches[0], phase=BatchPhase.VERIFYING, deadline_s=NOW + 600),))


def test_done_means_the_kubelet_reports_the_new_values() -> None:
    r = verifying(entry("a", 0, state=EntryState.APPLIED, generation=2, applied_s=NOW))
    # observedGeneration caught up but the status still shows the old values: not done.
    r2, _ = machine.advance(r, {"ns/a": obs("a", NEW, OLD, generation=2, observed=2)}, NOW + 1)
    assert r2.entries[0].state == EntryState.APPLIED
    r3, _ = machine.advance(r, {"ns/a": obs("a", NEW, NEW, generation=2, observed=2)}, NOW + 2)
    assert r3.entries[0].state == EntryState.VERIFIED
    assert r3.batches[0].phase == BatchPhase.BAKING and r3.batches[0].bake_until_s == NOW + 2 + 60


def test_a_verified_pod_gets_an_event_saying_what_changed() -> None:
    r = verifying(entry("a", 0, state=EntryState.APPLIED, generation=2, applied_s=NOW))
    _, effects = machine.advance(r, {"ns/a": obs("a", NEW, NEW, generation=2, observed=2)}, NOW + 2)
    [event] = [e for e in effects if isinstance(e, machine.Event) and e.pod]
    # OLD -> NEW changes only the CPU request (500m -> 250m); memory stays 256Mi and is not listed.
    assert (event.namespace, event.pod, event.reason, event.warning) == ("ns", "a", "ResizeVerified", False)
    assert event.message == "resized in place (no restart) and verified by r: app: cpu 500m -> 250m"
    restarted = entry("a", 0, state=EntryState.APPLIED, generation=2, applied_s=NOW, restarting=frozenset({"app"}))
    _, effects = machine.advance(verifying(restarted),
                                 {"ns/a": obs("a", NEW, NEW, generation=2, observed=2, restarts=1)}, NOW + 2)
    assert [e.message for e in effects if isinstance(e, machine.Event) and e.pod] == [
        "resized in place (restarted app) and verified by r: app: cpu 500m -> 250m"]
    # Still waiting for the kubelet: no Event yet.
    _, effects = machine.advance(r, {"ns/a": obs("a", NEW, OLD, generation=2, observed=2)}, NOW + 1)
    assert not [e for e in effects if isinstance(e, machine.Event) and e.pod]


def test_an_oom_kill_while_baking_restores_the_batch_and_halts_the_pool() -> None:
    r = verifying(entry("a", 0, state=EntryState.APPLIED, generation=2, applied_s=NOW),
                  entry("b", 0, state=EntryState.APPLIED, generation=2, applied_s=NOW))
    healthy = {k: obs(k, NEW, NEW, generation=2, observed=2) for k in ("a", "b")}
    r, _ = machine.advance(r, {f"ns/{k}": v for k, v in healthy.items()}, NOW + 5)
    assert r.phase == Phase.BAKING
    oom = {"ns/a": obs("a", NEW, NEW, generation=2, observed=2, restarts=1, oom_at=NOW + 20),
           "ns/b": healthy["b"]}
    r, effects = machine.advance(r, oom, NOW + 30)
    assert r.phase == Phase.ROLLING_BACK and "OOM" in r.message
    assert any(isinstance(e, machine.Event) and e.warning for e in effects)
    r, effects = machine.advance(r, oom, NOW + 31)
    reverts = [e for e in effects if isinstance(e, machine.Resize)]
    # Both pods the batch touched go back to exactly their recorded values.
    assert {z.key for z in reverts} == {"ns/a", "ns/b"} and all(z.values == (OLD,) for z in reverts)
    for z in reverts:
        r = machine.settle(r, z.key, machine.Purpose.REVERT, ok=True, generation=3, now_s=NOW + 31)
    restored = {k: obs(k, OLD, OLD, generation=3, observed=3) for k in ("a", "b")}
    r, _ = machine.advance(r, {f"ns/{k}": v for k, v in restored.items()}, NOW + 32)
    assert r.phase == Phase.HALTED and all(e.state == EntryState.REVERTED for e in r.entries)


def test_infeasible_is_restored_and_left_for_the_fallback_without_failing_the_batch() -> None:
    r = verifying(entry("a", 0, state=EntryState.APPLIED, generation=2, applied_s=NOW))
    r2, effects = machine.advance(r, {"ns/a": obs("a", NEW, OLD, generation=2, observed=2, pending="Infeasible")},
                                  NOW + 3)
    assert r2.entries[0].state == EntryState.INFEASIBLE
    assert [e.values for e in effects if isinstance(e, machine.Resize)] == [(OLD,)]
    assert r2.phase == Phase.BAKING  # the batch itself goes on


def test_deferred_waits_then_times_out() -> None:
    r = verifying(entry("a", 0, state=EntryState.APPLIED, generation=2, applied_s=NOW))
    deferred = {"ns/a": obs("a", NEW, OLD, generation=2, observed=2, pending="Deferred", since=NOW)}
    r2, _ = machine.advance(r, deferred, NOW + 100)
    assert r2.entries[0].state == EntryState.APPLIED
    r3, _ = machine.advance(r, deferred, NOW + 301)  # default Deferred timeout: 300 s
    assert r3.entries[0].state == EntryState.INFEASIBLE


def test_a_lasting_actuation_error_fails_the_batch_and_restores_it() -> None:
    # 1.34+: a memory limit below the container's usage stays PodResizeInProgress/Error; the kubelet retries.
    big = replace(OLD, limits=Resources(cpu_millicores=1000, memory_bytes=640 * 2**20))
    small = replace(NEW, limits=Resources(cpu_millicores=500, memory_bytes=512 * 2**20))
    a = entry("a", 0, state=EntryState.APPLIED, generation=2, applied_s=NOW, before=(big,), after=(small,))
    b = entry("b", 0, state=EntryState.VERIFIED, generation=2, applied_s=NOW, before=(big,), after=(small,))
    r = verifying(a, b)
    error = "memory limit (536870912) below current usage (629145600)"
    seen = {"ns/a": replace(obs("a", small, big, generation=2, observed=2), resize_in_progress=True,
                            resize_error=error),
            "ns/b": obs("b", small, small, generation=2, observed=2)}
    r2, _ = machine.advance(r, seen, NOW + 299)  # within the Deferred timeout (300 s): it may still clear
    assert r2.phase == Phase.PROGRESSING and r2.entries[0].state == EntryState.APPLIED
    r3, effects = machine.advance(r, seen, NOW + 301)
    assert r3.phase == Phase.ROLLING_BACK
    assert "has not been able to apply the resize for 301s" in r3.message and error in r3.message
    assert any(isinstance(e, machine.Event) and e.reason == "RolloutGateFailed" for e in effects)
    _, effects = machine.advance(r3, seen, NOW + 302)  # both pods of the batch go back to their old values
    assert sorted((e.key, e.values) for e in effects if isinstance(e, machine.Resize)) == [
        ("ns/a", (big,)), ("ns/b", (big,))]


def test_verification_timeout_fails_the_batch() -> None:
    r = verifying(entry("a", 0, state=EntryState.APPLIED, generation=2, applied_s=NOW))
    r2, _ = machine.advance(r, {"ns/a": obs("a", NEW, OLD, generation=2, observed=1)}, NOW + 601)
    assert r2.phase == Phase.ROLLING_BACK and "not verified within the timeout" in r2.message


def test_unexpected_restart_fails_but_an_expected_one_does_not() -> None:
    expected = entry("a", 0, state=EntryState.APPLIED, generation=2, applied_s=NOW, restarting=frozenset({"app"}))
    r2, _ = machine.advance(verifying(expected), {"ns/a": obs("a", NEW, NEW, generation=2, observed=2, restarts=1)},
                            NOW + 1)
    assert r2.entries[0].state == EntryState.VERIFIED
    online = entry("a", 0, state=EntryState.APPLIED, generation=2, applied_s=NOW)
    r3, _ = machine.advance(verifying(online), {"ns/a": obs("a", NEW, NEW, generation=2, observed=2, restarts=1)},
                            NOW + 1)
    assert r3.phase == Phase.ROLLING_BACK and "restarted unexpectedly" in r3.message


def test_the_next_batch_starts_only_after_the_bake() -> None:
    r = rollout(entry("a", 0, state=EntryState.VERIFIED, applied_s=NOW), entry("b", 1), bake_s=60)
    r = replace(r, phase=Phase.BAKING, batches=(replace(r.batches[0], phase=BatchPhase.BAKING,
                                                        bake_until_s=NOW + 60), r.batches[1]))
    current = {"ns/a": obs("a", NEW), "ns/b": obs("b", OLD)}
    r2, effects = machine.advance(r, current, NOW + 59)
    assert r2.current_batch == 0 and not effects
    r3, _ = machine.advance(r, current, NOW + 60)
    assert r3.current_batch == 1 and r3.phase == Phase.PROGRESSING
    _, effects = machine.advance(r3, current, NOW + 61)
    assert [e.key for e in effects if isinstance(e, machine.Resize)] == ["ns/b"]


def test_a_frozen_pool_starts_nothing_new() -> None:
    r2, effects = machine.advance(rollout(entry("a", 0)), {"ns/a": obs("a", OLD)}, NOW, frozen=True)
    assert not effects and r2.entries[0].state == EntryState.PLANNED and "frozen" in r2.message


def test_the_journal_round_trips_through_the_object() -> None:
    r = verifying(entry("a", 0, state=EntryState.APPLIED, generation=2, applied_s=NOW,
                        restarting=frozenset({"app"})))
    obj = {"metadata": {"name": "r", "resourceVersion": "9"}, "spec": {"pool": "p1", "policy": "default"},
           "status": to_status(r)}
    assert replace(from_object(obj), resource_version="") == r


def test_the_status_leaves_out_default_fields_and_old_full_statuses_still_read() -> None:
    planned = rollout(entry("a", 0), entry("b", 1), batches=2)
    status = to_status(planned)
    [first] = [e for e in status["entries"] if e["pod"] == "a"]
    assert set(first) == {"namespace", "pod", "uid", "workloadKind", "workloadName", "batch", "before", "after",
                          "state", "action", "restartsBefore"}  # the last not at its default; generation ... are
    assert "startedSeconds" not in status["batches"][0] and "sidecar" not in first["before"][0]
    obj = {"metadata": {"name": "r"}, "spec": {"pool": "p1", "policy": "default"}, "status": status}
    assert replace(from_object(obj), resource_version="") == planned
    # A status written before (every field present, defaults included) reads the same.
    full = dict(first, restarting=[], generation=None, appliedSeconds=None, message="", attempts=0,
                notBeforeSeconds=None, readyBefore=0, before=[dict(v, sidecar=False) for v in first["before"]])
    old = {**obj, "status": {**status, "entries": [full, *[e for e in status["entries"] if e["pod"] != "a"]]}}
    assert from_object(old).entries == from_object(obj).entries
    side = replace(planned.entries[0], before=tuple(replace(v, sidecar=True) for v in planned.entries[0].before))
    with_sidecar = to_status(replace(planned, entries=(side,)))
    assert with_sidecar["entries"][0]["before"][0]["sidecar"] is True
    assert from_object({**obj, "status": with_sidecar}).entries == (side,)


def test_completion_counts_the_pods_left_unchanged_and_warns() -> None:
    # One pod verified; one whose eviction was refused outright (403: Skipped). "Completed" must say so.
    r = rollout(entry("a", 0, state=EntryState.VERIFIED, applied_s=NOW),
                entry("b", 0, state=EntryState.SKIPPED, message="evict pod ns/b: 403 forbidden"), batches=1)
    r = replace(r, phase=Phase.BAKING, batches=(replace(r.batches[0], phase=BatchPhase.BAKING, bake_until_s=NOW),))
    done, effects = machine.advance(r, {"ns/a": obs("a", NEW), "ns/b": obs("b", OLD)}, NOW)
    assert done.phase == Phase.COMPLETED
    assert done.message == "all batches baked: 1 of 2 pods changed; not changed: 1 Skipped"
    [event] = [e for e in effects if isinstance(e, machine.Event)]
    assert event.reason == "RolloutCompleted" and event.warning
    # All verified: a plain, normal completion.
    clean = replace(r, entries=(r.entries[0],))
    done, effects = machine.advance(clean, {"ns/a": obs("a", NEW)}, NOW)
    assert done.message == "all batches baked: 1 of 1 pods changed"
    assert [e.warning for e in effects if isinstance(e, machine.Event)] == [False]
