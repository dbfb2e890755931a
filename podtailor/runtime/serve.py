"""The recommender's HTTP endpoints: ``/metrics``, ``/healthz`` and ``/readyz``.

Owns a small threaded HTTP server. ``/metrics`` renders the injected registry; ``/healthz`` answers while
the process runs its loop; ``/readyz`` answers 200 once a pass has completed within ``stale_after_s`` (or
while this replica is a standby that is not leading), else 503 with the reason.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest


class Health:
    """Shared state the loop updates and the endpoints read."""

    def __init__(self, stale_after_s: float) -> None:
        self.stale_after_s = stale_after_s
        self.leading = False
        self.last_success_monotonic: float | None = None
        self.lock = threading.Lock()

    def ready(self) -> tuple[bool, str]:
        with self.lock:
            if not self.leading:
                return True, "standby"
            if self.last_success_monotonic is None:
                return False, "no pass completed yet"
            age = time.monotonic() - self.last_success_monotonic
            if age > self.stale_after_s:
                return False, f"last successful pass {age:.0f}s ago"
            return True, "ok"


def make_server(address: str, port: int, registry: CollectorRegistry, health: Health) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            routes: dict[str, Callable[[], tuple[int, str, bytes]]] = {
                "/metrics": lambda: (200, CONTENT_TYPE_LATEST, generate_latest(registry)),
                "/healthz": lambda: (200, "text/plain", b"ok\n"),
                "/readyz": self._ready,
            }
            route = routes.get(self.path.split("?", 1)[0])
            code, ctype, body = route() if route else (404, "text/plain", b"not found\n")
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _ready(self) -> tuple[int, str, bytes]:
            ok, why = health.ready()
            return (200 if ok else 503), "text/plain", f"{why}\n".encode()

        def log_message(self, format: str, *args: object) -> None:
            return

    server = ThreadingHTTPServer((address, port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="podtailor-http", daemon=True).start()
    return server
