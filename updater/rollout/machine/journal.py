"""The rollout journal: one canary rollout in one pool, as values, and its form in ResizeRollout status.

Owns what is recorded durably before and after every action: for each pod the resources before and after,
the containers expected to restart and their restart counts before, the batch, and the entry's state; for
each batch its phase and clock. ``to_status``/``from_status`` convert to and from the object's JSON, with
resources as integers (millicores, bytes) so nothing is lost in formatting.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from podtailor.resources import Resources


class EntryState(enum.StrEnum):
    PLANNED = "Planned"
    APPLYING = "Applying"
    """Intent recorded; the resize may or may not have reached the API server (resume checks the spec)."""
    APPLIED = "Applied"
    VERIFIED = "Verified"
    REVERTING = "Reverting"
    """The restore is journaled (and maybe sent): done when the kubelet reports the recorded values again."""
    REVERTED = "Reverted"
    """Restored: the spec holds the recorded values again and the kubelet reports them (observedGeneration)."""
    NOT_RESTORED = "NotRestored"
    """A restore the API server accepted but the kubelet did not apply after ``MAX_RESTORE_CHECKS`` looks (e.g. a
    memory limit below the container's usage): the spec holds the recorded values, the pod still runs the others.
    Its pool stays Halted; ``rollback`` reports the rollout as incomplete."""
    SKIPPED = "Skipped"
    GONE = "Gone"
    INFEASIBLE = "Infeasible"
    """The kubelet could not fit it (or Deferred past the timeout): reverted, left for the fallback."""
    EVICTING = "Evicting"
    """Fallback intent recorded; the eviction may or may not have happened (resume checks the pod's uid). After
    the API server's "not now" (API Priority and Fairness) it is sent again from ``not_before_s``."""
    EVICTED = "Evicted"
    BLOCKED = "Blocked"
    """An eviction the pod's PodDisruptionBudget refused: the pod's outcome for now, left at its size. It does not
    hold its batch (``machine_effects.answered``); it is tried again after ``not_before_s``, in its batch while the
    batch still waits for another answer, else by the pool's next rollout (``fallback.budget_blocks``)."""
    DRAINING = "Draining"
    """A restarting resize of a gated pod: its serving gate is set False; the resize waits until no
    EndpointSlice lists the pod as ready (resume sets the gate again, then checks the endpoints)."""


ACTIVE = frozenset({EntryState.APPLYING, EntryState.APPLIED, EntryState.VERIFIED})


class EntryAction(enum.StrEnum):
    """What an entry does to its pod; the value is what the journal stores as ``action``."""

    RESIZE = "resize"
    """In place, through ``pods/resize``."""
    EVICT = "evict"
    """Fallback: the Eviction API."""
    TEMPLATE = "template"
    """Fallback: patch the workload's pod template (one entry per workload)."""


RESIZE, EVICT, TEMPLATE = EntryAction.RESIZE, EntryAction.EVICT, EntryAction.TEMPLATE
SETTLED = frozenset({EntryState.VERIFIED, EntryState.SKIPPED, EntryState.GONE, EntryState.INFEASIBLE,
                     EntryState.REVERTED})


class BatchPhase(enum.StrEnum):
    PENDING = "Pending"
    APPLYING = "Applying"
    VERIFYING = "Verifying"
    BAKING = "Baking"
    DONE = "Done"
    FAILED = "Failed"


class Phase(enum.StrEnum):
    PROGRESSING = "Progressing"
    BAKING = "Baking"
    ROLLING_BACK = "RollingBack"
    HALTED = "Halted"
    COMPLETED = "Completed"
    ROLLED_BACK = "RolledBack"


TERMINAL = frozenset({Phase.COMPLETED, Phase.ROLLED_BACK})


@dataclass(frozen=True, slots=True, kw_only=True)
class ContainerValues:
    name: str
    requests: Resources
    limits: Resources
    sidecar: bool = False
    init: bool = False
    """A plain init container (written under ``initContainers``, like a sidecar)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Entry:
    namespace: str
    pod: str
    uid: str
    workload_kind: str
    workload_name: str
    batch: int
    before: tuple[ContainerValues, ...]
    after: tuple[ContainerValues, ...]
    restarting: frozenset[str] = frozenset()
    restarts_before: Mapping[str, int] = field(default_factory=dict)
    state: EntryState = EntryState.PLANNED
    generation: int | None = None
    """The pod's generation after our resize; verification waits for observedGeneration to reach it."""
    applied_s: float | None = None
    message: str = ""
    action: EntryAction = EntryAction.RESIZE
    attempts: int = 0
    not_before_s: float | None = None
    ready_before: int = 0
    """Ready pods of the workload when the fallback was planned: an eviction is done when they are back."""
    drain: bool = False
    """A restarting resize of a pod with the serving gate: drained before, put back after its containers are
    ready again."""
    pod_level_before: Resources | None = None
    """The pod-level ``spec.resources.requests`` before (None: the resize leaves them alone)."""
    pod_level_after: Resources | None = None
    """The pod-level requests the resize writes with the containers (None: left alone)."""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.pod}"

    @property
    def workload(self) -> tuple[str, str, str]:
        return (self.namespace, self.workload_kind, self.workload_name)


@dataclass(frozen=True, slots=True, kw_only=True)
class BatchRecord:
    index: int
    step: int
    bake_s: float
    gates: tuple[str, ...]
    phase: BatchPhase = BatchPhase.PENDING
    started_s: float | None = None
    bake_until_s: float | None = None
    deadline_s: float | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Rollout:
    name: str
    pool: str
    policy: str
    batches: tuple[BatchRecord, ...]
    entries: tuple[Entry, ...]
    phase: Phase = Phase.PROGRESSING
    current_batch: int = 0
    message: str = ""
    resource_version: str = ""
    rollback_all: bool = False
    """Set by `podtailor-updater rollback`: restore every touched pod, not only the failed batch."""

    def entries_of(self, batch: int) -> list[Entry]:
        return [e for e in self.entries if e.batch == batch]


def _res(r: Resources) -> dict[str, int]:
    out = {}
    if r.cpu_millicores is not None:
        out["cpuMillicores"] = r.cpu_millicores
    if r.memory_bytes is not None:
        out["memoryBytes"] = r.memory_bytes
    return out


def _unres(d: Mapping[str, Any]) -> Resources:
    cpu, mem = d.get("cpuMillicores"), d.get("memoryBytes")
    return Resources(cpu_millicores=int(cpu) if cpu is not None else None,
                     memory_bytes=int(mem) if mem is not None else None)


def _values(v: ContainerValues) -> dict[str, Any]:
    out: dict[str, Any] = {"name": v.name, "requests": _res(v.requests)}
    if limits := _res(v.limits):
        out["limits"] = limits
    if v.sidecar:
        out["sidecar"] = True
    if v.init:
        out["init"] = True
    return out


def _unvalues(d: Mapping[str, Any]) -> ContainerValues:
    return ContainerValues(name=str(d["name"]), requests=_unres(d.get("requests") or {}),
                           limits=_unres(d.get("limits") or {}), sidecar=bool(d.get("sidecar", False)),
                           init=bool(d.get("init", False)))


def _opt_res(r: Resources | None) -> dict[str, int] | None:
    return None if r is None else _res(r)


def _opt_unres(d: Mapping[str, Any] | None) -> Resources | None:
    return None if d is None else _unres(d)


def _without_defaults(d: dict[str, Any], defaults: Mapping[str, Any]) -> dict[str, Any]:
    """``d`` without the keys whose value is the one ``from_object`` assumes when the key is absent: a status
    write is a few hundred bytes per entry instead of about 700 (the object is written whole every time). What
    an entry is and where it stands (``action``, ``state``) is always written, for people and scripts that
    read the status directly."""
    return {k: v for k, v in d.items() if k not in defaults or v != defaults[k]}


_ENTRY_DEFAULTS: Mapping[str, Any] = {"restarting": [], "restartsBefore": {}, "generation": None,
                                      "appliedSeconds": None, "message": "", "attempts": 0,
                                      "notBeforeSeconds": None, "readyBefore": 0, "drain": False,
                                      "podLevelBefore": None, "podLevelAfter": None}
_BATCH_DEFAULTS: Mapping[str, Any] = {"gates": [], "startedSeconds": None, "bakeUntilSeconds": None,
                                      "deadlineSeconds": None}


def to_status(r: Rollout) -> dict[str, Any]:
    """The status object; fields at the value ``from_object`` assumes when they are absent are left out."""
    return {
        "phase": r.phase.value, "currentBatch": r.current_batch, "message": r.message[:2000],
        "rollbackAll": r.rollback_all,
        "batches": [_without_defaults({
            "index": b.index, "step": b.step, "bakeSeconds": b.bake_s, "gates": list(b.gates),
            "phase": b.phase.value, "startedSeconds": b.started_s, "bakeUntilSeconds": b.bake_until_s,
            "deadlineSeconds": b.deadline_s}, _BATCH_DEFAULTS) for b in r.batches],
        "entries": [_without_defaults({
            "namespace": e.namespace, "pod": e.pod, "uid": e.uid, "workloadKind": e.workload_kind,
            "workloadName": e.workload_name, "batch": e.batch,
            "before": [_values(v) for v in e.before], "after": [_values(v) for v in e.after],
            "restarting": sorted(e.restarting), "restartsBefore": dict(e.restarts_before),
            "state": e.state.value, "generation": e.generation, "appliedSeconds": e.applied_s,
            "message": e.message[:500], "action": str(e.action), "attempts": e.attempts,
            "notBeforeSeconds": e.not_before_s, "readyBefore": e.ready_before, "drain": e.drain,
            "podLevelBefore": _opt_res(e.pod_level_before), "podLevelAfter": _opt_res(e.pod_level_after)},
            _ENTRY_DEFAULTS)
            for e in r.entries],
    }


def from_object(obj: Mapping[str, Any]) -> Rollout:
    spec, st = obj.get("spec") or {}, obj.get("status") or {}
    meta = obj.get("metadata") or {}
    batches = tuple(BatchRecord(index=int(b["index"]), step=int(b["step"]), bake_s=float(b["bakeSeconds"]),
                                gates=tuple(b.get("gates") or ()), phase=BatchPhase(b["phase"]),
                                started_s=b.get("startedSeconds"), bake_until_s=b.get("bakeUntilSeconds"),
                                deadline_s=b.get("deadlineSeconds")) for b in st.get("batches") or [])
    entries = tuple(Entry(namespace=e["namespace"], pod=e["pod"], uid=e["uid"], workload_kind=e["workloadKind"],
                          workload_name=e["workloadName"], batch=int(e["batch"]),
                          before=tuple(_unvalues(v) for v in e["before"]),
                          after=tuple(_unvalues(v) for v in e["after"]),
                          restarting=frozenset(e.get("restarting") or ()),
                          restarts_before={k: int(v) for k, v in (e.get("restartsBefore") or {}).items()},
                          state=EntryState(e["state"]), generation=e.get("generation"),
                          applied_s=e.get("appliedSeconds"), message=e.get("message", ""),
                          action=EntryAction(e.get("action", RESIZE)), attempts=int(e.get("attempts", 0)),
                          not_before_s=e.get("notBeforeSeconds"), ready_before=int(e.get("readyBefore", 0)),
                          drain=bool(e.get("drain", False)),
                          pod_level_before=_opt_unres(e.get("podLevelBefore")),
                          pod_level_after=_opt_unres(e.get("podLevelAfter")))
                    for e in st.get("entries") or [])
    return Rollout(name=str(meta.get("name")), pool=str(spec.get("pool", "")), policy=str(spec.get("policy", "")),
                   batches=batches, entries=entries, phase=Phase(st.get("phase", "Progressing")),
                   current_batch=int(st.get("currentBatch", 0)), message=str(st.get("message", "")),
                   resource_version=str(meta.get("resourceVersion", "")),
                   rollback_all=bool(st.get("rollbackAll", False)))
