"""Builders for the webhook's unit tests: raw VPAs, ReplicaSets, pods and AdmissionReviews as the API sends them."""

from __future__ import annotations

import base64
import json
from typing import Any

from updater.webhook.cache import TargetSnapshot, build_snapshot

NS = "shop"
Obj = dict[str, Any]


def vpa(name: str = "web", *, target: Obj | None = None, mode: str = "Auto", kind: str = "Deployment",
        workload: str | None = None, policies: list[Obj] | None = None, container: str = "app",
        stale: bool = False, extra: list[Obj] | None = None) -> Obj:
    recs = [{"containerName": container, "target": target or {"cpu": "250m", "memory": "256Mi"}}, *(extra or [])]
    status: Obj = {"recommendation": {"containerRecommendations": recs}}
    if stale:
        status["conditions"] = [{"type": "Stale", "status": "True"}]
    return {"apiVersion": "autoscaling.k8s.io/v1", "kind": "VerticalPodAutoscaler",
            "metadata": {"name": name, "namespace": NS},
            "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": kind, "name": workload or name},
                     "updatePolicy": {"updateMode": mode},
                     "resourcePolicy": {"containerPolicies": policies or []}},
            "status": status}


def owned(kind: str, name: str, owner_kind: str, owner: str) -> Obj:
    return {"metadata": {"name": name, "namespace": NS, "ownerReferences": [
        {"apiVersion": "apps/v1", "kind": owner_kind, "name": owner, "uid": "u", "controller": True}]}}


def snapshot(*vpas: Obj, replicasets: tuple[Obj, ...] = (owned("ReplicaSet", "web-abc", "Deployment", "web"),),
             jobs: tuple[Obj, ...] = (), limit_ranges: tuple[Obj, ...] = (),
             hpas: tuple[Obj, ...] = ()) -> TargetSnapshot:
    return build_snapshot({"VerticalPodAutoscaler": list(vpas), "ReplicaSet": list(replicasets), "Job": list(jobs),
                           "LimitRange": list(limit_ranges), "HorizontalPodAutoscaler": list(hpas)})


def container(name: str = "app", requests: Obj | None = None, limits: Obj | None = None, **extra: Any) -> Obj:
    res: Obj = {}
    if requests is not None:
        res["requests"] = requests
    if limits is not None:
        res["limits"] = limits
    return {"name": name, "image": "registry.invalid/app:1", "resources": res, **extra}


def pod(*containers: Obj, init: tuple[Obj, ...] = (), owner: tuple[str, str] | None = ("ReplicaSet", "web-abc"),
        labels: Obj | None = None, annotations: Obj | None = None) -> Obj:
    meta: Obj = {"generateName": "web-abc-", "labels": labels or {"app": "web", "pod-template-hash": "abc"}}
    if owner is not None:
        meta["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": owner[0], "name": owner[1], "uid": "u",
                                    "controller": True}]
    if annotations is not None:
        meta["annotations"] = annotations
    spec: Obj = {"containers": list(containers or (container(requests={"cpu": "500m", "memory": "512Mi"},
                                                             limits={"cpu": "1", "memory": "1Gi"}),))}
    if init:
        spec["initContainers"] = list(init)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def review(obj: Obj, *, uid: str = "7f0c-uid", operation: str = "CREATE", namespace: str = NS) -> bytes:
    return json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": uid, "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"}, "operation": operation,
        "namespace": namespace, "object": obj}}).encode()


def patch_of(answer: Obj) -> list[Obj]:
    return list(json.loads(base64.b64decode(answer["response"]["patch"])))


def apply(obj: Obj, ops: list[Obj]) -> Obj:
    """A minimal RFC 6902 ``add`` for the paths the webhook emits (object members and list indices)."""
    out: Obj = json.loads(json.dumps(obj))
    for op in ops:
        assert op["op"] == "add"
        *parents, last = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]]
        node = out
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node[part]
        node[int(last) if isinstance(node, list) else last] = op["value"]
    return out
