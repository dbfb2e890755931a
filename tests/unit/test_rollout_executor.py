"""The executor's pass: the rollouts of different pools are performed at once, under the global cap.

Small fakes for the ports (store, resizer, recorder); the state machine is the real one. Each test builds
open rollouts whose current batch is Pending, so the pass starts them: intent saved, then resizes sent.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field, replace
from typing import Any

import pytest

from podtailor.kube.errors import TemporaryKubeError
from tests.builders.rollout import NEW, NOW, OLD, entry, obs
from updater.kube.writes import Conflict
from updater.observe import PodObservation
from updater.policy.types import Plan, PodView, RolloutPolicy
from updater.rollout.act.executor import Executor
from updater.rollout.machine import lifecycle as machine
from updater.rollout.machine.journal import BatchPhase, BatchRecord, EntryState, Phase, Rollout


def pool_rollout(pool: str, pods: int) -> Rollout:
    entries = tuple(replace(entry(f"{pool}-{i}", 0), namespace="ns") for i in range(pods))
    return Rollout(name=f"bench-{pool}", pool=pool, policy="bench", entries=entries, resource_version="1",
                   batches=(BatchRecord(index=0, step=0, bake_s=10.0, gates=("oom",)),))


@dataclass
class Snap:
    observations: dict[str, PodObservation]
    pods: tuple[PodView, ...] = ()
    targets: tuple[Any, ...] = ()
    hpas: tuple[Any, ...] = ()
    limit_ranges: tuple[Any, ...] = ()
    nodes: tuple[Any, ...] = ()
    approvals: tuple[Any, ...] = ()
    analyses: dict[Any, Any] = field(default_factory=dict)
    pod_level_resize_supported: bool = True
    policy_errors: tuple[str, ...] = ()
    quotas: tuple[Any, ...] = ()
    features: None = None


@dataclass
class Store:
    rollouts: list[Rollout]
    saved: list[Rollout] = field(default_factory=list)
    conflict_on: str = ""
    lock: threading.Lock = field(default_factory=threading.Lock)

    def list(self) -> list[Rollout]:
        """As the real store lists: each rollout as last saved (its cache holds our own writes)."""
        with self.lock:
            newest = {r.name: r for r in self.saved}
        return [newest.get(r.name, r) for r in self.rollouts]

    def create(self, r: Rollout) -> Rollout:
        raise AssertionError("no rollout is created in these tests")

    def save(self, r: Rollout) -> Rollout:
        if r.name == self.conflict_on:
            raise Conflict(r.name)
        out = replace(r, resource_version=str(int(r.resource_version or "0") + 1))
        with self.lock:
            self.saved.append(out)
        return out

    def retry_requested(self, name: str) -> bool:
        return False

    def entry_state(self, key: str) -> EntryState | None:
        """The state of the pod's entry in the newest saved journal that names it."""
        with self.lock:
            for r in reversed(self.saved):
                for e in r.entries:
                    if e.key == key:
                        return e.state
        return None


class Resizer:
    """Records each call and the journal state of the pod at that moment; ``barrier``: calls wait until that
    many are in flight together (a pass that sends the pools one after another would time out here)."""

    def __init__(self, store: Store, barrier: int = 0) -> None:
        self.store = store
        self.barrier = threading.Barrier(barrier) if barrier else None
        self.lock = threading.Lock()
        self.calls: list[str] = []
        self.intent_at_send: dict[str, EntryState | None] = {}

    def resize(self, namespace: str, pod: str, uid: str, resource_version: str, values: Any,
               pod_level: Any = None) -> int:
        key = f"{namespace}/{pod}"
        with self.lock:
            self.calls.append(key)
            self.intent_at_send[key] = self.store.entry_state(key)
        if self.barrier is not None:
            self.barrier.wait(timeout=5)
        return 2


class Recorder:
    def __init__(self) -> None:
        self.reasons: list[str] = []

    def record(self, *, namespace: str, kind: str, name: str, uid: str, reason: str, message: str,
               warning: bool = False) -> None:
        self.reasons.append(reason)


