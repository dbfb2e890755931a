"""Workload controllers as an index: which top-level workload owns a pod, how many replicas it has, and
whether a person approved restarting changes on it.

Owns following a pod's controller ownerReferences to the top-level owner without a read per pod: the
ReplicaSets and Jobs of the snapshot are indexed once, so ReplicaSet -> Deployment (or whatever controls
it, e.g. an Argo Rollout) and Job -> CronJob are dictionary lookups; StatefulSet, DaemonSet and other
controllers are top-level themselves; a pod without a controller is its own workload (kind "Pod"). A
ReplicaSet missing from the index (created after the list) is mapped through the pod's
``pod-template-hash`` label when its name is "<deployment>-<hash>". Replicas: ``spec.replicas``
(Deployment, StatefulSet, ReplicaSet), ``status.currentNumberScheduled`` (DaemonSet), ``spec.parallelism``
(Job, and a CronJob's job template). Approvals: ``podtailor.io/approve-restart: "true"`` on a top-level
workload (the Deployment controller copies annotations onto ReplicaSets; those copies are ignored); the
workload's own canary analyses, ``podtailor.io/analyses``, are read from the same place.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from podtailor.numeric import is_int
from updater.kube.fields import Obj
from updater.policy.analysis import ANNOTATION as ANALYSES
from updater.policy.analysis import WorkloadAnalyses, from_annotation

APPROVE_RESTART = "podtailor.io/approve-restart"
WorkloadKey = tuple[str, str, str]
"""(namespace, kind, name)."""


def controller_of(meta: Mapping[str, Any]) -> tuple[str, str] | None:
    """(kind, name) of the ownerReference with controller: true, None when there is none."""
    for ref in meta.get("ownerReferences") or ():
        if ref.get("controller") and ref.get("kind") and ref.get("name"):
            return str(ref["kind"]), str(ref["name"])
    return None


def _replicas(kind: str, obj: Obj) -> int:
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    if kind == "DaemonSet":
        value = status.get("currentNumberScheduled", 0)
    elif kind == "Job":
        value = spec.get("parallelism", 1)
    elif kind == "CronJob":
        value = (((spec.get("jobTemplate") or {}).get("spec")) or {}).get("parallelism", 1)
    else:
        value = spec.get("replicas", 1)
    return value if is_int(value) and value >= 0 else 0


@dataclass(slots=True)
class WorkloadIndex:
    """Built once per snapshot from the listed controllers; read-only afterwards."""

    parents: dict[WorkloadKey, tuple[str, str]] = field(default_factory=dict)
    """(ns, ReplicaSet|Job, name) -> its controller (kind, name)."""
    replicas: dict[WorkloadKey, int] = field(default_factory=dict)
    approvals: set[WorkloadKey] = field(default_factory=set)
    analyses: dict[WorkloadKey, WorkloadAnalyses] = field(default_factory=dict)
    """Top-level workloads annotated podtailor.io/analyses (``policy.analysis``), parsed or with their error."""

    def add(self, kind: str, objs: Iterable[Obj]) -> None:
        for obj in objs:
            meta = obj.get("metadata") or {}
            key = (str(meta.get("namespace", "")), kind, str(meta.get("name", "")))
            self.replicas[key] = _replicas(kind, obj)
            parent = controller_of(meta) if kind in ("ReplicaSet", "Job") else None
            if parent is not None:
                self.parents[key] = parent
                continue
            annotations = meta.get("annotations") or {}  # top-level only: a Deployment's are copied onto its RSs
            if annotations.get(APPROVE_RESTART) == "true":
                self.approvals.add(key)
            if isinstance(annotations.get(ANALYSES), str):
                self.analyses[key] = from_annotation(annotations[ANALYSES], f"{kind} {key[0]}/{key[2]}: {ANALYSES}")

    def top_owner(self, namespace: str, pod: str, owner_refs: list[Obj], labels: Mapping[str, str]) -> tuple[str,
                                                                                                          str]:
        """The pod's top-level workload (kind, name)."""
        owner = controller_of({"ownerReferences": owner_refs})
        if owner is None:
            return "Pod", pod
        kind, name = owner
        if kind not in ("ReplicaSet", "Job"):
            return owner
        parent = self.parents.get((namespace, kind, name))
        if parent is not None:
            return parent
        if (namespace, kind, name) in self.replicas:
            return owner  # listed and without a controller: the ReplicaSet or Job is the workload
        template_hash = labels.get("pod-template-hash", "")
        if kind == "ReplicaSet" and template_hash and name.endswith(f"-{template_hash}"):
            return "Deployment", name[: -len(template_hash) - 1]
        return owner

    def replicas_of(self, key: WorkloadKey) -> int | None:
        return self.replicas.get(key)
