"""A DaemonSet's recommendation per node pool: the ``podtailor.io/pool-recommendations`` annotation.

Owns the contract by which the recommender hands per-pool values to the updater and the webhook: the
annotation's format (JSON, ``{"version": 1, "pools": {POOL: {"containerRecommendations": [ENTRY, ...]}}}``,
each ENTRY a ``status.recommendation`` entry as ``podtailor.vpa`` reads and writes it), its bounds
(``MAX_BYTES``, ``MAX_POOLS``, ``MAX_CONTAINERS``), the one encoder and the one validating decoder, which
refuses any content it cannot read whole (``PoolRecsError``, naming the reason: the reader then uses the
status value), the pool most pods run on (``majority_pool``, whose values the status carries) and the
choice of a pod's value (``target_for``: its own pool's, else the status one). Pools are named by
``podtailor.nodepool.node_pool``, the key the updater's canary batches use. Pure: no client, no clock.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from podtailor.vpa import RecommendedContainerResources, VpaConfigError, parse_recommendation

ANNOTATION = "podtailor.io/pool-recommendations"
FORMAT_VERSION = 1
MAX_BYTES = 16 * 1024
"""The annotation's largest accepted size (the API server caps all annotations of an object at 256 KiB)."""
MAX_POOLS = 32
"""Pools kept; a DaemonSet spread over more pools keeps only its status value (the encoder refuses)."""
MAX_CONTAINERS = 32
"""Containers per pool."""
_POOL_NAME = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?$")
"""A label value (Kubernetes' ``IsValidLabelValue``): pools are node-label values; "" is the unlabelled pool."""


class PoolRecsError(ValueError):
    """The annotation's content cannot be used; the message says why (the status value is used instead)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PoolRecommendations:
    """Per pool name, per container name: that pool's recommendation."""

    pools: Mapping[str, Mapping[str, RecommendedContainerResources]] = field(default_factory=dict)


def encode(recs: PoolRecommendations) -> str:
    """The annotation value (compact JSON, keys sorted, so an unchanged value is byte-for-byte the same);
    raises PoolRecsError when the value would break a bound or a name is not a label value."""
    if len(recs.pools) > MAX_POOLS:
        raise PoolRecsError(f"{len(recs.pools)} pools, at most {MAX_POOLS} are kept")
    for pool, containers in recs.pools.items():
        _check_pool(pool, len(containers))
    body = {"version": FORMAT_VERSION, "pools": {
        pool: {"containerRecommendations": [containers[n].to_status() for n in sorted(containers)]}
        for pool, containers in sorted(recs.pools.items())}}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"))
    if len(text.encode()) > MAX_BYTES:
        raise PoolRecsError(f"{len(text.encode())} bytes, at most {MAX_BYTES}")
    return text


def decode(text: object) -> PoolRecommendations:
    """The annotation value read whole, or PoolRecsError: not a string, too large, not JSON (duplicate keys,
    NaN and nesting deeper than the format are refused too), another version, a bound broken, a pool name
    that is not a label value, or an entry ``podtailor.vpa`` cannot read."""
    if not isinstance(text, str):
        raise PoolRecsError("not a string")
    if len(text.encode()) > MAX_BYTES:
        raise PoolRecsError(f"{len(text.encode())} bytes, at most {MAX_BYTES}")
    try:
        body = json.loads(text, object_pairs_hook=_unique, parse_constant=_no_constant)
    except (ValueError, RecursionError) as err:
        raise PoolRecsError(f"not JSON: {str(err)[:200]}") from None
    if not isinstance(body, dict) or set(body) != {"version", "pools"}:
        raise PoolRecsError("expected exactly the keys version and pools")
    if type(body["version"]) is not int or body["version"] != FORMAT_VERSION:
        raise PoolRecsError(f"version {str(body['version'])[:20]!r} is not {FORMAT_VERSION}")
    pools = body["pools"]
    if not isinstance(pools, dict) or len(pools) > MAX_POOLS:
        raise PoolRecsError(f"pools must be a map of at most {MAX_POOLS} pools")
    return PoolRecommendations(pools={pool: _pool(pool, raw) for pool, raw in pools.items()})


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        raise ValueError("a key appears twice")
    return out


def _no_constant(name: str) -> None:
    raise ValueError(f"{name} is not a number")


def _check_pool(pool: str, containers: int) -> None:
    if not _POOL_NAME.match(pool) or len(pool) > 63:
        raise PoolRecsError(f"pool {pool[:70]!r} is not a label value")
    if containers > MAX_CONTAINERS:
        raise PoolRecsError(f"pool {pool!r}: {containers} containers, at most {MAX_CONTAINERS}")


def _pool(pool: str, raw: object) -> dict[str, RecommendedContainerResources]:
    entries = raw.get("containerRecommendations") if isinstance(raw, dict) and set(raw) == {
        "containerRecommendations"} else None
    if not isinstance(entries, list):
        raise PoolRecsError(f"pool {pool[:70]!r}: expected exactly containerRecommendations, a list")
    _check_pool(pool, len(entries))
    out: dict[str, RecommendedContainerResources] = {}
    for i, entry in enumerate(entries):
        try:
            rec = parse_recommendation(entry, f"pools[{pool}][{i}]")
        except VpaConfigError as err:
            raise PoolRecsError(str(err)[:300]) from None
        if rec.container_name in out:
            raise PoolRecsError(f"pool {pool!r}: container {rec.container_name[:70]!r} appears twice")
        out[rec.container_name] = rec
    return out


def majority_pool(pod_pools: Iterable[str]) -> str | None:
    """The pool most of the pods run on (one pool name per pod); a tie goes to the first name in sorted
    order, so the choice is stable; None without pods."""
    counts = Counter(pod_pools)
    if not counts:
        return None
    return min(counts, key=lambda pool: (-counts[pool], pool))


def target_for(pool: str, container: str, status: Mapping[str, RecommendedContainerResources],
               per_pool: PoolRecommendations) -> RecommendedContainerResources | None:
    """The recommendation a pod on ``pool`` gets for ``container``: its pool's own value when the annotation
    has one, else the status value (None when neither has the container)."""
    own = per_pool.pools.get(pool, {}).get(container)
    return own if own is not None else status.get(container)
