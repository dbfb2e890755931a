"""One fleet across sharded replicas (``recommender.kube.fleet_share``), over the engine's narrow ports.

Two replicas of ``--shards 2`` are two engines, each serving one shard's namespaces, each with a
``ShardedFleet`` and its own ``LeaseNotes``; the Lease between them is played by copying each replica's note
for a shard it holds into the other's ``seen`` (what the shard election's renewal and read carry). The fleet is
the one of ``test_engine_risk``: one container ``app`` beside nine a tenth of its size, whose memory target
depends on the fleet it is priced in (alone: its top hours covered; in the whole fleet: not). The lock's side
(annotation read at each get, written at each renewal) is tested over a fake of the three Lease calls.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from fractions import Fraction
from typing import Any

import pytest
from kubernetes import client
from prometheus_client import CollectorRegistry

from podtailor.resources import CurrentResources
from podtailor.runtime.shards import LeaseNotes, ShardTable, shard_of
from podtailor.vpa import TargetRef
from recommender.engine import EngineConfig, RecommenderEngine
from recommender.kube.cluster import ContainerTemplate, Workload
from recommender.kube.fleet_share import FLEET_ANNOTATION, ShardedFleet, decode, encode
from recommender.kube.served import UnparsableVpa, VpaSpec, read_vpa
from recommender.metrics import RecommenderMetrics
from recommender.model.fleet import FleetSums
from recommender.model.registry import get_strategy
from recommender.model.types import ContainerKey, Recommendation, Samples, UsageBatch
from tests.builders.engine import StatusStore
from tests.unit.test_engine_risk import GIB, NOW, RISK_1, RISK_4, history
from tests.unit.test_shards import Leases, record

SHARDS = 2
MAX_AGE_S = 3 * 60.0 + 2 * 2.0


def names_in(shard: int, count: int) -> list[str]:
    """The first ``count`` names ``n-<k>`` whose namespace of the same name is in ``shard``."""
    found = [f"n-{k}" for k in range(200) if shard_of(f"n-{k}", SHARDS) == shard]
    return found[:count]


APP = names_in(0, 1)[0]
SMALL = names_in(1, 9)
SCALES = {APP: 1.0, **dict.fromkeys(SMALL, 0.1)}


class Store(StatusStore):
    """A Deployment ``<name>`` with one container ``app`` and its VPA ``v``, in namespace ``<name>``."""

    def __init__(self, names: Sequence[str]) -> None:
        super().__init__()
        self.names = names

    def list_vpas(self, namespaces: Sequence[str] = ()) -> list[VpaSpec | UnparsableVpa]:
        return [read_vpa({"metadata": {"namespace": n, "name": "v", "uid": f"u-{n}", "generation": 1},
                          "spec": {"targetRef": {"kind": "Deployment", "name": n},
                                   "recommenders": [{"name": "podtailor"}]}}) for n in self.names]

    def workload(self, namespace: str, ref: TargetRef) -> Workload | None:
        return Workload(namespace=namespace, kind="Deployment", name=ref.name,
                        containers=(ContainerTemplate(name="app", current=CurrentResources()),))


class Source:
    """``test_engine_risk``'s history (x ``SCALES``), each sample read once: those in (start, end]."""

    def history(self, namespaces: Sequence[str], start_s: float, end_s: float,
                pools: Mapping[tuple[str, str], str] | None = None) -> Mapping[ContainerKey, UsageBatch]:
        out = {}
        for n in namespaces:
            batch = history(SCALES[n])
            times = batch.cpu_cores.timestamps_s
            keep = (times > start_s) & (times <= end_s)
            if keep.any():
                out[ContainerKey(namespace=n, workload_kind="Deployment", workload_name=n, container="app")] = replace(
                    batch, cpu_cores=Samples(timestamps_s=times[keep], values=batch.cpu_cores.values[keep]),
                    memory_peak_bytes=Samples(timestamps_s=times[keep], values=batch.memory_peak_bytes.values[keep]))
        return out


class Replica:
    def __init__(self, names: Sequence[str], serving: tuple[int, ...], strategy: str = "podtailor") -> None:
        self.notes = LeaseNotes(FLEET_ANNOTATION)
        self.share = ShardedFleet(self.notes, lambda: serving, shards=SHARDS, strategy=strategy, max_age_s=MAX_AGE_S)
        self.serving = serving
        self.engine = engine(names, strategy)
        self.engine.fleet_share = self.share

    def memory(self, now_s: float) -> dict[str, int | None]:
        return {ns: rec.target.memory_bytes for ns, rec in recommend(self.engine, now_s).items()}


