"""VPA status as the recommender writes it: recommendations and conditions, changed only when needed.

Owns the ``status`` dict of a VerticalPodAutoscaler: ``recommendation.containerRecommendations``
(each entry written by ``podtailor.vpa.RecommendedContainerResources``) and ``conditions`` (RecommendationProvided,
LowConfidence, and our own Stale and ConfigUnsupported). A container without a new recommendation keeps
its last written one. The conditions speak of the containers that run together: a plain init container's
recommendation is written when it has one, but its missing or short history (it runs for minutes, at pod start,
so it often has none in the window) sets neither RecommendationProvided to False nor LowConfidence. A condition
keeps its lastTransitionTime while its status does not change; a build
that changes nothing returns None so no write is made.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

from podtailor.vpa import STALE_CONDITION, RecommendedContainerResources
from recommender.model.types import Recommendation

Obj = dict[str, Any]
StatusBuilder = Callable[[Obj], Obj | None]
"""Builds a VPA's new status from the one read (None: nothing to change); the store re-reads and rebuilds on a
conflict, so a builder is a pure function of the status it is given."""


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _set(conditions: list[Obj], ctype: str, status: bool, reason: str, message: str) -> list[Obj]:
    value = "True" if status else "False"
    old = next((c for c in conditions if c.get("type") == ctype), None)
    since = old["lastTransitionTime"] if old and old.get("status") == value and old.get("lastTransitionTime") \
        else _now()
    new = {"type": ctype, "status": value, "reason": reason, "message": message[:1024], "lastTransitionTime": since}
    return [c for c in conditions if c.get("type") != ctype] + [new]


def _entry(container: str, rec: Recommendation) -> Obj:
    return RecommendedContainerResources(container_name=container, target=rec.target, lower_bound=rec.lower_bound,
                                         upper_bound=rec.upper_bound,
                                         uncapped_target=rec.uncapped_target).to_status()


def _same(a: Obj, b: Obj) -> bool:
    def strip(status: Obj) -> Obj:
        conds = sorted(({k: v for k, v in c.items() if k != "lastTransitionTime"} for c in status.get("conditions")
                        or []), key=lambda c: str(c.get("type")))
        return {"recommendation": status.get("recommendation"), "conditions": conds}
    return strip(a) == strip(b)


def _finish(current: Obj, new: Obj) -> Obj | None:
    return None if _same(current, new) else new


def build_status(current: Obj, generation: int, recs: Mapping[str, Recommendation],
                 containers: Sequence[str], init: Collection[str] = ()) -> Obj | None:
    """``current`` with an entry per container of ``containers`` that has a recommendation (new, else the last
    written one) and the conditions; ``init`` names the plain init containers among them (module docstring)."""
    old_entries = {e.get("containerName"): e for e in (current.get("recommendation") or {})
                   .get("containerRecommendations") or []}
    entries = []
    for name in containers:
        if name in recs:
            entries.append(_entry(name, recs[name]))
        elif name in old_entries:
            entries.append(old_entries[name])  # the last good recommendation stays
    missing = [n for n in containers if n not in init and not any(e["containerName"] == n for e in entries)]
    conditions = list(current.get("conditions") or [])
    conditions = [c for c in conditions if c.get("type") != "ConfigUnsupported"]
    conditions = _set(conditions, "RecommendationProvided", not missing,
                      "NoUsageHistory" if missing else "RecommendationsProvided",
                      f"no usage history yet for container(s) {', '.join(missing)}" if missing else "")
    low = sorted(n for n, r in recs.items() if r.confidence < 1.0 and n not in init)
    conditions = _set(conditions, "LowConfidence", bool(low), "ShortHistory" if low else "EnoughHistory",
                      f"less history than the strategy wants for: {', '.join(low)}" if low else "")
    conditions = _set(conditions, STALE_CONDITION, False, "FreshData", "")
    new = dict(current)
    new["conditions"] = conditions
    new["recommendation"] = {"containerRecommendations": entries} if entries else current.get("recommendation")
    if new["recommendation"] is None:
        new.pop("recommendation")
    return _finish(current, new)


def stale_status(current: Obj, generation: int, message: str) -> Obj | None:
    new = dict(current)
    new["conditions"] = _set(list(current.get("conditions") or []), STALE_CONDITION, True, "UsageHistoryUnavailable",
                             f"{message}; the last recommendation is kept")
    return _finish(current, new)


def unsupported_status(current: Obj, generation: int, message: str) -> Obj | None:
    new = dict(current)
    new["conditions"] = _set(list(current.get("conditions") or []), "ConfigUnsupported", True, "ConfigUnsupported",
                             message)
    return _finish(current, new)