def executor(rollouts: list[Rollout], *, max_concurrent: int = 50, barrier: int = 0,
             conflict_on: str = "", parallelism: int = 8) -> tuple[Executor, Store, Resizer, Recorder]:
    observations = {e.key: obs(e.pod, OLD) for r in rollouts for e in r.entries}
    store = Store(rollouts=rollouts, conflict_on=conflict_on)
    resizer, recorder = Resizer(store, barrier), Recorder()
    policy = RolloutPolicy(name="bench", max_concurrent=max_concurrent)
    ex = Executor(read=lambda: Snap(observations=observations), planner=lambda **_: Plan(decisions=(), batches=()),
                  store=store, resizer=resizer, recorder=recorder, policy=lambda snap: [(policy, [])],
                  parallelism=parallelism)
    return ex, store, resizer, recorder


def test_the_pools_are_sent_at_once_and_each_intent_is_saved_first() -> None:
    # One client thread per pool's pod: the barrier only opens when both pools have a resize in flight.
    ex, store, resizer, recorder = executor([pool_rollout("p1", 1), pool_rollout("p2", 1)], barrier=2)
    out = ex.run_pass(NOW)
    assert sorted(resizer.calls) == ["ns/p1-0", "ns/p2-0"] and out.resized == 2 and out.next_bake_end_s is None
    assert out.awaiting_pods  # both batches wait for the kubelets: a run loop told of pod changes passes then
    assert set(resizer.intent_at_send.values()) == {EntryState.APPLYING}  # journaled before it was sent
    # Per rollout: the intent (1 save) and one resize. The answers are not written: the journal's Applying
    # already says "the resize may have been sent", and resuming from it finds the new spec.
    assert out.writes == 2 + 2 and ex.writes == 4
    assert {e.state for r in store.saved for e in r.entries} == {EntryState.APPLYING}
    assert sorted(recorder.reasons) == ["BatchStarted", "BatchStarted"]
    # The next pass goes on from what this executor knows (Applied, with the resize's generation): once the
    # kubelets have caught up it writes Verified and the bake, one save per rollout.
    observations = ex.read().observations
    for key in ("ns/p1-0", "ns/p2-0"):
        observations[key] = obs(key.split("/")[1], NEW, generation=2, observed=2)
    out = ex.run_pass(NOW + 1)
    assert out.writes == 2 and sorted(resizer.calls) == ["ns/p1-0", "ns/p2-0"]  # nothing sent again
    last = {r.name: r for r in store.saved}
    assert {e.state for r in last.values() for e in r.entries} == {EntryState.VERIFIED}
    assert {r.phase for r in last.values()} == {Phase.BAKING}
    assert [r.resource_version for r in store.saved if r.name == "bench-p1"] == ["2", "3"]


def test_after_a_crash_the_unwritten_answers_are_worked_out_again_from_the_pods() -> None:
    # The first executor sends and dies with the answers in memory only; a new one reads the journal (Applying),
    # finds the new spec on the pod, and goes on without sending it again.
    ex, store, resizer, _ = executor([pool_rollout("p1", 1)])
    ex.run_pass(NOW)
    assert [e.state for e in store.list()[0].entries] == [EntryState.APPLYING] and resizer.calls == ["ns/p1-0"]
    observations = ex.read().observations
    observations["ns/p1-0"] = obs("p1-0", NEW, OLD, generation=2, observed=2)  # resized, not yet actuated
    fresh = Executor(read=ex.read, planner=ex.planner, store=store, resizer=resizer, recorder=Recorder(),
                     policy=ex.policy_of)
    fresh.run_pass(NOW + 1)
    assert resizer.calls == ["ns/p1-0"] and fresh.writes == 0  # resumed as Applied: derivable, nothing written
    observations["ns/p1-0"] = obs("p1-0", NEW, generation=2, observed=2)  # the kubelet caught up
    fresh.run_pass(NOW + 2)
    [last] = store.list()
    assert [e.state for e in last.entries] == [EntryState.VERIFIED] and last.phase == Phase.BAKING
    assert resizer.calls == ["ns/p1-0"] and fresh.writes == 1


