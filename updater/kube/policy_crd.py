"""ResizePolicy objects (``podtailor.io/v1alpha1``, cluster-scoped) as ``RolloutPolicy`` values, and which one applies.

Owns parsing one API object into a ``RolloutPolicy`` (durations "90s"/"5m"/"1h" to seconds, weekday names to
0 = Monday .. 6 = Sunday, "HH:MM" to minutes from midnight with "24:00" = 1440) and choosing the policy for a
namespace. The API server's schema already validates these objects; parsing checks again and raises
``PolicyError`` naming the object and the field, because a policy read wrongly is worse than none: the
caller should then act on nothing rather than fall back to the more permissive defaults. Selection: a
policy that names the namespace in ``spec.namespaces`` beats a catch-all (empty ``namespaces``); among
equals the smallest ``metadata.name`` wins; excluded namespaces (the policy's plus kube-system,
kube-public and kube-node-lease, always) are never covered. No object at all means ``RolloutPolicy()``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from podtailor.numeric import is_int, is_number
from updater.policy.analysis import Analysis, AnalysisError, parse_analyses
from updater.policy.types import CanaryStep, FallbackMode, MaintenanceWindow, RolloutPolicy

GROUP, VERSION, PLURAL = "podtailor.io", "v1alpha1", "resizepolicies"
SYSTEM_NAMESPACES = frozenset({"kube-system", "kube-public", "kube-node-lease"})
DAYS = {"Mon": 0, "Tue": 1, "Wed": 2, "Thu": 3, "Fri": 4, "Sat": 5, "Sun": 6}
GATES = frozenset({"oom", "restarts", "ready", "throttling"})
_DURATION = re.compile(r"^([0-9]{1,6})(s|m|h)$")
_CLOCK = re.compile(r"^([01][0-9]|2[0-3]):([0-5][0-9])$")
_UNIT_S = {"s": 1.0, "m": 60.0, "h": 3600.0}
_KNOWN_SPEC = frozenset({
    "namespaces", "excludedNamespaces", "nodePoolLabel", "steps", "maxConcurrent", "maxConcurrentPerPool",
    "disruptionBudget", "maintenanceWindows", "requireApprovalForRestart", "changeThreshold", "minPodAge",
    "deferredTimeout", "inProgressTimeout", "fallback", "allowSingleReplicaEviction", "unhealthyPoolFraction",
    "analyses",
    # Not in the v1alpha1 schema (the server prunes them); accepted so that RolloutPolicy can be fully set.
    "workloadSelector", "keepLimitRatio",
})


class PolicyError(ValueError):
    """A ResizePolicy that cannot be used as written; the message names the object and the field."""


def parse_duration_s(text: object, where: str) -> float:
    """"90s" -> 90.0, "5m" -> 300.0, "1h" -> 3600.0 (the CRD's pattern: 1-6 digits and s, m or h)."""
    match = _DURATION.match(text) if isinstance(text, str) else None
    if match is None:
        raise PolicyError(f"{where}: {text!r} is not a duration like 90s, 5m or 1h")
    return int(match[1]) * _UNIT_S[match[2]]


def parse_clock_minute(text: object, where: str, *, end: bool = False) -> int:
    """"HH:MM" (00:00..23:59) -> minutes from midnight; an end may also be "24:00" (1440)."""
    if end and text == "24:00":
        return 1440
    match = _CLOCK.match(text) if isinstance(text, str) else None
    if match is None:
        allowed = "00:00..23:59 or 24:00" if end else "00:00..23:59"
        raise PolicyError(f"{where}: {text!r} is not a time of day HH:MM ({allowed})")
    return int(match[1]) * 60 + int(match[2])


def _number(spec: Mapping[str, Any], key: str, default: float, low: float, high: float, where: str) -> float:
    value = spec.get(key, default)
    if not is_number(value) or not low <= value <= high:
        raise PolicyError(f"{where}.{key}: {value!r} is not a number in [{low:g}, {high:g}]")
    return float(value)


def _integer(spec: Mapping[str, Any], key: str, default: int, low: int, high: int, where: str) -> int:
    value = spec.get(key, default)
    if not is_int(value) or not low <= value <= high:
        raise PolicyError(f"{where}.{key}: {value!r} is not an integer in [{low}, {high}]")
    return value


def _flag(spec: Mapping[str, Any], key: str, default: bool, where: str) -> bool:
    value = spec.get(key, default)
    if not isinstance(value, bool):  # not "true"/"yes"/1: the schema says boolean
        raise PolicyError(f"{where}.{key}: {value!r} is not true or false")
    return value


def _strings(value: object, where: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise PolicyError(f"{where}: must be a list of non-empty strings")
    return value


def _step(raw: object, where: str) -> CanaryStep:
    if not isinstance(raw, Mapping):
        raise PolicyError(f"{where}: must be an object with fraction, bake and gates")
    unknown = set(raw) - {"fraction", "bake", "gates"}
    if unknown:
        raise PolicyError(f"{where}: unknown fields {sorted(unknown)}")
    if "fraction" not in raw:
        raise PolicyError(f"{where}.fraction is required")
    fraction = _number(raw, "fraction", 0.0, 0.0, 1.0, where)
    bake_s = parse_duration_s(raw.get("bake", "5m"), f"{where}.bake")
    if "gates" not in raw:
        return CanaryStep(fraction=fraction, bake_s=bake_s)
    gates = _strings(raw["gates"], f"{where}.gates") if raw["gates"] else []
    if not set(gates) <= GATES or len(set(gates)) != len(gates):
        raise PolicyError(f"{where}.gates: {gates!r} must be distinct names among {sorted(GATES)}")
    return CanaryStep(fraction=fraction, bake_s=bake_s, gates=tuple(gates))


def _steps(raw: object, where: str) -> tuple[CanaryStep, ...]:
    if not isinstance(raw, list) or not 1 <= len(raw) <= 20:
        raise PolicyError(f"{where}: must be a list of 1 to 20 steps")
    steps = tuple(_step(s, f"{where}[{i}]") for i, s in enumerate(raw))
    for i in range(1, len(steps)):
        if steps[i - 1].fraction >= steps[i].fraction:
            raise PolicyError(f"{where}[{i}].fraction: step fractions must increase "
                              f"({steps[i - 1].fraction:g} then {steps[i].fraction:g})")
    if steps[-1].fraction != 1.0:
        raise PolicyError(f"{where}: the last step must cover every pod (fraction 1), not {steps[-1].fraction:g}")
    return steps


def _window(raw: object, where: str) -> MaintenanceWindow:
    if not isinstance(raw, Mapping) or set(raw) != {"days", "start", "end"}:
        raise PolicyError(f"{where}: must be an object with exactly days, start and end")
    days = _strings(raw["days"], f"{where}.days")
    if not days or any(d not in DAYS for d in days) or len(set(days)) != len(days):
        raise PolicyError(f"{where}.days: {days!r} must be distinct names among Mon Tue Wed Thu Fri Sat Sun")
    start = parse_clock_minute(raw["start"], f"{where}.start")
    end = parse_clock_minute(raw["end"], f"{where}.end", end=True)
    if start >= end:
        raise PolicyError(f"{where}: start {raw['start']} is not before end {raw['end']} (a window across "
                          "midnight is two windows: until 24:00, and from 00:00 on the next days)")
    return MaintenanceWindow(days=frozenset(DAYS[d] for d in days), start_minute=start, end_minute=end)


def _selector(raw: object, where: str) -> dict[str, str]:
    if not isinstance(raw, Mapping) or not all(isinstance(k, str) and isinstance(v, str) for k, v in raw.items()):
        raise PolicyError(f"{where}: must be a map of label names to values")
    return dict(raw)


def _name(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata")
    name = meta.get("name") if isinstance(meta, Mapping) else None
    if not isinstance(name, str) or not name:
        raise PolicyError("ResizePolicy without metadata.name")
    return name


def _durations(spec: Mapping[str, Any], where: str) -> dict[str, float]:
    return {"min_pod_age_s": parse_duration_s(spec.get("minPodAge", "5m"), f"{where}.minPodAge"),
            "deferred_timeout_s": parse_duration_s(spec.get("deferredTimeout", "5m"), f"{where}.deferredTimeout"),
            "in_progress_timeout_s": parse_duration_s(spec.get("inProgressTimeout", "1h"),
                                                      f"{where}.inProgressTimeout")}


def _fallback(value: object, where: str) -> FallbackMode:
    try:
        return FallbackMode(str(value))
    except ValueError:
        raise PolicyError(f"{where}.fallback: {value!r} is not one of evict, template, none") from None


def _analyses(spec: Mapping[str, Any], where: str) -> tuple[Analysis, ...]:
    """``spec.analyses``, set by whoever manages the policy: not confined to a namespace (``policy.analysis``)."""
    try:
        return parse_analyses(spec.get("analyses", []), f"{where}.analyses", namespaced=False)
    except AnalysisError as err:
        raise PolicyError(str(err)) from None


def parse_policy(obj: Mapping[str, Any]) -> RolloutPolicy:
    """One ResizePolicy API object as a RolloutPolicy; absent fields take the CRD's (and RolloutPolicy's)
    defaults. Raises PolicyError on anything the schema would not allow, or that makes no sense."""
    name = _name(obj)
    where = f"ResizePolicy {name}: spec"
    spec = obj.get("spec", {})
    if not isinstance(spec, Mapping):
        raise PolicyError(f"{where}: must be an object")
    unknown = set(spec) - _KNOWN_SPEC
    if unknown:
        raise PolicyError(f"{where}: unknown fields {sorted(unknown)}")
    defaults = RolloutPolicy()
    pool_label = spec.get("nodePoolLabel", "")
    if not isinstance(pool_label, str):
        raise PolicyError(f"{where}.nodePoolLabel: {pool_label!r} is not a label key")
    windows = spec.get("maintenanceWindows", [])
    if not isinstance(windows, list):
        raise PolicyError(f"{where}.maintenanceWindows: must be a list")
    return RolloutPolicy(
        name=name,
        namespaces=frozenset(_strings(spec.get("namespaces", []), f"{where}.namespaces")),
        excluded_namespaces=SYSTEM_NAMESPACES | frozenset(_strings(spec.get("excludedNamespaces", []),
                                                                   f"{where}.excludedNamespaces")),
        workload_selector=_selector(spec.get("workloadSelector", {}), f"{where}.workloadSelector"),
        pool_label_key=pool_label,
        steps=_steps(spec["steps"], f"{where}.steps") if "steps" in spec else defaults.steps,
        max_concurrent=_integer(spec, "maxConcurrent", defaults.max_concurrent, 1, 10000, where),
        max_concurrent_per_pool=_integer(spec, "maxConcurrentPerPool", defaults.max_concurrent_per_pool, 1, 10000,
                                         where),
        disruption_budget=_number(spec, "disruptionBudget", defaults.disruption_budget, 0.0, 1.0, where),
        maintenance_windows=tuple(_window(w, f"{where}.maintenanceWindows[{i}]") for i, w in enumerate(windows)),
        require_approval_for_restart=_flag(spec, "requireApprovalForRestart", False, where),
        change_threshold=_number(spec, "changeThreshold", defaults.change_threshold, 0.0, 10.0, where),
        fallback=_fallback(spec.get("fallback", "evict"), where),
        allow_single_replica_eviction=_flag(spec, "allowSingleReplicaEviction", False, where),
        keep_limit_ratio=_flag(spec, "keepLimitRatio", True, where),
        unhealthy_pool_fraction=_number(spec, "unhealthyPoolFraction", 0.0, 0.0, 1.0, where),
        analyses=_analyses(spec, where),
        **_durations(spec, where),
    )


def covers(policy: RolloutPolicy, namespace: str) -> bool:
    """The policy applies to the namespace: not excluded, and named or the policy names none."""
    if namespace in policy.excluded_namespaces:
        return False
    return not policy.namespaces or namespace in policy.namespaces


def select_policy(objs: Iterable[RolloutPolicy | Mapping[str, Any]], namespace: str) -> RolloutPolicy:
    """The policy for ``namespace``: API objects are parsed first (PolicyError if any is bad).

    Order: policies naming the namespace, then catch-alls, each by name; the first that covers the
    namespace wins. When objects exist but none covers it, the first by name is returned: it does not
    cover the namespace (``covers`` is False), so nothing there is touched. No objects: ``RolloutPolicy()``.
    """
    policies = sorted((p if isinstance(p, RolloutPolicy) else parse_policy(p) for p in objs), key=lambda p: p.name)
    if not policies:
        return RolloutPolicy()
    named = [p for p in policies if namespace in p.namespaces]
    catch_all = [p for p in policies if not p.namespaces]
    return next((p for p in named + catch_all if covers(p, namespace)), policies[0])
