"""Unit tests of the report's read-only use of recommender checkpoints (``recommender.report.checkpoints``):
which checkpoints are restored, what a cluster without the CRD or without permission gives, and how the
restored states are grown by the history after them. The listing is a small fake of one list call; the real
API server is the integration tests' business (``tests/integration/test_report_matches_once.py``)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from kubernetes import client

from podtailor.kube.errors import KubeError
from podtailor.kube.listing import Listing
from recommender.kube.checkpoint import Restored, checkpoint_spec
from recommender.kube.served import VpaSpec, read_vpa
from recommender.model.registry import get_strategy
from recommender.model.types import ContainerKey, UsageBatch
from recommender.report.checkpoints import KIND, grow, read_checkpoints, restore_owned, starting_states
from recommender.report.discovery import Discovery
from recommender.report.types import WorkloadKey
from tests.builders.report import DAY, NOW, Mi, batch, cur, key, spec, workload

STRATEGY = get_strategy("krr-simple")
WEB = workload("shop", "web", (spec("app", cur(500, 256 * Mi)),))
DB = workload("data", "db", (spec("db", cur(1000, 1024 * Mi)),), kind="StatefulSet", replicas=1)


def vpa(ns: str, name: str, target: tuple[str, str], uid: str) -> VpaSpec:
    out = read_vpa({"metadata": {"namespace": ns, "name": name, "uid": uid, "generation": 1},
                    "spec": {"targetRef": {"kind": target[0], "name": target[1]}}})
    assert isinstance(out, VpaSpec)
    return out


VPAS: Mapping[WorkloadKey, VpaSpec] = {WEB.key: vpa("shop", "web-vpa", ("Deployment", "web"), "u-web"),
                                       DB.key: vpa("data", "db-vpa", ("StatefulSet", "db"), "u-db")}


def checkpoint(ns: str, name: str, owner: str, until: float, **change: object) -> dict[str, Any]:
    state = STRATEGY.new_state()
    state.add(batch(0.2, 300 * Mi))
    return {"metadata": {"namespace": ns, "name": name, "ownerReferences": [{"uid": owner}]},
            "spec": {**checkpoint_spec(STRATEGY, {"app": state}, until), **change}}


def test_each_vpa_restores_the_checkpoint_it_owns_and_an_unusable_one_is_named_once() -> None:
    items = [checkpoint("shop", "web-vpa", "u-web", NOW - 600),
             checkpoint("data", "db-vpa", "u-db", NOW - 600, strategy="podtailor"),  # another strategy's
             checkpoint("shop", "old-vpa", "u-old", NOW - 600),  # a VPA the report does not show
             checkpoint("shop", "web-vpa", "u-earlier", NOW - 600)]  # an earlier VPA of the same name
    restored, warnings = restore_owned(items[:2], VPAS, STRATEGY)
    assert set(restored) == {WEB.key} and restored[WEB.key].history_until_s == NOW - 600
    assert warnings == ("1 recommender checkpoint not used, its workload recommended from fresh state (written for "
                        "another strategy or format version than --strategy krr-simple: data/db-vpa)",)
    assert restore_owned(items[2:], VPAS, STRATEGY) == ({}, ())


def test_many_unusable_checkpoints_are_one_warning_naming_a_few_per_reason() -> None:
    workloads = [workload("shop", f"w{i}", (spec("app", cur(1, 1)),)) for i in range(5)]
    vpas = {w.key: vpa("shop", f"v{i}", ("Deployment", w.name), f"u{i}") for i, w in enumerate(workloads)}
    items = [checkpoint("shop", f"v{i}", f"u{i}", NOW, strategy="vpa") for i in range(4)]
    items.append(checkpoint("shop", "v4", "u4", NOW, containers=[{"name": "app"}]))  # no state
    restored, warnings = restore_owned(items, vpas, STRATEGY)
    assert restored == {}
    assert warnings == ("5 recommender checkpoints not used, their workloads recommended from fresh state (unreadable: "
                        "shop/v4; written for another strategy or format version than --strategy krr-simple: shop/v0, "
                        "shop/v1, shop/v2 and 1 more)",)


def listing(answer: Exception | list[dict[str, Any]], seen: list[str | None]) -> Listing:
    class Response:
        data = json.dumps({"metadata": {}, "items": answer if isinstance(answer, list) else []})

    def call(*ns: str, **_: Any) -> Response:
        seen.append(ns[0] if ns else None)
        if isinstance(answer, Exception):
            raise answer
        return Response()
    return Listing(group="podtailor.io", resource="recommendercheckpoints", call=call, request_timeout=None)


def test_checkpoints_are_listed_once_per_namespace_and_restored() -> None:
    seen: list[str | None] = []
    found = read_checkpoints(Discovery(client.ApiClient(), {KIND: listing([checkpoint(
        "shop", "web-vpa", "u-web", NOW - 600)], seen)}), ("shop", "data"), VPAS, STRATEGY)
    assert seen == ["shop", "data"] and found.requests == 2
    assert set(found.restored) == {WEB.key} and found.warnings == ()


@pytest.mark.parametrize(("status", "said"), [
    (404, "the cluster has no RecommenderCheckpoint CRD (recommendercheckpoints.podtailor.io)"),
    (403, "missing permission: cannot list recommendercheckpoints cluster-wide (RBAC verb 'list' on resource "
          "'recommendercheckpoints', apiGroup 'podtailor.io')"),
])
def test_no_crd_or_no_permission_is_said_once_and_every_workload_starts_fresh(status: int, said: str) -> None:
    seen: list[str | None] = []
    found = read_checkpoints(Discovery(client.ApiClient(), {KIND: listing(client.ApiException(status=status), seen)}),
                             (), VPAS, STRATEGY)
    assert found.restored == {} and len(found.warnings) == 1
    assert found.warnings[0].startswith(said) and "recommended from fresh state" in found.warnings[0]


def test_another_failure_fails_the_report() -> None:
    with pytest.raises(KubeError):
        read_checkpoints(Discovery(client.ApiClient(), {KIND: listing(client.ApiException(status=500), [])}),
                         (), VPAS, STRATEGY)


def test_without_a_vpa_nothing_is_listed() -> None:
    seen: list[str | None] = []
    found = read_checkpoints(Discovery(client.ApiClient(), {KIND: listing([], seen)}), (), {}, STRATEGY)
    assert seen == [] and found.restored == {} and found.requests == 0


def test_restored_states_grow_by_one_read_per_checkpoint_time_from_there_to_the_end() -> None:
    reads: list[tuple[tuple[str, ...], float, float]] = []
    new = {key(WEB, "app"): batch(0.2, 300 * Mi, points=10), key(DB, "db"): batch(0.4, 700 * Mi, points=10)}

    def read(namespaces: Sequence[str], start_s: float, end_s: float) -> Mapping[ContainerKey, UsageBatch]:
        reads.append((tuple(namespaces), start_s, end_s))
        return new
    web_state, db_state = STRATEGY.new_state(), STRATEGY.new_state()
    restored = {WEB.key: Restored(states={"app": web_state, "gone": STRATEGY.new_state()},
                                  history_until_s=NOW - 600),
                DB.key: Restored(states={"db": db_state}, history_until_s=None)}  # no history time: whole window
    states = grow([WEB, DB, workload("shop", "fresh", (spec("x", cur(1, 1)),))], restored, read, end_s=NOW,
                  history_s=DAY, strategy=STRATEGY)
    assert reads == [(("data",), NOW - DAY, NOW), (("shop",), NOW - 600, NOW)]
    assert states[key(WEB, "app")] is web_state and states[key(DB, "db")] is db_state
    assert web_state.last_sample_s == new[key(WEB, "app")].cpu_cores.timestamps_s[-1]
    assert key(WEB, "gone") in states  # kept, as the engine keeps it (its fleet counts it)
    assert set(states) == {key(WEB, "app"), key(WEB, "gone"), key(DB, "db")}


def test_starting_states_take_the_window_only_for_workloads_without_a_checkpoint() -> None:
    reads: list[tuple[tuple[str, ...], float, float]] = []
    after = {key(WEB, "app"): batch(0.2, 300 * Mi, points=10)}

    def read(namespaces: Sequence[str], start_s: float, end_s: float) -> Mapping[ContainerKey, UsageBatch]:
        reads.append((tuple(namespaces), start_s, end_s))
        return after
    web_state = STRATEGY.new_state()
    window = {key(WEB, "app"): batch(3.0, 900 * Mi), key(DB, "db"): batch(0.4, 700 * Mi)}
    states = starting_states([WEB, DB], window, {WEB.key: Restored(states={"app": web_state},
                                                                    history_until_s=NOW - 600)},
                             read, end_s=NOW, history_s=DAY, strategy=STRATEGY)
    # web: its restored state grown by the one read after the checkpoint, not the window's 3 cores.
    assert states[key(WEB, "app")] is web_state and reads == [(("shop",), NOW - 600, NOW)]
    assert web_state.last_sample_s == after[key(WEB, "app")].cpu_cores.timestamps_s[-1]
    # db: no checkpoint, a new state over the window, as the engine's first pass.
    assert states[key(DB, "db")].last_sample_s == window[key(DB, "db")].cpu_cores.timestamps_s[-1]
    assert set(states) == {key(WEB, "app"), key(DB, "db")}
