"""Fallbacks in the rollout machine: evictions under PodDisruptionBudgets, template patches and reverts."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from prometheus_client import CollectorRegistry

from podtailor.kube.errors import PermanentKubeError, TemporaryKubeError
from podtailor.resize.types import ContainerChange, Reason
from tests.builders.rollout import NEW, NOW, OLD, entry, obs, rollout
from updater.answers import Refusal
from updater.metrics import UpdaterMetrics
from updater.observe import PodObservation
from updater.policy.types import Action, FallbackMode, Plan, PodDecision, RolloutPolicy
from updater.rollout import machine
from updater.rollout.executor import Executor
from updater.rollout.fallback import (
    fallback_entries,
    infeasible_uids,
    mark_infeasible,
    reverted_templates,
    without_reverted,
)
from updater.rollout.journal import BatchPhase, ContainerValues, EntryState, Phase, Rollout

WORK = ("ns", "Deployment", "web")


def evicting(*entries: object) -> Rollout:
    r = rollout(*entries, batches=1)  # type: ignore[arg-type]
    return replace(r, entries=tuple(replace(e, action="evict", ready_before=3) for e in r.entries))


def test_an_eviction_refused_by_a_budget_backs_off_instead_of_looping() -> None:
    r, effects = machine.advance(evicting(entry("a", 0)), {"ns/a": obs("a", OLD)}, NOW)
    assert [type(e).__name__ for e in effects if not isinstance(e, machine.Event)] == ["Evict"]
    r = machine.settle(r, "ns/a", "evict", ok=False, generation=None, now_s=NOW,
                       error="evict pod ns/a: 429 Cannot evict", refusal=Refusal.NOT_NOW)
    blocked = r.entries[0]
    assert blocked.state == EntryState.BLOCKED and blocked.not_before_s == NOW + 10  # 10 s, doubling
    _, effects = machine.advance(r, {"ns/a": obs("a", OLD)}, NOW + 5)
    assert not [e for e in effects if isinstance(e, machine.Evict)]  # not before the back-off ends
    r2, effects = machine.advance(r, {"ns/a": obs("a", OLD)}, NOW + 10)
    assert [e.key for e in effects if isinstance(e, machine.Evict)] == ["ns/a"]
    r2 = machine.settle(r2, "ns/a", "evict", ok=False, generation=None, now_s=NOW + 10, error="429",
                        refusal=Refusal.NOT_NOW)
    assert r2.entries[0].not_before_s == NOW + 10 + 20


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
                r = machine.settle(r, fx.key, "template", ok=True, generation=None, now_s=NOW)
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
    # API Priority and Fairness: 429 with Retry-After 16 s beats the first back-off of 10 s.
    r = machine.settle(r, "ns/a", "evict", ok=False, generation=None, now_s=NOW, error="429 Too Many Requests",
                       retry_after_s=16.0, refusal=Refusal.NOT_NOW)
    assert r.entries[0].state == EntryState.BLOCKED and r.entries[0].not_before_s == NOW + 16


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
    pod_level_resize_supported: bool = True


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
    """Accepts uid-a, answers uid-b like a PodDisruptionBudget (429), uid-c like missing RBAC (403)."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def evict(self, namespace: str, pod: str, uid: str) -> None:
        self.calls.append(pod)
        if uid == "uid-b":
            raise TemporaryKubeError("evict pod ns/b: 429 Cannot evict pod", status=429)
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
    def record(self, **kw: object) -> None:
        pass


def test_every_fallback_the_executor_performs_is_counted_by_mode_and_outcome() -> None:
    evicts = replace(evicting(entry("a", 0), entry("b", 0), entry("c", 0)), name="r-evict", pool="p1")
    template = rollout(entry("deployment-web", 0), batches=1)
    template = replace(template, name="r-template", pool="p2",
                       entries=(replace(template.entries[0], action="template", uid="", ready_before=1),))
    registry = CollectorRegistry()
    evictor, templates = _Evictor(), _Templates()
    executor = Executor(read=_Snap, planner=lambda **kw: Plan(decisions=(), batches=()), store=_Store(evicts, template),
                        resizer=None,  # type: ignore[arg-type]  # no resize in these rollouts
                        recorder=_Recorder(), policy=lambda snap: [(RolloutPolicy(name="default"), [])],
                        evictor=evictor, templates=templates, metrics=UpdaterMetrics(registry))
    executor.run_pass(NOW)
    assert sorted(evictor.calls) == ["a", "b", "c"] and templates.patched == ["ns/Deployment/web"]

    def count(mode: str, outcome: str) -> float | None:
        return registry.get_sample_value("podtailor_updater_fallbacks_total", {"mode": mode, "outcome": outcome})

    # One of each: a accepted, b held by its budget (backs off, tried again later), c refused for good.
    assert (count("evict", "ok"), count("evict", "retry"), count("evict", "refused")) == (1.0, 1.0, 1.0)
    assert count("template", "ok") == 1.0
    assert count("template", "retry") is None  # never touched: no series


class _Resizer:
    """Accepts uid-a (generation 2), answers uid-b "not now" (429), refuses uid-c (422: invalid)."""

    def resize(self, namespace: str, pod: str, uid: str, resource_version: str,
               values: Sequence[ContainerValues]) -> int:
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
