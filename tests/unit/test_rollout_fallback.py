"""Fallbacks in the rollout machine: evictions under PodDisruptionBudgets, template patches and reverts."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from podtailor.kube.errors import PermanentKubeError, TemporaryKubeError
from podtailor.resize.types import ContainerChange, Reason
from tests.builders.rollout import NEW, NOW, OLD, entry, obs, rollout
from updater.answers import Refusal
from updater.kube.refusals import NotNow
from updater.metrics import UpdaterMetrics
from updater.observe import PodObservation
from updater.policy.types import Action, FallbackMode, Plan, PodDecision, RolloutPolicy
from updater.rollout.act.executor import Executor
from updater.rollout.machine import lifecycle as machine
from updater.rollout.machine.fallback import (
    BudgetBlock,
    budget_blocks,
    fallback_entries,
    held_by_budget,
    infeasible_uids,
    mark_infeasible,
    reverted_templates,
    without_reverted,
)
from updater.rollout.machine.journal import BatchPhase, ContainerValues, EntryState, Phase, Rollout

WORK = ("ns", "Deployment", "web")


def evicting(*entries: object, batches: int = 1) -> Rollout:
    r = rollout(*entries, batches=batches)  # type: ignore[arg-type]
    return replace(r, entries=tuple(replace(e, action="evict", ready_before=3) for e in r.entries))


BUDGET_429 = ("evict pod ns/a: 429 Cannot evict pod as it would violate the pod's disruption budget. "
              "(The disruption budget web needs 3 healthy pods and has 3 currently)")


def refused(r: Rollout, pod: str, now_s: float, *, refusal: Refusal = Refusal.DISRUPTION_BUDGET,
            retry_after_s: float = 0.0) -> Rollout:
    return machine.settle(r, f"ns/{pod}", machine.Purpose.EVICT, ok=False, generation=None, now_s=now_s,
                          error=BUDGET_429, retry_after_s=retry_after_s, refusal=refusal)


def evicts(effects: Sequence[machine.Effect]) -> list[str]:
    return [e.key for e in effects if isinstance(e, machine.Evict)]


@pytest.mark.parametrize(("states", "expected"), [
    ((EntryState.BLOCKED,), True),  # only budget-blocked pods left: done for now
    ((EntryState.EVICTED, EntryState.BLOCKED), True),
    ((EntryState.VERIFIED, EntryState.SKIPPED, EntryState.GONE, EntryState.INFEASIBLE, EntryState.APPLIED), True),
    ((EntryState.EVICTING, EntryState.BLOCKED), False),  # an eviction still in flight (or "not now") holds it
    ((EntryState.PLANNED, EntryState.BLOCKED), False),
    ((EntryState.APPLYING,), False),
    ((EntryState.DRAINING,), False),
])
def test_a_batch_is_answered_unless_something_is_still_to_send_or_to_hear_back(
        states: tuple[EntryState, ...], expected: bool) -> None:
    assert machine.answered([entry(f"p{i}", 0, state=s) for i, s in enumerate(states)]) is expected


def test_an_eviction_refused_by_a_budget_is_blocked_with_a_back_off_that_doubles() -> None:
    r, effects = machine.advance(evicting(entry("a", 0)), {"ns/a": obs("a", OLD)}, NOW)
    assert evicts(effects) == ["ns/a"]
    r = refused(r, "a", NOW)
    blocked = r.entries[0]
    assert (blocked.state, blocked.attempts, blocked.not_before_s) == (EntryState.BLOCKED, 1, NOW + 10)
    assert blocked.message == (f"eviction refused by its PodDisruptionBudget (refusal 1): {BUDGET_429}; left at "
                               "its current size, tried again in 10s")
    # 10 s x 2^attempts, at most 300 s: the 2nd refusal waits 20 s, the 6th 300 s (not 320).
    again = refused(replace(r, entries=(replace(blocked, state=EntryState.EVICTING),)), "a", NOW + 10)
    assert (again.entries[0].attempts, again.entries[0].not_before_s) == (2, NOW + 10 + 20)
    sixth = refused(replace(r, entries=(replace(blocked, state=EntryState.EVICTING, attempts=5),)), "a", NOW)
    assert sixth.entries[0].not_before_s == NOW + 300


def test_a_budget_refusal_does_not_hold_up_the_pools_next_batch() -> None:
    # The benchmark's case: one pod of each workload per batch; guarded's PDB allows no disruption.
    r = evicting(entry("big-a", 0, workload_name="big"), entry("guarded-a", 0, workload_name="guarded"),
                 entry("big-b", 1, workload_name="big"), entry("guarded-b", 1, workload_name="guarded"), batches=2)
    r = replace(r, batches=tuple(replace(b, bake_s=5.0) for b in r.batches))
    pods = {f"ns/{p}": obs(p, OLD) for p in ("big-a", "guarded-a", "big-b", "guarded-b")}
    big = ("ns", "Deployment", "big")
    r, effects = machine.advance(r, pods, NOW)
    assert evicts(effects) == ["ns/big-a", "ns/guarded-a"]
    r = machine.settle(r, "ns/big-a", machine.Purpose.EVICT, ok=True, generation=None, now_s=NOW)
    r = refused(r, "guarded-a", NOW)
    # Only the Blocked pod is left: the batch is answered and verifies the eviction that happened.
    r, effects = machine.advance(r, pods, NOW + 1, workloads={big: machine.WorkloadObservation(ready=2)})
    assert r.batches[0].phase == BatchPhase.VERIFYING and not evicts(effects)
    r, effects = machine.advance(r, pods, NOW + 2, workloads={big: machine.WorkloadObservation(ready=3)})
    assert r.batches[0].phase == BatchPhase.BAKING and r.batches[0].bake_until_s == NOW + 2 + 5
    [verified] = [e.message for e in effects if isinstance(e, machine.Event) and e.reason == "BatchVerified"]
    assert verified == ("pool p1: batch 1/2: 1 pods verified, 1 blocked by their PodDisruptionBudget (left as they "
                        "are); baking 5s")
    # The bake ends: the next batch starts at once, with big's second pod in it.
    r, effects = machine.advance(r, pods, NOW + 7)
    assert (r.current_batch, r.batches[0].phase, r.batches[1].phase) == (1, BatchPhase.DONE, BatchPhase.APPLYING)
    assert evicts(effects) == ["ns/big-b", "ns/guarded-b"]
    states = {e.pod: (e.state, e.attempts, e.not_before_s) for e in r.entries}
    assert states["guarded-a"] == (EntryState.BLOCKED, 1, NOW + 10)  # pending, untouched, never lost
    r = machine.settle(r, "ns/big-b", machine.Purpose.EVICT, ok=True, generation=None, now_s=NOW + 7)
    r = refused(r, "guarded-b", NOW + 7)
    r, _ = machine.advance(r, pods, NOW + 8, workloads={big: machine.WorkloadObservation(ready=2)})
    r, _ = machine.advance(r, pods, NOW + 9, workloads={big: machine.WorkloadObservation(ready=3)})
    r, effects = machine.advance(r, pods, NOW + 14)
    assert r.phase == Phase.COMPLETED
    assert r.message == ("all batches baked: 2 of 4 pods changed; not changed: 2 Blocked (Blocked: refused by their "
                         "PodDisruptionBudget, tried again by the next rollout after a back-off)")
    assert [e.warning for e in effects if isinstance(e, machine.Event) and e.reason == "RolloutCompleted"] == [True]
    assert [e.state for e in r.entries if e.workload_name == "guarded"] == [EntryState.BLOCKED] * 2


def test_a_batch_stalled_by_the_old_rule_goes_on_after_an_upgrade() -> None:
    # A journal written before the fix: the batch still Applying, held by a Blocked entry whose budget refuses.
    r = evicting(entry("a", 0, state=EntryState.EVICTED), entry("b", 0, state=EntryState.BLOCKED, attempts=4,
                                                                   not_before_s=NOW + 100))
    r = replace(r, batches=(replace(r.batches[0], phase=BatchPhase.APPLYING, deadline_s=NOW + 3600),))
    r2, effects = machine.advance(r, {"ns/a": obs("a", NEW, uid="uid-new"), "ns/b": obs("b", OLD)}, NOW)
    assert r2.batches[0].phase == BatchPhase.VERIFYING and not evicts(effects)
    assert r2.entries[1] == r.entries[1]  # left as it was: pending, with its count and its back-off


def test_a_blocked_pod_is_tried_again_in_its_batch_while_the_batch_still_waits() -> None:
    r = evicting(entry("a", 0), entry("b", 0))
    pods = {"ns/a": obs("a", OLD), "ns/b": obs("b", OLD)}
    r, _ = machine.advance(r, pods, NOW)
    r = refused(r, "a", NOW)  # a: the budget, back off 10 s
    r = refused(r, "b", NOW, refusal=Refusal.NOT_NOW, retry_after_s=30.0)  # b: the API server, 30 s
    assert [(e.state, e.not_before_s) for e in r.entries] == [(EntryState.BLOCKED, NOW + 10),
                                                              (EntryState.EVICTING, NOW + 30)]
    r2, effects = machine.advance(r, pods, NOW + 5)
    assert not evicts(effects) and r2.batches[0].phase == BatchPhase.APPLYING  # b's answer is not in
    r3, effects = machine.advance(r2, pods, NOW + 10)
    assert evicts(effects) == ["ns/a"] and r3.batches[0].phase == BatchPhase.APPLYING
    _, effects = machine.advance(r2, pods, NOW + 30)
    assert evicts(effects) == ["ns/a", "ns/b"]


def test_a_resumed_eviction_is_not_sent_twice_and_waits_for_the_replacement() -> None:
    r = evicting(entry("a", 0, state=EntryState.EVICTING))
    r = replace(r, batches=(replace(r.batches[0], phase=BatchPhase.APPLYING, deadline_s=NOW + 600),))
    # The pod (uid-a) is gone and a replacement exists: the eviction happened before the crash.
    r2, effects = machine.advance(r, {"ns/a": obs("a", NEW, uid="uid-new")}, NOW)
    assert not [e for e in effects if isinstance(e, machine.Evict)] and r2.entries[0].state == EntryState.EVICTED
    work = {WORK: machine.WorkloadObservation(ready=2)}
    r3, _ = machine.advance(r2, {}, NOW + 1, workloads=work)
    r3, _ = machine.advance(r3, {}, NOW + 2, workloads=work)
    assert r3.entries[0].state == EntryState.EVICTED  # 2 of 3 ready: the replacement is not up yet
    r4, _ = machine.advance(r3, {}, NOW + 3, workloads={WORK: machine.WorkloadObservation(ready=3)})
    assert r4.entries[0].state == EntryState.VERIFIED and r4.phase == Phase.BAKING


def test_a_template_reverted_by_gitops_is_patched_again_then_left_alone() -> None:
    r = rollout(entry("deployment-web", 0), batches=1)
    r = replace(r, entries=(replace(r.entries[0], action="template", uid="", ready_before=1),))
    template = OLD  # what the Deployment's pod template holds now

    def step(r: Rollout) -> tuple[Rollout, list[machine.Effect]]:
        return machine.advance(r, {}, NOW, workloads={WORK: machine.WorkloadObservation(ready=1,
                                                                                        template=(template,))})

    patches = 0
    for _ in range(40):
        r, effects = step(r)
        for fx in effects:
            if isinstance(fx, machine.PatchTemplate):
                patches += 1
                template = NEW  # our patch lands...
                r = machine.settle(r, fx.key, machine.Purpose.TEMPLATE, ok=True, generation=None, now_s=NOW)
                r, _ = step(r)
                template = OLD  # ...and GitOps puts the old values back before we verify
        if r.entries[0].state == EntryState.SKIPPED:
            break
    assert patches == 3  # the first patch and two more after reverts, then no more fighting
    assert r.entries[0].attempts == 3 and "not fighting" in r.entries[0].message


def decision(pod: str, action: Action = Action.RESIZE_ONLINE, uid: str | None = None) -> PodDecision:
    change = ContainerChange(name="app", old_requests=OLD.requests, old_limits=OLD.limits, new_requests=NEW.requests,
                             new_limits=NEW.limits, restarts=False)
    return PodDecision(namespace="ns", pod=pod, uid=uid or f"uid-{pod}", resource_version="1", pool="p1",
                       workload_kind="Deployment", workload_name="web", action=action, reason=Reason.CHANGE,
                       changes=(change,))


def test_an_earlier_infeasible_verdict_is_shown_to_the_planner_as_infeasible() -> None:
    from tests.builders.policy import pod

    a, b = pod("a", ns="ns"), pod("b", ns="ns")
    journal = rollout(replace(entry("a", 0), uid=a.uid, state=EntryState.INFEASIBLE, message="Node didn't have enough"))
    marked = mark_infeasible([a, b], infeasible_uids([journal]))
    # The planner then applies every fallback rule (single replica, do-not-disrupt, ...) as for a live verdict.
    assert [p.resize_pending for p in marked] == ["Infeasible", None]


def test_a_workload_whose_template_gitops_keeps_reverting_is_left_alone() -> None:
    from updater.policy.types import Batch

    reverted = rollout(replace(entry("deployment-web", 0), action="template", state=EntryState.SKIPPED, attempts=3))
    plan = Plan(decisions=(decision("a", Action.FALLBACK),), batches=(Batch(pool="p1", step=0, pods=(), bake_s=1,
                                                                              gates=()),))
    template = RolloutPolicy(fallback=FallbackMode.TEMPLATE)
    kept = without_reverted(plan, reverted_templates([reverted]), template)
    assert kept.decisions[0].action == Action.SKIP and kept.decisions[0].reason == Reason.TEMPLATE_REVERTED
    # Two reverts is not enough to give up, and evictions are not concerned.
    twice = rollout(replace(entry("deployment-web", 0), action="template", state=EntryState.SKIPPED, attempts=2))
    assert without_reverted(plan, reverted_templates([twice]), template).decisions[0].action == Action.FALLBACK
    assert without_reverted(plan, reverted_templates([reverted]), RolloutPolicy()).decisions[0].action == \
        Action.FALLBACK


def test_fallback_batches_respect_the_disruption_budget() -> None:
    decisions = [decision(p, Action.FALLBACK) for p in "abcde"]
    # 4 replicas x 25% = 1 pod of the workload per batch.
    batches, entries = fallback_entries(decisions, "p1", RolloutPolicy(disruption_budget=0.25), {WORK: 4}, {WORK: 4},
                                        first_batch=2)
    assert [b.index for b in batches] == [2, 3, 4, 5, 6]
    assert [e.batch for e in entries] == [2, 3, 4, 5, 6] and all(e.action == "evict" for e in entries)
    template, t_entries = fallback_entries(decisions, "p1", RolloutPolicy(fallback=FallbackMode.TEMPLATE),
                                           {WORK: 4}, {WORK: 4}, first_batch=0)
    assert len(template) == 1 and [e.pod for e in t_entries] == ["deployment-web"]  # one patch per workload


def test_a_retry_after_longer_than_the_back_off_is_honoured() -> None:
    r, _ = machine.advance(evicting(entry("a", 0)), {"ns/a": obs("a", OLD)}, NOW)
    # API Priority and Fairness: 429 with Retry-After 16 s beats the first back-off of 10 s. The server's "not
    # now" is not the pod's outcome: the entry stays Evicting and the batch waits for it.
    r = machine.settle(r, "ns/a", machine.Purpose.EVICT, ok=False, generation=None, now_s=NOW,
                       error="429 Too Many Requests", retry_after_s=16.0, refusal=Refusal.NOT_NOW)
    assert r.entries[0].state == EntryState.EVICTING and r.entries[0].not_before_s == NOW + 16
    assert not machine.answered(r.entries)
    # A budget's 429 "still being processed" carries Retry-After 10: the longer of the two wins there too.
    blocked = refused(r, "a", NOW, retry_after_s=25.0).entries[0]
    assert (blocked.state, blocked.not_before_s) == (EntryState.BLOCKED, NOW + 25)


def test_a_budget_block_holds_the_pod_in_later_plans_until_its_back_off_ends() -> None:
    from updater.policy.types import Batch

    first = evicting(entry("a", 0, state=EntryState.BLOCKED, attempts=1, not_before_s=NOW + 10))
    later = evicting(entry("a", 0, state=EntryState.BLOCKED, attempts=2, not_before_s=NOW + 40),
                     entry("b", 0, state=EntryState.EVICTED, attempts=1, not_before_s=NOW + 10))
    blocks = budget_blocks([first, replace(later, name="r2")])
    assert blocks == {"uid-a": BudgetBlock(refusals=2, not_before_s=NOW + 40)}  # the last refusal; b was evicted
    plan = Plan(decisions=(decision("a", Action.FALLBACK), decision("b", Action.FALLBACK), decision("c")),
                batches=(Batch(pool="p1", step=0, pods=("ns/c",), bake_s=1, gates=()),))
    held = held_by_budget(plan, blocks, NOW + 20)
    a, b, c = held.decisions
    assert (a.action, a.reason, a.held) == (Action.SKIP, Reason.DISRUPTION_BUDGET, Action.FALLBACK)
    assert a.message == ("its eviction was refused by its PodDisruptionBudget (2 refusals so far): tried again in "
                         "20s, left at its current size until then")  # 40 - 20
    assert (b, c) == plan.decisions[1:]
    assert held_by_budget(plan, blocks, NOW + 40) is plan  # the back-off is over: planned again
    # The new rollout's entry goes on from 2 refusals: its next refusal waits 10 x 2^2 = 40 s.
    _, entries = fallback_entries([decision("a", Action.FALLBACK)], "p1", RolloutPolicy(), {WORK: 3}, {WORK: 3},
                                  first_batch=0, refusals={"uid-a": 2})
    assert [e.attempts for e in entries] == [2]
    r = refused(replace(evicting(), entries=tuple(replace(e, state=EntryState.EVICTING) for e in entries)), "a",
                NOW + 40)
    assert r.entries[0].not_before_s == NOW + 40 + 40


@dataclass(frozen=True)
class _Snap:
    """What ``Executor.run_pass`` reads from a snapshot: the pods of the open evicting rollout below, observed
    at their old values (nothing for the planner: it plans nothing new)."""

    pods: tuple[()] = ()
    observations: dict[str, PodObservation] = field(
        default_factory=lambda: {f"ns/{p}": obs(p, OLD) for p in "abc"})
    targets: tuple[()] = ()
    hpas: tuple[()] = ()
    limit_ranges: tuple[()] = ()
    nodes: dict[str, object] = field(default_factory=dict)
    approvals: frozenset[str] = frozenset()
    analyses: dict[object, object] = field(default_factory=dict)
    pod_level_resize_supported: bool = True
    policy_errors: tuple[str, ...] = ()
    quotas: tuple[()] = ()
    features: None = None


class _Store:
    def __init__(self, *rollouts: Rollout) -> None:
        self.rollouts = list(rollouts)

    def list(self) -> list[Rollout]:
        return list(self.rollouts)

    def create(self, r: Rollout) -> Rollout:
        raise AssertionError("no rollout is started: the planner plans nothing")

    def save(self, r: Rollout) -> Rollout:
        return r

    def retry_requested(self, name: str) -> bool:
        return False


class _Evictor:
    """Accepts uid-a, answers uid-b like a PodDisruptionBudget (429, typed as ``Evictor`` types it), uid-c like
    missing RBAC (403)."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def evict(self, namespace: str, pod: str, uid: str) -> None:
        self.calls.append(pod)
        if uid == "uid-b":
            raise NotNow(BUDGET_429.replace("ns/a", "ns/b"), kind=Refusal.DISRUPTION_BUDGET)
        if uid == "uid-c":
            raise PermanentKubeError("evict pod ns/c: 403 forbidden", status=403)


