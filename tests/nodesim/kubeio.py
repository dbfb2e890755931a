"""The node simulator's API traffic: a raw list+watch of pods and a coalescing, ordered writer.

Owns every request the simulator makes. Objects are plain JSON dicts (``_preload_content=False``), so
5,000 pods cost no model parsing. ``PodWatcher`` lists then watches pods bound to any node, re-listing on
``410 Gone`` or a broken stream, and hands events to a callback. ``Writer`` runs a small thread pool where
each key (a pod's status, a node's lease) has at most one request in flight and only its newest payload
is sent: like kubelet's status manager, a status superseded before it was written is never written.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from kubernetes import client

log = logging.getLogger("nodesim.kubeio")
Obj = dict[str, Any]
SMP = "application/strategic-merge-patch+json"


def read_json(resp: Any) -> Obj:
    data: Obj = json.loads(resp.data)
    return data


def _lines(resp: Any) -> Iterator[bytes]:
    buf = b""
    for chunk in resp.stream(64 * 1024):
        buf += chunk
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            if line.strip():
                yield line
    if buf.strip():
        yield buf


class PodWatcher(threading.Thread):
    """List+watch of every pod with a node name; ``on_event(type, pod)`` runs on this thread."""

    def __init__(self, core: Any, on_event: Callable[[str, Obj], None], *,
                 on_sync: Callable[[list[Obj]], None]) -> None:
        super().__init__(name="nodesim-pod-watch", daemon=True)
        self.core = core
        self.on_event = on_event
        self.on_sync = on_sync
        self.stopping = threading.Event()
        self.synced = threading.Event()

    def run(self) -> None:
        while not self.stopping.is_set():
            try:
                rv = self._list()
                self._watch(rv)
            except client.ApiException as err:
                log.warning("pod watch failed; relisting", extra={"status": err.status})
                self.stopping.wait(1.0)
            except Exception as err:  # the one broad catch: keep the simulated kubelets alive
                if self.stopping.is_set():
                    return
                log.warning("pod watch broke; relisting: %s", err)
                self.stopping.wait(1.0)

    def _list(self) -> str:
        resp = self.core.list_pod_for_all_namespaces(field_selector="spec.nodeName!=", _preload_content=False)
        body = read_json(resp)
        self.on_sync(body["items"])
        self.synced.set()
        return str(body["metadata"]["resourceVersion"])

    def _watch(self, rv: str) -> None:
        while not self.stopping.is_set():
            resp = self.core.list_pod_for_all_namespaces(
                field_selector="spec.nodeName!=", watch=True, resource_version=rv, allow_watch_bookmarks=True,
                timeout_seconds=60, _preload_content=False, _request_timeout=(10, 90),
            )
            try:
                for line in _lines(resp):
                    event = json.loads(line)
                    obj = event["object"]
                    if event["type"] == "ERROR":
                        if obj.get("code") == 410:
                            return  # expired: relist
                        raise RuntimeError(f"watch error: {obj.get('message')}")
                    rv = obj["metadata"]["resourceVersion"]
                    if event["type"] != "BOOKMARK":
                        self.on_event(event["type"], obj)
                    if self.stopping.is_set():
                        return
            finally:
                resp.release_conn()

    def stop(self) -> None:
        self.stopping.set()


class Writer:
    """Coalescing writer: ``submit(key, fn)`` runs the newest ``fn`` per key, one at a time per key."""

    def __init__(self, workers: int = 8) -> None:
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="nodesim-write")
        self._lock = threading.Lock()
        self._latest: dict[str, Callable[[], object]] = {}
        self._busy: set[str] = set()
        self._idle = threading.Condition(self._lock)
        self.errors = 0
        self.writes = 0

    def submit(self, key: str, fn: Callable[[], object]) -> None:
        with self._lock:
            self._latest[key] = fn
            if key in self._busy:
                return
            self._busy.add(key)
        self._pool.submit(self._drain, key)

    def _drain(self, key: str) -> None:
        while True:
            with self._lock:
                fn = self._latest.pop(key, None)
                if fn is None:
                    self._busy.discard(key)
                    self._idle.notify_all()
                    return
            self._run(key, fn)

    def _run(self, key: str, fn: Callable[[], object]) -> None:
        for attempt in range(5):
            try:
                fn()
                self.writes += 1
                return
            except client.ApiException as err:
                if err.status == 404:
                    return  # the object is gone: an outcome, not an error
                if err.status in (409, 429, 500, 503, 504) and attempt < 4:
                    time.sleep(0.1 * 2**attempt)
                    continue
                self.errors += 1
                log.warning("write failed: %s %s", key, err.status)
                return
            except Exception as err:  # a write must never kill the worker thread
                self.errors += 1
                log.warning("write failed: %s %s", key, err)
                return

    def wait_idle(self, timeout_s: float = 30.0) -> bool:
        deadline = time.monotonic() + timeout_s
        with self._lock:
            while self._busy:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._idle.wait(left)
        return True

    def shutdown(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
