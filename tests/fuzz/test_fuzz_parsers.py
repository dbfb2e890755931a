"""Property and fuzz tests of the parsers that take untrusted input: quantities, VPA specs and statuses,
ResizePolicies.

Each parser may accept or refuse, but refuses only with its own error type (``QuantityError``,
``VpaConfigError``, ``PolicyError``), and what it accepts is sane: quantities are non-negative, bounded and
round-trip through the formatter.
"""

from __future__ import annotations

import contextlib
import math
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from podtailor.units import (
    MAX_CPU_MILLICORES,
    MAX_MEMORY_BYTES,
    QuantityError,
    format_cpu,
    format_memory,
    parse_cpu_millicores,
    parse_memory_bytes,
)
from podtailor.vpa import Vpa, VpaConfigError, parse_status, parse_vpa
from updater.kube.policy_crd import PolicyError, parse_policy
from updater.policy.types import RolloutPolicy

QUANTITY_ALPHABET = "0123456789.+-eEkKmMGTPinu \n\u0661\u0663\uff11" + "x"
quantity_like = st.one_of(
    st.text(alphabet=QUANTITY_ALPHABET, max_size=20),
    st.from_regex(r"\A[+-]?[0-9]{0,6}(\.[0-9]{0,4})?([numkMGTPE]|[KMGTPE]i|[eE][+-]?[0-9]{1,4})?\Z"),
    st.text(max_size=70),
)
json_scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=12))
json_values = st.recursive(json_scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=12), inner, max_size=4)), max_leaves=20)


@given(quantity_like)
def test_quantities_are_sane_or_refused(text: str) -> None:
    for parse, high in ((parse_cpu_millicores, MAX_CPU_MILLICORES), (parse_memory_bytes, MAX_MEMORY_BYTES)):
        try:
            value = parse(text)
        except QuantityError:
            continue
        assert isinstance(value, int) and 0 <= value <= high
        assert text.strip().isascii() and text.strip()[:1] in set("+.0123456789")


@given(st.floats(allow_nan=True, allow_infinity=True))
def test_float_quantities_are_finite_and_non_negative(value: float) -> None:
    try:
        out = parse_memory_bytes(value)
    except QuantityError:
        assert not math.isfinite(value) or value < 0 or value > MAX_MEMORY_BYTES
        return
    assert math.isfinite(value) and value >= 0 and out == math.ceil(value)


@given(st.integers(0, MAX_CPU_MILLICORES), st.integers(0, MAX_MEMORY_BYTES))
def test_formatting_round_trips(millicores: int, memory_bytes: int) -> None:
    assert parse_cpu_millicores(format_cpu(millicores)) == millicores
    assert parse_memory_bytes(format_memory(memory_bytes)) == memory_bytes


def test_garbage_quantities_are_refused() -> None:
    for text in ("NaN", "inf", "-1", "1e309", "10Xi", "\u0661\u0662", "1Mi1", "", " ", "0x10", "1_000", "1,5"):
        for parse in (parse_cpu_millicores, parse_memory_bytes):
            try:
                parse(text)
            except QuantityError:
                continue
            raise AssertionError(f"{text!r} accepted")


resources = st.one_of(json_values, st.fixed_dictionaries({}, optional={
    "cpu": st.one_of(quantity_like, st.integers(-5, 10**7)), "memory": st.one_of(quantity_like, st.integers())}))
container_policy = st.fixed_dictionaries({}, optional={
    "containerName": st.one_of(st.sampled_from(["app", "*", ""]), json_scalars),
    "minAllowed": resources, "maxAllowed": resources, "mode": st.sampled_from(["Auto", "Off"]),
    "controlledResources": st.lists(st.sampled_from(["cpu", "memory", "gpu"]), max_size=3),
    "controlledValues": st.sampled_from(["RequestsAndLimits", "RequestsOnly", "Limits"])})
schema_vpa = st.fixed_dictionaries({
    "metadata": st.fixed_dictionaries({"name": st.text(max_size=8), "namespace": st.text(max_size=8)},
                                      optional={"uid": st.text(max_size=8), "generation": st.integers(0, 10**6)}),
    "spec": st.fixed_dictionaries({}, optional={
        "targetRef": st.fixed_dictionaries({}, optional={
            "kind": st.sampled_from(["Deployment", "StatefulSet", "Pod", "CronJob", ""]),
            "name": st.text(max_size=8), "apiVersion": st.text(max_size=8)}),
        "recommenders": st.lists(st.fixed_dictionaries({"name": st.text(max_size=8)}), max_size=2),
        "updatePolicy": st.fixed_dictionaries({}, optional={"updateMode": st.one_of(
            st.sampled_from(["Off", "Auto", "InPlace", "Bogus"]), st.text(max_size=5))}),
        "resourcePolicy": st.fixed_dictionaries({}, optional={"containerPolicies": st.lists(container_policy,
                                                                                              max_size=3)})})})


