"""The report's read-only use of the recommender's checkpoints: the states ``once`` and ``run`` would start from.

Owns reading ``RecommenderCheckpoint``s for the report (one list call per namespace, or one cluster-wide,
through ``Discovery``; the report never writes one) and growing them as the engine's pass does. Each
checkpoint owned by the VPA of a reported workload is restored with the engine's own
``recommender.kube.checkpoint.restore``; the history after it is read from where the engine would read it
(``checkpoint.read_start``, one read per distinct start, as the engine groups its reads) to the report's
end and folded in with the engine's ``recommend.fold_new``. A workload without a usable checkpoint is
recommended from fresh state over the report's window (``build.fold``), as the engine's first pass does. A
checkpoint of another strategy or version, or an unreadable one, is left out with one warning for all of
them. When the cluster has no RecommenderCheckpoint CRD (404) or the user may not list them (403), one
warning says so and every workload is recommended from fresh state; any other failure fails the report.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from kubernetes import client

from podtailor.kube.errors import KubeError
from podtailor.kube.listing import custom_listing
from recommender.kube.checkpoint import Restored, UnusableCheckpoint, owned_by, read_start, restore
from recommender.kube.cluster import CHECKPOINT_GROUP, CHECKPOINT_PLURAL, CHECKPOINT_VERSION
from recommender.kube.served import VpaSpec
from recommender.model.types import ContainerKey, ContainerState, Strategy, UsageBatch
from recommender.recommend import fold_new
from recommender.report.build import container_keys, fold
from recommender.report.discovery import Discovery
from recommender.report.types import Workload, WorkloadKey

KIND = "RecommenderCheckpoint"
Read = Callable[[Sequence[str], float, float], Mapping[ContainerKey, UsageBatch]]
"""``UsageSource.history``: (namespaces, start, end) -> batches."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Checkpoints:
    restored: Mapping[WorkloadKey, Restored]
    """Per workload whose VPA has a usable checkpoint."""
    warnings: tuple[str, ...] = ()
    requests: int = 0
    """API requests made to list them."""


def checkpoint_discovery(api: client.ApiClient) -> Discovery:
    """A ``Discovery`` that lists RecommenderCheckpoints (``KIND``) and nothing else."""
    listing = custom_listing(client.CustomObjectsApi(api), CHECKPOINT_GROUP, CHECKPOINT_VERSION, CHECKPOINT_PLURAL)
    return Discovery(api, {KIND: replace(listing, request_timeout=None)})


def restoring(api: client.ApiClient, namespaces: Sequence[str], vpas: Mapping[WorkloadKey, VpaSpec],
              strategy: Strategy, *, enabled: bool = True) -> Checkpoints:
    """The usable checkpoints of ``vpas`` read from the API server of ``api`` (none when not ``enabled``:
    ``--no-checkpoints``); raises ``KubeError`` as ``read_checkpoints``. One cluster's, for either path."""
    if not enabled:
        return Checkpoints(restored={})
    return read_checkpoints(checkpoint_discovery(api), namespaces, vpas, strategy)


def read_checkpoints(discovery: Discovery, namespaces: Sequence[str], vpas: Mapping[WorkloadKey, VpaSpec],
                     strategy: Strategy) -> Checkpoints:
    """The usable checkpoints of ``vpas`` (none listed when there is no VPA); raises ``KubeError`` on a failure
    other than 404 and 403."""
    fresh = "every workload is recommended from fresh state over --history, as the recommender's first pass"
    try:
        items = discovery.list(KIND, namespaces) if vpas else []
    except KubeError as err:
        if err.status == 404:
            why = (f"the cluster has no {KIND} CRD ({CHECKPOINT_PLURAL}.{CHECKPOINT_GROUP}), so no recommender "
                   "checkpoint to restore")
            return Checkpoints(restored={}, warnings=(f"{why}: {fresh}",), requests=discovery.requests)
        if err.status == 403:
            return Checkpoints(restored={}, warnings=(f"{err}: {fresh}",), requests=discovery.requests)
        raise
    restored, warnings = restore_owned(items, vpas, strategy)
    return Checkpoints(restored=restored, warnings=warnings, requests=discovery.requests)


