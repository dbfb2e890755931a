"""The MutatingWebhookConfiguration: what the webhook registers, and create-or-update against the API server.

Owns the object's shape. One webhook ``pods.podtailor.io`` for pods CREATE (core/v1), ``failurePolicy:
Ignore`` (a webhook that is down must never block pods), ``timeoutSeconds`` at most 5, ``sideEffects:
None`` (so dry-run requests are admitted too), ``admissionReviewVersions: [v1]``, ``reinvocationPolicy:
IfNeeded`` (our patch is idempotent), ``matchPolicy: Equivalent``; a ``namespaceSelector`` keeping out
kube-system, kube-node-lease, kube-public and our own namespace (``kubernetes.io/metadata.name NotIn``,
a label the API server sets on every namespace), optionally restricted to listed namespaces (``In``);
``clientConfig`` is the Service (name, namespace, port, path /mutate) or a URL. ``ensure`` creates the
object or replaces it when it differs (conflicts are retried), keeping a caBundle injected by someone
else (e.g. cert-manager's cainjector) when we have none to register.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kubernetes import client

from podtailor.kube.errors import classify, is_not_found
from updater.kube.fields import Obj

WEBHOOK_NAME = "pods.podtailor.io"
ALWAYS_EXCLUDED = ("kube-system", "kube-node-lease", "kube-public")
MAX_TIMEOUT_S = 5
NAMESPACE_LABEL = "kubernetes.io/metadata.name"


@dataclass(frozen=True, slots=True, kw_only=True)
class Registration:
    """What to register (one per webhook process, from the flags)."""

    name: str = "podtailor-updater"
    """Name of the (cluster-scoped) MutatingWebhookConfiguration."""
    namespace: str = "podtailor-system"
    """Our own namespace: excluded, and the Service's."""
    service_name: str = "podtailor-updater-webhook"
    service_port: int = 443
    url: str | None = None
    """Call this URL instead of the Service (out-of-cluster runs and tests)."""
    timeout_s: int = MAX_TIMEOUT_S
    """Seconds the API server waits for us (capped at 5; then it goes on without us)."""
    excluded_namespaces: tuple[str, ...] = ()
    """Beside kube-system, kube-node-lease, kube-public and our own namespace."""
    only_namespaces: tuple[str, ...] = ()
    """When non-empty, only these namespaces are sent to us."""


def excluded(reg: Registration) -> list[str]:
    return list(dict.fromkeys([*ALWAYS_EXCLUDED, reg.namespace, *reg.excluded_namespaces]))


def configuration(reg: Registration, ca_bundle: bytes) -> Obj:
    """The object to register; ``ca_bundle`` is PEM (empty: none, keep what is there)."""
    expressions: list[Obj] = [{"key": NAMESPACE_LABEL, "operator": "NotIn", "values": excluded(reg)}]
    if reg.only_namespaces:
        expressions.append({"key": NAMESPACE_LABEL, "operator": "In", "values": list(reg.only_namespaces)})
    client_config: Obj = {"url": reg.url} if reg.url else {"service": {
        "name": reg.service_name, "namespace": reg.namespace, "path": "/mutate", "port": reg.service_port}}
    if ca_bundle:
        client_config["caBundle"] = base64.b64encode(ca_bundle).decode()
    webhook: Obj = {
        "name": WEBHOOK_NAME, "clientConfig": client_config,
        "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"],
                   "scope": "Namespaced"}],
        "failurePolicy": "Ignore", "matchPolicy": "Equivalent", "sideEffects": "None",
        "timeoutSeconds": max(1, min(MAX_TIMEOUT_S, reg.timeout_s)), "admissionReviewVersions": ["v1"],
        "reinvocationPolicy": "IfNeeded", "namespaceSelector": {"matchExpressions": expressions},
        "objectSelector": {},
    }
    return {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": reg.name, "labels": {"app.kubernetes.io/name": "podtailor-updater",
                                                      "app.kubernetes.io/component": "webhook"}},
            "webhooks": [webhook]}


def registered_bundle(existing: Obj | None) -> bytes:
    """The PEM caBundle of our webhook in an existing object (b"" when none)."""
    for hook in (existing or {}).get("webhooks") or ():
        if hook.get("name") == WEBHOOK_NAME:
            raw = (hook.get("clientConfig") or {}).get("caBundle") or ""
            try:
                return base64.b64decode(raw)
            except ValueError:
                return b""
    return b""


def _same(want: Obj, have: Obj) -> bool:
    hooks = have.get("webhooks") or []
    if len(hooks) != 1:
        return False
    return all(hooks[0].get(k) == v for k, v in want["webhooks"][0].items()) and all(
        (have.get("metadata") or {}).get("labels", {}).get(k) == v for k, v in want["metadata"]["labels"].items())


class Registrar:
    """Create-or-update of one MutatingWebhookConfiguration (raw JSON reads, dict bodies)."""

    def __init__(self, api_client: client.ApiClient) -> None:
        self.api: Any = client.AdmissionregistrationV1Api(api_client)

    def read(self, name: str) -> Obj | None:
        try:
            body: Obj = json.loads(self.api.read_mutating_webhook_configuration(name, _preload_content=False).data)
            return body
        except Exception as err:
            if is_not_found(err):
                return None
            raise classify(err, f"read mutatingwebhookconfiguration {name}") from err

    def ensure(self, name: str, build: Callable[[Obj | None], Obj], attempts: int = 3) -> str:
        """Create or replace object ``name`` with ``build(existing or None)``: "created", "updated" or
        "unchanged"; raises KubeError."""
        for attempt in range(attempts):
            have = self.read(name)
            body = build(have)
            try:
                if have is None:
                    self.api.create_mutating_webhook_configuration(body)
                    return "created"
                kept = registered_bundle(have)
                if "caBundle" not in body["webhooks"][0]["clientConfig"] and kept:
                    body["webhooks"][0]["clientConfig"]["caBundle"] = base64.b64encode(kept).decode()
                if _same(body, have):
                    return "unchanged"
                body["metadata"]["resourceVersion"] = have["metadata"]["resourceVersion"]
                self.api.replace_mutating_webhook_configuration(name, body)
                return "updated"
            except client.ApiException as err:
                if err.status == 409 and attempt + 1 < attempts:
                    continue
                raise classify(err, f"write mutatingwebhookconfiguration {name}") from err
        raise AssertionError("unreachable")
