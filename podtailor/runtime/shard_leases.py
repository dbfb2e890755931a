"""The Leases of ``run --shards N``: one per shard, taken through the leader-election code, and one per replica.

Owns the API side of sharding (the bookkeeping is ``shards.ShardTable``). Shard I's Lease is
``<leader-election-id>-shard-I``; each is campaigned for by ``leader.start_election``, the same election as the
single Lease, with a lock (``_ShardLock``, a ``LeaseLock``) that takes a shard only within this replica's share
and records every write of the Lease in the table. Live replicas are counted from membership Leases: each
replica renews ``<leader-election-id>-member-<identity>`` (labelled with the group) every retry period, and a
member is live while its renewTime is less than a lease duration ago (the clocks of the replicas are assumed
to agree to well within a lease duration, as Lease expiry itself assumes). Every retry period
``ShardedElection`` renews its membership, sets the share to ceil(N / live), gives up shards beyond it (the
table stops writing for them at once; the Lease is then written with an empty holder, which the other
replicas' elections take at their next try) and starts a new campaign for each shard whose election ended.
A shard whose Lease is lost or given up is simply campaigned for again: unlike the single Lease, losing one
does not end the process. With ``LeaseNotes``, each read of a shard's Lease records its note annotation and
each renewal of a held shard writes this replica's note there (on the same request: no write of its own).
On shutdown the held shards are given up and the membership Lease deleted.
"""

from __future__ import annotations

import datetime as dt
import logging
import re
import threading
import time
from collections.abc import Callable
from typing import Any

from kubernetes import client
from kubernetes.leaderelection.leaderelectionrecord import LeaderElectionRecord
from kubernetes.leaderelection.resourcelock.leaselock import LeaseLock

from podtailor.runtime.leader import TimedLeases, start_election
from podtailor.runtime.shards import LeaseNotes, LeaseTimings, ShardTable, share

log = logging.getLogger("podtailor.runtime.shards")
GROUP_LABEL = "podtailor.io/shard-group"
"""Label of the membership Leases: the leader-election id they count replicas for."""
FORGET_AFTER_LEASES = 10
"""A membership Lease expired for this many lease durations is deleted (a replica that is gone for good)."""


def shard_lease_name(base: str, index: int) -> str:
    return f"{base}-shard-{index}"


def member_lease_name(base: str, identity: str) -> str:
    """``<base>-member-<identity>``, the identity lowercased with anything but [a-z0-9.-] as ``-``."""
    return f"{base}-member-{re.sub(r'[^a-z0-9.-]', '-', identity.lower())}"[:253].rstrip("-.")


class _ShardLock(LeaseLock):
    """``LeaseLock`` of one shard: takes it only within the share, records each write, writes an empty holder
    once while the shard is given up (and then refuses to renew, so the election ends at its renew deadline)."""

    def __init__(self, name: str, namespace: str, identity: str, *, table: ShardTable, index: int,
                 notes: LeaseNotes | None = None) -> None:
        super().__init__(name, namespace, identity)  # type: ignore[no-untyped-call]
        self.table, self.index, self.notes = table, index, notes

    def get(self, name: str, namespace: str) -> tuple[bool, Any]:
        """The Lease read (every retry period, by the election), its note recorded (``LeaseNotes.saw``)."""
        found, record = super().get(name, namespace)  # type: ignore[no-untyped-call]
        ref = self.lease_reference
        if found and self.notes is not None and ref is not None and ref.metadata is not None:
            annotations = ref.metadata.annotations or {}
            self.notes.saw(self.index, annotations.get(self.notes.annotation))
        return bool(found), record

    def create(self, name: str, namespace: str, election_record: LeaderElectionRecord) -> bool:
        if not self.table.reserve(self.index):
            return False
        started = self.table.clock()
        done = bool(super().create(name, namespace, election_record))  # type: ignore[no-untyped-call]
        self.table.settle(self.index, started if done else None)
        return done

    def update(self, name: str, namespace: str, updated_record: LeaderElectionRecord) -> bool:
        if self.table.releasing(self.index):
            self._write_empty_holder(name, namespace, updated_record)
            return False
        held = self.table.holds(self.index)
        if not held and not self.table.reserve(self.index):
            return False
        started = self.table.clock()
        if held:
            self._attach_note()
            done = bool(super().update(name, namespace, updated_record))  # type: ignore[no-untyped-call]
            if done:
                self.table.renewed(self.index, started)
        else:
            done = bool(super().update(name, namespace, updated_record))  # type: ignore[no-untyped-call]
            self.table.settle(self.index, started if done else None)
        return done

    def _attach_note(self) -> None:
        """This replica's note for a shard it holds onto the Lease its renewal writes (read just before)."""
        ref = self.lease_reference
        if self.notes is None or ref is None or ref.metadata is None:
            return
        note = self.notes.outgoing(self.index)
        if note is not None:
            ref.metadata.annotations = {**(ref.metadata.annotations or {}), self.notes.annotation: note}

    def _write_empty_holder(self, name: str, namespace: str, record: LeaderElectionRecord) -> None:
        ref = self.lease_reference
        if ref is None or ref.spec is None or ref.spec.holder_identity != self.identity:
            return  # written already, or somebody else's now
        empty = LeaderElectionRecord("", record.lease_duration, record.acquire_time,  # type: ignore[no-untyped-call]
                                     record.renew_time)
        if super().update(name, namespace, empty):  # type: ignore[no-untyped-call]
            log.info("shard given up", extra={"shard": self.index, "lease": name})