def restore_owned(items: Iterable[Mapping[str, object]], vpas: Mapping[WorkloadKey, VpaSpec],
                  strategy: Strategy) -> tuple[dict[WorkloadKey, Restored], tuple[str, ...]]:
    """Each VPA's checkpoint (same namespace and name, owned by its uid) restored, and one warning naming
    the checkpoints that could not be used and why."""
    by_name: dict[tuple[str, str], WorkloadKey] = {(v.namespace, v.name): key for key, v in vpas.items()}
    restored: dict[WorkloadKey, Restored] = {}
    unusable: dict[str, list[str]] = defaultdict(list)
    for obj in items:
        meta = obj.get("metadata")
        meta = meta if isinstance(meta, Mapping) else {}
        where = (str(meta.get("namespace", "")), str(meta.get("name", "")))
        key = by_name.get(where)
        if key is None or not owned_by(obj, vpas[key].uid):
            continue  # not the checkpoint of a reported workload's VPA
        try:
            restored[key] = restore(obj, strategy)
        except UnusableCheckpoint as err:
            why = f"written for another strategy or format version than --strategy {strategy.name}" if err.stale \
                else "unreadable"
            unusable[why].append(f"{where[0]}/{where[1]}")
    return restored, _unusable_warning(unusable)


def _unusable_warning(unusable: Mapping[str, list[str]], shown: int = 3) -> tuple[str, ...]:
    """One warning for every checkpoint not used, by reason, naming the first few of each."""
    if not unusable:
        return ()
    parts = []
    for why, names in sorted(unusable.items()):
        more = f" and {len(names) - shown} more" if len(names) > shown else ""
        parts.append(f"{why}: {', '.join(sorted(names)[:shown])}{more}")
    n = sum(len(names) for names in unusable.values())
    which = "checkpoint not used, its workload" if n == 1 else "checkpoints not used, their workloads"
    return (f"{n} recommender {which} recommended from fresh state ({'; '.join(parts)})",)


def grow(workloads: Iterable[Workload], restored: Mapping[WorkloadKey, Restored], read: Read, *, end_s: float,
         history_s: float, strategy: Strategy) -> dict[ContainerKey, ContainerState]:
    """The restored states of ``workloads`` with the history after each checkpoint folded in, keyed by
    container (every restored state, as the engine keeps them all and prices its fleet over them)."""
    groups: dict[float, list[Workload]] = {}
    for w in workloads:
        if w.key in restored and not w.pool:  # a pool's row is recommended from its own usage only
            groups.setdefault(read_start(restored[w.key].history_until_s, end_s, history_s), []).append(w)
    out: dict[ContainerKey, ContainerState] = {}
    for start, members in sorted(groups.items()):
        batches = read(sorted({w.namespace for w in members}), start, end_s)
        for w in members:
            states = dict(restored[w.key].states)
            fold_new(strategy, states, container_keys(w), batches)
            out.update((ContainerKey(namespace=w.namespace, workload_kind=w.kind, workload_name=w.name,
                                     container=name), state) for name, state in states.items())
    return out


def starting_states(workloads: Iterable[Workload], batches: Mapping[ContainerKey, UsageBatch],
                    restored: Mapping[WorkloadKey, Restored], read: Read, *, end_s: float, history_s: float,
                    strategy: Strategy) -> dict[ContainerKey, ContainerState]:
    """The states of ``workloads`` as the engine's pass has them: fresh over ``batches`` (the window's read)
    where no checkpoint was restored (``build.fold``), else restored and grown by ``read`` (``grow``)."""
    members = list(workloads)
    states = fold((w for w in members if w.pool or w.key not in restored), batches, strategy)
    states.update(grow(members, restored, read, end_s=end_s, history_s=history_s, strategy=strategy))
    return states
