"""The webhook's HTTPS server: ``POST /mutate``, ``GET /healthz``, ``/readyz`` and ``/metrics``.

Owns TLS per connection (the context is read from a callable at every accept, so a rotated certificate is
used by the next connection without a restart; the handshake runs in the connection's thread, never in the
accept loop), HTTP/1.1 keep-alive (the API server reuses connections), the body limit (``MAX_BODY_BYTES``:
a larger review gets 413 without being read, which the API server treats as a failed call and, with
``failurePolicy: Ignore``, admits the pod), and the timing and counting of every review. The GET endpoints
answer as the base's plain HTTP server does (``podtailor.runtime.serve.health_answer``, ``/livez`` too);
``/readyz`` is 200 once the cache has synced and the webhook is registered (``WebhookReadiness``).
"""

from __future__ import annotations

import json
import logging
import socket
import ssl
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CollectorRegistry

from podtailor.runtime.serve import NOT_FOUND, health_answer
from updater.webhook.metrics import WebhookMetrics
from updater.webhook.mutation import Outcome
from updater.webhook.review import Resolver, admit

log = logging.getLogger("podtailor.updater.webhook")
MAX_BODY_BYTES = 3 * 2**20
"""The API server's own request limit; a review above it is not read."""
HANDSHAKE_TIMEOUT_S = 5.0
IDLE_TIMEOUT_S = 60.0
LIVENESS_PATHS = ("/healthz", "/livez")


class WebhookReadiness:
    """What ``/readyz`` reports (a ``podtailor.runtime.serve.Readiness``); set by the maintenance loop."""

    def __init__(self) -> None:
        self.synced = threading.Event()
        self.registered = threading.Event()

    def ready(self) -> tuple[bool, str]:
        if not self.synced.is_set():
            return False, "cache not synced yet"
        if not self.registered.is_set():
            return False, "webhook configuration not registered yet"
        return True, "ok"


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128

    def __init__(self, address: tuple[str, int], context: Callable[[], ssl.SSLContext], app: _App) -> None:
        self.context, self.app = context, app
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        super().__init__(address, _Handler)

    def get_request(self) -> tuple[Any, Any]:
        sock, addr = super().get_request()
        sock.settimeout(HANDSHAKE_TIMEOUT_S)
        return self.context().wrap_socket(sock, server_side=True, do_handshake_on_connect=False), addr

    def finish_request(self, request: Any, client_address: Any) -> None:
        try:
            request.do_handshake()
        except (ssl.SSLError, OSError) as err:
            log.debug("TLS handshake failed", extra={"client": client_address[0], "error": str(err)})
            return
        request.settimeout(IDLE_TIMEOUT_S)
        super().finish_request(request, client_address)


class _App:
    def __init__(self, resolver: Resolver, registry: CollectorRegistry, metrics: WebhookMetrics,
                 health: WebhookReadiness) -> None:
        self.resolver, self.registry, self.metrics, self.health = resolver, registry, metrics, health

    def mutate(self, body: bytes) -> bytes:
        started = time.perf_counter()
        answer, outcome = admit(body, self.resolver)
        self.metrics.admissions.labels(outcome.value).inc()
        self.metrics.admission_seconds.observe(time.perf_counter() - started)
        return json.dumps(answer, separators=(",", ":")).encode()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def _send(self, code: int, ctype: str, body: bytes, close: bool = False) -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        if close:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        app, path = self.server.app, self.path.split("?", 1)[0]
        self._send(*(health_answer(path, app.registry, app.health, LIVENESS_PATHS) or NOT_FOUND))

    def do_POST(self) -> None:
        app = self.server.app
        if self.path.split("?", 1)[0] != "/mutate":
            self._send(404, "text/plain", b"not found\n", close=True)
            return
        try:
            length = int(self.headers.get("Content-Length", ""))
        except ValueError:
            self._send(411, "text/plain", b"Content-Length required\n", close=True)
            return
        if length < 0 or length > MAX_BODY_BYTES:
            app.metrics.admissions.labels(Outcome.TOO_LARGE.value).inc()
            self._send(413, "text/plain", b"AdmissionReview too large\n", close=True)
            return
        body = self.rfile.read(length)
        self._send(200, "application/json", app.mutate(body))

    def log_message(self, format: str, *args: object) -> None:
        return


class WebhookServer:
    """Serves until ``shutdown()``; ``port`` is the bound port (useful with port 0)."""

    def __init__(self, host: str, port: int, context: Callable[[], ssl.SSLContext], resolver: Resolver,
                 registry: CollectorRegistry, metrics: WebhookMetrics, health: WebhookReadiness) -> None:
        self.httpd = _Server((host, port), context, _App(resolver, registry, metrics, health))
        self.port = int(self.httpd.server_address[1])
        self.thread = threading.Thread(target=self.httpd.serve_forever, name="webhook-https", daemon=True)

    def start(self) -> WebhookServer:
        self.thread.start()
        return self

    def shutdown(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
