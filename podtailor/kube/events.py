"""Kubernetes core/v1 Events: what a component did or could not do, where ``kubectl describe`` shows it.

Owns the one Event writer of both halves. Each ``record`` posts one Event (count 1, first and last timestamp
now, ``generateName`` from the involved object's name) about the object an ``ObjectRef`` names, in that
object's namespace (``default`` for a cluster-scoped object), with the component as source and reporting
component. An Event is best effort: a failed write is logged and never raised.

Nor does a failing API server hold the caller for long: once a write fails for a reason that will pass (a
timeout, no connection, 429 or 5xx), the Events of the next ``QUIET_S`` seconds are dropped without being
sent, counted, and the count logged when an Event next lands. Each write during an API server or etcd outage
would otherwise wait out its own timeout: drill 2 saw one updater pass spend 27 s on three Events.
client-go's recorder keeps its caller free another way, with a queue and a goroutine that drops Events when
the queue is full (``tools/record/event.go``, ``eventBroadcasterImpl``); here the caller's thread writes, so
an Event written just after an action is in the API server when the pass returns.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kubernetes import client

from podtailor.kube.errors import TemporaryKubeError, classify
from podtailor.kube.listing import REQUEST_TIMEOUT_S

log = logging.getLogger("podtailor.kube.events")
MAX_MESSAGE = 1024
"""Longer messages are cut (the API server keeps at most 1 KiB of an Event's note)."""
QUIET_S = 30.0
"""After a write fails for a passing reason, Events are dropped for this long (or the server's Retry-After)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ObjectRef:
    """The involved object of an Event."""

    api_version: str
    kind: str
    name: str
    namespace: str = ""
    """Empty for a cluster-scoped object."""
    uid: str = ""
    """Empty when not known: the Event then names the object without its uid."""


class EventRecorder:
    def __init__(self, api_client: client.ApiClient, component: str, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.core: Any = client.CoreV1Api(api_client)
        self.component, self.clock = component, clock
        self.quiet_until = float("-inf")
        self.dropped = 0
        """Events dropped in quiet spells and not yet reported."""
        self._lock = threading.Lock()  # the executor's threads record at once

    def record(self, obj: ObjectRef, reason: str, message: str, *, warning: bool = False) -> None:
        with self._lock:
            if self.clock() < self.quiet_until:
                self.dropped += 1
                return
        now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        ns = obj.namespace or "default"
        body = {"metadata": {"generateName": f"{obj.name[:200]}.", "namespace": ns},
                "involvedObject": {"apiVersion": obj.api_version, "kind": obj.kind, "name": obj.name,
                                   "namespace": obj.namespace or None, "uid": obj.uid or None},
                "reason": reason, "message": message[:MAX_MESSAGE], "type": "Warning" if warning else "Normal",
                "source": {"component": self.component}, "firstTimestamp": now, "lastTimestamp": now, "count": 1,
                "reportingComponent": self.component, "reportingInstance": self.component}
        try:
            self.core.create_namespaced_event(ns, body, _preload_content=False, _request_timeout=REQUEST_TIMEOUT_S)
        except Exception as err:  # best effort: an Event must never fail the caller's pass or action
            kind = classify(err, "record Event")
            passing = isinstance(kind, TemporaryKubeError) and kind.status != 409
            quiet_s = max(QUIET_S, kind.retry_after_s) if passing else 0.0
            if passing:
                with self._lock:
                    self.quiet_until = max(self.quiet_until, self.clock() + quiet_s)
            log.warning("event not recorded", extra={"reason": reason, "error": str(err), "component": self.component,
                                                     "quiet_s": quiet_s})
            return
        with self._lock:
            dropped, self.dropped = self.dropped, 0
        if dropped:
            log.warning("events dropped while the API server was failing", extra={"dropped": dropped,
                                                                                  "component": self.component})
