"""The per-pool annotation: its codec round-trips, its reader refuses hostile or malformed content whole,
the majority pool, and a pod's value (its pool's, else the status one)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from podtailor.poolrecs import (
    MAX_BYTES,
    MAX_POOLS,
    PoolRecommendations,
    PoolRecsError,
    decode,
    encode,
    majority_pool,
    target_for,
)
from podtailor.resources import Resources
from podtailor.vpa import RecommendedContainerResources


def rec(name: str, cpu_m: int, mem: int, *, bounds: bool = False) -> RecommendedContainerResources:
    low = Resources(cpu_millicores=cpu_m // 2, memory_bytes=mem // 2) if bounds else None
    return RecommendedContainerResources(container_name=name, target=Resources(cpu_millicores=cpu_m, memory_bytes=mem),
                                         lower_bound=low)


TWO = PoolRecommendations(pools={"small": {"agent": rec("agent", 100, 64 << 20, bounds=True)},
                                 "large": {"agent": rec("agent", 1600, 1 << 30)}})


def test_encode_is_the_documented_format_and_decodes_back() -> None:
    text = encode(TWO)
    assert json.loads(text) == {"version": 1, "pools": {
        "large": {"containerRecommendations": [{"containerName": "agent",
                                                "target": {"cpu": "1600m", "memory": "1Gi"}}]},
        "small": {"containerRecommendations": [{"containerName": "agent", "target": {"cpu": "100m", "memory": "64Mi"},
                                                "lowerBound": {"cpu": "50m", "memory": "32Mi"}}]}}}
    assert decode(text) == TWO
    assert encode(decode(text)) == text  # stable: an unchanged value is written byte for byte the same


@given(st.dictionaries(st.from_regex(r"[a-z0-9]([a-z0-9.-]{0,20}[a-z0-9])?", fullmatch=True),
                       st.tuples(st.integers(1, 10**6), st.integers(1, 2**40)), max_size=8))
def test_round_trip(values: dict[str, tuple[int, int]]) -> None:
    recs = PoolRecommendations(pools={p: {"c": rec("c", cpu, mem)} for p, (cpu, mem) in values.items()})
    assert decode(encode(recs)) == recs


@pytest.mark.parametrize(("text", "why"), [
    (None, "not a string"),
    ("{", "not JSON"),
    ("[]", "exactly the keys"),
    ('{"version": 1}', "exactly the keys"),
    ('{"version": 2, "pools": {}}', "version"),
    ('{"version": true, "pools": {}}', "version"),
    ('{"version": 1.0, "pools": {}}', "version"),
    ('{"version": 1, "pools": []}', "map of at most"),
    ('{"version": 1, "pools": {}, "extra": 1}', "exactly the keys"),
    ('{"version": 1, "version": 1, "pools": {}}', "twice"),
    ('{"version": 1, "pools": {"a": {"containerRecommendations": {}}}}', "a list"),
    ('{"version": 1, "pools": {"a": {"containerRecommendations": [], "x": 1}}}', "exactly containerRecommendations"),
    ('{"version": 1, "pools": {"bad pool!": {"containerRecommendations": []}}}', "not a label value"),
    ('{"version": 1, "pools": {"a": {"containerRecommendations": [{"target": {}}]}}}', "without containerName"),
    ('{"version": 1, "pools": {"a": {"containerRecommendations": [{"containerName": "c", "target": {"cpu": "-1"}}]}}}',
     "cpu"),
    ('{"version": 1, "pools": {"a": {"containerRecommendations": [{"containerName": "c", "target": {"cpu": NaN}}]}}}',
     "not JSON"),
    ('{"version": 1, "pools": {"a": {"containerRecommendations": [{"containerName": "c", "target": {}}, '
     '{"containerName": "c", "target": {}}]}}}', "twice"),
    ("[" * 5000 + "]" * 5000, "not JSON"),
    (" " * (MAX_BYTES + 1), "bytes"),
])
def test_hostile_or_malformed_content_is_refused_whole(text: object, why: str) -> None:
    with pytest.raises(PoolRecsError, match=why):
        decode(text)


def test_too_many_pools_is_refused_both_ways() -> None:
    many = PoolRecommendations(pools={f"p{i}": {"c": rec("c", 10, 10)} for i in range(MAX_POOLS + 1)})
    with pytest.raises(PoolRecsError, match="pools"):
        encode(many)
    body = {"version": 1, "pools": {f"p{i}": {"containerRecommendations": []} for i in range(MAX_POOLS + 1)}}
    with pytest.raises(PoolRecsError, match="at most"):
        decode(json.dumps(body))


def test_an_oversized_value_is_not_encoded() -> None:
    name = "c" * 250
    big = PoolRecommendations(pools={f"p{i}": {f"{name}{j}": rec(f"{name}{j}", 10, 10) for j in range(30)}
                                     for i in range(4)})
    with pytest.raises(PoolRecsError, match="bytes"):
        encode(big)


def test_majority_pool() -> None:
    assert majority_pool(["small", "large", "small"]) == "small"
    assert majority_pool(["b", "a", "b", "a"]) == "a"  # a tie: the first name in sorted order
    assert majority_pool([]) is None


def test_a_pod_gets_its_pools_value_else_the_status_one() -> None:
    status = {"agent": rec("agent", 500, 256 << 20), "sidecar": rec("sidecar", 20, 16 << 20)}
    assert target_for("large", "agent", status, TWO) == rec("agent", 1600, 1 << 30)
    assert target_for("large", "sidecar", status, TWO) == status["sidecar"]  # the pool has no value for it
    assert target_for("other", "agent", status, TWO) == status["agent"]  # a pool without values
    assert target_for("other", "absent", status, TWO) is None
