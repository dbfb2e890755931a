"""Reading what resized containers' cgroups hold, as production exposes it: the kubelet's cAdvisor series.

Owns the cgroup check's edge: ``NodeCgroups`` reads ``/api/v1/nodes/NAME/proxy/metrics/cadvisor`` through the
API server and turns the ``container_spec_*`` series into ``CgroupReading`` values keyed by container ID (the
hex ID at the end of the series' ``id`` label, the cgroup path, as cAdvisor's ``containerdCgroupRegexp`` finds it);
``CgroupCheck`` is the executor's port: for the pods of batches being verified whose status says the resize
is done, it compares each container's reading with status (``updater.cgroups.disagreement``), remembers since
when a disagreement is seen, and puts both on the pod's observation for the state machine to judge. A node that
serves no such series (a hollow node's fake runtime has no cgroups) is not checked, and that is logged once per
node, not passed over silently.
"""

from __future__ import annotations

import logging
import math
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

from kubernetes import client
from prometheus_client.parser import text_string_to_metric_families

from podtailor.kube.errors import KubeError, classify
from podtailor.resources import Resources
from updater.cgroups import CgroupReading, disagreement
from updater.kube.snapshot import Snapshot
from updater.observe import PodObservation
from updater.rollout.act.ports import PassSnapshot
from updater.rollout.machine.journal import BatchPhase, EntryState, Rollout

log = logging.getLogger("podtailor.updater.cgroups")
CONTAINER_ID = re.compile(r"(?:^|/)(?:cri-containerd-|crio-|docker-)?([0-9a-f]{32,64})(?:\.scope)?$")
"""The container ID at the end of a cgroup path: ``.../<id>`` (cgroupfs) or ``.../cri-containerd-<id>.scope``
(systemd); cAdvisor's ``containerdCgroupRegexp`` takes 64 hex digits, 32 also pass for the node simulator."""
SERIES = {"container_spec_cpu_quota": "cpu_quota_us", "container_spec_cpu_period": "cpu_period_us",
          "container_spec_cpu_shares": "cpu_shares", "container_spec_memory_limit_bytes": "memory_limit_bytes"}
REQUEST_TIMEOUT_S = 10


def parse_cadvisor(text: str) -> dict[str, CgroupReading]:
    """The ``container_spec_*`` series of one /metrics/cadvisor page by container ID (other series ignored)."""
    fields: dict[str, dict[str, int]] = {}
    for family in text_string_to_metric_families(text):
        attr = SERIES.get(family.name)
        if attr is None:
            continue
        for sample in family.samples:
            match = CONTAINER_ID.search(sample.labels.get("id", ""))
            if match and math.isfinite(sample.value):  # a NaN or infinite sample says nothing: not compared
                fields.setdefault(match.group(1), {})[attr] = int(sample.value)
    return {cid: CgroupReading(**values) for cid, values in fields.items()}


class NodeCgroups:
    """``read(node)``: the node's cAdvisor page through the API server's node proxy, parsed."""

    def __init__(self, api: client.ApiClient) -> None:
        self.core = client.CoreV1Api(api)

    def read(self, node: str) -> dict[str, CgroupReading]:
        try:
            text = self.core.connect_get_node_proxy_with_path(node, "metrics/cadvisor",
                                                              _request_timeout=REQUEST_TIMEOUT_S)
        except (client.ApiException, OSError) as err:
            raise classify(err, f"node {node} /metrics/cadvisor") from err
        return parse_cadvisor(str(text))


def verifying(rollouts: Sequence[Rollout]) -> set[str]:
    """Keys of the pods whose resize was applied in a batch being verified."""
    keys: set[str] = set()
    for r in rollouts:
        for b in r.batches:
            if b.phase == BatchPhase.VERIFYING:
                keys.update(e.key for e in r.entries_of(b.index) if e.state == EntryState.APPLIED)
    return keys


def _done_in_status(o: PodObservation) -> bool:
    return o.observed_generation >= o.generation and o.resize_pending is None and not o.resize_in_progress


class CgroupCheck:
    """The executor's cgroup port: ``checked(snapshot, rollouts, now_s)`` is the snapshot with the verifying
    pods' cgroup disagreements on their observations."""

    def __init__(self, read: Callable[[str], Mapping[str, CgroupReading]]) -> None:
        self.read = read
        self.since: dict[tuple[str, str], float] = {}
        """(pod uid, disagreement) -> when first seen."""
        self.unchecked_nodes: set[str] = set()

    def checked(self, snap: PassSnapshot, rollouts: Sequence[Rollout], now_s: float) -> PassSnapshot:
        keys = [k for k in sorted(verifying(rollouts)) if k in snap.observations
                and _done_in_status(snap.observations[k])]
        if not keys or not isinstance(snap, Snapshot):
            return snap
        t0 = time.monotonic()
        pages: dict[str, Mapping[str, CgroupReading] | None] = {}
        observations = dict(snap.observations)
        for key in keys:
            o = observations[key]
            if o.node not in pages:
                pages[o.node] = self._page(o.node)
            page = pages[o.node]
            if page is not None:
                observations[key] = self._judged(o, page, now_s)
        log.debug("cgroups checked", extra={"pods": len(keys), "nodes": len(pages),
                                            "seconds": round(time.monotonic() - t0, 4)})
        return replace(snap, observations=observations)

    def _page(self, node: str) -> Mapping[str, CgroupReading] | None:
        try:
            page = self.read(node)
        except KubeError as err:
            log.warning("cgroup check skipped: the node's cAdvisor series could not be read; verification goes "
                        "on from status alone this pass", extra={"node": node, "reason": str(err)})
            return None
        if not page and node not in self.unchecked_nodes:
            self.unchecked_nodes.add(node)
            log.warning("cgroup check skipped: the node serves no container_spec series (a fake runtime?); "
                        "its pods are verified from status alone", extra={"node": node})
        return page or None

    def _judged(self, o: PodObservation, page: Mapping[str, CgroupReading], now_s: float) -> PodObservation:
        found = ""
        for name, c in sorted(o.containers.items()):
            reading = page.get(c.container_id)
            if reading is None or c.actual_requests is None:
                continue
            why = disagreement(c.actual_requests, c.actual_limits or Resources(), reading)
            if why:
                found = f"container {name}: {why}"
                break
        if not found:
            self._forget(o.uid)
            return o
        first = self.since.setdefault((o.uid, found), now_s)
        return replace(o, cgroup_disagreement=found, cgroup_disagreement_s=now_s - first)

    def _forget(self, uid: str) -> None:
        for k in [k for k in self.since if k[0] == uid]:
            del self.since[k]


def check_nodes(api: client.ApiClient) -> CgroupCheck:
    """The cgroup check over the API server's node proxy (what ``podtailor-updater run`` uses)."""
    return CgroupCheck(NodeCgroups(api).read)
