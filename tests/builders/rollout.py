"""Rollout journals and pod observations for the state machine and the executor's tests.

A fixed time anchor (``NOW``), one container's old and new values (``OLD``, ``NEW``), and builders for an
entry, a rollout of it and a pod observed the way the adapter builds it from a Pod.
"""

from __future__ import annotations

from dataclasses import replace

from podtailor.resources import Resources
from updater.observe import ContainerObservation, PodObservation
from updater.rollout.machine.journal import BatchRecord, ContainerValues, Entry, Rollout

NOW = 1_700_000_000.0
OLD = ContainerValues(name="app", requests=Resources(cpu_millicores=500, memory_bytes=256 * 2**20),
                      limits=Resources(cpu_millicores=1000))
NEW = ContainerValues(name="app", requests=Resources(cpu_millicores=250, memory_bytes=256 * 2**20),
                      limits=Resources(cpu_millicores=500))


def entry(pod: str, batch: int, **kw: object) -> Entry:
    base = Entry(namespace="ns", pod=pod, uid=f"uid-{pod}", workload_kind="Deployment", workload_name="web",
                 batch=batch, before=(OLD,), after=(NEW,), restarts_before={"app": 0})
    return replace(base, **kw)  # type: ignore[arg-type]


def rollout(*entries: Entry, batches: int = 2, bake_s: float = 60.0) -> Rollout:
    return Rollout(name="r", pool="p1", policy="default", entries=entries,
                   batches=tuple(BatchRecord(index=i, step=i, bake_s=bake_s, gates=("oom", "restarts", "ready"))
                                 for i in range(batches)))


def obs(pod: str, spec: ContainerValues, actual: ContainerValues | None = None, *, generation: int = 1,
        observed: int = 1, ready: bool = True, restarts: int = 0, oom_at: float | None = None,
        pending: str | None = None, since: float | None = None, uid: str | None = None) -> PodObservation:
    a = actual or spec
    c = ContainerObservation(spec_requests=spec.requests, spec_limits=spec.limits, actual_requests=a.requests,
                             actual_limits=a.limits, restart_count=restarts,
                             last_termination_reason="OOMKilled" if oom_at else None, last_termination_s=oom_at)
    return PodObservation(namespace="ns", name=pod, uid=uid or f"uid-{pod}", resource_version="7",
                          generation=generation, observed_generation=observed, ready=ready, node="n1",
                          containers={"app": c}, resize_pending=pending, resize_pending_since_s=since)
