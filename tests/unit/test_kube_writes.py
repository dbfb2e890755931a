"""The bodies of the updater's API writes: the one ``pods/resize`` patch and the template patch share the
container entry, so a resize and a template fallback write the same quantities for the same values."""

from __future__ import annotations

from podtailor.resources import Resources
from updater.kube.writes import container_resources, resize_body
from updater.rollout.machine.journal import ContainerValues

APP = ContainerValues(name="app", requests=Resources(cpu_millicores=250, memory_bytes=512 * 2**20),
                      limits=Resources(memory_bytes=2**30))
PROXY = ContainerValues(name="proxy", requests=Resources(cpu_millicores=1500, memory_bytes=64 * 2**20),
                        limits=Resources(), sidecar=True)


def test_container_entry_has_requests_and_only_the_limits_set() -> None:
    # 512 * 2**20 bytes is exactly 512Mi; 1500m stays in millicores as kubectl prints it.
    assert container_resources(APP) == {"name": "app", "resources": {
        "requests": {"cpu": "250m", "memory": "512Mi"}, "limits": {"memory": "1Gi"}}}
    assert container_resources(PROXY) == {"name": "proxy", "resources": {
        "requests": {"cpu": "1500m", "memory": "64Mi"}}}


def test_resize_body_sends_preconditions_and_sidecars_as_init_containers() -> None:
    body = resize_body("uid-1", "42", [APP, PROXY])
    assert body["metadata"] == {"uid": "uid-1", "resourceVersion": "42"}
    assert [c["name"] for c in body["spec"]["containers"]] == ["app"]
    assert [c["name"] for c in body["spec"]["initContainers"]] == ["proxy"]


def test_resize_body_leaves_out_a_list_with_nothing_to_change() -> None:
    assert "initContainers" not in resize_body("u", "1", [APP])["spec"]
    assert "containers" not in resize_body("u", "1", [PROXY])["spec"]
