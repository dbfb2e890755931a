"""Shards of namespaces (``run --shards N``): the hash, the share arithmetic, one replica's table and its store guard.

The Leases themselves are exercised on the real API server (tests/integration/test_shards_real.py).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
from collections import Counter
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kubernetes import client
from kubernetes.leaderelection.leaderelectionrecord import LeaderElectionRecord

from podtailor.runtime.shard_leases import GROUP_LABEL, Membership, _ShardLock, member_lease_name, shard_lease_name
from podtailor.runtime.shards import LeaseTimings, ShardTable, shard_of, share
from podtailor.vpa import TargetRef
from recommender.__main__ import main
from recommender.kube.served import UnparsableVpa
from recommender.kube.sharded import ShardedStore

NAMES = ["default", "kube-system", "team-a", *(f"ns-{i}" for i in range(200))]


def test_the_shard_is_the_sha256_of_the_name_modulo_n() -> None:
    # sha256("default")[:8] = 37a8eec1ce19687d = 4010717984327297149, mod 6 = 1;
    # sha256("team-a")[:8] = 96c2886c51d1dfb4 = 10863395249981611956, mod 6 = 0 (worked out with hashlib by hand).
    assert shard_of("default", 6) == 1
    assert shard_of("team-a", 6) == 0
    assert shard_of("kube-system", 6) == 1
    assert all(shard_of(n, 1) == 0 for n in NAMES)


def test_the_shard_is_the_same_in_other_processes_whatever_their_hash_seed() -> None:
    here = [shard_of(n, 6) for n in NAMES]
    code = ("import json, sys; from podtailor.runtime.shards import shard_of; "
            "print(json.dumps([shard_of(n, 6) for n in json.loads(sys.argv[1])]))")
    for seed in ("1", "2", "random"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        out = subprocess.run([sys.executable, "-c", code, json.dumps(NAMES)], capture_output=True, text=True,
                             env=env, check=True, timeout=60)
        assert json.loads(out.stdout) == here, seed
    # and the salted hash() would not have been: two seeds disagree on some name
    salted = [subprocess.run([sys.executable, "-c", f"print([hash(n) % 6 for n in {NAMES!r}])"], capture_output=True,
                             text=True, env={**os.environ, "PYTHONHASHSEED": s}, check=True).stdout for s in ("1", "2")]
    assert salted[0] != salted[1]


def test_the_shards_are_balanced() -> None:
    counts = Counter(shard_of(f"team-{i}", 6) for i in range(6000))
    # 1000 expected per shard, binomial sd sqrt(6000 x 1/6 x 5/6) = 28.9: 5 sd either way is 855..1145.
    assert sorted(counts) == [0, 1, 2, 3, 4, 5]
    assert all(855 <= c <= 1145 for c in counts.values()), counts


@pytest.mark.parametrize(("shards", "live", "expected"), [
    (6, 1, 6), (6, 2, 3), (6, 3, 2), (6, 4, 2), (6, 5, 2), (6, 6, 1), (6, 9, 1), (7, 3, 3), (1, 3, 1), (6, 0, 6)])
def test_a_replica_holds_at_most_ceil_n_over_live(shards: int, live: int, expected: int) -> None:
    assert share(shards, live) == expected


@given(st.integers(1, 256), st.integers(1, 64))
def test_the_live_replicas_shares_cover_every_shard_and_no_more_than_one_extra_each(shards: int, live: int) -> None:
    cap = share(shards, live)
    assert cap * live >= shards  # every shard can be held
    assert (cap - 1) * live < shards  # and the share is the least that covers them


def test_bad_counts_are_refused() -> None:
    with pytest.raises(ValueError):
        shard_of("a", 0)
    with pytest.raises(ValueError):
        share(0, 3)
    with pytest.raises(ValueError):
        ShardTable(0, renew_s=10)
    with pytest.raises(ValueError):
        LeaseTimings(lease_s=10, renew_s=10, retry_s=2)
    with pytest.raises(ValueError):
        LeaseTimings(lease_s=15, renew_s=2, retry_s=2)


def test_lease_names_derive_from_the_election_id() -> None:
    assert shard_lease_name("podtailor-recommender", 3) == "podtailor-recommender-shard-3"
    assert member_lease_name("podtailor-recommender", "Pod_A-12") == "podtailor-recommender-member-pod-a-12"


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def table_with(held: list[int], cap: int, clock: Clock) -> ShardTable:
    table = ShardTable(6, renew_s=10, clock=clock)
    table.set_cap(cap)
    for i in held:
        assert table.reserve(i)
        table.settle(i, clock())
    return table


def test_a_replica_takes_shards_only_within_its_share() -> None:
    clock = Clock()
    table = table_with([0, 1], cap=3, clock=clock)
    assert table.reserve(2)  # the third: within the share
    assert not table.reserve(3)  # a fourth would be beyond it while the third is being taken
    table.settle(2, None)  # the third was not taken (somebody else's Lease)
    assert table.reserve(3)
    table.settle(3, clock())
    assert not table.reserve(4)
    assert table.serving() == (0, 1, 3)


def test_a_replica_owns_a_namespace_only_within_the_renew_deadline_of_its_last_lease_write() -> None:
    clock = Clock()
    index = shard_of("team-a", 6)  # 0
    table = table_with([index], cap=2, clock=clock)
    assert table.owns("team-a") and not table.owns("default")  # default is in shard 1
    clock.now += 9.9
    assert table.owns("team-a")
    clock.now += 0.2  # 10.1 s after the write: the Lease may be lost at 15 s, writes stop first
    assert not table.owns("team-a") and table.serving() == ()
    table.renewed(index, clock())
    assert table.owns("team-a")


def test_shards_beyond_a_smaller_share_are_given_up_and_no_longer_written() -> None:
    clock = Clock()
    table = table_with([0, 1, 4], cap=3, clock=clock)
    table.set_cap(2)  # a third replica came back: ceil(6 / 3)
    assert table.excess() == [4]
    table.release(4)
    assert table.releasing(4) and not table.holds(4) and table.serving() == (0, 1)
    assert not table.reserve(4)  # not taken back while its election ends
    table.dropped(4)
    assert not table.releasing(4) and table.excess() == []
    assert not table.reserve(4)  # at the share: 2 held
    table.close()
    table.release(1)
    table.dropped(1)
    assert not table.reserve(1)  # shutting down: nothing taken


class Vpa:
    def __init__(self, namespace: str) -> None:
        self.namespace, self.name, self.uid, self.generation = namespace, "web", f"uid-{namespace}", 1


class Inner:
    """The store under the guard: records what reached it."""

    def __init__(self) -> None:
        self.vpas = [UnparsableVpa(namespace=ns, name="web", uid=ns, generation=1, recommenders=("podtailor",),
                                   error="x") for ns in ("team-a", "default")]
        self.statuses: list[str] = []
        self.checkpoints: list[str] = []

    def list_vpas(self, namespaces: Any = ()) -> list[Any]:
        return list(self.vpas)

    def workload(self, namespace: str, ref: TargetRef) -> None:
        return None

    def update_vpa_status(self, vpa: Any, build: Any, attempts: int = 4) -> bool:
        status = build({})  # as KubeAdapter: build after the read, just before the write
        if status is None:
            return False
        self.statuses.append(vpa.namespace)
        return True

    def load_checkpoint(self, vpa: Any) -> None:
        return None

    def save_checkpoint(self, vpa: Any, spec: Any) -> None:
        self.checkpoints.append(vpa.namespace)


def test_the_store_lists_and_writes_only_owned_namespaces() -> None:
    clock = Clock()
    table = table_with([0], cap=3, clock=clock)  # team-a is in shard 0, default in shard 1
    inner = Inner()
    refusals: list[int] = []
    store = ShardedStore(inner, table.owns, 6, refused=lambda: refusals.append(1))
    built: list[str] = []

    def build(status: dict[str, Any]) -> dict[str, Any]:
        built.append("x")
        return {"recommendation": {}}

    assert [v.namespace for v in store.list_vpas()] == ["team-a"]
    assert store.update_vpa_status(Vpa("team-a"), build)
    assert not store.update_vpa_status(Vpa("default"), build)
    store.save_checkpoint(Vpa("team-a"), {})
    store.save_checkpoint(Vpa("default"), {})
    assert inner.statuses == ["team-a"] and inner.checkpoints == ["team-a"] and built == ["x"]
    clock.now += 11  # the Lease not renewed within the renew deadline: nothing more is written
    assert not store.update_vpa_status(Vpa("team-a"), build)
    store.save_checkpoint(Vpa("team-a"), {})
    assert inner.statuses == ["team-a"] and inner.checkpoints == ["team-a"] and store.list_vpas() == []
    assert len(refusals) == 4  # default's status and checkpoint, then team-a's once its Lease was stale


RUN = ["run", "--prometheus-url", "http://127.0.0.1:9", "--kubeconfig", "/nonexistent"]


@pytest.mark.parametrize(("extra", "message"), [
    (["--shards", "2", "--no-leader-elect"], "--shards needs leader election"),
    (["--lease-duration", "5", "--renew-deadline", "5"], "lease duration > renew deadline"),
])
def test_bad_shard_settings_exit_2_before_anything_is_contacted(extra: list[str], message: str,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*RUN, *extra]) == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("value", ["0", "257", "two"])
def test_a_bad_shard_count_is_a_usage_error(value: str) -> None:
    with pytest.raises(SystemExit) as exit_:
        main([*RUN, "--shards", value])
    assert exit_.value.code == 2


class Leases:
    """The Lease calls a ``LeaseLock`` makes, over one stored Lease (a fake of three methods, no server)."""

    def __init__(self) -> None:
        self.lease: client.V1Lease | None = None
        self.writes: list[str | None] = []

    def read_namespaced_lease(self, name: str, namespace: str) -> client.V1Lease:
        if self.lease is None:
            raise client.ApiException(status=404)
        return self.lease

    def create_namespaced_lease(self, namespace: str, body: client.V1Lease) -> client.V1Lease:
        self.lease = body
        self.writes.append(body.spec.holder_identity)
        return body

    def replace_namespaced_lease(self, name: str, namespace: str, body: client.V1Lease) -> client.V1Lease:
        self.lease = body
        self.writes.append(body.spec.holder_identity)
        return body


def shard_lock(table: ShardTable, index: int, leases: Leases) -> _ShardLock:
    lock = _ShardLock(f"pt-shard-{index}", "ns", "me", table=table, index=index)
    lock.api_instance = leases
    return lock


def record(holder: str) -> LeaderElectionRecord:
    return LeaderElectionRecord(holder, "6", "2026-12-06 10:00:00", "2026-12-06 10:00:01")  # type: ignore[no-untyped-call]


def test_the_lock_takes_a_shard_only_within_the_share_and_records_each_write() -> None:
    clock = Clock()
    table = table_with([0], cap=2, clock=clock)
    free = [Leases() for _ in range(3)]
    assert shard_lock(table, 1, free[1]).create("pt-shard-1", "ns", record("me"))
    assert table.holds(1) and free[1].writes == ["me"]
    assert not shard_lock(table, 2, free[2]).create("pt-shard-2", "ns", record("me"))  # beyond the share of 2
    assert free[2].writes == [] and not table.holds(2)
    lock = shard_lock(table, 1, free[1])
    assert lock.get("pt-shard-1", "ns")[0]
    clock.now += 3
    assert lock.update("pt-shard-1", "ns", record("me"))  # a renewal, counted from its start
    clock.now += 9  # 9 s after the renewal, 12 s after taking it: still within the 10 s renew deadline
    assert table.owns(next(n for n in NAMES if shard_of(n, 6) == 1))


def test_a_shard_given_up_gets_an_empty_holder_once_and_is_not_renewed() -> None:
    clock = Clock()
    table = table_with([], cap=2, clock=clock)
    leases = Leases()
    lock = shard_lock(table, 3, leases)
    assert lock.create("pt-shard-3", "ns", record("me"))
    table.release(3)
    for _ in range(3):  # the election keeps trying to renew until its renew deadline
        lock.get("pt-shard-3", "ns")
        assert not lock.update("pt-shard-3", "ns", record("me"))
    assert leases.writes == ["me", ""]  # taken, then given up once; never renewed


def test_live_replicas_are_the_members_renewed_within_their_lease_duration() -> None:
    now = dt.datetime.now(dt.UTC)

    def member(holder: str, age_s: float) -> client.V1Lease:
        return client.V1Lease(metadata=client.V1ObjectMeta(name=f"m-{holder}", resource_version="1"),
                              spec=client.V1LeaseSpec(holder_identity=holder, lease_duration_seconds=6,
                                                      renew_time=now - dt.timedelta(seconds=age_s)))

    class Listed:
        def __init__(self) -> None:
            self.deleted: list[str] = []

        def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
            if method == "delete_namespaced_lease":
                self.deleted.append(args[0])
                return None
            assert method == "list_namespaced_lease" and kwargs["label_selector"] == f"{GROUP_LABEL}=pt"
            return client.V1LeaseList(items=[member("a", 1), member("b", 5), member("c", 7), member("d", 600)])

    leases = Listed()
    membership = Membership(leases, base="pt", namespace="ns", identity="me", lease_s=6)  # type: ignore[arg-type]
    # a and b within 6 s, c expired 1 s ago, d 594 s ago (beyond 10 lease durations: deleted); "me" counts itself
    assert membership.live() == 3
    assert leases.deleted == ["m-d"]