def test_a_resize_the_api_server_did_not_answer_is_written_with_the_others_outcome() -> None:
    # One of two resizes meets "not now" (a 5xx, a timeout, the API server down): the step is not a plain set
    # of answers, so the outcome is written (and fails with the API server, failing the pass, as before).
    ex, store, resizer, _ = executor([pool_rollout("p1", 2)])

    def flaky(namespace: str, pod: str, uid: str, resource_version: str, values: Any, pod_level: Any = None) -> int:
        resizer.calls.append(f"{namespace}/{pod}")
        if pod == "p1-1":
            raise TemporaryKubeError("resize pod ns/p1-1: connection refused")
        return 2

    resizer.resize = flaky  # type: ignore[method-assign]
    out = ex.run_pass(NOW)
    assert out.writes == 3 and out.resized == 1  # intent, the answered resize, the outcome
    assert [[e.state for e in r.entries] for r in store.saved] == [
        [EntryState.APPLYING, EntryState.APPLYING], [EntryState.APPLIED, EntryState.APPLYING]]


def test_what_is_known_ahead_of_a_journal_is_dropped_when_another_writer_changes_it() -> None:
    # After the answers (in memory), someone asks for a rollback (the journal's version moves): the next pass
    # decides from the journal as written, not from the version built on the old one.
    ex, store, resizer, _ = executor([pool_rollout("p1", 1)])
    ex.run_pass(NOW)
    [intent] = store.list()
    store.saved.append(replace(intent, phase=Phase.ROLLING_BACK, rollback_all=True, resource_version="9"))
    ex.read().observations["ns/p1-0"] = obs("p1-0", NEW, generation=2, observed=2)
    ex.run_pass(NOW + 1)
    [last] = store.list()
    assert resizer.calls == ["ns/p1-0", "ns/p1-0"]  # the restore was sent, from the journal's Applying entry
    # intent, outcome: the restore is accepted (Reverting, with its generation), not yet reported by the kubelet
    assert last.resource_version == "11" and [(e.state, e.generation) for e in last.entries] == [
        (EntryState.REVERTING, 2)]
    ex.read().observations["ns/p1-0"] = obs("p1-0", OLD, generation=2, observed=2)  # the kubelet applied it
    ex.run_pass(NOW + 2)
    [last] = store.list()
    assert [e.state for e in last.entries] == [EntryState.REVERTED] and last.phase == Phase.ROLLED_BACK
    assert resizer.calls == ["ns/p1-0", "ns/p1-0"]  # and nothing more was sent


def test_derivable_is_only_answered_resizes_and_pods_seen_verified() -> None:
    from updater.rollout.machine.entries import derivable

    planned = pool_rollout("p1", 2)
    batch = replace(planned.batches[0], phase=BatchPhase.APPLYING, started_s=NOW, deadline_s=NOW + 600)
    intent = replace(planned, batches=(batch,), entries=tuple(
        replace(e, state=EntryState.APPLYING, applied_s=NOW) for e in planned.entries))
    answered = replace(intent, batches=(replace(batch, phase=BatchPhase.VERIFYING),), entries=tuple(
        replace(e, state=EntryState.APPLIED, generation=2) for e in intent.entries))
    one_verified = replace(answered, entries=(replace(answered.entries[0], state=EntryState.VERIFIED),
                                              answered.entries[1]))
    assert derivable(intent, answered) and derivable(answered, one_verified) and derivable(intent, intent)
    refused = replace(answered, entries=(replace(answered.entries[0], state=EntryState.SKIPPED, message="403"),
                                         answered.entries[1]))
    assert not derivable(intent, refused)
    assert not derivable(planned, intent)  # the intent itself
    baking = replace(one_verified, phase=Phase.BAKING, batches=(replace(
        one_verified.batches[0], phase=BatchPhase.BAKING, bake_until_s=NOW + 10),))
    assert not derivable(answered, baking)  # a phase and a bake's clock
    assert not derivable(answered, replace(answered, resource_version="7"))
    assert not derivable(answered, replace(answered, message="frozen"))
    assert not derivable(answered, replace(answered, batches=(replace(answered.batches[0], deadline_s=NOW),)))


