"""A loopback HTTP reverse proxy that lets through only requests with the right bearer token.

Owns what neither VictoriaMetrics single-node (basic auth only) nor Thanos Query (no auth) does: checking
``Authorization: Bearer <token>``, as an authenticating proxy in front of them does in production (vmauth,
an ingress, kube-rbac-proxy). A request without the header, or with another token, gets 401 and never
reaches the upstream; any other request is forwarded as it came (method, path, query, body, headers other
than hop-by-hop ones), and the upstream's answer is returned as it is. ``forwarded`` and ``refused`` count
requests, so a test can prove both what went through and what was stopped.
"""

from __future__ import annotations

import http.client
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from tests.harness.process import free_port

_HOP_BY_HOP = frozenset({"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade",
                         "proxy-authorization", "proxy-authenticate", "host", "content-length"})


class BearerProxy:
    """Forwards to ``http://127.0.0.1:<upstream_port>`` when the bearer token matches ``token``."""

    def __init__(self, upstream_port: int, token: str) -> None:
        self.upstream_port = upstream_port
        self.token = token
        self.port = free_port()
        self.forwarded = 0
        self.refused = 0
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="bearer-proxy", daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> BearerProxy:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _count(self, *, forwarded: bool) -> None:
        with self._lock:
            if forwarded:
                self.forwarded += 1
            else:
                self.refused += 1

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:
                return

            def _relay(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                if self.headers.get("Authorization") != f"Bearer {proxy.token}":
                    proxy._count(forwarded=False)
                    self._answer(401, [("Content-Type", "text/plain")], b"missing or wrong bearer token\n")
                    return
                proxy._count(forwarded=True)
                headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP}
                upstream = http.client.HTTPConnection("127.0.0.1", proxy.upstream_port, timeout=300)
                try:
                    upstream.request(self.command, self.path, body=body, headers=headers)
                    answer = upstream.getresponse()
                    data = answer.read()
                    kept = [(k, v) for k, v in answer.getheaders() if k.lower() not in _HOP_BY_HOP]
                    self._answer(answer.status, kept, data)
                except OSError:
                    self._answer(502, [("Content-Type", "text/plain")], b"upstream unreachable\n")
                finally:
                    upstream.close()

            def _answer(self, status: int, headers: list[tuple[str, str]], data: bytes) -> None:
                self.send_response(status)
                for k, v in headers:
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = _relay

        return Handler
