"""A watch-fed cache of one kind in one scope (informer-like), so a pass reads from memory instead of listing.

Owns ``Informer``: list once (paged, raw JSON), then watch from the list's resourceVersion on a thread of its
own with the official client's ``watch.Watch`` (events left as JSON, like the listings), applying every
ADDED, MODIFIED and DELETED event and following BOOKMARKs. It is trusted only while it is known to be
current: ``items()`` returns None, and the caller lists instead, before the first list, from any watch error
until the relist that follows it (410 Gone: the version expired; anything else: the stream broke), and when
nothing has come from the API server for longer than one watch lasts plus a margin (a connection gone silent
without closing: each watch asks the server to end it after ``watch_timeout_s`` and the next starts at once,
so a healthy stream is heard from at least that often, and the client-side read timeout ends a dead one).
What is left is the delay of events in flight, a view milliseconds old, which the writes' resourceVersion
preconditions (pods/resize, the journal's status) turn into a 409 and a re-decision as with a listing.
``observe`` puts the answer of our own write in the cache before its event arrives (never over a newer
version), so the next pass sees what this one wrote.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from kubernetes import client, watch

from podtailor.kube.listing import REQUEST_TIMEOUT_S, Listing, Obj, list_versioned

log = logging.getLogger("podtailor.updater.kube")
WATCH_TIMEOUT_S = 15
"""Seconds the API server keeps one watch open (``timeoutSeconds``); the next starts from the last version
seen. Bounds how long a silently dead connection can go unnoticed (plus ``SILENCE_MARGIN_S``)."""
SILENCE_MARGIN_S = 5.0
"""Beyond ``WATCH_TIMEOUT_S`` without a byte from the API server, the cache counts as out of date."""
BACKOFF_S = (0.5, 30.0)
"""First and longest pause before relisting after a failed list or a broken watch (doubling)."""
ABSENT_RETRY_S = 30.0
"""Pause before listing again a kind the API server does not serve (an optional CRD not installed)."""


class _RawWatch(watch.Watch):
    """``watch.Watch`` that leaves each event's object as JSON (no model classes; the cache keeps raw items)."""

    def get_return_type(self, func: Any) -> Any:
        return None


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def resource_version(obj: Mapping[str, Any]) -> str:
    return str(_meta(obj).get("resourceVersion") or "")


def object_key(obj: Mapping[str, Any]) -> str:
    meta = _meta(obj)
    return f"{meta.get('namespace') or ''}/{meta.get('name') or ''}"


def trimmed(obj: Obj) -> Obj:
    """The object without ``metadata.managedFields`` (nothing here reads it; often a third of a pod's size),
    as client-go informers' transforms do, so a cache of every pod holds less."""
    meta = obj.get("metadata")
    if isinstance(meta, dict) and "managedFields" in meta:
        obj = {**obj, "metadata": {k: v for k, v in meta.items() if k != "managedFields"}}
    return obj


def older(a: str, b: str) -> bool:
    """Version ``a`` is older than ``b``. Versions are opaque to clients; the API server's are etcd revisions,
    so two decimal ones compare as numbers, and anything else is taken as not older (the event wins)."""
    return a.isdigit() and b.isdigit() and int(a) < int(b)


