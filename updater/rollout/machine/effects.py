"""The state machine's vocabulary (pure): the effects it asks for, what it is told about workloads, its timeouts,
and the small reads and edits of the journal that every phase of ``machine.py`` uses.

An effect is a value: ``advance`` returns them, the executor performs them and tells ``settle`` how each went.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Literal

from podtailor.resources import Resources
from updater.observe import PodObservation
from updater.rollout.machine.journal import BatchRecord, ContainerValues, Entry, EntryState, Rollout


class Purpose(enum.StrEnum):
    """What a performed effect was for, as ``settle`` is told: it decides how the outcome is journaled. The value
    is the ``purpose`` field of the executor's logs."""

    APPLY = "apply"
    """A resize to the entry's new values."""
    REVERT = "revert"
    """A resize back to the entry's recorded values (rollback, or an Infeasible pod restored)."""
    EVICT = "evict"
    TEMPLATE = "template"
    SERVING = "serving"
    """Setting the serving gate (either way)."""


ResizePurpose = Literal[Purpose.APPLY, Purpose.REVERT]


@dataclass(frozen=True, slots=True, kw_only=True)
class Resize:
    """Patch the pod's resize subresource to ``values`` (precondition: its uid, and the spec still ``expect``)."""

    key: str
    namespace: str
    pod: str
    uid: str
    values: tuple[ContainerValues, ...]
    expect: tuple[ContainerValues, ...]
    purpose: ResizePurpose
    pod_level: Resources | None = None
    """The pod-level requests to write with ``values`` (None: ``spec.resources`` left alone)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Event:
    namespace: str
    pod: str | None
    reason: str
    message: str
    warning: bool = False
    kind: str = ""
    """With ``name``: the Event is about this workload (recorded on it, in its namespace)."""
    name: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class Evict:
    """Evict the pod through the Eviction API, with its uid as precondition (PDBs decide)."""

    key: str
    namespace: str
    pod: str
    uid: str


@dataclass(frozen=True, slots=True, kw_only=True)
class PatchTemplate:
    """Set the workload's pod-template resources (our own field manager) so its controller rolls the pods."""

    key: str
    namespace: str
    kind: str
    name: str
    values: tuple[ContainerValues, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkloadObservation:
    ready: int
    """Ready, non-terminating pods of the workload now."""
    template: tuple[ContainerValues, ...] | None = None
    """The pod template's resources for the containers the journal names (None: not read)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SetServing:
    """Set the pod's serving gate condition (``pods/status``, uid precondition): False takes it out of its
    Services' endpoints before a restarting resize, True puts it back."""

    key: str
    namespace: str
    pod: str
    uid: str
    serving: bool


Effect = Resize | Event | Evict | PatchTemplate | SetServing
Workloads = Mapping[tuple[str, str, str], WorkloadObservation]
"""What the executor read about the workloads, keyed (namespace, kind, name)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Timeouts:
    verify_s: float = 3600.0
    deferred_s: float = 300.0


def spec_matches(obs: PodObservation, values: Iterable[ContainerValues]) -> bool:
    for v in values:
        c = obs.containers.get(v.name)
        if c is None or c.spec_requests != v.requests or c.spec_limits != v.limits:
            return False
    return True


def same_pod(entry: Entry, obs: PodObservation | None) -> bool:
    return obs is not None and obs.uid == entry.uid and not obs.deleting


def resize_effect(entry: Entry, purpose: ResizePurpose) -> Resize:
    values, expect = (entry.after, entry.before) if purpose == Purpose.APPLY else (entry.before, entry.after)
    pod_level = entry.pod_level_after if purpose == Purpose.APPLY else entry.pod_level_before
    return Resize(key=entry.key, namespace=entry.namespace, pod=entry.pod, uid=entry.uid, values=values,
                  expect=expect, purpose=purpose, pod_level=pod_level)


def serving_effect(entry: Entry, serving: bool) -> SetServing:
    return SetServing(key=entry.key, namespace=entry.namespace, pod=entry.pod, uid=entry.uid, serving=serving)


def set_entries(r: Rollout, changed: Mapping[str, Entry]) -> Rollout:
    return replace(r, entries=tuple(changed.get(e.key, e) for e in r.entries))


def set_batch(r: Rollout, batch: BatchRecord) -> Rollout:
    return replace(r, batches=tuple(batch if b.index == batch.index else b for b in r.batches))


WAITING = frozenset({EntryState.PLANNED, EntryState.APPLYING, EntryState.EVICTING, EntryState.DRAINING})
"""The states that hold a batch in Applying: something still to send, or its answer not yet in (an eviction the
API server said "not now" to stays Evicting until its back-off ends). Blocked is not one of them: ``answered``."""


def answered(entries: Iterable[Entry]) -> bool:
    """Whether a batch being applied goes on to verification: none of its entries is WAITING.

    The rule for a pod whose eviction its PodDisruptionBudget refused (Blocked): the refusal is that pod's
    outcome, not its batch's. The pod is left at its current size (never evicted against its budget, never half
    changed), the refusal is in its entry's message and a Warning Event on it, and it does not hold up the
    batch: once the batch has nothing else to send or hear back about, it is verified and baked, and the next
    batch starts. While its batch is still being applied the pod is tried again when its back-off ends; after
    that, the pool's next rollout tries it again (the planner holds it until its back-off ends and carries its
    refusal count on: ``updater.rollout.machine.fallback.budget_blocks``), so it is never lost."""
    return not any(e.state in WAITING for e in entries)