def test_the_global_cap_is_divided_up_front_by_rollout_name() -> None:
    # max_concurrent 5 over two pools of 4: "bench-p1" takes 4, "bench-p2" the 1 left; 5 sent in all.
    ex, store, resizer, _ = executor([pool_rollout("p2", 4), pool_rollout("p1", 4)], max_concurrent=5)
    out = ex.run_pass(NOW)
    assert out.resized == 5 and len(resizer.calls) == 5
    assert sorted(k for k in resizer.calls if k.startswith("ns/p1")) == [f"ns/p1-{i}" for i in range(4)]
    assert [k for k in resizer.calls if k.startswith("ns/p2")] == ["ns/p2-0"]
    last = {r.name: r for r in store.saved}
    assert [e.state for e in last["bench-p2"].entries] == [EntryState.APPLYING] + [EntryState.PLANNED] * 3


def test_a_conflict_on_one_rollout_sends_nothing_for_it_and_leaves_the_other_pool_alone() -> None:
    ex, store, resizer, recorder = executor([pool_rollout("p1", 2), pool_rollout("p2", 2)], conflict_on="bench-p1")
    out = ex.run_pass(NOW)
    assert sorted(resizer.calls) == ["ns/p2-0", "ns/p2-1"] and out.resized == 2
    assert {r.name for r in store.saved} == {"bench-p2"}
    assert recorder.reasons == ["BatchStarted"]  # the conflicted step's Events are not emitted


class Crash(Exception):
    """Stands for the process dying mid-batch."""


def test_a_crash_in_one_pool_is_raised_after_the_other_pools_step_is_recorded() -> None:
    ex, store, resizer, _ = executor([pool_rollout("p1", 1), pool_rollout("p2", 1)])

    def dying(namespace: str, pod: str, uid: str, resource_version: str, values: Any, pod_level: Any = None) -> int:
        if pod.startswith("p1"):
            raise Crash(pod)
        return 2

    resizer.resize = dying  # type: ignore[method-assign]
    with pytest.raises(Crash):
        ex.run_pass(NOW)
    by_name: dict[str, list[Rollout]] = {}
    for r in store.saved:
        by_name.setdefault(r.name, []).append(r)
    assert [e.state for e in by_name["bench-p1"][-1].entries] == [EntryState.APPLYING]  # intent only
    assert [e.state for e in by_name["bench-p2"][-1].entries] == [EntryState.APPLYING]  # intent; answer in memory
    assert by_name["bench-p2"][-1].phase == Phase.PROGRESSING



def test_a_bake_that_ends_while_another_pool_is_sending_starts_its_next_batch_in_the_same_pass() -> None:
    # p1 starts a batch whose resize is slow (it waits for p2's); p2 is baking batch 1 until NOW + 0.3 s. A pass
    # that waited for p1 before looking at p2 again would time out in the resizer after 5 s.
    p1 = pool_rollout("p1", 1)
    baked = replace(entry("p2-0", 0), state=EntryState.VERIFIED, applied_s=NOW - 60)
    p2 = Rollout(name="bench-p2", pool="p2", policy="bench", resource_version="1", phase=Phase.BAKING,
                 entries=(baked, entry("p2-1", 1)),
                 batches=(BatchRecord(index=0, step=0, bake_s=10.0, gates=("oom",), phase=BatchPhase.BAKING,
                                      started_s=NOW - 70, bake_until_s=NOW + 0.3),
                          BatchRecord(index=1, step=1, bake_s=10.0, gates=("oom",))))
    ex, store, resizer, recorder = executor([p1, p2])
    p2_sent = threading.Event()

    def slow(namespace: str, pod: str, uid: str, resource_version: str, values: Any, pod_level: Any = None) -> int:
        resizer.calls.append(f"{namespace}/{pod}")
        if pod == "p1-0" and not p2_sent.wait(timeout=5):
            raise AssertionError("p2's next batch was not started while p1 was sending")
        p2_sent.set()
        return 2

    resizer.resize = slow  # type: ignore[method-assign]
    out = ex.run_pass(NOW)
    assert resizer.calls == ["ns/p1-0", "ns/p2-1"] and out.resized == 2
    last = {r.name: r for r in store.saved}
    assert [b.phase for b in last["bench-p2"].batches] == [BatchPhase.DONE, BatchPhase.APPLYING]  # the intent
    assert last["bench-p2"].batches[1].started_s is not None and last["bench-p2"].batches[1].started_s > NOW + 0.3
    assert sorted(recorder.reasons) == ["BatchStarted", "BatchStarted"]


