"""The ``RecommenderCheckpoint`` spec: what the engine writes, and what the engine and ``report`` restore.

Owns the checkpoint's format (``checkpoint_spec``: the strategy, the format version, ``historyUntilSeconds`` and
each container's state, packed into one string by ``checkpoint_pack``) and the one way it is read back (``restore``,
which also reads format 1, where each state is plain JSON): a checkpoint of another strategy or format version is
not used (``UnusableCheckpoint``, ``stale``), nor is one that cannot be read (a missing field, a packed state
``unpack`` refuses, a state the strategy refuses); a usable one gives the containers' states and the time up to
which they hold history, after which the caller reads (``read_start``). The engine restores each VPA's checkpoint
the first time it serves the VPA; ``report`` restores the same ones, read-only, so that it recommends from the state
``once`` and ``run`` would (as VPA's recommender restores its ``VerticalPodAutoscalerCheckpoint``s before its first
``UpdateVPAs``, ``pkg/recommender/input/cluster_feeder.go``, ``InitFromCheckpoints``). ``owned_by`` says whether a
checkpoint object belongs to a VPA (an object left over from an earlier VPA of the same name does not). Pure: no API
calls.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

from podtailor.numeric import is_number
from recommender.kube.checkpoint_pack import pack, unpack
from recommender.model.types import ContainerState, Strategy

CHECKPOINT_VERSION = "2"
"""The format of the spec below: each container's state packed (``checkpoint_pack``)."""
PLAIN_VERSION = "1"
"""The earlier format, still restored: each container's state as plain JSON (``state``)."""


class UnusableCheckpoint(Exception):
    """Why a checkpoint is not restored: ``stale`` for another strategy or version (expected after a change of
    ``--strategy`` or an upgrade), else unreadable."""

    def __init__(self, message: str, *, stale: bool) -> None:
        super().__init__(message)
        self.stale = stale


@dataclass(frozen=True, slots=True, kw_only=True)
class Restored:
    states: Mapping[str, ContainerState]
    """Per container name, the state as checkpointed."""
    history_until_s: float | None
    """History up to this time is in ``states``; None: unknown (the whole window is read again)."""


def owned_by(obj: Mapping[str, object], uid: str) -> bool:
    """Whether the checkpoint object is owned by the VPA with this uid."""
    meta = obj.get("metadata")
    owners = meta.get("ownerReferences") if isinstance(meta, Mapping) else None
    return isinstance(owners, list) and any(isinstance(o, Mapping) and o.get("uid") == uid for o in owners)


def restore(obj: Mapping[str, object], strategy: Strategy) -> Restored:
    """The states and history time of a checkpoint object; raises ``UnusableCheckpoint``."""
    spec = obj.get("spec") or {}
    if not isinstance(spec, Mapping):
        raise UnusableCheckpoint("spec is not an object", stale=False)
    version = spec.get("version")
    if spec.get("strategy") != strategy.name or version not in (CHECKPOINT_VERSION, PLAIN_VERSION):
        raise UnusableCheckpoint("strategy or version changed", stale=True)
    containers = spec.get("containers") or []
    try:
        if not isinstance(containers, list):
            raise TypeError("spec.containers is not a list")
        states = {c["name"]: strategy.restore(unpack(c["packed"]) if version == CHECKPOINT_VERSION else c["state"])
                  for c in containers}
        until = _seconds(spec["historyUntilSeconds"]) if "historyUntilSeconds" in spec else None
        return Restored(states=states, history_until_s=until)
    except (LookupError, TypeError, ValueError, AttributeError, OverflowError) as err:
        # LookupError: a histogram bucket or field the state does not have; AttributeError: a part that is
        # not the object the strategy reads it as (a list where a map should be); OverflowError: an integer
        # too large for a float (JSON integers are unbounded) where a number is read.
        raise UnusableCheckpoint(f"{type(err).__name__}: {err}", stale=False) from err


def _seconds(value: object) -> float:
    if not (is_number(value) or isinstance(value, str)):
        raise TypeError(f"historyUntilSeconds is not a number: {value!r}")
    return float(value)


def read_start(history_until_s: float | None, end_s: float, history_s: float) -> float:
    """Where a read for a workload begins: after its checkpointed history, else ``history_s`` before ``end_s``."""
    return history_until_s if history_until_s is not None else end_s - history_s


def checkpoint_spec(strategy: Strategy, states: Mapping[str, ContainerState], history_until_s: float,
                    ) -> dict[str, object]:
    """The spec the engine writes (``restore`` reads it back)."""
    return {
        "strategy": strategy.name, "version": CHECKPOINT_VERSION,
        "historyUntil": datetime.fromtimestamp(history_until_s, UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "historyUntilSeconds": history_until_s,
        "containers": [{"name": n, "packed": pack(s.to_checkpoint())} for n, s in sorted(states.items())],
    }
