"""Counting disruption from what the cluster recorded: the API server's audit log and a timeline of pods.

Owns the arithmetic of the VPA side-by-side benchmark (bench_vpa.py), kept free of servers so it can be read
and checked on its own: ``count_writes`` reads the audit log (JSON lines, one per request) into writes per
user and kind (evictions and resizes split into done and refused), ``PodTimeline`` folds periodic snapshots of
an arena's pods into the number of pods created, container restarts and the time of the last change, and
``placement`` compares the running pods at the end with their workloads' targets.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

WRITE_VERBS = frozenset({"create", "update", "patch", "delete", "deletecollection"})


def write_kind(resource: str, subresource: str, verb: str) -> str:
    """A short name for what a write changed: ``eviction``, ``resize``, ``pod`` (spec/metadata), ``pod-status``,
    ``event``, ``lease``, ``vpa``, ``rollout`` (ResizeRollout), ``webhook-config`` or ``resource/subresource``."""
    if resource == "pods":
        return {"eviction": "eviction", "resize": "resize", "status": "pod-status", "": "pod"}.get(
            subresource, f"pods/{subresource}")
    named = {"events": "event", "leases": "lease", "verticalpodautoscalers": "vpa", "resizerollouts": "rollout",
             "mutatingwebhookconfigurations": "webhook-config"}
    if resource in named:
        return named[resource] + (f"/{subresource}" if subresource else "")
    return f"{resource}/{subresource}" if subresource else resource


@dataclass(frozen=True, slots=True, kw_only=True)
class Writes:
    """One user's writes: by kind, and by kind and HTTP code (evictions: 201 done, 429 refused by a PDB)."""

    by_kind: Mapping[str, int]
    by_kind_code: Mapping[tuple[str, int], int]
    done_by_object: Mapping[tuple[str, str], int]
    """Successful (2xx) writes by kind and object name (the pod's, for evictions and resizes)."""

    @property
    def total(self) -> int:
        return sum(self.by_kind.values())

    def done(self, kind: str) -> int:
        return sum(n for (k, code), n in self.by_kind_code.items() if k == kind and 200 <= code < 300)

    def refused(self, kind: str) -> int:
        return sum(n for (k, code), n in self.by_kind_code.items() if k == kind and code >= 400)


def count_writes(lines: Iterable[str], users: Iterable[str], *, since_s: float = 0.0) -> Writes:
    """Writes whose request completed, by the given users, at or after ``since_s`` (the audit event's
    ``requestReceivedTimestamp``, as epoch seconds)."""
    wanted = set(users)
    kinds: Counter[str] = Counter()
    codes: Counter[tuple[str, int]] = Counter()
    objects: Counter[tuple[str, str]] = Counter()
    for line in lines:
        event = json.loads(line)
        if event.get("stage") != "ResponseComplete" or event.get("verb") not in WRITE_VERBS:
            continue
        if (event.get("user") or {}).get("username") not in wanted:
            continue
        if since_s and _epoch(event.get("requestReceivedTimestamp", "")) < since_s:
            continue
        ref = event.get("objectRef") or {}
        kind = write_kind(ref.get("resource", ""), ref.get("subresource", ""), event["verb"])
        code = int((event.get("responseStatus") or {}).get("code", 0))
        kinds[kind] += 1
        codes[(kind, code)] += 1
        if 200 <= code < 300:
            objects[(kind, ref.get("name", ""))] += 1
    return Writes(by_kind=dict(kinds), by_kind_code=dict(codes), done_by_object=dict(objects))


def _epoch(stamp: str) -> float:
    import datetime as dt

    if not stamp:
        return 0.0
    return dt.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def read_writes(audit_log: Path, users: Iterable[str], *, since_s: float = 0.0) -> Writes:
    with audit_log.open() as lines:
        return count_writes(lines, users, since_s=since_s)


# ------------------------------------------------------------------------------------------ pod timeline
@dataclass(frozen=True, slots=True, kw_only=True)
class PodView:
    """What a snapshot shows of one pod."""

    uid: str
    name: str
    workload: str
    running: bool
    requests: tuple[tuple[int, int], ...]
    """(cpu millicores, memory bytes) per container as the kubelet reports them (spec before it does)."""
    restarts: int


@dataclass
class PodTimeline:
    """Snapshots of one arena's pods, oldest first, from ``t0_s`` (the moment the targets were written)."""

    t0_s: float
    first_uids: frozenset[str] = frozenset()
    seen: dict[str, PodView] = field(default_factory=dict)
    max_restarts: dict[str, int] = field(default_factory=dict)
    last_signature: tuple[object, ...] | None = None
    last_change_s: float | None = None
    latest: tuple[PodView, ...] = ()

    def add(self, now_s: float, pods: Iterable[PodView]) -> None:
        views = tuple(sorted(pods, key=lambda p: p.uid))
        if self.last_signature is None:
            self.first_uids = frozenset(p.uid for p in views)
        for p in views:
            self.seen[p.uid] = p
            self.max_restarts[p.uid] = max(self.max_restarts.get(p.uid, 0), p.restarts)
        signature = tuple((p.uid, p.running, p.requests, p.restarts) for p in views)
        if self.last_signature is not None and signature != self.last_signature:
            self.last_change_s = now_s - self.t0_s
        self.last_signature = signature
        self.latest = views

    @property
    def created(self) -> int:
        """Pods that appeared after the first snapshot (replacements of evicted pods)."""
        return len(set(self.seen) - self.first_uids)

    @property
    def restarts(self) -> int:
        return sum(self.max_restarts.values())


@dataclass(frozen=True, slots=True, kw_only=True)
class Placement:
    at_target: int
    above: int
    below: int
    not_running: int


def placement(pods: Iterable[PodView], targets: Mapping[str, tuple[int, int]], *, tolerance: float = 0.01) -> Placement:
    """Running pods at, above or below their workload's target (any container, any resource beyond
    ``tolerance`` decides: below wins over above), and pods not running."""
    at = above = below = idle = 0
    for p in pods:
        if not p.running:
            idle += 1
            continue
        cpu, mem = targets[p.workload]
        verdicts = set()
        for have_cpu, have_mem in p.requests:
            for have, want in ((have_cpu, cpu), (have_mem, mem)):
                if have < want * (1 - tolerance):
                    verdicts.add("below")
                elif have > want * (1 + tolerance):
                    verdicts.add("above")
        if "below" in verdicts:
            below += 1
        elif "above" in verdicts:
            above += 1
        else:
            at += 1
    return Placement(at_target=at, above=above, below=below, not_running=idle)
