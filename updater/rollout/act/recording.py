"""What the executor tells people and Prometheus: Kubernetes Events and the updater's metrics.

Owns where an effect's Event is recorded (on the pod, on the workload, or on the ResizeRollout), the Warning
Event for a pod the webhook held at its own resources (once per pod), and the counters and gauges of a pass:
resizes and fallbacks by outcome, open rollouts by pool and phase, pods a ResourceQuota holds back. Without
metrics (``metrics`` None) only the Events are recorded.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

from podtailor.resize.types import Reason
from updater.metrics import UpdaterMetrics
from updater.observe import PodObservation
from updater.policy.quota import BOOST_REJECTED_ANNOTATION, HELD_ANNOTATION
from updater.policy.types import Action, Plan, PodView, RolloutPolicy
from updater.rollout.act.ports import Recorder
from updater.rollout.machine.effects import Event
from updater.rollout.machine.journal import TERMINAL, Rollout


class Recording:
    def __init__(self, recorder: Recorder, metrics: UpdaterMetrics | None = None) -> None:
        self.recorder = recorder
        self.metrics = metrics
        self._held_noted: set[tuple[str, str]] = set()
        """Uids of pods whose admission-held annotation has been recorded as an Event by this process."""

    def event(self, r: Rollout, ev: Event, obs: Mapping[str, PodObservation] | None = None) -> None:
        if ev.pod:
            o = (obs or {}).get(f"{ev.namespace}/{ev.pod}")
            self.recorder.record(namespace=ev.namespace, kind="Pod", name=ev.pod, uid=o.uid if o else "",
                                 reason=ev.reason, message=ev.message, warning=ev.warning)
        elif ev.kind and ev.name:  # about a workload: where its owners look
            self.recorder.record(namespace=ev.namespace, kind=ev.kind, name=ev.name, uid="", reason=ev.reason,
                                 message=ev.message, warning=ev.warning)
        else:
            self.recorder.record(namespace="", kind="ResizeRollout", name=r.name, uid="", reason=ev.reason,
                                 message=ev.message, warning=ev.warning)

    def admission_held(self, pods: Sequence[PodView]) -> None:
        """A Warning Event, once per pod, on each pod the webhook left at its own resources because its target
        would exceed a ResourceQuota (``HELD_ANNOTATION``): the webhook is read-only, the updater records it.
        A ``BOOST_REJECTED_ANNOTATION`` (the VPA's startupBoost was invalid, the pod admitted unboosted) is
        recorded the same way, with reason ``StartupBoostRejected``."""
        current = set()
        for p in pods:
            for key, reason in ((HELD_ANNOTATION, "TargetExceedsQuota"), (BOOST_REJECTED_ANNOTATION,
                                                                          "StartupBoostRejected")):
                why = p.annotations.get(key)
                if not why:
                    continue
                current.add((p.uid, reason))
                if (p.uid, reason) not in self._held_noted:
                    self.recorder.record(namespace=p.namespace, kind="Pod", name=p.name, uid=p.uid,
                                         reason=reason, message=why, warning=True)
        self._held_noted = current

    def resize(self, outcome: str) -> None:
        if self.metrics is not None:
            self.metrics.resizes.labels(outcome=outcome).inc()

    def fallback(self, mode: str, outcome: str) -> None:
        if self.metrics is not None:
            self.metrics.fallbacks.labels(mode=mode, outcome=outcome).inc()

    def open_rollouts(self, rollouts: Iterable[Rollout]) -> None:
        """The open-rollouts gauge: rollouts not Completed or RolledBack, by pool and phase, as of this pass."""
        if self.metrics is None:
            return
        counts = Counter((r.pool, r.phase.value) for r in rollouts if r.phase not in TERMINAL)
        self.metrics.open_rollouts.clear()
        for (pool, state), n in counts.items():
            self.metrics.open_rollouts.labels(pool=pool, state=state).set(n)

    def quota_held(self, plans: Sequence[tuple[RolloutPolicy, Plan]]) -> None:
        """Pods whose resize or fallback a ResourceQuota holds back in this pass's plans, by what was held."""
        if self.metrics is None:
            return
        held = Counter("fallback" if d.held == Action.FALLBACK else "resize"
                       for _, plan in plans for d in plan.decisions if d.reason == Reason.QUOTA)
        for action in ("resize", "fallback"):
            self.metrics.quota_held.labels(action=action).set(held.get(action, 0))
