"""The store found by its Service is read through the API server's service proxy, every request with the
kubeconfig's credentials, against a scripted API server on 127.0.0.1.

The scripted server answers the Service list the way the API server does and, under the service-proxy path,
the way a Prometheus does; it records every request's path and Authorization header. A real proxy cannot be
exercised here (the API server refuses to proxy to a Service without pod endpoints, and the only endpoints we
may send traffic to are on 127.0.0.1: tests/integration/test_store_discovery_real.py says why), so this test shows
the client's half: what it sends, and where.
"""

from __future__ import annotations

import argparse
import json
import logging
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from prometheus_client import CollectorRegistry

from podtailor.runtime.cli import kube_client
from recommender.cli import found_store
from recommender.report import clusters
from recommender.report.cli import add_report_parser
from recommender.sources.config import PrometheusConfig
from recommender.sources.prometheus import PrometheusSource

PROXY = "/api/v1/namespaces/mon/services/http:prom:9090/proxy"
SERVICES = {"kind": "ServiceList", "apiVersion": "v1", "metadata": {"resourceVersion": "7"}, "items": [
    {"metadata": {"namespace": "apps", "name": "web", "labels": {"app": "nginx"}},
     "spec": {"ports": [{"name": "http", "port": 80, "protocol": "TCP"}]}},
    {"metadata": {"namespace": "mon", "name": "prom", "labels": {"app": "prometheus-server"}},
     "spec": {"ports": [{"name": "grpc", "port": 10901, "protocol": "TCP"},
                        {"name": "web", "port": 9090, "protocol": "TCP"}]}}]}
SERIES = [{"__name__": "container_cpu_usage_seconds_total", "namespace": "a", "pod": "p-1", "container": "c"},
          {"__name__": "container_memory_working_set_bytes", "namespace": "a", "pod": "p-1", "container": "c"}]


def _answer(path: str) -> tuple[int, bytes]:
    """The API server's Service list, or a Prometheus's answer under the proxy path (404 for remote read)."""
    if path == "/api/v1/services":
        return 200, json.dumps(SERVICES).encode()
    endpoint = path.removeprefix(f"{PROXY}/api/v1/")
    data: object = {"series": SERIES, "query": {"resultType": "vector", "result": []},
                    "query_range": {"resultType": "matrix", "result": []},
                    "status/runtimeinfo": {"GOMAXPROCS": 2}}.get(endpoint)
    if not path.startswith(PROXY) or data is None:
        return 404, b"404 page not found"
    return 200, json.dumps({"status": "success", "data": data}).encode()


@pytest.fixture
def api_server() -> Iterator[tuple[str, list[tuple[str, str, str]]]]:
    seen: list[tuple[str, str, str]] = []

    class Handler(BaseHTTPRequestHandler):
        def _reply(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            path = urlsplit(self.path).path
            seen.append((self.command, path, self.headers.get("Authorization", "")))
            status, body = _answer(path.removeprefix("/prefix"))
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = _reply

        def log_message(self, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", seen
    finally:
        httpd.shutdown()
        httpd.server_close()


def _args(tmp_path: Path, server: str) -> argparse.Namespace:
    path = tmp_path / "kubeconfig"
    path.write_text(f"""apiVersion: v1
kind: Config
clusters: [{{name: c, cluster: {{server: "{server}/prefix"}}}}]
users: [{{name: u, user: {{token: s3cret}}}}]
contexts: [{{name: x, context: {{cluster: c, user: u}}}}]
current-context: x
""")
    parser = argparse.ArgumentParser()
    add_report_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["report", "--kubeconfig", str(path), "-n", "a", "--prometheus-timeout", "5s"])
    return clusters.read_flags(args, available=lambda: ["x"])[1]  # the one-cluster flags, as run_report reads them


def _unprefixed(seen: list[tuple[str, str, str]]) -> list[tuple[str, str, str]]:
    """Every request under the kubeconfig server's own path (/prefix), which is stripped."""
    assert all(p.startswith("/prefix/") for _, p, _ in seen)
    return [(m, p.removeprefix("/prefix"), auth) for m, p, auth in seen]


def test_every_request_goes_through_the_proxy_path_with_the_api_servers_token(
        tmp_path: Path, api_server: tuple[str, list[tuple[str, str, str]]], caplog: pytest.LogCaptureFixture) -> None:
    server, seen = api_server
    args = _args(tmp_path, server)
    api = kube_client(args)
    try:
        config = found_store(args, api)
    finally:
        api.close()
    assert isinstance(config, PrometheusConfig)
    assert config.base_url == f"{server}/prefix{PROXY}"
    source = PrometheusSource(config, registry=CollectorRegistry())
    end = time.time()
    with caplog.at_level(logging.INFO, logger="recommender.sources.prometheus"):
        try:
            assert source.history(["a"], end - 3600, end) == {}   # the scripted store holds no samples
        finally:
            source.close()
    requests = _unprefixed(seen)
    assert requests[0] == ("GET", "/api/v1/services", "Bearer s3cret")        # the listing
    proxied = requests[1:]
    assert {(m, p.removeprefix(PROXY)) for m, p, _ in proxied} >= {
        ("GET", "/api/v1/status/runtimeinfo"), ("POST", "/api/v1/series"), ("POST", "/api/v1/query"),
        ("POST", "/api/v1/read"), ("POST", "/api/v1/query_range")}
    assert all(p.startswith(f"{PROXY}/api/v1/") and auth == "Bearer s3cret" for _, p, auth in proxied)
    assert source.request_count == len(proxied)
    fallback = [r for r in caplog.records if "no remote-read API" in r.getMessage()]
    assert len(fallback) == 1 and fallback[0].__dict__["status"] == 404       # remote read refused: PromQL, logged
