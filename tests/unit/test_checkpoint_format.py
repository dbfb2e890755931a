"""Unit tests of the checkpoint format: a checkpoint written by an earlier version (``tests/data/checkpoints``)
restores to the state that gave the recorded recommendation; ``checkpoint_pack`` and ``SlotMax``'s range form
round-trip exactly (hypothesis); hostile packed states are refused as unreadable, with what is wrong."""

from __future__ import annotations

import base64
import dataclasses
import json
import logging
import re
import struct
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

from podtailor.resources import CurrentResources
from recommender.engine import EngineConfig, RecommenderEngine
from recommender.kube.checkpoint import (
    CHECKPOINT_VERSION,
    PLAIN_VERSION,
    UnusableCheckpoint,
    checkpoint_spec,
    restore,
)
from recommender.kube.checkpoint_pack import FLOAT_MARK, INT_MARK, MAX_PACKED_CHARS, MAX_STATE_BYTES, pack, unpack
from recommender.metrics import RecommenderMetrics
from recommender.model.histogram import BucketScheme, DecayingHistogram
from recommender.model.peaks import SlotMax, sort_samples
from recommender.model.registry import get_strategy
from recommender.model.types import ContainerPolicy, OomKill, Samples, UsageBatch
from tests.unit.test_engine_risk import Events, Source, Store
from tests.unit.test_engine_risk import engine as risk_engine

NOW = 1_700_000_000.0  # the fixture's time (tests/data/checkpoints/README.md)
V1 = Path(__file__).parents[1] / "data" / "checkpoints" / "v1-podtailor-vpa.json"


def _recommendation(strategy_name: str, state: Any) -> dict[str, Any]:
    strategy = get_strategy(strategy_name)
    rec, _ = strategy.recommend(state, now_s=NOW, policy=ContainerPolicy(containers_in_pod=1),
                                current=CurrentResources())
    out: dict[str, Any] = json.loads(json.dumps(dataclasses.asdict(rec)))
    return out


@pytest.mark.parametrize("strategy_name", ["podtailor", "vpa"])
def test_a_version_1_checkpoint_restores_to_the_state_it_was_written_from(strategy_name: str) -> None:
    fixture = json.loads(V1.read_text())[strategy_name]
    restored = restore({"spec": fixture["spec"]}, get_strategy(strategy_name))
    assert set(restored.states) == {"app"} and restored.history_until_s == NOW
    assert _recommendation(strategy_name, restored.states["app"]) == fixture["recommendation"]


@pytest.mark.parametrize("strategy_name", ["podtailor", "vpa"])
def test_a_version_1_state_written_again_packed_gives_the_same_recommendation(strategy_name: str) -> None:
    fixture = json.loads(V1.read_text())[strategy_name]
    strategy = get_strategy(strategy_name)
    old = restore({"spec": fixture["spec"]}, strategy)
    spec = checkpoint_spec(strategy, old.states, NOW)
    assert spec["version"] == CHECKPOINT_VERSION and "state" not in spec["containers"][0]  # type: ignore[index]
    again = restore({"spec": spec}, strategy)
    assert _recommendation(strategy_name, again.states["app"]) == fixture["recommendation"]
    assert again.states["app"].to_checkpoint() == old.states["app"].to_checkpoint()


finite = st.floats(allow_nan=False, allow_infinity=False)
json_trees = st.recursive(
    st.none() | st.booleans() | st.integers(-2**63, 2**63) | finite
    | st.text(max_size=5).filter(lambda s: s not in (FLOAT_MARK, INT_MARK)),  # the two strings pack refuses
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=30)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.text(max_size=5), json_trees, max_size=5))
def test_pack_round_trips_any_json_state_exactly(state: dict[str, Any]) -> None:
    back = unpack(pack(state))
    assert back == state
    # == does not tell 1 from 1.0 nor 0.0 from -0.0: the types and the bits must survive too
    assert json.dumps(back, sort_keys=True) == json.dumps(state, sort_keys=True)
    assert _float_bits(back) == _float_bits(state)


def _float_bits(tree: Any) -> list[bytes]:
    if isinstance(tree, float):
        return [struct.pack("<d", tree)]
    children = tree.values() if isinstance(tree, dict) else tree if isinstance(tree, list) else []
    return [b for child in children for b in _float_bits(child)]


slot_samples = st.lists(st.tuples(st.integers(0, 40 * 24), st.floats(0, 1e12, allow_nan=False) | st.integers(0, 2**40)),
                        min_size=1, max_size=60)


