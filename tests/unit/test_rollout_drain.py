"""Drain before a restarting resize: gate False, endpoints gone, resize, containers ready, gate True, Ready.

Pure state-machine tests (fixed time anchor) and the webhook's gate for opted-in pods.
"""

from __future__ import annotations

from dataclasses import replace

from tests.builders.rollout import NEW, NOW, OLD, entry, obs, rollout
from tests.builders.webhook import apply, patch_of, pod, review, snapshot
from updater.observe import DRAIN_ANNOTATION, SERVING_GATE
from updater.rollout.machine import lifecycle as machine
from updater.rollout.machine.journal import EntryState, Phase
from updater.webhook.review import admit


def gated(o: machine.PodObservation, *, serving: bool | None, endpoint: bool | None,
          containers_ready: bool = True) -> machine.PodObservation:
    return replace(o, gated=True, serving=serving, endpoint_ready=endpoint, containers_ready=containers_ready,
                   ready=bool(serving) and containers_ready)


def kinds(effects: list[machine.Effect]) -> list[str]:
    return [type(e).__name__ + (f"({e.serving})" if isinstance(e, machine.SetServing) else "")
            for e in effects if not isinstance(e, machine.Event)]


def test_the_resize_waits_until_the_pod_has_left_its_endpoints_and_it_serves_again_after() -> None:
    r = rollout(entry("a", 0, drain=True, restarting=frozenset({"app"})), batches=1)
    # 1. Gate set False first; no resize yet.
    r, effects = machine.advance(r, {"ns/a": gated(obs("a", OLD), serving=True, endpoint=True)}, NOW)
    assert kinds(effects) == ["SetServing(False)"] and r.entries[0].state == EntryState.DRAINING
    # 2. The gate is False but the EndpointSlice still lists the pod as ready: wait, send nothing.
    r, effects = machine.advance(r, {"ns/a": gated(obs("a", OLD), serving=False, endpoint=True)}, NOW + 1)
    assert kinds(effects) == [] and r.entries[0].state == EntryState.DRAINING
    # 3. The endpoint is not ready any more: the resize goes out.
    r, effects = machine.advance(r, {"ns/a": gated(obs("a", OLD), serving=False, endpoint=False)}, NOW + 2)
    assert kinds(effects) == ["Resize"] and r.entries[0].state == EntryState.APPLYING
    r = machine.settle(r, "ns/a", machine.Purpose.APPLY, ok=True, generation=2, now_s=NOW + 2)
    # 4. Restarted (restart count +1 is expected), containers ready, gate still False: set it True.
    done = gated(obs("a", NEW, generation=2, observed=2, restarts=1), serving=False, endpoint=False)
    r, effects = machine.advance(r, {"ns/a": done}, NOW + 3)
    assert kinds(effects) == ["SetServing(True)"] and r.entries[0].state == EntryState.APPLIED
    # 5. Gate True and the pod Ready: verified, the batch bakes.
    r, effects = machine.advance(r, {"ns/a": replace(done, serving=True, ready=True, endpoint_ready=True)}, NOW + 4)
    assert r.entries[0].state == EntryState.VERIFIED and r.phase == Phase.BAKING


def test_containers_not_ready_keep_the_gate_false() -> None:
    r = rollout(entry("a", 0, drain=True, restarting=frozenset({"app"}), state=EntryState.APPLIED, generation=2),
                batches=1)
    r = replace(r, batches=(replace(r.batches[0], phase=machine.BatchPhase.VERIFYING, deadline_s=NOW + 600),))
    starting = gated(obs("a", NEW, generation=2, observed=2, restarts=1), serving=False, endpoint=False,
                     containers_ready=False)
    r, effects = machine.advance(r, {"ns/a": starting}, NOW)
    assert kinds(effects) == [] and r.entries[0].state == EntryState.APPLIED


def test_a_rollback_puts_a_drained_pod_back_in_service() -> None:
    r = rollout(entry("a", 0, drain=True, restarting=frozenset({"app"}), state=EntryState.DRAINING), batches=1)
    r = replace(r, phase=Phase.ROLLING_BACK, rollback_all=True)
    r, effects = machine.advance(r, {"ns/a": gated(obs("a", OLD), serving=False, endpoint=False)}, NOW)
    assert kinds(effects) == ["SetServing(True)"] and r.entries[0].state == EntryState.SKIPPED


def test_a_pod_without_the_gate_is_resized_at_once() -> None:
    r = rollout(entry("a", 0, restarting=frozenset({"app"})), batches=1)
    _, effects = machine.advance(r, {"ns/a": obs("a", OLD)}, NOW)
    assert kinds(effects) == ["Resize"]


def test_the_webhook_adds_the_gate_to_opted_in_pods_only() -> None:
    opted = pod(annotations={DRAIN_ANNOTATION: "true"})
    answer, _ = admit(review(opted), snapshot())
    assert apply(opted, patch_of(answer))["spec"]["readinessGates"] == [{"conditionType": SERVING_GATE}]
    answer, _ = admit(review(pod()), snapshot())
    assert "patch" not in answer["response"]


def test_the_plan_flags_a_restart_without_drain() -> None:
    from tests.builders.policy import GI, MI, container, ctarget, decide_one, wtarget
    from tests.builders.policy import pod as pod_view

    restarting = container(mem=512 * MI, policy={"memory": "RestartContainer"})
    t = wtarget(ctarget(cpu=500, mem=GI))
    plain = decide_one(pod_view(containers=[restarting]), t)
    drained = decide_one(pod_view(containers=[restarting], gated=True), t)
    assert plain.message == "resize restarts app (restart without drain)"
    assert drained.message == "resize restarts app (drained first)"


def test_the_updater_puts_new_gated_pods_in_service_but_not_one_it_is_draining() -> None:
    from updater.rollout.act.executor import Executor

    class Gates:
        def __init__(self) -> None:
            self.set: list[tuple[str, bool]] = []

        def set_serving(self, namespace: str, pod: str, uid: str, serving: bool) -> None:
            self.set.append((f"{namespace}/{pod}", serving))

    gates = Gates()
    executor = Executor(read=lambda: None, planner=lambda **_: None, store=None, resizer=None,  # type: ignore[arg-type]
                        recorder=None, policy=lambda _: [], gates=gates)  # type: ignore[arg-type]
    fresh = gated(obs("new", OLD), serving=None, endpoint=None)
    draining = gated(obs("a", OLD), serving=False, endpoint=False)
    left = gated(obs("b", OLD), serving=False, endpoint=False)
    open_rollout = rollout(entry("a", 0, drain=True, state=EntryState.DRAINING), batches=1)
    count = executor.keep_gates({"ns/new": fresh, "ns/a": draining, "ns/b": left, "ns/plain": obs("plain", OLD)},
                                [open_rollout])
    assert count == 2 and sorted(gates.set) == [("ns/b", True), ("ns/new", True)]
