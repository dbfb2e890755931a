"""Kubernetes Events for VPA objects: what the recommender changed or could not do, where kubectl shows it.

Owns the recommender's side of the base Event writer (``podtailor.kube.events``): each Event is about the
VPA it names. An Event is best effort: failing to record one never fails a pass.
"""

from __future__ import annotations

from kubernetes import client

from podtailor.kube import events
from podtailor.vpa import GROUP, VERSION
from recommender.kube.served import VpaIdentity


def vpa_ref(vpa: VpaIdentity) -> events.ObjectRef:
    return events.ObjectRef(api_version=f"{GROUP}/{VERSION}", kind="VerticalPodAutoscaler", name=vpa.name,
                            namespace=vpa.namespace, uid=vpa.uid)


class EventRecorder:
    def __init__(self, api_client: client.ApiClient, component: str = "podtailor-recommender") -> None:
        self.events = events.EventRecorder(api_client, component)

    def record(self, vpa: VpaIdentity, reason: str, message: str, *, warning: bool = False) -> None:
        self.events.record(vpa_ref(vpa), reason, message, warning=warning)