class Informer:
    """One kind in one namespace (or cluster-wide), listed once and then kept current by a watch."""

    def __init__(self, listing: Listing, namespace: str | None = None, *, watch_timeout_s: int = WATCH_TIMEOUT_S,
                 clock: Callable[[], float] = time.monotonic, on_change: Callable[[], None] | None = None,
                 list_options: Mapping[str, str] | None = None) -> None:
        self.listing, self.namespace, self.list_kwargs = listing, namespace, dict(list_options or {})
        self.watch_timeout_s, self.clock, self.on_change = watch_timeout_s, clock, on_change
        self.name = listing.resource + (f" in {namespace}" if namespace else "")
        self.resource_version = ""
        """Where the next watch starts: the list's version, then each event's (bookmarks included)."""
        self.synced = False
        self.last_contact = -float("inf")
        """``clock()`` of the last list, watch start or event: the last time the API server was heard from."""
        self.relists = 0
        self._items: dict[str, Obj] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._watch = _RawWatch()  # type: ignore[no-untyped-call]
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------------------------------ reading
    def items(self) -> list[Obj] | None:
        """The cached objects (shared: not to be modified), or None when the cache is not known to be current."""
        with self._lock:
            if not self.synced or self.clock() - self.last_contact > self.watch_timeout_s + SILENCE_MARGIN_S:
                return None
            return list(self._items.values())

    # ----------------------------------------------------------------------------------------- updating
    def relist(self) -> None:
        """Replace the cache by a fresh list; raises a KubeError when the list fails. A kind that is not served
        (no version in the answer) stays unsynced."""
        items, version = list_versioned(self.listing, self.namespace, **self.list_kwargs)
        with self._lock:
            self._items = {object_key(o): trimmed(o) for o in items}
            self.resource_version = version
            self.synced = bool(version)
            self.last_contact = self.clock()
            self.relists += 1

    def apply(self, event: Mapping[str, Any]) -> None:
        """One watch event (``raw_object`` as ``watch.Watch`` yields it, or ``object``)."""
        kind = event.get("type")
        obj = event.get("raw_object", event.get("object"))
        if not isinstance(obj, dict):
            raise ValueError(f"{self.name}: watch event {kind} without an object")
        version, key = resource_version(obj), object_key(obj)
        with self._lock:
            self.last_contact = self.clock()
            old = self._items.get(key)
            newer = old is None or not older(version, resource_version(old))
            changed = False
            if kind in ("ADDED", "MODIFIED"):
                if newer:
                    self._items[key], changed = trimmed(obj), True
            elif kind == "DELETED":
                if old is not None and newer:
                    del self._items[key]
                    changed = True
            elif kind != "BOOKMARK":
                raise ValueError(f"{self.name}: unexpected watch event type {kind!r}")
            if version:
                self.resource_version = version
        if changed and self.on_change is not None:
            self.on_change()

    def observe(self, obj: Obj) -> None:
        """Our own write's answer, cached before its watch event arrives (unless a newer version is cached)."""
        version, key = resource_version(obj), object_key(obj)
        with self._lock:
            old = self._items.get(key)
            if self.synced and (old is None or not older(version, resource_version(old))):
                self._items[key] = trimmed(obj)

    def mark_broken(self, why: str, err: BaseException | None = None) -> None:
        with self._lock:
            was, self.synced = self.synced, False
        if was:
            log.warning("watch broken; listing instead until the cache is relisted",
                        extra={"watch": self.name, "reason": why, "error": str(err or "")})

    def watch_once(self) -> None:
        """One watch from ``resource_version`` until the server ends it after ``watch_timeout_s`` (or ``stop``).
        Raises ``client.ApiException`` (410 Gone included) or a transport error when the stream breaks."""
        args = (self.namespace,) if self.namespace else ()

        def call(*a: Any, **kw: Any) -> Any:
            resp = self.listing.call(*a, **kw)
            with self._lock:
                self.last_contact = self.clock()  # the server answered: the stream is open
            return resp

        timeouts = (REQUEST_TIMEOUT_S[0], self.watch_timeout_s + SILENCE_MARGIN_S)
        for event in self._watch.stream(  # type: ignore[no-untyped-call]
                call, *args, resource_version=self.resource_version, timeout_seconds=self.watch_timeout_s,
                allow_watch_bookmarks=True, _request_timeout=timeouts, **self.list_kwargs):
            if self._stop.is_set():
                break
            self.apply(event)

    def run(self) -> None:
        """List, then watch again and again; on any failure, stop trusting the cache and relist after a pause
        (at once after a 410). Returns when ``stop`` is called."""
        delay = BACKOFF_S[0]
        while not self._stop.is_set():
            try:
                if not self.synced:
                    self.relist()
                    if not self.synced:
                        self._stop.wait(ABSENT_RETRY_S)
                        continue
                opened = self.clock()
                self.watch_once()
                delay = BACKOFF_S[0]
                if self.clock() - opened < 1.0:  # ended at once without an error: do not spin
                    self._stop.wait(BACKOFF_S[0])
                continue
            except client.ApiException as err:
                if err.status == 410:
                    self.mark_broken("410 Gone: the watched version expired; relisting", err)
                    continue
                self.mark_broken(f"API error {err.status}", err)
            except Exception as err:  # the one broad catch of the thread: a failed list or a broken stream
                if self._stop.is_set():
                    break
                self.mark_broken(type(err).__name__, err)
            self._stop.wait(delay)
            delay = min(2 * delay, BACKOFF_S[1])

    # ------------------------------------------------------------------------------------------ lifecycle
    def start(self) -> Informer:
        self._thread = threading.Thread(target=self.run, name=f"watch {self.name}", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        self._watch.stop()  # type: ignore[no-untyped-call]
        if self._thread is not None:
            self._thread.join(timeout=timeout_s)
        with self._lock:
            self.synced = False

    def wait_synced(self, timeout_s: float) -> bool:
        """Until the first list is in (for tests and start-up); False after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.items() is not None:
                return True
            time.sleep(0.05)
        return self.items() is not None
