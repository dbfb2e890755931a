"""kustomize builds and server-side apply of arbitrary objects, for the tests of the install manifests.

Owns ``kustomize_bin`` (kustomize built from Go modules by scripts/build-kustomize.sh, cached), ``build``
(the objects of a kustomization), ``raw`` (one request through the client's own serialization and TLS) and
``Applier`` (server-side apply of any kind, resolved through discovery, under the field manager ``MANAGER``).
"""

from __future__ import annotations

import json
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client

REPO = Path(__file__).resolve().parents[1]
MANAGER = "podtailor-manifests-test"


@cache
def kustomize_bin() -> str:
    done = subprocess.run(["bash", str(REPO / "scripts" / "build-kustomize.sh")], capture_output=True, text=True,
                          timeout=600, check=False)
    assert done.returncode == 0, f"scripts/build-kustomize.sh failed:\n{done.stderr[-3000:]}"
    return done.stdout.strip().splitlines()[-1]


def build(path: Path) -> list[dict[str, Any]]:
    done = subprocess.run([kustomize_bin(), "build", str(path)], capture_output=True, text=True, timeout=60,
                          check=False)
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def raw(api: client.ApiClient, method: str, path: str, body: Any = None, query: list[Any] | None = None,
        content_type: str = "application/json") -> Any:
    """One request through the client's own serialization, authentication and TLS; ApiException on >= 400."""
    params = api.param_serialize(method=method, resource_path=path, query_params=query or [], body=body,
                                 header_params={"Content-Type": content_type, "Accept": "application/json"},
                                 auth_settings=["BearerToken"])
    resp = api.call_api(*params, _request_timeout=30)
    data = resp.read()
    if resp.status >= 400:
        raise client.ApiException(http_resp=resp, body=data.decode(errors="replace"))
    return json.loads(data)


class Applier:
    """Server-side apply of any object, resolving kinds through discovery."""

    def __init__(self, api: client.ApiClient) -> None:
        self.api = api
        self.kinds: dict[tuple[str, str], tuple[str, bool]] = {}

    def _resource(self, api_version: str, kind: str) -> tuple[str, bool]:
        if (api_version, kind) not in self.kinds:
            base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
            for r in raw(self.api, "GET", base)["resources"]:
                if "/" not in r["name"]:
                    self.kinds[(api_version, r["kind"])] = (r["name"], r["namespaced"])
        return self.kinds[(api_version, kind)]

    def path(self, obj: dict[str, Any]) -> str:
        plural, namespaced = self._resource(obj["apiVersion"], obj["kind"])
        base = "/api/v1" if obj["apiVersion"] == "v1" else f"/apis/{obj['apiVersion']}"
        ns = f"/namespaces/{obj['metadata']['namespace']}" if namespaced else ""
        return f"{base}{ns}/{plural}/{obj['metadata']['name']}"

    def apply(self, obj: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = raw(self.api, "PATCH", self.path(obj), body=json.dumps(obj),
                                  query=[("fieldManager", MANAGER), ("force", "true")],
                                  content_type="application/apply-patch+yaml")
        return out

    def delete(self, obj: dict[str, Any]) -> None:
        try:
            raw(self.api, "DELETE", self.path(obj))
        except client.ApiException as err:
            if err.status != 404:
                raise