class _Templates:
    def __init__(self) -> None:
        self.patched: list[str] = []

    def read(self, namespace: str, kind: str, name: str, containers: object) -> tuple[ContainerValues, ...]:
        return (OLD,)

    def patch(self, namespace: str, kind: str, name: str, values: object) -> None:
        self.patched.append(f"{namespace}/{kind}/{name}")


class _Recorder:
    def __init__(self) -> None:
        self.events: list[dict[str, object]] = []

    def record(self, **kw: object) -> None:
        self.events.append(kw)


def test_every_fallback_the_executor_performs_is_counted_by_mode_and_outcome() -> None:
    evicts = replace(evicting(entry("a", 0), entry("b", 0), entry("c", 0)), name="r-evict", pool="p1")
    template = rollout(entry("deployment-web", 0), batches=1)
    template = replace(template, name="r-template", pool="p2",
                       entries=(replace(template.entries[0], action="template", uid="", ready_before=1),))
    registry = CollectorRegistry()
    evictor, templates, recorder = _Evictor(), _Templates(), _Recorder()
    executor = Executor(read=_Snap, planner=lambda **kw: Plan(decisions=(), batches=()), store=_Store(evicts, template),
                        resizer=None,  # type: ignore[arg-type]  # no resize in these rollouts
                        recorder=recorder, policy=lambda snap: [(RolloutPolicy(name="default"), [])],
                        evictor=evictor, templates=templates, metrics=UpdaterMetrics(registry))
    executor.run_pass(NOW)
    assert sorted(evictor.calls) == ["a", "b", "c"] and templates.patched == ["ns/Deployment/web"]

    def count(mode: str, outcome: str) -> float | None:
        return registry.get_sample_value("podtailor_updater_fallbacks_total", {"mode": mode, "outcome": outcome})

    # One of each: a accepted, b held by its budget (backs off, tried again later), c refused for good.
    assert (count("evict", "ok"), count("evict", "retry"), count("evict", "refused")) == (1.0, 1.0, 1.0)
    assert count("template", "ok") == 1.0
    assert count("template", "retry") is None  # never touched: no series
    # The budget's refusal is told on the pod itself, with the budget's own words and what happens next.
    [blocked] = [e for e in recorder.events if e["reason"] == "EvictionBlocked"]
    assert (blocked["kind"], blocked["name"], blocked["uid"], blocked["warning"]) == ("Pod", "b", "uid-b", True)
    said = BUDGET_429.replace("ns/a", "ns/b")
    assert blocked["message"] == (f"eviction refused by its PodDisruptionBudget (refusal 1): {said}; left at its "
                                  "current size, tried again in 10s; the rollout r-evict goes on with the pool's "
                                  "other pods")


