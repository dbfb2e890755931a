"""Node pools and canary batches: which pools are frozen, and in which batch each resize goes.

Owns the Batch step of the lifecycle as pure data (like Argo Rollouts steps). A pool is frozen when more
than ``unhealthy_pool_fraction`` of its nodes are NotReady or under MemoryPressure (with 0: any). Per pool,
actionable pods are ordered least critical first, so the canary lands where a failure hurts least: lower
priority first, then QoS (Burstable before Guaranteed), then older pods first, then by key for determinism.
Steps are cumulative: step i covers ceil(fraction_i x n) pods in total (fraction 0: one pod), each step at
least one more than the previous; empty steps are dropped. Pods a ladder ending below 1.0 leaves uncovered
go into extra batches that repeat the last step (index, bake and gates), as does the budget overflow below.
Restarting changes obey a disruption budget within each batch: at most max(1, floor(budget x replicas))
pods of one workload restart together; the overflow moves to the next batch (extra batches carrying the
last step's index, bake and gates are appended when needed). A batch larger than
``max_concurrent_per_pool`` is split into consecutive pieces of that size; every piece keeps the step index
and gates, only the last one keeps the bake time (the others bake 0 s: they are one step applied in parts).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from podtailor.resize.types import QoS
from updater.policy.types import Batch, CanaryStep, NodeView, RolloutPolicy

_QOS_ORDER = {QoS.BEST_EFFORT: 0, QoS.BURSTABLE: 1, QoS.GUARANTEED: 2}
_EPS = 1e-9
DEFAULT_STEP = CanaryStep(fraction=1.0, bake_s=0.0)
"""Used when a policy has no steps at all: everything in one batch."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Candidate:
    """One actionable pod as the batcher sees it."""

    key: str
    pool: str
    workload: tuple[str, str, str]
    replicas: int
    restarts: bool
    priority: int
    qos: QoS
    created_s: float

    @property
    def order(self) -> tuple[int, int, float, str]:
        return (self.priority, _QOS_ORDER[self.qos], self.created_s, self.key)


def frozen_pools(nodes: Iterable[NodeView], unhealthy_fraction: float) -> dict[str, str]:
    """pool -> why, for pools whose share of NotReady / MemoryPressure nodes is above the fraction."""
    total: dict[str, int] = defaultdict(int)
    bad: dict[str, list[str]] = defaultdict(list)
    for node in nodes:
        total[node.pool] += 1
        if not node.ready or node.memory_pressure:
            bad[node.pool].append(node.name)
    frozen = {}
    for pool, names in bad.items():
        if len(names) / total[pool] > unhealthy_fraction:
            shown = ", ".join(sorted(names)[:5]) + (" ..." if len(names) > 5 else "")
            frozen[pool] = (f"{len(names)}/{total[pool]} nodes NotReady or under MemoryPressure "
                            f"(allowed fraction {unhealthy_fraction:g}): {shown}")
    return frozen


def step_counts(fractions: Sequence[float], n: int) -> list[int]:
    """Cumulative pod counts per step for n pods (a ladder ending below 1.0 may leave some uncovered)."""
    counts, prev = [], 0
    for fraction in fractions:
        want = 1 if fraction <= 0 else math.ceil(fraction * n - _EPS)
        count = min(n, max(want, prev + 1))
        counts.append(count)
        prev = count
    return counts


def _budget(candidate: Candidate, budget: float) -> int:
    return max(1, math.floor(budget * candidate.replicas + _EPS))


def _fill(queue: list[Candidate], budget: float) -> tuple[list[Candidate], list[Candidate]]:
    """Take pods in order; a restarting pod whose workload is at its budget waits for the next batch."""
    taken: list[Candidate] = []
    overflow: list[Candidate] = []
    restarting: dict[tuple[str, str, str], int] = defaultdict(int)
    for c in queue:
        if c.restarts and restarting[c.workload] >= _budget(c, budget):
            overflow.append(c)
            continue
        if c.restarts:
            restarting[c.workload] += 1
        taken.append(c)
    return taken, overflow


def _split(pool: str, step: int, spec: CanaryStep, pods: list[Candidate], size: int) -> list[Batch]:
    pieces = [pods[i:i + size] for i in range(0, len(pods), size)]
    return [Batch(pool=pool, step=step, pods=tuple(c.key for c in piece),
                  bake_s=spec.bake_s if i == len(pieces) - 1 else 0.0, gates=spec.gates)
            for i, piece in enumerate(pieces)]


def pool_batches(pool: str, candidates: Sequence[Candidate], policy: RolloutPolicy) -> list[Batch]:
    steps = policy.steps or (DEFAULT_STEP,)
    ordered = sorted(candidates, key=lambda c: c.order)
    counts = step_counts([s.fraction for s in steps], len(ordered))
    size = max(1, policy.max_concurrent_per_pool)
    batches: list[Batch] = []
    carry: list[Candidate] = []
    prev = 0
    for index, (spec, count) in enumerate(zip(steps, counts, strict=True)):
        taken, carry = _fill(carry + ordered[prev:count], policy.disruption_budget)
        prev = count
        if taken:
            batches.extend(_split(pool, index, spec, taken, size))
    carry += ordered[prev:]
    last = len(steps) - 1
    while carry:
        taken, carry = _fill(carry, policy.disruption_budget)
        batches.extend(_split(pool, last, steps[last], taken, size))
    return batches


def build_batches(candidates: Iterable[Candidate], policy: RolloutPolicy) -> tuple[Batch, ...]:
    """Batches of every pool, pools in name order, each pool's batches in step order."""
    by_pool: dict[str, list[Candidate]] = defaultdict(list)
    for c in candidates:
        by_pool[c.pool].append(c)
    out: list[Batch] = []
    for pool in sorted(by_pool):
        out.extend(pool_batches(pool, by_pool[pool], policy))
    return tuple(out)