def test_perform_outside_a_pass_restores_a_rolled_back_pod() -> None:
    # The rollback command: a Verified pod whose spec has the new values is sent back to its recorded ones.
    done = replace(entry("p1-0", 0), state=EntryState.VERIFIED)
    r = replace(pool_rollout("p1", 1), entries=(done,), phase=Phase.ROLLING_BACK, rollback_all=True)
    ex, _, resizer, _ = executor([r])
    observations = {"ns/p1-0": obs("p1-0", NEW)}
    new, effects = machine.advance(r, observations, NOW)
    saved, ok = ex.perform(r, new, effects, observations, NOW)
    assert ok == 1 and resizer.calls == ["ns/p1-0"]
    assert [e.state for e in saved.entries] == [EntryState.REVERTING] and saved.resource_version == "3"
    restored = {"ns/p1-0": obs("p1-0", OLD, generation=2, observed=2)}  # the kubelet reports the recorded values
    new, effects = machine.advance(saved, restored, NOW + 1)
    saved, _ = ex.perform(saved, new, effects, restored, NOW + 1)
    assert [e.state for e in saved.entries] == [EntryState.REVERTED] and saved.phase == Phase.ROLLED_BACK


def test_a_batch_verified_while_another_pool_is_sending_starts_baking_in_the_same_pass() -> None:
    # p2's pod was resized, not yet actuated when the pass read it; it is actuated while p1 sends, and the
    # re-read (every verify_poll_s) finds it Verified: p2 starts baking before p1's resize returns.
    p1 = pool_rollout("p1", 1)
    applied = replace(entry("p2-0", 0), state=EntryState.APPLIED, generation=2, applied_s=NOW - 1)
    p2 = Rollout(name="bench-p2", pool="p2", policy="bench", resource_version="1", entries=(applied,),
                 batches=(BatchRecord(index=0, step=0, bake_s=10.0, gates=("oom",), phase=BatchPhase.VERIFYING,
                                      started_s=NOW - 2, deadline_s=NOW + 600),))
    ex, store, resizer, recorder = executor([p1, p2])
    ex.verify_poll_s = 0.05
    observations = ex.read().observations
    observations["ns/p2-0"] = obs("p2-0", NEW, OLD, generation=2, observed=2)  # spec changed, not actuated

    def slow(namespace: str, pod: str, uid: str, resource_version: str, values: Any, pod_level: Any = None) -> int:
        observations["ns/p2-0"] = obs("p2-0", NEW, generation=2, observed=2)  # the kubelet caught up
        for _ in range(100):
            if any(r.name == "bench-p2" and r.phase == Phase.BAKING for r in store.saved):
                return 2
            time.sleep(0.05)
        raise AssertionError("p2 was not verified while p1 was sending")

    resizer.resize = slow  # type: ignore[method-assign]
    out = ex.run_pass(NOW)
    assert out.resized == 1
    [baking] = [r for r in store.saved if r.name == "bench-p2"]
    assert baking.entries[0].state == EntryState.VERIFIED and baking.batches[0].phase == BatchPhase.BAKING
    assert baking.batches[0].bake_until_s is not None and baking.batches[0].bake_until_s > NOW + 10.0
    assert out.next_bake_end_s == baking.batches[0].bake_until_s  # the run loop's next pass is due then
    assert sorted(recorder.reasons) == ["BatchStarted", "BatchVerified", "ResizeVerified"]


