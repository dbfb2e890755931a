"""CRDs that tests install as a cluster's prerequisites, and waiting for a CRD to be served.

Owns ``SERVICE_MONITOR_CRD``, a minimal stand-in for the Prometheus Operator's ServiceMonitor CRD (the
test cluster has no operator, and the install manifests carry a ServiceMonitor), and ``ensure_crd``.
"""

from __future__ import annotations

from typing import Any

from kubernetes import client

from tests.waiting import eventually

SERVICE_MONITOR_CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": "servicemonitors.monitoring.coreos.com"},
    "spec": {"group": "monitoring.coreos.com", "scope": "Namespaced",
             "names": {"plural": "servicemonitors", "singular": "servicemonitor", "kind": "ServiceMonitor",
                       "listKind": "ServiceMonitorList"},
             "versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": {
                 "type": "object", "x-kubernetes-preserve-unknown-fields": True}}}]}}


def wait_established(api: client.ApiClient, name: str) -> None:
    ext = client.ApiextensionsV1Api(api)
    eventually(f"CRD {name} established", lambda: any(
        c.type == "Established" and c.status == "True"
        for c in ext.read_custom_resource_definition(name).status.conditions or []), timeout_s=30)


def ensure_crd(api: client.ApiClient, body: dict[str, Any]) -> bool:
    """Create the CRD unless it exists, wait until it is served; True when this call created it."""
    try:
        client.ApiextensionsV1Api(api).create_custom_resource_definition(body)
        created = True
    except client.ApiException as err:
        if err.status != 409:
            raise
        created = False
    wait_established(api, body["metadata"]["name"])
    return created