def engine(names: Sequence[str], strategy: str = "podtailor") -> RecommenderEngine:
    return RecommenderEngine(store=Store(names), source=Source(), strategy=get_strategy(strategy),
                             config=EngineConfig(checkpoint_every_s=1e9),
                             metrics=RecommenderMetrics(CollectorRegistry()))


def recommend(eng: RecommenderEngine, now_s: float) -> dict[str, Recommendation]:
    """A pass's recommendations, by namespace (one VPA of one container in each)."""
    return {ns: rec for (ns, _, _), rec in eng.run_pass(now_s).recommendations.items()}


def carry(source: Replica, to: Replica) -> None:
    """What the Leases carry: ``source``'s note on each shard it holds, as ``to``'s elections read it."""
    for index in source.serving:
        to.notes.saw(index, source.notes.outgoing(index))


def test_two_replicas_sharing_their_sums_recommend_what_one_recommender_does() -> None:
    one = engine([APP, *SMALL])
    recommend(one, NOW)
    whole = recommend(one, NOW + 60)
    assert whole[APP].target.memory_bytes == RISK_4  # priced in the whole fleet (test_engine_risk's arithmetic)
    a, b = Replica([APP], (0,)), Replica(SMALL, (1,))
    # First pass: nothing published yet, so each prices in its own shard's fleet; "app" alone covers its peaks.
    assert a.memory(NOW) == {APP: RISK_1}
    b.memory(NOW)
    carry(a, b)
    carry(b, a)
    # Next pass: each replica's own fresh sums plus the other shard's published ones: the whole fleet, so
    # every recommendation (targets, bounds, limits, confidence, reasons) equals one recommender's.
    assert {**recommend(a.engine, NOW + 60), **recommend(b.engine, NOW + 60)} == whole
    published = decode(b.notes.outgoing(1) or "")
    assert published[0].memory_count == 9 and published[1:] == ("podtailor", NOW + 60)
    assert json.loads(b.notes.outgoing(1) or "")["pass"] == 2


def test_sums_too_old_missing_unreadable_or_of_another_strategy_leave_the_replica_its_own_fleet() -> None:
    a, b = Replica([APP], (0,)), Replica(SMALL, (1,))
    b.memory(NOW)
    carry(b, a)
    assert a.memory(NOW + MAX_AGE_S) == {APP: RISK_4}  # at the bound: still used
    assert a.memory(NOW + MAX_AGE_S + 1) == {APP: RISK_1}  # older than the bound: its own fleet
    for note in ("{not json", json.dumps({"strategy": "podtailor"}),
                 encode(FleetSums.zero(), strategy="vpa", published_s=NOW, pass_number=1)):
        a.notes.saw(1, note)
        assert a.memory(NOW) == {APP: RISK_1}
    a.notes.saw(1, None)
    assert a.memory(NOW) == {APP: RISK_1}


def test_a_served_shard_without_vpas_publishes_zero_and_a_strategy_without_a_fleet_publishes_nothing() -> None:
    a = Replica([APP], (0, 1))  # holds both shards; shard 1 has none of its VPAs
    assert a.memory(NOW) == {APP: RISK_1}  # the whole fleet is its own: no other shard to wait for
    assert decode(a.notes.outgoing(1) or "")[0] == FleetSums.zero()
    assert decode(a.notes.outgoing(0) or "")[0].memory_count == 1
    vpa = Replica([APP], (0,), strategy="vpa")
    vpa.memory(NOW)
    assert vpa.notes.outgoing(0) is None and vpa.share.passes == 0


def test_the_annotation_round_trips_exactly_and_refuses_what_it_did_not_write() -> None:
    sums = FleetSums(cpu_cores_sum=Fraction(1, 3 * 2**60), cpu_count=2, memory_bytes_sum=Fraction(5 * GIB),
                     memory_count=2)
    text = encode(sums, strategy="podtailor", published_s=NOW + 0.25, pass_number=7)
    assert decode(text) == (sums, "podtailor", NOW + 0.25)
    doc = json.loads(text)
    assert doc["cpuCoresSum"] == "1/3458764513820540928" and doc["pass"] == 7
    for bad in ({**doc, "cpuCount": "2"}, {**doc, "memoryBytesSum": "1/0"}, {**doc, "cpuCount": -1},
                {**doc, "cpuCoresSum": "x"}, {k: v for k, v in doc.items() if k != "time"}, [1]):
        with pytest.raises(ValueError):
            decode(json.dumps(bad))


