"""Kubernetes Events for VPA objects: what the recommender changed or could not do, where kubectl shows it.

Owns the recommender's Events. An Event is best effort: failing to record one never fails a pass.
"""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

from kubernetes import client

from recommender.kube.vpa_objects import GROUP, VERSION, VpaSpec

log = logging.getLogger("podtailor.recommender")


class EventRecorder:
    def __init__(self, api_client: client.ApiClient, component: str = "podtailor-recommender") -> None:
        self.core: Any = client.CoreV1Api(api_client)
        self.component = component

    def record(self, vpa: VpaSpec, reason: str, message: str, *, warning: bool = False) -> None:
        now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        body = {"metadata": {"generateName": f"{vpa.name[:200]}.", "namespace": vpa.namespace},
                "involvedObject": {"apiVersion": f"{GROUP}/{VERSION}", "kind": "VerticalPodAutoscaler",
                                   "name": vpa.name, "namespace": vpa.namespace, "uid": vpa.uid or None},
                "reason": reason, "message": message[:1024], "type": "Warning" if warning else "Normal",
                "source": {"component": self.component}, "firstTimestamp": now, "lastTimestamp": now, "count": 1,
                "reportingComponent": self.component, "reportingInstance": self.component}
        try:
            self.core.create_namespaced_event(vpa.namespace, body, _preload_content=False)
        except Exception as err:  # best effort: an Event must never fail a pass
            log.warning("event not recorded", extra={"reason": reason, "error": str(err)})
