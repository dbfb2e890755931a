"""What the webhook would do to a replacement pod now: a dry-run create of a pod of each VPA-targeted
Deployment's ReplicaSets (its own template, labels and controller reference), as the ReplicaSet controller
would create it after an eviction. This module holds no tests.

Readiness checks of the webhook's cache must be per namespace and per workload: counting the objects in
its cache (``podtailor_webhook_cache_objects``) is satisfied by other tests' namespaces, whose VPAs and
ReplicaSets outlive their test while the namespace is deleted, and a test that went on then raced the cache.
"""

from __future__ import annotations

import json
from typing import Any

from kubernetes import client

from updater.webhook.review import ANNOTATION


def _targeted_deployments(api: client.ApiClient, ns: str) -> set[str]:
    vpas = client.CustomObjectsApi(api).list_namespaced_custom_object("autoscaling.k8s.io", "v1", ns,
                                                                     "verticalpodautoscalers")
    return {v["spec"]["targetRef"]["name"] for v in vpas["items"] if v["spec"]["targetRef"]["kind"] == "Deployment"}


def replacements(api: client.ApiClient, ns: str) -> dict[str, dict[str, Any] | None]:
    """ReplicaSet name -> the dry-run-created replacement pod (raw JSON, after every admission plugin), or None
    when admission refused it with a 403 (e.g. the webhook's mutation exceeded a ResourceQuota)."""
    targeted = _targeted_deployments(api, ns)
    apps, core = client.AppsV1Api(api), client.CoreV1Api(api)
    sets = json.loads(apps.list_namespaced_replica_set(ns, _preload_content=False).data)["items"]
    out: dict[str, dict[str, Any] | None] = {}
    for rs in sets:
        owner = next((o for o in rs["metadata"].get("ownerReferences") or () if o.get("controller")), None)
        if owner is None or owner["kind"] != "Deployment" or owner["name"] not in targeted:
            continue
        template = rs["spec"]["template"]
        body = {"apiVersion": "v1", "kind": "Pod", "metadata": {
            "generateName": f"{rs['metadata']['name']}-", "labels": template["metadata"].get("labels") or {},
            "annotations": template["metadata"].get("annotations") or {},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": rs["metadata"]["name"],
                                 "uid": rs["metadata"]["uid"], "controller": True}]},
            "spec": template["spec"]}
        try:
            resp = core.create_namespaced_pod(ns, body, dry_run="All", _preload_content=False)
        except client.ApiException as err:
            if err.status != 403:
                raise
            out[rs["metadata"]["name"]] = None
            continue
        out[rs["metadata"]["name"]] = json.loads(resp.data)
    return out


def mutated(pod: dict[str, Any] | None) -> bool:
    return pod is not None and ANNOTATION in (pod["metadata"].get("annotations") or {})


def all_mutated(api: client.ApiClient, ns: str) -> bool:
    """Every VPA-targeted Deployment of ``ns`` has a ReplicaSet, and the webhook mutates its replacements."""
    pods = replacements(api, ns)
    return bool(pods) and all(mutated(p) for p in pods.values())
