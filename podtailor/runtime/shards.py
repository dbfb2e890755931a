"""Shards of namespaces: which shard a namespace is in, how many shards a replica may hold, and which it holds.

Owns the arithmetic and the bookkeeping of ``run --shards N``, none of the API calls (those are in
``shard_leases``). A namespace's shard is the first 8 bytes of the SHA-256 of its UTF-8 name, big-endian,
modulo N (``shard_of``): the same in every process and every Python (``hash()`` is salted per process). A
replica holds at most ``share(N, live replicas)`` = ceil(N / live) shards. ``ShardTable`` is one replica's
record, safe across threads: the shards it holds, each with the monotonic time its Lease was last written
(the request's start), and the ones it is giving up. It owns a namespace (may write for it) only while its
shard is held and that time is less than the renew deadline ago: the Lease cannot pass to another replica
before a whole lease duration after it was written, and the renew deadline is shorter, so writes stop first
(client-go's ``leaderelection.LeaderElector`` gives up leading at the renew deadline for the same reason).
Also owns the flags (``--shards`` and the Lease timings) and their checked values (``LeaseTimings``), and
the notes replicas leave each other on the shard Leases (``LeaseNotes``).
"""

from __future__ import annotations

import argparse
import hashlib
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

MAX_SHARDS = 256
"""More shards than this buys nothing: each costs a Lease read per replica every retry period."""


