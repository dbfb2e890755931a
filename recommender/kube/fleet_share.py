"""One fleet across the replicas of ``run --shards N``: each shard's fleet sums published on its Lease.

Owns the fleet of a sharded replica (the engine's ``FleetShare`` port). The podtailor strategy prices relative
to the fleet (``model.fleet``); a replica's own containers are only its shards'. So after folding a pass's
history, a replica publishes, for each shard it serves, that shard's ``FleetSums`` (summed over its namespaces'
parts; zero for a shard with no VPA) in the annotation ``podtailor.io/fleet-sums`` of the shard's Lease, with
the time and this replica's pass number (``FLEET_ANNOTATION``; the JSON written by ``encode``). The shard
election's next renewal writes it (``shard_leases``: within a retry period, on the renewal's own request), and
every replica's elections read every shard Lease each retry period, which is where the others' sums come from.
The fleet is then this replica's fresh sums plus every other shard's published sums; when any other shard's
are missing, unreadable, of another strategy or older than ``max_age_s`` (the caller's: 3 pass intervals and
2 retry periods), the fleet is this replica's own containers' alone, as before sharing, and that is logged.
Sums are exact fractions (``FleetSums``), written as ``"numerator/denominator"``, so the combined fleet is the
one a single recommender computes, bit for bit.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
from collections.abc import Callable, Mapping
from fractions import Fraction

from podtailor.numeric import is_int
from podtailor.runtime.shards import LeaseNotes, shard_of
from recommender.model.fleet import FleetSums, combine

log = logging.getLogger("podtailor.recommender.fleet")
FLEET_ANNOTATION = "podtailor.io/fleet-sums"
"""The annotation of a shard's Lease holding that shard's fleet sums, written by the replica holding it."""


def encode(sums: FleetSums, *, strategy: str, published_s: float, pass_number: int) -> str:
    """The annotation's value: JSON with the exact sums, their counts, the strategy, the time and the pass."""
    return json.dumps({
        "strategy": strategy, "pass": pass_number,
        "time": dt.datetime.fromtimestamp(published_s, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        "cpuCoresSum": str(sums.cpu_cores_sum), "cpuCount": sums.cpu_count,
        "memoryBytesSum": str(sums.memory_bytes_sum), "memoryCount": sums.memory_count,
        **_margins(sums)}, sort_keys=True)


def _margins(sums: FleetSums) -> dict[str, object]:
    """The risk budget's margin sums (and the memory excess, ``FleetSums.memory_excess_sum``), only where some
    container has one (no budget: the note is as before)."""
    out: dict[str, object] = {}
    if sums.cpu_margin_count:
        out.update(cpuMarginSum=str(sums.cpu_margin_sum), cpuMarginCount=sums.cpu_margin_count)
    if sums.memory_margin_count:
        out.update(memoryMarginSum=str(sums.memory_margin_sum), memoryMarginCount=sums.memory_margin_count)
    if sums.memory_excess_count:
        out.update(memoryExcessSum=str(sums.memory_excess_sum), memoryExcessCount=sums.memory_excess_count)
    return out


def decode(text: str) -> tuple[FleetSums, str, float]:
    """The sums, the strategy and the publication time (epoch seconds) of an annotation's value;
    ``ValueError`` when it is not one ``encode`` wrote."""
    try:
        doc = json.loads(text)
        published = dt.datetime.strptime(doc["time"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=dt.UTC)
        counts = (doc["cpuCount"], doc["memoryCount"], doc.get("cpuMarginCount", 0), doc.get("memoryMarginCount", 0),
                  # a note written before the floor-held containers were left out counted the excess over every
                  # container with a memory margin
                  doc.get("memoryExcessCount", doc.get("memoryMarginCount", 0) if "memoryExcessSum" in doc else 0))
        if not all(is_int(c) for c in counts) or not isinstance(doc["strategy"], str):
            raise ValueError("counts must be whole numbers and the strategy a name")
        sums = FleetSums(cpu_cores_sum=Fraction(doc["cpuCoresSum"]), cpu_count=counts[0],
                         memory_bytes_sum=Fraction(doc["memoryBytesSum"]), memory_count=counts[1],
                         cpu_margin_sum=Fraction(doc.get("cpuMarginSum", "0")), cpu_margin_count=counts[2],
                         memory_margin_sum=Fraction(doc.get("memoryMarginSum", "0")), memory_margin_count=counts[3],
                         memory_excess_sum=Fraction(doc.get("memoryExcessSum", "0")), memory_excess_count=counts[4])
    except (KeyError, TypeError, ZeroDivisionError, json.JSONDecodeError) as err:
        raise ValueError(f"not fleet sums: {err!r}") from err
    return sums, doc["strategy"], published.timestamp()


class ShardedFleet:
    """The engine's ``FleetShare`` under ``--shards N`` (module docstring)."""

    def __init__(self, notes: LeaseNotes, serving: Callable[[], tuple[int, ...]], *, shards: int, strategy: str,
                 max_age_s: float) -> None:
        self.notes, self.serving, self.shards, self.strategy = notes, serving, shards, strategy
        self.max_age_s = max_age_s
        """Published sums older than this are not used (the fleet is then this replica's own)."""
        self.passes = 0

    def fleet(self, parts: Mapping[str, FleetSums], now_s: float) -> FleetSums:
        """The whole fleet from ``parts`` (this replica's, by namespace) and the other shards' published sums;
        ``parts`` alone when some other shard's are not usable. Publishes the served shards' sums."""
        self.passes += 1
        own = {index: FleetSums.zero() for index in self.serving()}
        for namespace, part in parts.items():
            index = shard_of(namespace, self.shards)
            if index in own:
                own[index] = own[index] + part
        for index, sums in own.items():
            self.notes.publish(index, encode(sums, strategy=self.strategy, published_s=now_s,
                                             pass_number=self.passes))
        others: list[FleetSums] = []
        unusable: dict[int, str] = {}
        for index in range(self.shards):
            if index not in own:
                published, why = self._published(index, now_s)
                if published is None:
                    unusable[index] = why
                else:
                    others.append(published)
        if unusable:
            log.info("fleet from this replica's shards only: some shards' sums are not usable",
                     extra={"serving": sorted(own), "unusable": unusable, "max_age_s": self.max_age_s})
            return combine(parts.values())
        return combine([*own.values(), *others])

    def _published(self, index: int, now_s: float) -> tuple[FleetSums | None, str]:
        """Shard ``index``'s published sums if usable, else None and why."""
        text = self.notes.seen(index)
        if text is None:
            return None, "none published"
        try:
            sums, strategy, published_s = decode(text)
        except ValueError as err:
            return None, f"unreadable: {err}"
        if strategy != self.strategy:
            return None, f"of the {strategy} strategy"
        if now_s - published_s > self.max_age_s:
            return None, f"{now_s - published_s:.0f}s old"
        return sums, ""
