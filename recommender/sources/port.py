"""The port through which the recommender reads usage history: one method, so tests use small fakes.

Owns the ``UsageSource`` protocol. Implementations (``prometheus.PrometheusSource``) return, for the
containers of the given namespaces, the samples whose step timestamps fall in ``(start_s, end_s]`` on the
source's step grid, keyed by workload and container. They raise ``errors.SourceError`` subclasses and
never return an empty result for a failed read.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from recommender.model.types import ContainerKey, UsageBatch


class UsageSource(Protocol):
    """Reads usage history for the containers of some namespaces."""

    def history(self, namespaces: Sequence[str], start_s: float, end_s: float) -> dict[ContainerKey, UsageBatch]:
        """New usage with step timestamps in ``(start_s, end_s]``; no entry for a key without samples."""
        ...