class Membership:
    """This replica's membership Lease, and the count of live members of the group."""

    def __init__(self, leases: TimedLeases, *, base: str, namespace: str, identity: str, lease_s: int) -> None:
        self.leases, self.base, self.namespace, self.identity = leases, base, namespace, identity
        self.lease_s = lease_s
        self.name = member_lease_name(base, identity)

    def renew(self) -> None:
        now = _micro_time(dt.datetime.now(dt.UTC))
        spec = {"holderIdentity": self.identity, "leaseDurationSeconds": self.lease_s, "renewTime": now}
        try:
            self.leases.call("patch_namespaced_lease", self.name, self.namespace, {"spec": spec})
        except client.ApiException as err:
            if err.status != 404:
                raise
            body = {"metadata": {"name": self.name, "labels": {GROUP_LABEL: self.base}},
                    "spec": {**spec, "acquireTime": now}}
            self.leases.call("create_namespaced_lease", self.namespace, body)

    def live(self) -> int:
        """Members renewed less than their lease duration ago (this one included, whatever the Lease says)."""
        items = self.leases.call("list_namespaced_lease", self.namespace,
                                 label_selector=f"{GROUP_LABEL}={self.base}").items
        now = dt.datetime.now(dt.UTC)
        live = {self.identity}
        for lease in items:
            spec = lease.spec
            if spec is None or spec.renew_time is None or not spec.holder_identity:
                continue
            expired_s = (now - spec.renew_time).total_seconds() - (spec.lease_duration_seconds or self.lease_s)
            if expired_s < 0:
                live.add(spec.holder_identity)
            elif expired_s > FORGET_AFTER_LEASES * self.lease_s:
                self._forget(lease)
        return len(live)

    def _forget(self, lease: Any) -> None:
        try:
            self.leases.call("delete_namespaced_lease", lease.metadata.name, self.namespace,
                             body=client.V1DeleteOptions(preconditions=client.V1Preconditions(
                                 resource_version=lease.metadata.resource_version)))
        except client.ApiException:
            return  # renewed or deleted meanwhile, or not ours to delete: the next count sees it again

    def leave(self) -> None:
        try:
            self.leases.call("delete_namespaced_lease", self.name, self.namespace)
        except client.ApiException as err:
            log.warning("membership Lease not deleted; it expires", extra={"lease": self.name, "error": str(err)})


def _micro_time(t: dt.datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class ShardedElection:
    """This replica's part in ``--shards N`` (module docstring): ``start()``, then ``table.owns(namespace)``
    before each write, ``describe()`` for ``/readyz``, ``stop()`` on shutdown."""

    def __init__(self, api_client: client.ApiClient, *, base: str, namespace: str, identity: str, shards: int,
                 timings: LeaseTimings, notes: LeaseNotes | None = None) -> None:
        self.api_client, self.base, self.namespace, self.identity = api_client, base, namespace, identity
        self.shards, self.timings, self.notes = shards, timings, notes
        """``notes``: carried on the shard Leases (``LeaseNotes``); None: no annotation is read or written."""
        self.table = ShardTable(shards, renew_s=timings.renew_s)
        self.membership = Membership(TimedLeases(api_client, float(timings.retry_s)), base=base, namespace=namespace,
                                     identity=identity, lease_s=timings.lease_s)
        self._elections: dict[int, threading.Thread] = {}
        self._stop = threading.Event()
        self._counted = False
        self._thread = threading.Thread(target=self._run, name="shards", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.step()
            except Exception as err:  # the one broad catch: the next round tries again
                log.error("shard round failed; retrying", extra={"error": str(err)})
            self._stop.wait(self.timings.retry_s)

    def step(self) -> None:
        """One round: membership renewed and counted, the share set, shards beyond it given up, and a
        campaign for every shard whose election is not running (from the second round on)."""
        try:
            self.membership.renew()
            self.table.set_cap(share(self.shards, self.membership.live()))
        except client.ApiException as err:  # TimedLeases turns no answer into one too; the last share stands
            log.warning("replica count not refreshed; keeping the last share",
                        extra={"error": str(err), "share": self.table.cap})
        for index in self.table.excess():
            log.info("giving up a shard beyond this replica's share", extra={"shard": index, "share": self.table.cap})
            self.table.release(index)
        if not self._counted:  # the first round only counts: replicas started together then see each other
            self._counted = True
            return
        for index in range(self.shards):
            election = self._elections.get(index)
            if not self._stop.is_set() and (election is None or not election.is_alive()):
                self._elections[index] = self._campaign(index)

    def _campaign(self, index: int) -> threading.Thread:
        def make_lock(name: str, namespace: str, identity: str) -> LeaseLock:
            return _ShardLock(name, namespace, identity, table=self.table, index=index, notes=self.notes)

        def started() -> None:
            log.info("serving shard", extra={"shard": index, "serving": self.describe()})

        def stopped() -> None:
            self.table.dropped(index)
            log.info("shard no longer served", extra={"shard": index, "serving": self.describe()})

        t = self.timings
        return start_election(self.api_client, name=shard_lease_name(self.base, index), namespace=self.namespace,
                              identity=self.identity, on_started=started, on_stopped=stopped, lease_s=t.lease_s,
                              renew_s=t.renew_s, retry_s=t.retry_s, make_lock=make_lock)

    def describe(self) -> str:
        """What ``/readyz`` says: ``shards 1,4 of 6`` (or ``no shards of 6``)."""
        serving = self.table.serving()
        return f"shards {','.join(map(str, serving))} of {self.shards}" if serving else f"no shards of {self.shards}"

    def stop(self, wait: Callable[[float], Any] | None = None) -> None:
        """Stop campaigning, give up every held shard (its Lease's holder emptied at its election's next renewal,
        within a retry period, waited for) and delete the membership Lease."""
        self._stop.set()
        self.table.close()
        held = self.table.held()
        for index in held:
            self.table.release(index)
        if held:
            (wait or time.sleep)(self.timings.retry_s + 1.0)
        self.membership.leave()
