"""ResourceQuotas as the planner's values: one raw ResourceQuota in, one ``QuotaView`` out.

Owns reading the compute part of a quota: ``spec.hard`` and ``status.used`` for cpu, requests.cpu,
limits.cpu, memory, requests.memory and limits.memory (CPU in millicores, memory in bytes; other resources
such as pods, storage or extended resources are not moved by a resize and are left out), and its scopes:
``spec.scopes`` (each an Exists requirement) and ``spec.scopeSelector.matchExpressions``. A quota whose
status has no ``used`` yet (the quota controller has not counted it) counts as fully used, so nothing is
admitted against it until it has been counted. Malformed content raises ``MalformedObject``.
"""

from __future__ import annotations

from collections.abc import Mapping

from updater.kube.fields import MalformedObject, Obj, cpu_millicores, memory_bytes
from updater.policy.types import QuotaView, ScopeRequirement

CPU_NAMES = ("cpu", "requests.cpu", "limits.cpu")
MEMORY_NAMES = ("memory", "requests.memory", "limits.memory")


def _amounts(raw: object, where: str) -> dict[str, int]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise MalformedObject(f"{where}: not a resource list")
    out = {}
    for name, value in raw.items():
        if name in CPU_NAMES:
            out[str(name)] = cpu_millicores(value, f"{where}.{name}")
        elif name in MEMORY_NAMES:
            out[str(name)] = memory_bytes(value, f"{where}.{name}")
    return out


def _scopes(spec: Mapping[str, object], where: str) -> tuple[ScopeRequirement, ...]:
    scopes = spec.get("scopes") or []
    selector = spec.get("scopeSelector") or {}
    expressions = selector.get("matchExpressions") or [] if isinstance(selector, Mapping) else None
    if not isinstance(scopes, list) or not isinstance(expressions, list):
        raise MalformedObject(f"{where}: scopes and scopeSelector.matchExpressions must be lists")
    out = [ScopeRequirement(scope=str(s)) for s in scopes]
    for e in expressions:
        if not isinstance(e, Mapping) or not isinstance(e.get("scopeName"), str):
            raise MalformedObject(f"{where}: a scopeSelector expression without a scopeName")
        out.append(ScopeRequirement(scope=e["scopeName"], operator=str(e.get("operator") or "Exists"),
                                    values=frozenset(str(v) for v in e.get("values") or ())))
    return tuple(out)


def convert_quota(obj: Obj) -> QuotaView:
    meta, spec, status = obj.get("metadata") or {}, obj.get("spec") or {}, obj.get("status") or {}
    ns, name = str(meta.get("namespace", "")), str(meta.get("name", ""))
    where = f"resourcequota {ns}/{name}"
    hard = _amounts(spec.get("hard"), f"{where} spec.hard")
    used = _amounts(status.get("used"), f"{where} status.used")
    if status.get("used") is None:
        used = dict(hard)  # not counted yet: admit nothing against it
    return QuotaView(namespace=ns, name=name, hard=hard, used={k: used.get(k, 0) for k in hard},
                     scopes=_scopes(spec, where))