def shard_of(namespace: str, shards: int) -> int:
    """The shard of ``namespace`` among ``shards``: SHA-256 of the UTF-8 name, first 8 bytes big-endian, mod N."""
    if shards < 1:
        raise ValueError(f"shards must be at least 1, got {shards}")
    digest = hashlib.sha256(namespace.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") % shards


def share(shards: int, live_replicas: int) -> int:
    """How many shards one replica may hold: ceil(shards / live replicas), counting this one (at least 1)."""
    if shards < 1:
        raise ValueError(f"shards must be at least 1, got {shards}")
    return math.ceil(shards / max(1, live_replicas))


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaseTimings:
    """The Lease timings of leader election and of every shard's Lease (client-go's defaults are 15/10/2 s)."""

    lease_s: int = 15
    """How long a Lease holds after its last renewal before another replica may take it."""
    renew_s: int = 10
    """The holder stops writing, and gives the Lease up, when it has not renewed it for this long."""
    retry_s: int = 2
    """How often a holder renews, and a candidate tries to take a Lease."""

    def __post_init__(self) -> None:
        if not (self.lease_s > self.renew_s > 1.2 * self.retry_s and self.retry_s >= 1):
            raise ValueError("need lease duration > renew deadline > 1.2 x retry period >= 1 second, got "
                             f"{self.lease_s}s, {self.renew_s}s, {self.retry_s}s")


class ShardTable:
    """One replica's shards (module docstring). ``clock`` is monotonic seconds."""

    def __init__(self, shards: int, renew_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        if not 1 <= shards <= MAX_SHARDS:
            raise ValueError(f"shards must be 1 to {MAX_SHARDS}, got {shards}")
        self.shards, self.renew_s, self.clock = shards, renew_s, clock
        self.cap = shards
        """At most this many held or being taken (``share`` of the live replicas)."""
        self._written: dict[int, float] = {}
        """Held shard -> ``clock()`` at the start of the last successful write of its Lease."""
        self._taking: set[int] = set()
        self._releasing: set[int] = set()
        self._closed = False
        self._lock = threading.Lock()

    def close(self) -> None:
        """Take no shard from now on (shutdown); the held ones stay until released or dropped."""
        with self._lock:
            self._closed = True

    def set_cap(self, cap: int) -> None:
        with self._lock:
            self.cap = max(1, cap)

    def reserve(self, index: int) -> bool:
        """Whether this replica may try to take shard ``index`` now (counted against the cap until ``settle``)."""
        with self._lock:
            if self._closed or index in self._written or index in self._releasing:
                return False
            if index not in self._taking and len(self._written) + len(self._taking) >= self.cap:
                return False
            self._taking.add(index)
            return True

    def settle(self, index: int, written_at: float | None) -> None:
        """The attempt to take ``index`` ended: its Lease written at ``written_at``, or not taken (None)."""
        with self._lock:
            self._taking.discard(index)
            if written_at is not None:
                self._written[index] = written_at

    def renewed(self, index: int, written_at: float) -> None:
        with self._lock:
            if index in self._written:
                self._written[index] = written_at

    def holds(self, index: int) -> bool:
        """Whether the Lease of ``index`` is this replica's (as far as its own writes tell)."""
        with self._lock:
            return index in self._written

    def release(self, index: int) -> None:
        """Stop serving ``index`` at once; its Lease is given up (``releasing``) until ``dropped``."""
        with self._lock:
            if self._written.pop(index, None) is not None:
                self._releasing.add(index)

    def releasing(self, index: int) -> bool:
        with self._lock:
            return index in self._releasing

    def dropped(self, index: int) -> None:
        """The election of ``index`` ended (Lease lost or given up): neither held nor being released."""
        with self._lock:
            self._written.pop(index, None)
            self._taking.discard(index)
            self._releasing.discard(index)

    def excess(self) -> list[int]:
        """Held shards beyond the cap, the highest indices first (the ones to give up)."""
        with self._lock:
            return sorted(self._written, reverse=True)[:max(0, len(self._written) - self.cap)]

    def held(self) -> tuple[int, ...]:
        """The shards whose Lease this replica last wrote as its own (fresh or not)."""
        with self._lock:
            return tuple(sorted(self._written))

    def serving(self) -> tuple[int, ...]:
        """The shards whose namespaces this replica may write for now."""
        now = self.clock()
        with self._lock:
            return tuple(sorted(i for i, t in self._written.items() if now - t < self.renew_s))

    def owns(self, namespace: str) -> bool:
        """Whether this replica may write for ``namespace`` now (module docstring); check before each write."""
        index = shard_of(namespace, self.shards)
        now = self.clock()
        with self._lock:
            written = self._written.get(index)
            return written is not None and now - written < self.renew_s


def _shard_count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text[:32]!r} is not a whole number") from None
    if not 1 <= value <= MAX_SHARDS:
        raise argparse.ArgumentTypeError(f"--shards must be 1 to {MAX_SHARDS}, got {value}")
    return value


def _seconds(text: str) -> int:
    try:
        value = int(text.removesuffix("s"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text[:32]!r} is not a whole number of seconds") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text[:32]!r} must be at least 1s")
    return value


def add_shard_flags(p: argparse._ActionsContainer) -> None:
    """``--shards`` and the Lease timings (``--lease-duration``, ``--renew-deadline``, ``--retry-period``)."""
    d = LeaseTimings()
    p.add_argument("--shards", type=_shard_count, default=1, metavar="N",
                   help="split the namespaces into N shards, each with its own Lease (<leader-election-id>-shard-I); "
                        "every replica serves at most ceil(N / live replicas) of them (default: 1, one Lease, one "
                        "active replica)")
    p.add_argument("--lease-duration", type=_seconds, default=d.lease_s, metavar="SECONDS",
                   help="how long a Lease holds after its last renewal (default: %(default)ss)")
    p.add_argument("--renew-deadline", type=_seconds, default=d.renew_s, metavar="SECONDS",
                   help="stop writing and give up a Lease not renewed for this long (default: %(default)ss)")
    p.add_argument("--retry-period", type=_seconds, default=d.retry_s, metavar="SECONDS",
                   help="how often Leases are renewed and free ones tried (default: %(default)ss)")


def lease_timings(args: argparse.Namespace) -> LeaseTimings:
    """The checked timings of ``add_shard_flags``; ``ValueError`` when they do not fit together."""
    return LeaseTimings(lease_s=args.lease_duration, renew_s=args.renew_deadline, retry_s=args.retry_period)


class LeaseNotes:
    """A note per shard carried in one annotation of the shard Leases, safe across threads: ``publish`` sets
    what this replica's next renewal of a held shard's Lease writes there, ``seen`` is the value last read
    from each shard's Lease (the elections read every Lease once per retry period anyway, so sharing costs no
    request of its own). What the notes mean is the caller's (the recommender shares its fleet's sums)."""

    def __init__(self, annotation: str) -> None:
        self.annotation = annotation
        self._outgoing: dict[int, str] = {}
        self._seen: dict[int, str] = {}
        self._lock = threading.Lock()

    def publish(self, index: int, value: str) -> None:
        with self._lock:
            self._outgoing[index] = value

    def outgoing(self, index: int) -> str | None:
        with self._lock:
            return self._outgoing.get(index)

    def saw(self, index: int, value: str | None) -> None:
        """The annotation as the Lease of ``index`` was just read (None: it has none)."""
        with self._lock:
            if value is None:
                self._seen.pop(index, None)
            else:
                self._seen[index] = value

    def seen(self, index: int) -> str | None:
        with self._lock:
            return self._seen.get(index)
