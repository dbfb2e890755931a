"""Quantities, VPA spec parsing and VPA status building: pure functions with worked numbers."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from podtailor.resources import Resources
from podtailor.units import (
    QuantityError,
    format_cpu,
    format_memory,
    parse_cpu_millicores,
    parse_memory_bytes,
)
from recommender.kube.vpa_objects import VpaConfigError, parse_vpa
from recommender.kube.vpa_status import build_status, stale_status
from recommender.model.types import ControlledValues, Recommendation


@pytest.mark.parametrize(("text", "millis"), [
    ("250m", 250), ("1", 1000), ("0.1", 100), ("1.0001", 1001),  # 1000.1m rounds up to 1001m
    ("1e3", 1_000_000), ("2k", 2_000_000), ("100u", 1), (".5", 500), (3, 3000), (0.25, 250),
])
def test_cpu_quantities(text: Any, millis: int) -> None:
    assert parse_cpu_millicores(text) == millis


@pytest.mark.parametrize(("text", "value"), [
    ("1.5Gi", 1_610_612_736), ("128974848", 128_974_848), ("129e6", 129_000_000), ("123Mi", 128_974_848),
    ("1e3", 1000), ("100m", 1),  # 0.1 byte rounds up to 1
    ("1Ki", 1024), ("1k", 1000),
])
def test_memory_quantities(text: str, value: int) -> None:
    assert parse_memory_bytes(text) == value


@pytest.mark.parametrize("bad", ["", "abc", "-1", "1.5.5", "1Gb", "1 Gi", "NaN", "inf", "1e999", "1" * 80,
                                 float("nan"), float("inf"), True, "1Ei0"])
def test_malformed_quantities_are_refused(bad: Any) -> None:
    with pytest.raises(QuantityError):
        parse_memory_bytes(bad)


def test_absurd_quantities_are_refused() -> None:
    with pytest.raises(QuantityError, match="absurdly large"):
        parse_cpu_millicores("1e12")
    with pytest.raises(QuantityError, match="absurdly large"):
        parse_memory_bytes("2Ei")


@given(st.integers(min_value=0, max_value=10**12))
def test_cpu_format_round_trips(millis: int) -> None:
    assert parse_cpu_millicores(format_cpu(millis)) == millis


@given(st.integers(min_value=0, max_value=2**60))
def test_memory_format_round_trips(value: int) -> None:
    assert parse_memory_bytes(format_memory(value)) == value


@given(st.text(max_size=40))
def test_parsing_garbage_raises_only_quantity_error(text: str) -> None:
    try:
        value = parse_memory_bytes(text)
    except QuantityError:
        return
    assert value >= 0 and math.isfinite(value)


def vpa(**spec: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}}
    base.update(spec)
    return {"metadata": {"namespace": "ns", "name": "v", "uid": "u1", "generation": 3}, "spec": base}


def test_vpa_spec_is_parsed_with_policies() -> None:
    spec = parse_vpa(vpa(recommenders=[{"name": "podtailor"}], updatePolicy={"updateMode": "InPlaceOrRecreate"},
                         resourcePolicy={"containerPolicies": [
                             {"containerName": "*", "minAllowed": {"cpu": "50m"}, "maxAllowed": {"memory": "2Gi"}},
                             {"containerName": "side", "mode": "Off"},
                             {"containerName": "app", "controlledResources": ["cpu"],
                              "controlledValues": "RequestsOnly"}]}))
    assert spec.recommender == "podtailor" and spec.update_mode == "InPlaceOrRecreate"
    app = spec.policy_for("app", 3)
    assert app.controlled_resources == frozenset({"cpu"}) and app.controlled_values is ControlledValues.REQUESTS_ONLY
    assert app.containers_in_pod == 3
    other = spec.policy_for("other", 3)  # falls back to "*"
    assert other.min_allowed == Resources(cpu_millicores=50) and other.max_allowed == Resources(
        memory_bytes=2 * 2**30)
    assert spec.policy_for("side", 3).mode_off


@pytest.mark.parametrize(("spec", "message"), [
    ({"targetRef": {"kind": "Pod", "name": "x"}}, "not supported"),
    ({"targetRef": {"kind": "Deployment"}}, "needs kind and name"),
    ({"recommenders": [{"name": "a"}, {"name": "b"}]}, "at most one"),
    ({"updatePolicy": {"updateMode": "Sometimes"}}, "not a VPA update mode"),
    ({"resourcePolicy": {"containerPolicies": [{"containerName": "a", "minAllowed": {"cpu": "2"},
                                                "maxAllowed": {"cpu": "1"}}]}}, "minAllowed is above maxAllowed"),
    ({"resourcePolicy": {"containerPolicies": [{"containerName": "a", "minAllowed": {"memory": "1Gb"}}]}},
     "malformed quantity"),
    ({"resourcePolicy": {"containerPolicies": [{"containerName": "a", "controlledResources": ["gpu"]}]}},
     "only cpu and memory"),
])
def test_bad_vpa_specs_are_explained(spec: dict[str, Any], message: str) -> None:
    with pytest.raises(VpaConfigError, match=message):
        parse_vpa(vpa(**spec))


def rec(cpu: int, memory: int, confidence: float = 1.0) -> Recommendation:
    r = Resources(cpu_millicores=cpu, memory_bytes=memory)
    return Recommendation(target=r, lower_bound=r, upper_bound=r, uncapped_target=r, confidence=confidence)


def test_status_keeps_the_last_recommendation_of_a_container_without_new_data() -> None:
    first = build_status({}, 1, {"app": rec(250, 2**28), "side": rec(10, 2**24)}, ["app", "side"])
    assert first is not None
    second = build_status(first, 1, {"app": rec(300, 2**28)}, ["app", "side"])
    assert second is not None
    entries = {e["containerName"]: e["target"] for e in second["recommendation"]["containerRecommendations"]}
    assert entries == {"app": {"cpu": "300m", "memory": "256Mi"}, "side": {"cpu": "10m", "memory": "16Mi"}}


def test_status_without_change_is_not_rewritten_and_conditions_keep_their_time() -> None:
    first = build_status({}, 1, {"app": rec(250, 2**28, confidence=0.4)}, ["app"])
    assert first is not None
    assert build_status(first, 1, {"app": rec(250, 2**28, confidence=0.4)}, ["app"]) is None
    low = next(c for c in first["conditions"] if c["type"] == "LowConfidence")
    assert low["status"] == "True" and "app" in low["message"]


def test_missing_history_is_reported_not_zeroed() -> None:
    status = build_status({}, 1, {}, ["app"])
    assert status is not None and "recommendation" not in status
    provided = next(c for c in status["conditions"] if c["type"] == "RecommendationProvided")
    assert provided["status"] == "False" and provided["reason"] == "NoUsageHistory"


def test_stale_keeps_the_recommendation() -> None:
    first = build_status({}, 1, {"app": rec(250, 2**28)}, ["app"])
    assert first is not None
    stale = stale_status(first, 1, "usage history unavailable: connection refused")
    assert stale is not None and stale["recommendation"] == first["recommendation"]
    assert next(c for c in stale["conditions"] if c["type"] == "Stale")["status"] == "True"


@pytest.mark.parametrize("spec", [
    {"recommenders": [5]},
    {"resourcePolicy": {"containerPolicies": ["app"]}},
    {"resourcePolicy": "everything"},
    {"updatePolicy": ["Auto"]},
    {"targetRef": "web"},
])
def test_malformed_vpa_objects_raise_only_config_errors(spec: dict[str, Any]) -> None:
    with pytest.raises(VpaConfigError):
        parse_vpa(vpa(**spec))
    bad = vpa()
    bad["metadata"]["generation"] = "x"
    with pytest.raises(VpaConfigError, match="malformed"):
        parse_vpa(bad)