@settings(max_examples=300, deadline=None)
@given(st.lists(slot_samples, min_size=1, max_size=4))
def test_slot_max_round_trips_through_its_checkpoint(batches: list[list[tuple[int, float]]]) -> None:
    slots = SlotMax(slot_s=3600.0, retention_s=10 * 86400.0)
    for batch in batches:  # several batches: merged slots, pruned slots, gaps
        ts = np.array([NOW + 3600.0 * h for h, _ in batch])
        vals = np.array([float(v) for _, v in batch])
        slots.add(sort_samples(ts, vals))
    back = SlotMax.from_checkpoint(unpack(pack(slots.to_checkpoint())))
    assert back.maxima == slots.maxima and back.counts == slots.counts
    assert all(type(v) is float for v in back.maxima.values()) and all(type(c) is int for c in back.counts.values())
    assert (back.slot_s, back.retention_s) == (slots.slot_s, slots.retention_s)


def test_slot_max_checkpoint_is_one_range_with_the_gaps_marked() -> None:
    slots = SlotMax(slot_s=3600.0, retention_s=10 * 86400.0)
    slots.add(sort_samples(np.array([7200.0, 7300.0, 3 * 3600.0 + 1, 5 * 3600.0]), np.array([5.0, 7.0, 2.5, 9.0])))
    # slots 2 (max 7 of 2 samples), 3 (2.5), 4 (none), 5 (9): integral maxima as ints
    assert slots.to_checkpoint() == {"slot_s": 3600.0, "retention_s": 864000.0, "first": 2,
                                     "maxima": [7, 2.5, None, 9], "counts": [2, 1, 0, 1]}


@pytest.mark.parametrize("bad", [
    {"first": 1.5, "maxima": [1], "counts": [1]},
    {"first": 0, "maxima": [1, 2], "counts": [1]},
    {"first": 0, "maxima": [None], "counts": [3]},
    {"first": 0, "maxima": [4], "counts": [0]},
    {"first": 0, "maxima": [4], "counts": [-1]},
    {"first": 0, "maxima": ["4"], "counts": [1]},
    {"first": 0, "maxima": [float("nan")], "counts": [1]},
])
def test_a_slot_max_checkpoint_that_does_not_add_up_is_refused(bad: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="slot maxima"):
        SlotMax.from_checkpoint({"slot_s": 3600.0, "retention_s": 86400.0, **bad})


def test_the_whole_podtailor_state_round_trips_packed() -> None:
    strategy_name = "podtailor"
    fixture = json.loads(V1.read_text())[strategy_name]
    state = restore({"spec": fixture["spec"]}, get_strategy(strategy_name)).states["app"]
    data = state.to_checkpoint()
    assert unpack(pack(data)) == data
    assert _float_bits(unpack(pack(data))) == _float_bits(data)