@given(schema_vpa)
def test_vpa_specs_parse_or_raise_vpa_config_error(obj: dict[str, Any]) -> None:
    """Shapes the VPA CRD's schema admits (types right, values anything): only VpaConfigError on bad content."""
    try:
        spec = parse_vpa(obj)
    except VpaConfigError:
        return
    assert isinstance(spec, Vpa)
    for policy in spec.policies.values():
        for low, high in ((policy.min_allowed.cpu_millicores, policy.max_allowed.cpu_millicores),
                          (policy.min_allowed.memory_bytes, policy.max_allowed.memory_bytes)):
            assert low is None or high is None or low <= high
            assert all(v is None or v >= 0 for v in (low, high))


recommendation = st.fixed_dictionaries({}, optional={
    "containerName": st.one_of(st.sampled_from(["app", "side"]), json_scalars), "target": resources,
    "lowerBound": resources, "upperBound": resources, "uncappedTarget": resources})
schema_status = st.fixed_dictionaries({"metadata": st.fixed_dictionaries({"name": st.text(max_size=8)})}, optional={
    "status": st.fixed_dictionaries({}, optional={
        "recommendation": st.fixed_dictionaries({}, optional={
            "containerRecommendations": st.lists(recommendation, max_size=3)}),
        "conditions": st.lists(st.fixed_dictionaries({"type": st.sampled_from(["Stale", "LowConfidence"]),
                                                      "status": st.sampled_from(["True", "False"])}), max_size=2)})})


@given(schema_status)
def test_vpa_statuses_parse_or_raise_vpa_config_error(obj: dict[str, Any]) -> None:
    """The status the updater reads: only VpaConfigError on bad content, and amounts never negative."""
    try:
        status = parse_status(obj)
    except VpaConfigError:
        return
    for name, entry in status.recommendations.items():
        assert entry.container_name == name
        assert all(v is None or v >= 0 for v in (entry.target.cpu_millicores, entry.target.memory_bytes))


durations = st.one_of(st.sampled_from(["90s", "5m", "1h", "0s", "1d", "-1m", "999999h", "1000000s"]), json_scalars)
policy_spec = st.fixed_dictionaries({}, optional={
    "namespaces": st.one_of(st.lists(st.text(max_size=5), max_size=3), json_values),
    "excludedNamespaces": st.lists(st.text(max_size=5), max_size=3),
    "steps": st.one_of(json_values, st.lists(st.fixed_dictionaries({"fraction": st.one_of(
        st.floats(allow_nan=True), st.integers(-1, 2), json_scalars)}, optional={
        "bake": durations, "gates": st.lists(st.sampled_from(["oom", "ready", "restarts", "x"]), max_size=3),
        "extra": json_scalars}), max_size=4)),
    "maxConcurrent": json_scalars, "disruptionBudget": st.one_of(st.floats(allow_nan=True), json_scalars),
    "maintenanceWindows": st.one_of(json_values, st.lists(st.fixed_dictionaries({
        "days": st.lists(st.sampled_from(["Mon", "Sun", "Xyz"]), max_size=3),
        "start": st.sampled_from(["00:00", "23:59", "24:00", "7:00", "x"]),
        "end": st.sampled_from(["00:00", "24:00", "12:30", "25:00"])}), max_size=2)),
    "requireApprovalForRestart": json_scalars, "fallback": json_scalars, "minPodAge": durations,
    "deferredTimeout": durations, "changeThreshold": json_scalars, "unhealthyPoolFraction": json_scalars,
    "nodePoolLabel": json_scalars, "workloadSelector": json_values, "bogus": json_scalars})


@given(st.fixed_dictionaries({"metadata": st.fixed_dictionaries({"name": st.text(min_size=1, max_size=8)}),
                              "spec": policy_spec}))
def test_resize_policies_parse_or_raise_policy_error(obj: dict[str, Any]) -> None:
    try:
        policy = parse_policy(obj)
    except PolicyError:
        return
    assert isinstance(policy, RolloutPolicy)
    assert policy.steps[-1].fraction == 1.0 and 0.0 <= policy.disruption_budget <= 1.0
    assert {"kube-system", "kube-public", "kube-node-lease"} <= policy.excluded_namespaces


@given(json_values)
def test_any_json_as_a_resize_policy_gives_only_policy_error(obj: Any) -> None:
    with contextlib.suppress(PolicyError):
        parse_policy(obj if isinstance(obj, dict) else {"metadata": {"name": "p"}, "spec": obj})
