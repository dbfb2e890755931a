"""Pieces of raw Kubernetes objects (plain JSON dicts) both halves read the same way.

Owns the containers of a pod spec (native sidecars, that is init containers with ``restartPolicy: Always``,
then the regular containers, then on request the plain init containers), the Container-type limits of a
LimitRange (several items merged tightest-wins, as a ``LimitRangeView``) and what an autoscaling/v2 HPA
scales (its target workload and the resources it scales on by Utilization, Resource and ContainerResource
metrics alike; no metrics means the controller's default of 80% CPU). A field that cannot be read raises
``MalformedObject`` with its path; a caller that would rather skip that object (or, with ``lenient``, that
value) says so. Plain dict parsing: no client calls.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from podtailor.resize.changes import merge_limit_ranges
from podtailor.resize.types import LimitRangeView
from podtailor.resources import Resources, ResourcesError, parse_resources
from podtailor.units import QuantityError, parse_quantity

Obj = dict[str, Any]


class MalformedObject(ValueError):
    """An API object with a field that cannot be read; the object is skipped, never guessed."""


def resources(raw: object, where: str, *, lenient: bool = False) -> Resources:
    """``podtailor.resources.parse_resources`` raising MalformedObject."""
    try:
        return parse_resources(raw, where=where, lenient=lenient)
    except ResourcesError as err:
        raise MalformedObject(str(err)) from None


# ------------------------------------------------------------------------------------------ containers
class PodContainer(NamedTuple):
    raw: Obj
    sidecar: bool = False
    """A native sidecar: an init container with restartPolicy Always (resizable like a regular container)."""
    init: bool = False
    """A plain init container (runs to completion first; never resized in place)."""


def is_sidecar(container: object) -> bool:
    return isinstance(container, Mapping) and container.get("restartPolicy") == "Always"


def pod_containers(spec: Mapping[str, Any], *, with_init: bool = False) -> list[PodContainer]:
    """The native sidecars, then the regular containers, then (``with_init``) the plain init containers, each
    in spec order, as the raw container dicts."""
    inits = list(spec.get("initContainers") or ())
    out = [PodContainer(c, sidecar=True) for c in inits if is_sidecar(c)]
    out += [PodContainer(c) for c in spec.get("containers") or ()]
    if with_init:
        out += [PodContainer(c, init=True) for c in inits if not is_sidecar(c)]
    return out


# ----------------------------------------------------------------------------------------- LimitRanges
def _ratio(raw: object, where: str, lenient: bool) -> float | None:
    if raw is None:
        return None
    try:
        return float(parse_quantity(raw))  # type: ignore[arg-type]
    except (QuantityError, TypeError) as err:
        if lenient:
            return None
        raise MalformedObject(f"{where}: {err}") from None


def limit_range(obj: Mapping[str, Any], *, lenient: bool = False) -> LimitRangeView:
    """The Container-type items of one LimitRange merged tightest-wins (other types are ignored); with
    ``lenient`` an unreadable quantity counts as unset instead of raising MalformedObject."""
    meta = obj.get("metadata") or {}
    ns, where = str(meta.get("namespace", "")), f"LimitRange {meta.get('namespace')}/{meta.get('name')}"
    view = LimitRangeView(namespace=ns)
    for i, item in enumerate((obj.get("spec") or {}).get("limits") or ()):
        if item.get("type") != "Container":
            continue
        at, ratio = f"{where} limits[{i}]", item.get("maxLimitRequestRatio") or {}
        view = merge_limit_ranges(view, LimitRangeView(
            namespace=ns, min=resources(item.get("min"), f"{at}.min", lenient=lenient),
            max=resources(item.get("max"), f"{at}.max", lenient=lenient),
            max_limit_request_ratio_cpu=_ratio(ratio.get("cpu"), f"{at}.maxLimitRequestRatio.cpu", lenient),
            max_limit_request_ratio_memory=_ratio(ratio.get("memory"), f"{at}.maxLimitRequestRatio.memory",
                                                  lenient)))
    return view


# ------------------------------------------------------------------------------------------------ HPAs
@dataclass(frozen=True, slots=True, kw_only=True)
class HpaTarget:
    """What one HPA scales: (namespace, kind, name) of its scale target, and the resources it scales on by
    utilization (a percentage of the request, so their requests must stay put)."""

    namespace: str
    kind: str
    name: str
    utilization: frozenset[str]


METRIC_SOURCES = {"Resource": "resource", "ContainerResource": "containerResource"}


def hpa_target(obj: Mapping[str, Any]) -> HpaTarget:
    """Raises MalformedObject when ``spec.scaleTargetRef`` lacks a kind or a name."""
    meta, spec = obj.get("metadata") or {}, obj.get("spec") or {}
    ref = spec.get("scaleTargetRef") or {}
    if not isinstance(ref.get("kind"), str) or not isinstance(ref.get("name"), str):
        raise MalformedObject(f"HPA {meta.get('namespace')}/{meta.get('name')}: spec.scaleTargetRef needs kind "
                              "and name")
    metrics = spec.get("metrics")
    utilization: set[str] = set() if metrics else {"cpu"}  # no metrics: the controller's 80% CPU default
    for metric in metrics or ():
        source = METRIC_SOURCES.get(metric.get("type", ""))
        body = (metric.get(source) or {}) if source else {}
        if (body.get("target") or {}).get("type") == "Utilization" and isinstance(body.get("name"), str):
            utilization.add(body["name"])
    return HpaTarget(namespace=str(meta.get("namespace", "")), kind=ref["kind"], name=ref["name"],
                     utilization=frozenset(utilization))
