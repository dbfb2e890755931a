"""A fake of the engine's ``VpaStore`` write side, for unit tests of the engine over its narrow ports.

Owns ``StatusStore``: status writes kept per VPA name (``build`` applied to the last one written, as the real
adapter applies it to the object it read), no checkpoint ever found, and checkpoints written nowhere. Tests
subclass it with the ``list_vpas`` and ``workload`` their cluster needs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from recommender.kube.served import VpaSpec


class StatusStore:
    def __init__(self) -> None:
        self.status: dict[str, dict[str, Any]] = {}

    def update_vpa_status(self, vpa: VpaSpec, build: Any, attempts: int = 4) -> bool:
        new = build(self.status.get(vpa.name, {}))
        if new is not None:
            self.status[vpa.name] = new
        return new is not None

    def load_checkpoint(self, vpa: VpaSpec) -> dict[str, Any] | None:
        return None

    def save_checkpoint(self, vpa: VpaSpec, spec: Mapping[str, object]) -> None:
        pass
