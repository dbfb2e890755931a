"""Unit tests of ResizePolicy parsing and selection: worked examples, bad inputs, precedence, defaults."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from updater.kube.policy_crd import (
    PolicyError,
    covers,
    parse_clock_minute,
    parse_duration_s,
    parse_policy,
    select_policy,
)
from updater.policy.types import CanaryStep, FallbackMode, MaintenanceWindow, RolloutPolicy

SYSTEM = frozenset({"kube-system", "kube-public", "kube-node-lease"})


def policy(name: str = "p", **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "podtailor.io/v1alpha1", "kind": "ResizePolicy", "metadata": {"name": name},
            "spec": spec}


FULL = policy(
    "prod",
    namespaces=["shop", "pay"], excludedNamespaces=["pay-canary"], nodePoolLabel="karpenter.sh/nodepool",
    steps=[{"fraction": 0, "bake": "90s"}, {"fraction": 0.1, "bake": "10m", "gates": ["oom", "ready"]},
           {"fraction": 1, "bake": "0s", "gates": []}],
    maxConcurrent=10, maxConcurrentPerPool=3, disruptionBudget=0.5,
    maintenanceWindows=[{"days": ["Sat", "Sun"], "start": "01:30", "end": "24:00"},
                        {"days": ["Mon"], "start": "00:00", "end": "06:00"}],
    requireApprovalForRestart=True, changeThreshold=0.2, minPodAge="2h", deferredTimeout="15m",
    inProgressTimeout="30m", fallback="template", allowSingleReplicaEviction=True, unhealthyPoolFraction=0.3,
)


def test_a_full_policy_is_parsed_field_by_field() -> None:
    p = parse_policy(FULL)
    assert p.name == "prod"
    assert p.namespaces == {"shop", "pay"}
    assert p.excluded_namespaces == SYSTEM | {"pay-canary"}  # the system namespaces are always excluded
    assert p.pool_label_key == "karpenter.sh/nodepool"
    assert p.steps == (
        CanaryStep(fraction=0.0, bake_s=90.0),  # no gates given: the default four
        CanaryStep(fraction=0.1, bake_s=600.0, gates=("oom", "ready")),  # 10 x 60 s
        CanaryStep(fraction=1.0, bake_s=0.0, gates=()),  # an empty list means: no gates
    )
    assert (p.max_concurrent, p.max_concurrent_per_pool, p.disruption_budget) == (10, 3, 0.5)
    assert p.maintenance_windows == (
        MaintenanceWindow(days=frozenset({5, 6}), start_minute=90, end_minute=1440),  # 1 x 60 + 30; 24:00
        MaintenanceWindow(days=frozenset({0}), start_minute=0, end_minute=360),  # 6 x 60
    )
    assert p.require_approval_for_restart is True
    assert p.change_threshold == 0.2
    assert (p.min_pod_age_s, p.deferred_timeout_s, p.in_progress_timeout_s) == (7200.0, 900.0, 1800.0)
    assert p.fallback is FallbackMode.TEMPLATE
    assert p.allow_single_replica_eviction is True
    assert p.unhealthy_pool_fraction == 0.3


def test_an_empty_spec_gives_the_defaults_under_its_own_name() -> None:
    assert parse_policy(policy("empty")) == RolloutPolicy(name="empty")
    assert parse_policy({"metadata": {"name": "nospec"}}) == RolloutPolicy(name="nospec")


def test_the_crd_defaults_as_the_server_fills_them_in_equal_rolloutpolicy_defaults() -> None:
    served = policy("d", maxConcurrent=50, maxConcurrentPerPool=20, disruptionBudget=0.25,
                    requireApprovalForRestart=False, changeThreshold=0.1, minPodAge="5m", deferredTimeout="5m",
                    inProgressTimeout="1h", fallback="evict", allowSingleReplicaEviction=False,
                    unhealthyPoolFraction=0)
    assert parse_policy(served) == RolloutPolicy(name="d")


@pytest.mark.parametrize(("text", "seconds"), [("0s", 0.0), ("45s", 45.0), ("5m", 300.0), ("1h", 3600.0),
                                               ("999999h", 999999 * 3600.0)])
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration_s(text, "x") == seconds


@pytest.mark.parametrize("text", ["", "5", "5min", "1d", "-5m", "1.5h", " 5m", "5m ", "1234567s", 300, None])
def test_bad_durations_are_refused(text: object) -> None:
    with pytest.raises(PolicyError, match=r"x: .* is not a duration like 90s, 5m or 1h"):
        parse_duration_s(text, "x")


def test_clock_times() -> None:
    assert parse_clock_minute("00:00", "x") == 0
    assert parse_clock_minute("23:59", "x") == 23 * 60 + 59
    assert parse_clock_minute("24:00", "x", end=True) == 1440
    for bad in ("24:00", "24:01", "7:00", "07:60", "0700", "", None):
        with pytest.raises(PolicyError, match="is not a time of day"):
            parse_clock_minute(bad, "x")
    with pytest.raises(PolicyError, match="is not a time of day"):
        parse_clock_minute("24:30", "x", end=True)


def mutated(path: tuple[str | int, ...], value: Any) -> dict[str, Any]:
    obj = copy.deepcopy(FULL)
    node: Any = obj["spec"]
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return obj


@pytest.mark.parametrize(("path", "value", "message"), [
    (("steps",), [], "must be a list of 1 to 20 steps"),
    (("steps",), [{"fraction": 0.5}, {"fraction": 0.5}, {"fraction": 1}], r"steps\[1\].fraction: step fractions "
                                                                           r"must increase \(0.5 then 0.5\)"),
    (("steps",), [{"fraction": 0}, {"fraction": 0.9}], r"last step must cover every pod \(fraction 1\), not 0.9"),
    (("steps", 0, "fraction"), 1.5, r"steps\[0\].fraction: 1.5 is not a number in \[0, 1\]"),
    (("steps", 0, "fraction"), True, r"steps\[0\].fraction: True is not a number"),
    (("steps", 0, "bake"), "5 minutes", r"steps\[0\].bake: '5 minutes' is not a duration"),
    (("steps", 1, "gates"), ["oom", "latency"], r"steps\[1\].gates: .* must be distinct names among"),
    (("steps", 1, "gates"), ["oom", "oom"], "must be distinct names"),
    (("steps", 1, "speed"), 3, r"steps\[1\]: unknown fields \['speed'\]"),
    (("steps", 0), {"bake": "1m"}, r"steps\[0\].fraction is required"),
    (("maintenanceWindows", 0, "days"), ["Monday"], r"maintenanceWindows\[0\].days: \['Monday'\] must be"),
    (("maintenanceWindows", 0, "days"), [], "must be distinct names among Mon"),
    (("maintenanceWindows", 0, "start"), "1:30", r"maintenanceWindows\[0\].start: '1:30' is not a time of day"),
    (("maintenanceWindows", 0, "end"), "01:00", "start 01:30 is not before end 01:00 .*two windows"),
    (("maintenanceWindows", 1), {"days": ["Mon"], "start": "00:00"}, "must be an object with exactly days"),
    (("maxConcurrent",), 0, r"maxConcurrent: 0 is not an integer in \[1, 10000\]"),
    (("maxConcurrent",), 2.5, "is not an integer"),
    (("maxConcurrentPerPool",), "3", "is not an integer"),
    (("disruptionBudget",), 1.1, r"disruptionBudget: 1.1 is not a number in \[0, 1\]"),
    (("changeThreshold",), -0.1, "changeThreshold"),
    (("unhealthyPoolFraction",), 2, "unhealthyPoolFraction"),
    (("requireApprovalForRestart",), "true", "requireApprovalForRestart: 'true' is not true or false"),
    (("fallback",), "delete", "fallback: 'delete' is not one of evict, template, none"),
    (("minPodAge",), "5", "minPodAge: '5' is not a duration"),
    (("inProgressTimeout",), "1d", "inProgressTimeout"),
    (("namespaces",), "shop", "namespaces: must be a list of non-empty strings"),
    (("excludedNamespaces",), [""], "excludedNamespaces: must be a list"),
    (("nodePoolLabel",), 7, "nodePoolLabel: 7 is not a label key"),
    (("workloadSelector",), {"app": 1}, "workloadSelector: must be a map"),
    (("maxConcurent",), 5, r"unknown fields \['maxConcurent'\]"),
])
def test_bad_policies_are_refused_with_the_field_named(path: tuple[str | int, ...], value: Any,
                                                       message: str) -> None:
    with pytest.raises(PolicyError, match=f"^ResizePolicy prod: spec.*{message}"):
        parse_policy(mutated(path, value))


def test_a_policy_without_name_or_with_a_bad_spec_is_refused() -> None:
    with pytest.raises(PolicyError, match=r"without metadata\.name"):
        parse_policy({"spec": {}})
    with pytest.raises(PolicyError, match="spec: must be an object"):
        parse_policy({"metadata": {"name": "x"}, "spec": []})


def test_workload_selector_and_keep_limit_ratio_are_read_when_present() -> None:
    p = parse_policy(policy("x", workloadSelector={"tier": "web"}, keepLimitRatio=False))
    assert p.workload_selector == {"tier": "web"}
    assert p.keep_limit_ratio is False


# ------------------------------------------------------------------------------------------- selection
def test_no_policy_means_the_defaults() -> None:
    assert select_policy([], "shop") == RolloutPolicy()
    assert not covers(select_policy([], "kube-system"), "kube-system")


def test_a_policy_naming_the_namespace_beats_a_catch_all_whatever_the_names() -> None:
    objs = [policy("a-everything"), policy("z-shop", namespaces=["shop"])]
    assert select_policy(objs, "shop").name == "z-shop"
    assert select_policy(objs, "other").name == "a-everything"


def test_ties_are_broken_by_name() -> None:
    assert select_policy([policy("b"), policy("a")], "shop").name == "a"
    named = [policy("y", namespaces=["shop"]), policy("x", namespaces=["shop", "pay"])]
    assert select_policy(named, "shop").name == "x"


def test_an_excluded_namespace_falls_through_to_the_next_policy() -> None:
    objs = [policy("a", excludedNamespaces=["shop"]), policy("b")]
    assert select_policy(objs, "shop").name == "b"
    # A named policy that also excludes the namespace does not cover it either.
    assert select_policy([policy("a", namespaces=["shop"], excludedNamespaces=["shop"]), policy("b")],
                         "shop").name == "b"


def test_when_objects_exist_but_none_covers_the_namespace_nothing_is_covered() -> None:
    objs = [policy("only-shop", namespaces=["shop"]), policy("all-but-pay", excludedNamespaces=["pay"])]
    chosen = select_policy(objs, "pay")
    assert not covers(chosen, "pay")  # not the defaults, which would cover "pay"
    assert chosen.name == "all-but-pay"


def test_system_namespaces_are_never_covered_even_when_named() -> None:
    chosen = select_policy([policy("sys", namespaces=["kube-system"])], "kube-system")
    assert not covers(chosen, "kube-system")


def test_parsed_policies_are_accepted_and_a_bad_object_stops_selection() -> None:
    assert select_policy([RolloutPolicy(name="x", namespaces=frozenset({"shop"}))], "shop").name == "x"
    with pytest.raises(PolicyError, match="fallback"):
        select_policy([policy("ok"), policy("bad", fallback="delete")], "shop")


@given(st.lists(st.tuples(st.sampled_from("abcdef"), st.lists(st.sampled_from(["n1", "n2", "n3"]), max_size=2),
                          st.lists(st.sampled_from(["n1", "n2"]), max_size=1)), max_size=6, unique_by=lambda t: t[0]),
       st.sampled_from(["n1", "n2", "n3"]))
def test_selection_is_independent_of_order_and_prefers_named(specs: list[tuple[str, list[str], list[str]]],
                                                             ns: str) -> None:
    objs = [policy(name, namespaces=names, excludedNamespaces=excluded) for name, names, excluded in specs]
    chosen = select_policy(objs, ns)
    assert chosen == select_policy(list(reversed(objs)), ns)
    named_covering = [n for n, names, excluded in specs if ns in names and ns not in excluded]
    if named_covering:
        assert chosen.name == min(named_covering)
