"""The updater's and the webhook's targets read through ``podtailor.vpa``: one VPA, one reading, and a VPA the
base refuses (minAllowed above maxAllowed) unusable for both, reported like any other malformed VPA."""

from __future__ import annotations

import pytest

from podtailor.resize.boost import BoostType
from podtailor.resources import Resources
from podtailor.vpa import ControlledValues, UpdateMode
from tests.builders.webhook import NS, pod, review, snapshot, vpa
from updater.kube.fields import MalformedObject
from updater.kube.objects import convert_vpa
from updater.kube.snapshot import ServerVersion, build_snapshot
from updater.webhook.mutation import Outcome
from updater.webhook.review import admit

MI = 2**20
VERSION = ServerVersion(major=1, minor=37, git_version="v1.37.2")
MIN_ABOVE_MAX = [{"containerName": "app", "minAllowed": {"memory": "1Gi"}, "maxAllowed": {"memory": "512Mi"}}]


def test_a_vpa_becomes_the_planners_target() -> None:
    obj = vpa(mode="InPlace", stale=True, policies=[
        {"containerName": "*", "controlledValues": "RequestsOnly", "maxAllowed": {"cpu": "2"}},
        {"containerName": "side", "mode": "Off", "startupBoost": {"cpu": {"type": "Factor", "factor": 0.5}}}],
        extra=[{"containerName": "side", "target": {"cpu": "10m"}, "lowerBound": {"cpu": "5m"}}])
    obj["spec"]["startupBoost"] = {"cpu": {"type": "Factor", "factor": 2}}
    target = convert_vpa(obj, replicas=4)
    assert (target.namespace, target.workload_kind, target.workload_name, target.vpa_name) == (
        NS, "Deployment", "web", "web")
    assert target.update_mode is UpdateMode.IN_PLACE and target.stale and target.replicas == 4
    app, side = target.containers["app"], target.containers["side"]
    assert app.controlled_values is ControlledValues.REQUESTS_ONLY  # from the "*" policy
    assert app.max_allowed == Resources(cpu_millicores=2000) and not app.mode_off
    assert app.lower_bound == app.upper_bound == app.target == Resources(cpu_millicores=250, memory_bytes=256 * MI)
    assert app.startup_boost is not None and app.startup_boost.type is BoostType.FACTOR and not app.boost_error
    assert side.mode_off and side.lower_bound == Resources(cpu_millicores=5) and side.upper_bound == side.target
    assert side.startup_boost is None  # its own boost wins, and it is invalid: not applied, said why
    assert side.boost_error.startswith(f"VPA {NS}/web container side spec.resourcePolicy.containerPolicies[1]")
    assert "below 1" in side.boost_error


def test_min_above_max_is_a_malformed_vpa_for_the_updater() -> None:
    with pytest.raises(MalformedObject, match=rf"VPA {NS}/web: .*containerPolicies\[0\]: minAllowed is above "
                                              "maxAllowed"):
        convert_vpa(vpa(policies=MIN_ABOVE_MAX), replicas=1)


def test_the_snapshot_skips_and_counts_a_vpa_with_min_above_max() -> None:
    good = vpa("api", workload="api")
    snap = build_snapshot({"VerticalPodAutoscaler": [vpa(policies=MIN_ABOVE_MAX), good]}, VERSION)
    assert snap.skipped == {"VerticalPodAutoscaler": 1}
    assert [t.vpa_name for t in snap.targets] == ["api"]


def test_the_webhook_admits_the_pod_unchanged_and_says_why() -> None:
    resolver = snapshot(vpa(policies=MIN_ABOVE_MAX))
    assert "minAllowed is above maxAllowed" in resolver.broken[(NS, "Deployment", "web")]
    answer, outcome = admit(review(pod()), resolver)
    assert outcome is Outcome.MALFORMED and "patch" not in answer["response"] and answer["response"]["allowed"]
    (warning,) = answer["response"]["warnings"]
    assert "minAllowed is above maxAllowed" in warning and warning.startswith(f"podtailor: VPA {NS}/web:")