def test_the_risk_budgets_margin_sums_travel_in_the_note_only_when_some_container_has_a_margin() -> None:
    """Under ``--risk-budget`` each shard's note also carries the exact sums of its containers' log-margins, so
    a container without history starts from the whole fleet's mean margin in every replica; without a budget the
    note has no margin keys (as before the budget existed) and decodes to zero margins."""
    from recommender.model.fleet import combine

    left = FleetSums.of([0.5, 1.5], [GIB], cpu_log_margins=[0.1, -0.3], memory_log_margins=[0.2],
                        memory_excess=[0.75])
    right = FleetSums.of([2.0], [3 * GIB], cpu_log_margins=[0.5], memory_log_margins=[-0.1], memory_excess=[-1.25])
    for part in (left, right):
        text = encode(part, strategy="podtailor", published_s=NOW, pass_number=1)
        assert decode(text)[0] == part
    whole = combine([decode(encode(p, strategy="podtailor", published_s=NOW, pass_number=1))[0]
                     for p in (left, right)])
    scale = whole.scale()
    assert scale is not None and scale.cpu_log_margin == pytest.approx((0.1 - 0.3 + 0.5) / 3, rel=1e-15)
    assert scale.memory_log_margin == pytest.approx(0.05, rel=1e-15)
    assert scale.memory_excess == -0.25  # the fleet's kills beyond budget, per container with a memory margin
    assert whole == FleetSums.of([0.5, 1.5, 2.0], [GIB, 3 * GIB], cpu_log_margins=[0.1, -0.3, 0.5],
                                 memory_log_margins=[0.2, -0.1], memory_excess=[0.75, -1.25])
    plain = FleetSums.of([1.0], [GIB])
    doc = json.loads(encode(plain, strategy="podtailor", published_s=NOW, pass_number=1))
    assert not any("Margin" in key or "Excess" in key for key in doc)
    assert plain.scale() is not None and plain.scale().cpu_log_margin is None  # type: ignore[union-attr]
    with pytest.raises(ValueError):
        decode(json.dumps({**doc, "cpuMarginSum": "1/2"}))  # a margin sum over no containers
    with pytest.raises(ValueError):
        decode(json.dumps({**doc, "memoryExcessSum": "3/4"}))  # an excess over no containers
    # the excess is counted apart: a container whose target the pod's floor holds has a margin, not an excess
    held = FleetSums.of([1.0, 2.0], [GIB, GIB], memory_log_margins=[0.1, 0.3], memory_excess=[0.5])
    assert held.memory_excess_count == 1 and held.scale().memory_excess == 0.5  # type: ignore[union-attr]
    assert decode(encode(held, strategy="podtailor", published_s=NOW, pass_number=1))[0] == held
    # a note written before the excess had a count of its own counted it over every memory margin
    old = json.loads(encode(left, strategy="podtailor", published_s=NOW, pass_number=1))
    del old["memoryExcessCount"]
    assert decode(json.dumps(old))[0] == left
    with pytest.raises(ValueError, match="memory_excess"):
        FleetSums.of([1.0], [GIB], memory_log_margins=[0.1], memory_excess=[math.nan])
    with pytest.raises(ValueError):
        decode(json.dumps({**old, "memoryExcessCount": 1.5}))


def test_the_lock_records_each_shards_note_and_writes_its_own_on_the_renewals_of_a_held_shard() -> None:
    from podtailor.runtime.shard_leases import _ShardLock

    table, notes, leases = ShardTable(SHARDS, renew_s=10.0, clock=lambda: 0.0), LeaseNotes(FLEET_ANNOTATION), Leases()
    lock: Any = _ShardLock("pt-shard-1", "ns", "me", table=table, index=1, notes=notes)
    lock.api_instance = leases
    leases.lease = client.V1Lease(metadata=client.V1ObjectMeta(name="pt-shard-1",
                                                               annotations={FLEET_ANNOTATION: "theirs"}),
                                  spec=client.V1LeaseSpec(holder_identity="other"))
    assert lock.get("pt-shard-1", "ns")[0]
    assert notes.seen(1) == "theirs"
    notes.publish(1, "mine")
    assert lock.update("pt-shard-1", "ns", record("me"))  # taking it: the note waits for the first renewal
    assert leases.lease.metadata.annotations == {FLEET_ANNOTATION: "theirs"}
    assert lock.get("pt-shard-1", "ns")[0]
    assert lock.update("pt-shard-1", "ns", record("me"))  # a renewal carries it
    assert leases.lease.metadata.annotations == {FLEET_ANNOTATION: "mine"} and leases.writes == ["me", "me"]
    leases.lease.metadata.annotations = None
    assert lock.get("pt-shard-1", "ns")[0] and notes.seen(1) is None