def _raw(skeleton: bytes, floats: bytes = b"", ints: bytes = b"", *, layout: int = 1,
         declared: int | None = None, n_floats: int | None = None) -> str:
    """A packed state built by hand: layout byte, the JSON's declared length and the float count, the JSON, the
    float bytes, the int bytes (one number each at most, whose bytes in planes are its bytes in order)."""
    head = struct.pack("<BII", layout, len(skeleton) if declared is None else declared,
                       len(floats) // 8 if n_floats is None else n_floats)
    return base64.b64encode(zlib.compress(head + skeleton + floats + ints)).decode()


def _spec_with(packed: object) -> dict[str, object]:
    strategy = get_strategy("podtailor")
    spec = checkpoint_spec(strategy, {"app": strategy.new_state()}, NOW)
    return {**spec, "containers": [{"name": "app", "packed": packed}]}


BOMB = base64.b64encode(zlib.compress(b"\0" * (MAX_STATE_BYTES + 1))).decode()


@pytest.mark.parametrize(("packed", "message"), [
    ("not base64!", "not base64"),
    (base64.b64encode(b"plain text").decode(), "not zlib"),
    (base64.b64encode(zlib.compress(b"\1\0\0\0\0{}")[:-3]).decode(), "cut short"),
    (BOMB, f"more than {MAX_STATE_BYTES} bytes"),
    ("A" * (MAX_PACKED_CHARS + 4), "at most"),
    (12, "not a string"),
    (_raw(b"{}", layout=9), "unknown layout 9"),
    (_raw(b"{}", declared=2**31), "lengths do not add up"),
    (_raw(b"{}", n_floats=2**31), "lengths do not add up"),
    (_raw(b"{}", b"\0" * 5), "lengths do not add up"),
    (_raw(b'{"a":"\\u0000"}', np.array([np.nan]).tobytes()), "NaN or infinite"),
    (_raw(b'{"a":"\\u0000"}', np.array([np.inf]).tobytes()), "NaN or infinite"),
    (_raw(b'{"a":1.5}'), "1.5 in the JSON"),
    (_raw(b'{"a":NaN}'), "NaN in the JSON"),
    (_raw(b'{"a":"\\u0000"}'), "fewer numbers"),
    (_raw(b'{"a":"\\u0001"}', np.array([1.0]).tobytes()), "fewer numbers"),  # a float where an int is marked
    (_raw(b'{"a":1}', np.zeros(1).tobytes()), "more numbers"),
    (_raw(b'{"a":1}', ints=np.array([7], dtype="<i8").tobytes()), "more numbers"),
    (_raw(b"[1]"), "not an object"),
    (_raw(b"[" * 100_000 + b"]" * 100_000), "nested too deeply"),
    (_raw(b"{"), "Expecting"),
])
def test_a_hostile_packed_state_is_refused_with_what_is_wrong(packed: object, message: str) -> None:
    with pytest.raises(UnusableCheckpoint, match=re.escape(message)) as caught:
        restore({"spec": _spec_with(packed)}, get_strategy("podtailor"))
    assert caught.value.stale is False  # unreadable: logged as a warning, history read again


@pytest.mark.parametrize(("cpu", "message"), [
    ({"weights": {"999999999": 1.0}}, "bucket 999999999 of 502"),  # the earlier map form
    ({"weights": {"-1": 1.0}}, "bucket -1 of 502"),
    ({"weights_from": 500, "weights": [1.0, 2.0, 3.0]}, "3 from bucket 500 do not fit 502 buckets"),
    ({"weights_from": -1, "weights": [1.0]}, "from bucket -1"),
    ({"weights_from": 0, "weights": ["1.5"]}, "not all finite numbers"),
])
def test_a_well_packed_state_with_histogram_weights_out_of_range_is_refused(cpu: dict[str, Any],
                                                                             message: str) -> None:
    strategy = get_strategy("podtailor")
    state = strategy.new_state().to_checkpoint()
    hostile = {**state, "cpu": {**{k: v for k, v in state["cpu"].items() if k != "weights_from"}, **cpu}}
    with pytest.raises(UnusableCheckpoint, match=re.escape(message)) as caught:
        restore({"spec": _spec_with(pack(hostile))}, strategy)
    assert caught.value.stale is False


def test_a_well_packed_state_of_the_wrong_shape_is_refused() -> None:
    strategy = get_strategy("podtailor")
    not_a_map = {**strategy.new_state().to_checkpoint(), "memory": [1, 2]}
    with pytest.raises(UnusableCheckpoint, match="TypeError: list indices"):
        restore({"spec": _spec_with(pack(not_a_map))}, strategy)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 50, allow_nan=False), st.integers(0, 30 * 24 * 60)), max_size=80),
       st.floats(60, 86400 * 4))
def test_a_decaying_histogram_round_trips_bit_for_bit(samples: list[tuple[float, int]], half_life_s: float) -> None:
    hist = DecayingHistogram(BucketScheme(first_bucket_size=0.01, ratio=1.05, max_value=1000.0), half_life_s)
    if samples:  # minutes over 30 days: the reference moves and the weights are rescaled on the way
        hist.add(np.array([v for v, _ in samples]), NOW + 60.0 * np.array([m for _, m in samples], dtype=np.float64))
    back = DecayingHistogram.from_checkpoint(unpack(pack(hist.to_checkpoint())))
    assert back.hist.weights.tobytes() == hist.hist.weights.tobytes()
    assert (back.reference_s, back.half_life_s) == (hist.reference_s, hist.half_life_s)


class _HostileStore(Store):
    """Every VPA's checkpoint is one whose packed state decompresses past the bound."""

    def load_checkpoint(self, vpa: Any) -> dict[str, Any] | None:
        return {"spec": _spec_with(BOMB)}


