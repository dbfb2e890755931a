"""Pod to workload mapping from kube-state-metrics owner series, computed client-side.

Owns ``OwnerIndex``: built from the rows of ``kube_pod_owner``, ``kube_replicaset_owner`` and
``kube_job_owner`` (one query each per namespace batch, not per pod), it maps a pod to its top-level
workload: pod -> ReplicaSet -> Deployment (or Argo Rollout), pod -> Job -> CronJob, pod -> StatefulSet or
DaemonSet directly. A ReplicaSet or Job without a known owner is itself the workload. A pod without a
controller, with no owner series at all, or owned by a Node (static mirror pods) maps to kind ``Pod`` with
its own name: pooling static pods by node would mix unrelated components. Pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

NO_OWNER = "<none>"
"""kube-state-metrics' owner_kind/owner_name for an object without an owner."""


@dataclass(frozen=True, slots=True, kw_only=True, order=True)
class Workload:
    kind: str
    name: str


def _owner(labels: Mapping[str, str]) -> Workload | None:
    kind = labels.get("owner_kind", "")
    name = labels.get("owner_name", "")
    if not kind or not name or NO_OWNER in (kind, name):
        return None
    return Workload(kind=kind, name=name)


def _index(rows: Iterable[Mapping[str, str]], object_label: str) -> dict[tuple[str, str], Workload]:
    """(namespace, object) -> owner; several owners for one object: the smallest, so the choice is stable."""
    out: dict[tuple[str, str], Workload] = {}
    for labels in rows:
        owner = _owner(labels)
        key = (labels.get("namespace", ""), labels.get(object_label, ""))
        if owner is None or not key[1]:
            continue
        current = out.get(key)
        out[key] = owner if current is None else min(current, owner)
    return out


@dataclass(frozen=True, slots=True, kw_only=True)
class OwnerIndex:
    """Owner maps keyed by (namespace, name)."""

    pods: dict[tuple[str, str], Workload] = field(default_factory=dict)
    replicasets: dict[tuple[str, str], Workload] = field(default_factory=dict)
    jobs: dict[tuple[str, str], Workload] = field(default_factory=dict)

    @staticmethod
    def from_rows(pod_rows: Iterable[Mapping[str, str]], replicaset_rows: Iterable[Mapping[str, str]],
                  job_rows: Iterable[Mapping[str, str]]) -> OwnerIndex:
        return OwnerIndex(pods=_index(pod_rows, "pod"), replicasets=_index(replicaset_rows, "replicaset"),
                          jobs=_index(job_rows, "job_name"))

    def merged(self, other: OwnerIndex) -> OwnerIndex:
        """Both indexes together (pages of one pass cover disjoint pods; later pages win on overlap)."""
        return OwnerIndex(pods={**self.pods, **other.pods}, replicasets={**self.replicasets, **other.replicasets},
                          jobs={**self.jobs, **other.jobs})

    def workload(self, namespace: str, pod: str) -> Workload:
        """The top-level workload of ``pod``."""
        direct = self.pods.get((namespace, pod))
        if direct is None or direct.kind == "Node":
            return Workload(kind="Pod", name=pod)
        if direct.kind == "ReplicaSet":
            return self.replicasets.get((namespace, direct.name), direct)
        if direct.kind == "Job":
            return self.jobs.get((namespace, direct.name), direct)
        return direct
