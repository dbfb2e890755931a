"""The recommender's store under ``run --shards N``: it lists and writes only the namespaces this replica owns.

Owns the write guard of a sharded replica. ``ShardedStore`` wraps the engine's ``VpaStore``: ``list_vpas``
returns only the VPAs of namespaces whose shard this replica holds (so the engine serves, reads history for
and checkpoints nothing else), and every write asks ``owns(namespace)`` (``podtailor.runtime.shards.
ShardTable.owns``) just before it is sent: a status write inside its read-build-write step, after the read
(so a 409 retry asks again), a checkpoint or a DaemonSet's pool annotation before its write. A write refused
there is skipped, logged, counted (``refused``) and reported as not written; the engine drops the VPA at its
next pass, and the replica that takes the shard restores it from the checkpoint. Each write done is logged at
debug level with the namespace, the VPA and the shard, so the writers of a VPA can be counted from the replicas' logs.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from podtailor.runtime.shards import shard_of
from podtailor.vpa import TargetRef
from recommender.kube.served import UnparsableVpa, VpaIdentity, VpaSpec
from recommender.kube.vpa_status import StatusBuilder

if TYPE_CHECKING:
    from recommender.engine import VpaStore
    from recommender.kube.cluster import Workload

log = logging.getLogger("podtailor.recommender.shards")


class ShardedStore:
    """A ``VpaStore`` over ``inner`` limited to the namespaces ``owns`` says (module docstring)."""

    def __init__(self, inner: VpaStore, owns: Callable[[str], bool], shards: int,
                 refused: Callable[[], None] = lambda: None) -> None:
        self.inner, self.owns, self.shards, self.refused = inner, owns, shards, refused
        """``refused()`` is called once per write not sent (a counter's ``inc``)."""

    def list_vpas(self, namespaces: Sequence[str] = ()) -> list[VpaSpec | UnparsableVpa]:
        return [vpa for vpa in self.inner.list_vpas(namespaces) if self.owns(vpa.namespace)]

    def workload(self, namespace: str, ref: TargetRef) -> Workload | None:
        return self.inner.workload(namespace, ref)

    def update_vpa_status(self, vpa: VpaIdentity, build: StatusBuilder, attempts: int = 4) -> bool:
        refused = False

        def guarded(status: dict[str, Any]) -> dict[str, Any] | None:
            nonlocal refused
            refused = not self.owns(vpa.namespace)
            return None if refused else build(status)

        wrote = self.inner.update_vpa_status(vpa, guarded, attempts)
        self._logged("VPA status", vpa, wrote=wrote, refused=refused)
        return wrote

    def load_checkpoint(self, vpa: VpaIdentity) -> Mapping[str, object] | None:
        return self.inner.load_checkpoint(vpa)

    def save_checkpoint(self, vpa: VpaIdentity, spec: Mapping[str, object]) -> None:
        refused = not self.owns(vpa.namespace)
        if not refused:
            self.inner.save_checkpoint(vpa, spec)
        self._logged("checkpoint", vpa, wrote=not refused, refused=refused)

    def pod_pools(self, namespace: str, daemonset: str, pool_label: str) -> Mapping[str, str]:
        return self.inner.pod_pools(namespace, daemonset, pool_label)

    def write_pool_annotation(self, vpa: VpaIdentity, value: str | None) -> bool:
        refused = not self.owns(vpa.namespace)
        wrote = False if refused else self.inner.write_pool_annotation(vpa, value)
        self._logged("pool annotation", vpa, wrote=wrote, refused=refused)
        return wrote

    def _logged(self, what: str, vpa: VpaIdentity, *, wrote: bool, refused: bool) -> None:
        fields = {"namespace": vpa.namespace, "vpa": vpa.name, "shard": shard_of(vpa.namespace, self.shards),
                  "what": what}
        if refused:
            self.refused()
            log.info("not written: this replica no longer holds the shard; its new holder writes it", extra=fields)
        elif wrote:
            log.debug("written", extra=fields)