def test_a_rollout_whose_save_conflicted_is_not_stepped_again_from_its_unsaved_version() -> None:
    # p1's intent cannot be saved (409) while p2 is still sending for several re-reads: p1 is never decided
    # from the version its conflict kept from being saved, so nothing is sent for it without a durable intent.
    ex, store, resizer, _ = executor([pool_rollout("p1", 1), pool_rollout("p2", 1)], conflict_on="bench-p1")
    ex.verify_poll_s = 0.05
    rounds = []

    def slow(namespace: str, pod: str, uid: str, resource_version: str, values: Any, pod_level: Any = None) -> int:
        resizer.calls.append(f"{namespace}/{pod}")
        time.sleep(0.5)  # p2 sends long enough for several re-reads
        return 2

    resizer.resize = slow  # type: ignore[method-assign]
    original = store.save

    def counting(r: Rollout) -> Rollout:
        rounds.append(r.name)
        return original(r)

    store.save = counting  # type: ignore[method-assign]
    ex.run_pass(NOW)
    assert resizer.calls == ["ns/p2-0"]
    assert {r.name for r in store.saved} == {"bench-p2"} and "bench-p1" in rounds


def test_a_pass_that_leaves_only_bakes_running_does_not_wait_for_pod_changes() -> None:
    verified = replace(entry("p1-0", 0), namespace="ns", state=EntryState.VERIFIED, generation=2,
                       applied_s=NOW - 5)
    r = Rollout(name="bench-p1", pool="p1", policy="bench", resource_version="1", phase=Phase.BAKING,
                entries=(verified,), batches=(BatchRecord(index=0, step=0, bake_s=10.0, gates=("oom",),
                                                          phase=BatchPhase.BAKING, started_s=NOW - 5,
                                                          bake_until_s=NOW + 8, deadline_s=NOW + 600),))
    ex, _, resizer, _ = executor([r])
    ex.read().observations["ns/p1-0"] = obs("p1-0", NEW, generation=2, observed=2)
    out = ex.run_pass(NOW)
    assert resizer.calls == [] and out.next_bake_end_s == NOW + 8  # the bake's end, not a pod, is next
    assert not out.awaiting_pods


def test_a_pass_that_ends_a_bake_reads_the_pods_afresh_and_sees_a_late_oom() -> None:
    # The watch cache (``read``) still shows the pod healthy; the fresh listing shows the OOM kill that came in
    # the bake's last second. The pass decides the bake's end on the fresh one: the pool halts, nothing is sent.
    baked = replace(entry("p1-0", 0), namespace="ns", state=EntryState.VERIFIED, applied_s=NOW - 60, generation=2)
    r = Rollout(name="bench-p1", pool="p1", policy="bench", resource_version="1", phase=Phase.BAKING,
                entries=(baked, replace(entry("p1-1", 1), namespace="ns")),
                batches=(BatchRecord(index=0, step=0, bake_s=10.0, gates=("oom",), phase=BatchPhase.BAKING,
                                     started_s=NOW - 70, bake_until_s=NOW - 0.5),
                         BatchRecord(index=1, step=1, bake_s=10.0, gates=("oom",))))
    ex, store, resizer, _ = executor([r])
    healthy = {"ns/p1-0": obs("p1-0", NEW, NEW, generation=2, observed=2), "ns/p1-1": obs("p1-1", OLD)}
    killed = {**healthy, "ns/p1-0": obs("p1-0", NEW, NEW, generation=2, observed=2, oom_at=NOW - 1)}
    ex.read = lambda: Snap(observations=healthy)
    ex.read_fresh = lambda: Snap(observations=killed)
    ex.run_pass(NOW)
    assert ex.fresh_reads >= 1
    assert store.saved[0].phase == Phase.ROLLING_BACK and "OOM" in store.saved[0].message
    assert "ns/p1-1" not in resizer.calls  # the next batch was not started
    # Without a fresh read, the cached view would have started the next batch: what the fresh read prevents.
    ex2, _, resizer2, _ = executor([r])
    ex2.read = lambda: Snap(observations=healthy)
    ex2.run_pass(NOW)
    assert "ns/p1-1" in resizer2.calls and ex2.fresh_reads == 0


def test_a_pass_with_no_bake_ended_reads_from_the_cache_only() -> None:
    ex, _, _, _ = executor([pool_rollout("p1", 1)])

    def refuse() -> Any:
        raise AssertionError("no bake ended: the cached read is enough")

    ex.read_fresh = refuse
    ex.run_pass(NOW)
    assert ex.fresh_reads == 0