def test_the_engine_starts_a_container_with_a_hostile_checkpoint_cold_and_says_why(
        caplog: pytest.LogCaptureFixture) -> None:
    cold, _, _ = risk_engine({"web": None})
    expected = cold.run_pass(NOW).recommendations[("ns", "v-web", "app")]
    registry = CollectorRegistry()
    eng = RecommenderEngine(store=_HostileStore({"web": None}), source=Source(["web"]),
                            strategy=get_strategy("podtailor"), config=EngineConfig(checkpoint_every_s=1e9),
                            metrics=RecommenderMetrics(registry), events=Events())
    with caplog.at_level(logging.WARNING, logger="podtailor.recommender"):
        report = eng.run_pass(NOW)
    assert report.recommendations[("ns", "v-web", "app")] == expected  # the whole history read, as cold
    [record] = [r for r in caplog.records if r.getMessage() == "checkpoint unreadable; reloading history"]
    assert record.vpa == "v-web" and f"more than {MAX_STATE_BYTES} bytes" in record.error  # type: ignore[attr-defined]
    assert registry.get_sample_value("podtailor_recommender_checkpoints_restored_total") == 0.0


usage_batches = st.lists(st.tuples(
    st.lists(st.tuples(st.integers(0, 60 * 24 * 9), st.floats(0, 64), st.integers(0, 2**36)), min_size=1, max_size=40),
    st.lists(st.integers(0, 60 * 24 * 9), max_size=2)), min_size=1, max_size=3)


@settings(max_examples=40, deadline=None)
@given(usage_batches, st.sampled_from(["podtailor", "vpa"]))
def test_any_state_restores_packed_to_the_same_state_and_recommendation(
        batches: list[tuple[list[tuple[int, float, int]], list[int]]], strategy_name: str) -> None:
    """Batches of samples at whole minutes over 9 days (CPU cores, memory bytes) and OOM kills, in any order."""
    strategy = get_strategy(strategy_name)
    state = strategy.new_state()
    start = NOW - 9 * 86400.0
    for samples, ooms in batches:
        ts = start + 60.0 * np.array([m for m, _, _ in samples], dtype=np.float64)
        state.add(UsageBatch(cpu_cores=Samples(timestamps_s=ts, values=np.array([c for _, c, _ in samples])),
                             cpu_interval_s=60.0, memory_interval_s=60.0,
                             memory_peak_bytes=Samples(timestamps_s=ts, values=np.array(
                                 [float(b) for _, _, b in samples])),
                             oom_kills=tuple(OomKill(timestamp_s=start + 60.0 * m, memory_limit_bytes=2**30)
                                             for m in ooms)))
    spec = checkpoint_spec(strategy, {"app": state}, NOW)
    back = restore({"spec": json.loads(json.dumps(spec))}, strategy).states["app"]  # through JSON, as stored
    assert back.to_checkpoint() == state.to_checkpoint()
    assert _float_bits(back.to_checkpoint()) == _float_bits(state.to_checkpoint())
    assert _recommendation(strategy_name, back) == _recommendation(strategy_name, state)


@pytest.mark.parametrize("mark", [FLOAT_MARK, INT_MARK])
def test_a_state_string_equal_to_a_number_mark_is_refused_not_mangled(mark: str) -> None:
    with pytest.raises(ValueError, match="equal to a number mark"):
        pack({"note": [1.5, mark]})
    assert unpack(pack({"note": [1.5, mark + "x", "x" + mark]})) == {"note": [1.5, mark + "x", "x" + mark]}


@pytest.mark.parametrize(("field", "value", "message"), [
    ("cpu", "weights", "not all finite numbers"),  # the histogram's own check refuses it
    ("memory_margin", None, "OverflowError"),  # read with float(): the restore's handler takes it
    ("applied_since_s", None, "OverflowError"),
])
def test_an_integer_too_large_for_a_float_is_refused_not_raised(field: str, value: str | None,
                                                                  message: str) -> None:
    """JSON integers are unbounded: 10**400 in a plain (format 1) state raised OverflowError out of
    ``restore``, past the engine's handling; it is an unusable checkpoint like any other."""
    strategy = get_strategy("podtailor")
    state = strategy.new_state().to_checkpoint()
    hostile = {**state["cpu"], "weights_from": 0, "weights": [10**400]} if value else 10**400
    spec = {**checkpoint_spec(strategy, {"app": strategy.new_state()}, NOW), "version": PLAIN_VERSION,
            "containers": [{"name": "app", "state": {**state, field: hostile}}]}
    with pytest.raises(UnusableCheckpoint, match=message) as caught:
        restore({"spec": spec}, strategy)
    assert caught.value.stale is False
