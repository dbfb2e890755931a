"""Listings by API path: the query a list call sends, and its errors, without the generated API classes.

A recording stand-in for the ``ApiClient`` (its two methods the listing calls) shows what goes on the wire;
the real API server answers the same calls in the integration tests (report discovery, updater snapshot,
drill 4's watches).
"""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from podtailor.kube.listing import builtin_listings, path_call


class _Response:
    def __init__(self, status: int, data: bytes = b"{}") -> None:
        self.status, self.data, self.response = status, data, f"raw-{status}"
        self.reason, self.headers = "Forbidden" if status == 403 else "OK", {}

    def read(self) -> bytes:
        return self.data

    def getheaders(self) -> dict[str, str]:
        return {}


class _Client:
    def __init__(self, status: int = 200) -> None:
        self.status = status
        self.serialized: list[dict[str, Any]] = []
        self.timeouts: list[Any] = []

    def param_serialize(self, method: str, resource_path: str, **kw: Any) -> tuple[Any, ...]:
        self.serialized.append({"method": method, "path": resource_path, **kw})
        return (method, resource_path, {}, None, [])

    def call_api(self, *request: Any, _request_timeout: Any = None) -> _Response:
        self.timeouts.append(_request_timeout)
        return _Response(self.status)


def test_a_call_sends_the_generated_clients_query_names() -> None:
    api = _Client()
    call = path_call(api, "/apis/apps/v1/deployments",  # type: ignore[arg-type]
                     "/apis/apps/v1/namespaces/{namespace}/deployments")
    assert call("shop", limit=500, _continue="tok", label_selector="a=b", allow_watch_bookmarks=True,
                timeout_seconds=30, resource_version="7", watch=None, _request_timeout=(5.0, 9.0)) == "raw-200"
    sent = api.serialized[-1]
    assert (sent["method"], sent["path"], sent["path_params"]) == (
        "GET", "/apis/apps/v1/namespaces/{namespace}/deployments", {"namespace": "shop"})
    assert sent["query_params"] == [("limit", 500), ("continue", "tok"), ("labelSelector", "a=b"),
                                    ("allowWatchBookmarks", True), ("timeoutSeconds", 30), ("resourceVersion", "7")]
    assert sent["auth_settings"] == ["BearerToken"] and api.timeouts == [(5.0, 9.0)]
    assert call() == "raw-200" and api.serialized[-1]["path"] == "/apis/apps/v1/deployments"


def test_a_refusal_is_an_api_exception_and_preloading_is_refused() -> None:
    call = path_call(_Client(status=403), "/api/v1/pods", "/api/v1/namespaces/{namespace}/pods")  # type: ignore[arg-type]
    with pytest.raises(client.ApiException) as err:
        call("shop")
    assert err.value.status == 403
    with pytest.raises(ValueError, match="raw response"):
        call("shop", _preload_content=True)
    with pytest.raises(ValueError, match="not namespaced"):
        path_call(_Client(), "/api/v1/nodes", None)("shop")  # type: ignore[arg-type]


def test_built_in_kinds_map_to_their_api_paths() -> None:
    api = _Client()
    listings = builtin_listings(api)  # type: ignore[arg-type]
    for kind, path in (("Pod", "/api/v1/pods"), ("Deployment", "/apis/apps/v1/deployments"),
                       ("CronJob", "/apis/batch/v1/cronjobs"),
                       ("HorizontalPodAutoscaler", "/apis/autoscaling/v2/horizontalpodautoscalers"),
                       ("EndpointSlice", "/apis/discovery.k8s.io/v1/endpointslices"), ("Node", "/api/v1/nodes")):
        listings[kind].call()
        assert api.serialized[-1]["path"] == path, kind
    assert not listings["Node"].namespaced and listings["Pod"].namespaced
    listings["Job"].call("ns")
    assert api.serialized[-1]["path"] == "/apis/batch/v1/namespaces/{namespace}/jobs"