class _Resizer:
    """Accepts uid-a (generation 2), answers uid-b "not now" (429), refuses uid-c (422: invalid)."""

    def resize(self, namespace: str, pod: str, uid: str, resource_version: str,
               values: Sequence[ContainerValues], pod_level: Any = None) -> int:
        if uid == "uid-b":
            raise TemporaryKubeError("resize ns/b: 429 Too Many Requests", status=429)
        if uid == "uid-c":
            raise PermanentKubeError("resize ns/c: 422 Invalid", status=422)
        return 2


def test_resizes_are_counted_by_outcome_and_open_rollouts_by_pool_and_state() -> None:
    resizing = replace(rollout(entry("a", 0), entry("b", 0), entry("c", 0), batches=1), name="r-resize", pool="p1")
    store, registry = _Store(resizing), CollectorRegistry()
    executor = Executor(read=_Snap, planner=lambda **kw: Plan(decisions=(), batches=()), store=store,
                        resizer=_Resizer(), recorder=_Recorder(),
                        policy=lambda snap: [(RolloutPolicy(name="default"), [])], metrics=UpdaterMetrics(registry))
    executor.run_pass(NOW)

    def value(name: str, **labels: str) -> float | None:
        return registry.get_sample_value(name, labels)

    assert [value("podtailor_updater_resizes_total", outcome=o) for o in ("ok", "retry", "refused")] == [1.0] * 3
    assert value("podtailor_updater_open_rollouts", pool="p1", state="Progressing") == 1.0
    # Once the rollout is closed, its series goes: the gauge is what is open as of the last pass.
    store.rollouts = [replace(resizing, phase=Phase.COMPLETED)]
    executor.run_pass(NOW + 1)
    assert value("podtailor_updater_open_rollouts", pool="p1", state="Progressing") is None
