"""Kubernetes core/v1 Events: what a component did or could not do, where ``kubectl describe`` shows it.

Owns the one Event writer of both halves. Each ``record`` posts one Event (count 1, first and last timestamp
now, ``generateName`` from the involved object's name) about the object an ``ObjectRef`` names, in that
object's namespace (``default`` for a cluster-scoped object), with the component as source and reporting
component. An Event is best effort: a failed write is logged and never raised.
"""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass
from typing import Any

from kubernetes import client

from podtailor.kube.listing import REQUEST_TIMEOUT_S

log = logging.getLogger("podtailor.kube.events")
MAX_MESSAGE = 1024
"""Longer messages are cut (the API server keeps at most 1 KiB of an Event's note)."""


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
    def __init__(self, api_client: client.ApiClient, component: str) -> None:
        self.core: Any = client.CoreV1Api(api_client)
        self.component = component

    def record(self, obj: ObjectRef, reason: str, message: str, *, warning: bool = False) -> None:
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
            log.warning("event not recorded", extra={"reason": reason, "error": str(err),
                                                     "component": self.component})
