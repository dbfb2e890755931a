"""The VPA object's one typed home (``podtailor.vpa``): spec and status parsed once, errors naming the field,
the recommendation entry written and read back alike; and the recommender's rules on top (``served``)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from podtailor.resize.boost import BoostType
from podtailor.resources import Resources
from podtailor.units import MAX_CPU_MILLICORES, MAX_MEMORY_BYTES
from podtailor.vpa import (
    ACTED_MODES,
    ADMISSION_MODES,
    ContainerResourcePolicy,
    ControlledValues,
    RecommendedContainerResources,
    UpdateMode,
    VpaConfigError,
    parse_recommendation,
    parse_status,
    parse_vpa,
)
from recommender.kube.served import UnparsableVpa, VpaSpec, read_vpa

MI, GI = 2**20, 2**30


def vpa(**spec: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}}
    base.update(spec)
    return {"metadata": {"namespace": "ns", "name": "v", "uid": "u1", "generation": 3}, "spec": base}


def test_vpa_spec_is_parsed_with_policies() -> None:
    obj = vpa(recommenders=[{"name": "podtailor"}], updatePolicy={"updateMode": "InPlaceOrRecreate"},
              resourcePolicy={"containerPolicies": [
                  {"containerName": "*", "minAllowed": {"cpu": "50m"}, "maxAllowed": {"memory": "2Gi"}},
                  {"containerName": "side", "mode": "Off"},
                  {"containerName": "app", "controlledResources": ["cpu"], "controlledValues": "RequestsOnly"}]})
    spec = parse_vpa(obj)
    assert (spec.namespace, spec.name, spec.uid, spec.generation) == ("ns", "v", "u1", 3)
    assert spec.recommenders == ("podtailor",) and spec.update_mode is UpdateMode.IN_PLACE_OR_RECREATE
    app = spec.policy_for("app")
    assert app.controlled_resources == frozenset({"cpu"}) and app.controlled_values is ControlledValues.REQUESTS_ONLY
    other = spec.policy_for("other")  # falls back to "*"
    assert other.min_allowed == Resources(cpu_millicores=50) and other.max_allowed == Resources(memory_bytes=2 * GI)
    assert spec.policy_for("side").mode_off
    served = read_vpa(obj)  # the recommender's view: the core's policy, with the pod's container count
    assert isinstance(served, VpaSpec) and served.recommender == "podtailor"
    assert served.policy_for("app", 3).containers_in_pod == 3
    assert served.policy_for("app", 3).controlled_values is ControlledValues.REQUESTS_ONLY


def test_defaults_are_recreate_and_every_resource_with_its_limits() -> None:
    spec = parse_vpa(vpa())
    assert spec.update_mode is UpdateMode.RECREATE and spec.recommenders == () and spec.policies == {}
    assert spec.policy_for("app") == ContainerResourcePolicy()
    assert ContainerResourcePolicy().controlled_values is ControlledValues.REQUESTS_AND_LIMITS


@pytest.mark.parametrize(("spec", "message"), [
    ({"targetRef": {"kind": "Deployment"}}, "spec.targetRef needs kind and name"),
    ({"updatePolicy": {"updateMode": "Sometimes"}}, "updateMode 'Sometimes' is not a VPA update mode"),
    ({"resourcePolicy": {"containerPolicies": [{"containerName": "a", "minAllowed": {"cpu": "2"},
                                                "maxAllowed": {"cpu": "1"}}]}},
     r"containerPolicies\[0\]: minAllowed is above maxAllowed"),
    ({"resourcePolicy": {"containerPolicies": [{"containerName": "a"}, {"containerName": "b", "minAllowed": {
        "memory": "2Gi"}, "maxAllowed": {"memory": "1Gi"}}]}}, r"containerPolicies\[1\]: minAllowed is above"),
    ({"resourcePolicy": {"containerPolicies": [{"containerName": "a", "minAllowed": {"memory": "1Gb"}}]}},
     r"containerPolicies\[0\]\.minAllowed\.memory: malformed quantity"),
    ({"resourcePolicy": {"containerPolicies": [{"containerName": "a", "maxAllowed": "1Gi"}]}},
     r"containerPolicies\[0\]\.maxAllowed must be a map of resources"),
    ({"resourcePolicy": {"containerPolicies": [{"containerName": "a", "controlledResources": ["gpu"]}]}},
     r"containerPolicies\[0\]: controlledResources may hold only cpu and memory"),
    ({"resourcePolicy": {"containerPolicies": [{"containerName": "a", "controlledValues": "Limits"}]}},
     r"containerPolicies\[0\]\.controlledValues must be RequestsAndLimits or RequestsOnly"),
    ({"resourcePolicy": {"containerPolicies": [{"minAllowed": {"cpu": "1"}}]}},
     r"containerPolicies\[0\]\.containerName is required"),
])
def test_bad_vpa_specs_are_explained(spec: dict[str, Any], message: str) -> None:
    with pytest.raises(VpaConfigError, match=message):
        parse_vpa(vpa(**spec))


def test_a_policy_value_is_never_built_with_min_above_max() -> None:
    with pytest.raises(VpaConfigError, match="minAllowed is above maxAllowed"):
        ContainerResourcePolicy(min_allowed=Resources(memory_bytes=2 * GI), max_allowed=Resources(memory_bytes=GI))
    pinned = Resources(cpu_millicores=500)
    equal = ContainerResourcePolicy(min_allowed=pinned, max_allowed=pinned)
    assert equal.min_allowed == equal.max_allowed  # min == max pins the value: allowed


@pytest.mark.parametrize(("spec", "message"), [
    ({"targetRef": {"kind": "Pod", "name": "x"}}, "spec.targetRef.kind 'Pod' is not supported"),
    ({"recommenders": [{"name": "a"}, {"name": "b"}]}, "at most one"),
    ({"updatePolicy": {"updateMode": "Sometimes"}}, "not a VPA update mode"),
])
def test_the_recommender_gets_what_it_cannot_serve_as_a_typed_value(spec: dict[str, Any], message: str) -> None:
    item = read_vpa(vpa(**spec))
    assert isinstance(item, UnparsableVpa) and message in item.error
    assert (item.namespace, item.name, item.uid, item.generation) == ("ns", "v", "u1", 3)


def test_an_unparsable_vpa_keeps_the_recommenders_it_names() -> None:
    item = read_vpa(vpa(recommenders=[{"name": "podtailor"}], updatePolicy={"updateMode": "x"}))
    assert isinstance(item, UnparsableVpa) and item.recommenders == ("podtailor",)
    broken = vpa(recommenders=[5, {"name": "podtailor"}])
    broken["metadata"]["generation"] = "x"
    item = read_vpa(broken)
    assert isinstance(item, UnparsableVpa) and item.recommenders == ("", "podtailor") and item.generation == 0


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


def test_acted_and_admission_modes_are_subsets_of_the_one_enum() -> None:
    assert ACTED_MODES < ADMISSION_MODES < frozenset(UpdateMode)
    assert frozenset(UpdateMode) - ADMISSION_MODES == {UpdateMode.OFF}
    assert {UpdateMode.INITIAL} == ADMISSION_MODES - ACTED_MODES  # pods get resources at creation only


def test_a_container_policys_startup_boost_wins_over_the_vpas() -> None:
    spec = parse_vpa(vpa(startupBoost={"cpu": {"type": "Factor", "factor": 2}}, resourcePolicy={"containerPolicies": [
        {"containerName": "app", "startupBoost": {"cpu": {"type": "Quantity", "quantity": "500m"}}},
        {"containerName": "bad", "startupBoost": {"cpu": {"type": "Factor", "factor": 0.5}}}]}))
    app, _ = spec.boost_for("app")
    assert app is not None and (app.type, app.quantity_millicores) == (BoostType.QUANTITY, 500)
    other, _ = spec.boost_for("other")  # no policy of its own: the VPA's boost
    assert other is not None and other.type is BoostType.FACTOR and other.factor == 2
    bad, why = spec.boost_for("bad")  # an invalid boost is not applied, and is no config error
    assert bad is None and "containerPolicies[1].startupBoost.cpu.factor" in why and "below 1" in why


def status(*entries: dict[str, Any], stale: str | None = None) -> dict[str, Any]:
    obj = vpa()
    obj["status"] = {"recommendation": {"containerRecommendations": list(entries)}}
    if stale is not None:
        obj["status"]["conditions"] = [{"type": "Stale", "status": stale}]
    return obj


def test_the_status_is_read_with_absent_bounds_as_none() -> None:
    read = parse_status(status({"containerName": "app", "target": {"cpu": "250m", "memory": "256Mi"},
                                "upperBound": {"cpu": "1"}}, stale="True"))
    assert read.stale
    assert read.recommendations == {"app": RecommendedContainerResources(
        container_name="app", target=Resources(cpu_millicores=250, memory_bytes=256 * MI),
        upper_bound=Resources(cpu_millicores=1000))}
    assert not parse_status(status(stale="False")).stale and not parse_status(vpa()).stale


@pytest.mark.parametrize(("entry", "message"), [
    ({"target": {"cpu": "1"}}, "a container recommendation without containerName"),
    ({"containerName": "app", "target": {"cpu": "lots"}}, r"status\.recommendation container app\.target\.cpu"),
    ({"containerName": "app", "target": {}, "lowerBound": ["1"]}, r"container app\.lowerBound must be a map"),
])
def test_an_unreadable_recommendation_is_a_config_error(entry: dict[str, Any], message: str) -> None:
    with pytest.raises(VpaConfigError, match=message):
        parse_status(status(entry))


def test_a_status_of_the_wrong_shape_is_a_config_error() -> None:
    obj = vpa()
    obj["status"] = {"recommendation": ["app"]}
    with pytest.raises(VpaConfigError, match="malformed VPA status: AttributeError"):
        parse_status(obj)


def test_the_entry_is_written_as_the_recommender_writes_it() -> None:
    entry = RecommendedContainerResources(container_name="app", target=Resources(cpu_millicores=250),
                                          lower_bound=Resources(), upper_bound=Resources(memory_bytes=GI))
    assert entry.to_status() == {"containerName": "app", "target": {"cpu": "250m"}, "upperBound": {"memory": "1Gi"}}


resources = st.builds(Resources, cpu_millicores=st.one_of(st.none(), st.integers(1, MAX_CPU_MILLICORES)),
                      memory_bytes=st.one_of(st.none(), st.integers(1, MAX_MEMORY_BYTES)))
bounds = st.one_of(st.none(), resources.filter(lambda r: r != Resources()))


@given(st.text(min_size=1, max_size=10), resources, bounds, bounds, bounds)
def test_an_entry_round_trips_through_the_status(name: str, target: Resources, lower: Resources | None,
                                                 upper: Resources | None, uncapped: Resources | None) -> None:
    entry = RecommendedContainerResources(container_name=name, target=target, lower_bound=lower, upper_bound=upper,
                                          uncapped_target=uncapped)
    assert parse_recommendation(entry.to_status(), "VPA ns/v") == entry
