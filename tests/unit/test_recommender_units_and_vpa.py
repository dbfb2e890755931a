"""Quantities, the recommender's risk annotation and VPA status building: pure functions with worked numbers."""

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
from recommender.kube.served import RISK_ANNOTATION, VpaSpec, read_vpa, risk_annotation
from recommender.kube.vpa_status import build_status, stale_status
from recommender.model.types import Recommendation


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


def served(obj: dict[str, Any]) -> VpaSpec:
    item = read_vpa(obj)
    assert isinstance(item, VpaSpec), item
    return item


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


def annotated(value: Any) -> dict[str, Any]:
    obj = vpa()
    obj["metadata"]["annotations"] = {RISK_ANNOTATION: value, "other": "x"}
    return obj


@pytest.mark.parametrize(("value", "risk"), [("2", 2.0), ("0.5", 0.5), (".25", 0.25), (" 4 ", 4.0), ("0.05", 0.05),
                                             ("20", 20.0), ("1.", 1.0)])
def test_the_risk_annotation_is_read(value: str, risk: float) -> None:
    spec = served(annotated(value))
    assert spec.risk == risk and spec.risk_problem is None


def test_no_risk_annotation_is_no_risk_and_no_problem() -> None:
    assert (served(vpa()).risk, served(vpa()).risk_problem) == (None, None)
    assert risk_annotation("not a map") == (None, None)


@pytest.mark.parametrize(("value", "message"), [
    ("0", "is outside [0.05, 20]"), ("21", "is outside [0.05, 20]"), ("0.049", "is outside"),
    ("20.0001", "is outside"), ("", "is not a decimal number in [0.05, 20]"), ("high", "is not a decimal"),
    ("nan", "is not a decimal"), ("inf", "is not a decimal"), ("1e1", "is not a decimal"),
    ("1_0", "is not a decimal"), ("-2", "is not a decimal"), ("+2", "is not a decimal"), ("0x10", "is not a decimal"),
    ("\uff12", "is not a decimal"),
    ("2; rm -rf /", "is not a decimal"), ("2\n3", "is not a decimal"), ("1" * 10_000, "is not a decimal"),
    (2, "is not a decimal"), (None, "is not a decimal"), (["2"], "is not a decimal"),
])
def test_an_unusable_risk_annotation_is_a_problem_not_a_config_error(value: Any, message: str) -> None:
    spec = served(annotated(value))  # the VPA is still served: no VpaConfigError
    assert spec.risk is None and spec.risk_problem is not None
    assert message in spec.risk_problem and spec.risk_problem.startswith(f"annotation {RISK_ANNOTATION}=")
    assert len(spec.risk_problem) < 120  # a hostile value is quoted short, escaped by repr
    assert "\n" not in spec.risk_problem


@given(st.text(max_size=60))
def test_any_annotation_text_gives_a_risk_in_range_or_a_problem(text: str) -> None:
    risk, problem = risk_annotation({RISK_ANNOTATION: text})
    assert (risk is None) != (problem is None)
    assert risk is None or 0.05 <= risk <= 20
