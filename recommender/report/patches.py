"""The report as changes to the source: one kustomize strategic-merge patch per workload (``-o patches``).

Owns ``workload_patch`` (a ``WorkloadReport`` in, the patch document out: the workload's apiVersion, kind,
metadata.name and namespace, and its pod template's ``containers`` and ``initContainers`` by name, each with
``resources.requests`` and ``resources.limits``, and the pod-level ``resources.requests`` where the template
declares pod-level requests), ``file_name`` (a safe, stable name per workload) and
``write_patches`` (the files in a directory, and what was skipped and why). The values are the report's
``planned`` ones: the recommendation through the updater's own limit, LimitRange and HPA rules, which is what
the updater would write, so a workload patched with them leaves the updater nothing to resize; without a
LimitRange or an HPA they are the recommended target and limits. Requests are written for the resources the
recommendation targets, limits only for those it sets limits for (none under ``controlledValues:
RequestsOnly`` or where the container has no limit). Quantities are the base's exact ``quantities``
("1536Mi", "250m", "1234567"), never the rounded text of the human formats. Native sidecars and plain init
containers go in ``initContainers`` (strategic merge matches that list by name too, as ``containers``). The
pod-level requests are the ones the updater derives from the planned containers (``podtailor.resize.pod_level``:
each scaled with the pod's aggregate container requests, never below it); the pod-level limits are left alone,
as the updater leaves them, and a workload whose planned containers the API server would refuse under them is
skipped (``Skip.POD_LEVEL_LIMIT``). The merge keys follow upstream: ``containers`` and ``initContainers`` are
merged by ``name`` and ``resources`` maps key by key (k8s.io/api/core/v1/types.go, ``PodSpec``:
``patchMergeKey:"name"``).
"""

from __future__ import annotations

import enum
import hashlib
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from podtailor.kube.names import is_dns_label, is_dns_subdomain
from podtailor.resize import changes as ch
from podtailor.resources import Resources, quantities
from recommender.recommend import has_target
from recommender.report.types import ContainerReport, Report, Role, WorkloadReport

FORMAT = "patches"
"""The ``-o`` value."""
_POD_SPEC: Mapping[str, tuple[str, tuple[str, ...]]] = {
    "Deployment": ("apps/v1", ("spec", "template", "spec")),
    "StatefulSet": ("apps/v1", ("spec", "template", "spec")),
    "DaemonSet": ("apps/v1", ("spec", "template", "spec")),
    "ReplicaSet": ("apps/v1", ("spec", "template", "spec")),
    "Job": ("batch/v1", ("spec", "template", "spec")),
    "CronJob": ("batch/v1", ("spec", "jobTemplate", "spec", "template", "spec")),
    "Pod": ("v1", ("spec",)),
}
"""Kind -> (apiVersion, path from the object to its pod spec)."""
_NAME_MAX = 255
"""Bytes in a file name on Linux and macOS file systems."""


class Skip(enum.StrEnum):
    """Why a workload gets no patch file."""

    NO_HISTORY = "no usage history"
    MODE_OFF = "container policy mode Off"
    UNSUPPORTED_KIND = "kind takes no strategic-merge patch (a custom resource)"
    UNSAFE_NAME = "namespace or name is not a valid Kubernetes name"
    PER_POOL = "a DaemonSet's row for one node pool: no one template value fits its pools"
    POD_LEVEL_LIMIT = "planned values above the pod-level limits (the API server would refuse them)"


@dataclass(frozen=True, slots=True, kw_only=True)
class Written:
    """What ``write_patches`` did: the files it wrote, in report order, and the skipped workloads by reason."""

    files: tuple[Path, ...]
    skipped: Mapping[Skip, int]


def _pick(values: Resources, covered: Resources) -> Resources:
    """``values`` where ``covered`` sets an amount (and ``values`` has one), unset elsewhere."""
    cpu, memory = (ch.get(values, r) if ch.get(covered, r) is not None else None for r in ch.RESOURCES)
    return Resources(cpu_millicores=cpu, memory_bytes=memory)


def container_entry(c: ContainerReport) -> dict[str, Any] | None:
    """The container's entry of the patch (None: no recommendation with a target)."""
    rec = c.recommendation
    if rec is None or not has_target(rec):
        return None
    resources = {"requests": quantities(_pick(c.planned.requests, rec.target))}
    limits = quantities(_pick(c.planned.limits, rec.limits))
    if limits:
        resources["limits"] = limits
    return {"name": c.name, "resources": resources}


def skip_reason(w: WorkloadReport) -> Skip | None:
    """Why ``w`` gets no patch (None: it gets one)."""
    if w.kind not in _POD_SPEC:
        return Skip.UNSUPPORTED_KIND
    if w.pool_row:  # the updater and the webhook give each pod its own pool's value instead
        return Skip.PER_POOL
    if not is_dns_label(w.namespace) or not is_dns_subdomain(w.name):
        return Skip.UNSAFE_NAME
    if any(container_entry(c) is not None for c in w.containers):
        return Skip.POD_LEVEL_LIMIT if w.pod_level is not None and w.pod_level.refused else None
    # A container with usage but no recommendation was switched off by its VPA's container policy.
    off = any(c.usage is not None and c.recommendation is None for c in w.containers)
    return Skip.MODE_OFF if off else Skip.NO_HISTORY


def workload_patch(w: WorkloadReport) -> dict[str, Any] | None:
    """The strategic-merge patch of ``w`` (None: see ``skip_reason``)."""
    return None if skip_reason(w) is not None else _patch(w)


def _patch(w: WorkloadReport) -> dict[str, Any]:
    api_version, path = _POD_SPEC[w.kind]
    pod: dict[str, Any] = {}
    for roles, field in (((Role.CONTAINER,), "containers"), ((Role.SIDECAR, Role.INIT), "initContainers")):
        entries = [e for c in w.containers if c.role in roles and (e := container_entry(c)) is not None]
        if entries:
            pod[field] = entries
    if w.pod_level is not None and w.pod_level.planned_requests != Resources():
        pod["resources"] = {"requests": quantities(w.pod_level.planned_requests)}
    body: dict[str, Any] = pod
    for step in reversed(path):
        body = {step: body}
    return {"apiVersion": api_version, "kind": w.kind, "metadata": {"name": w.name, "namespace": w.namespace},
            **body}


def file_name(w: WorkloadReport) -> str:
    """``<namespace>_<kind>_<name>.yaml`` ("_" is in no Kubernetes name, so the name is unambiguous); a name too
    long for a file system keeps its first part and a hash of the whole. Only for workloads ``skip_reason``
    passes: their names hold nothing but [a-z0-9.-] and never start with "."."""
    name = f"{w.namespace}_{w.kind.lower()}_{w.name}"
    if len(name) + len(".yaml") > _NAME_MAX:
        digest = hashlib.sha256(name.encode()).hexdigest()[:16]
        name = f"{name[:_NAME_MAX - len('.yaml') - 17]}-{digest}"
    return f"{name}.yaml"


def write_patches(report: Report, directory: Path) -> Written:
    """One patch file per workload of ``report`` with a recommendation, in ``directory`` (created if missing;
    other files in it are left alone). Raises ``OSError`` when the directory or a file cannot be written."""
    directory.mkdir(parents=True, exist_ok=True)
    files, skipped = [], Counter[Skip]()
    for w in report.workloads:
        why = skip_reason(w)
        if why is not None:
            skipped[why] += 1
            continue
        path = directory / file_name(w)
        path.write_text(yaml.safe_dump(_patch(w), sort_keys=False))
        files.append(path)
    return Written(files=tuple(files), skipped=dict(skipped))
