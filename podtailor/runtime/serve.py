"""The processes' health: what ``/readyz`` reports, and the plain HTTP ``/metrics``, ``/healthz`` and ``/readyz``.

Owns the one readiness abstraction (``Readiness``: ``ready() -> (ok, why)``), the run loops' implementation
of it (``PassFreshness``: ready once a pass has completed within ``stale_after_s``, or while this replica is
a standby that is not leading; ``Detailed`` adds a sharded replica's shards to its reason), the answers of
the three endpoints (``health_answer``: 200 ``ok`` for liveness, 200 or 503 with the reason for readiness,
the registry's text for metrics) and a small threaded HTTP server that gives them (``make_server``).
Servers of their own (the webhook's HTTPS one) answer the same paths with ``health_answer``.
"""

from __future__ import annotations

import argparse
import threading
import time
from collections.abc import Callable, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Protocol

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest


class Readiness(Protocol):
    def ready(self) -> tuple[bool, str]:
        """Whether ``/readyz`` answers 200, and the reason it gives (its body)."""
        ...


class PassFreshness:
    """Readiness of a run loop: ready while standby, then once a pass has succeeded within ``stale_after_s``.
    The loop calls ``leading()`` when it starts working and ``passed()`` after each successful pass."""

    def __init__(self, stale_after_s: float) -> None:
        self.stale_after_s = stale_after_s
        self.is_leading = False
        self.last_success_monotonic: float | None = None
        self.lock = threading.Lock()

    def leading(self) -> None:
        with self.lock:
            self.is_leading = True

    def passed(self) -> None:
        with self.lock:
            self.last_success_monotonic = time.monotonic()

    def ready(self) -> tuple[bool, str]:
        with self.lock:
            if not self.is_leading:
                return True, "standby"
            if self.last_success_monotonic is None:
                return False, "no pass completed yet"
            age = time.monotonic() - self.last_success_monotonic
            if age > self.stale_after_s:
                return False, f"last successful pass {age:.0f}s ago"
            return True, "ok"


class Detailed:
    """``inner``'s readiness with ``detail()`` after its reason (a sharded replica: the shards it serves)."""

    def __init__(self, inner: Readiness, detail: Callable[[], str]) -> None:
        self.inner, self.detail = inner, detail

    def ready(self) -> tuple[bool, str]:
        ok, why = self.inner.ready()
        return ok, f"{why}; {self.detail()}"


LIVENESS_PATHS = ("/healthz",)


def health_answer(path: str, registry: CollectorRegistry, readiness: Readiness,
                  liveness_paths: Sequence[str] = LIVENESS_PATHS) -> tuple[int, str, bytes] | None:
    """(status, content type, body) of a GET of ``path`` (query removed) if it is ``/metrics``, ``/readyz`` or
    one of ``liveness_paths``; None for any other path."""
    if path == "/metrics":
        return 200, CONTENT_TYPE_LATEST, generate_latest(registry)
    if path in liveness_paths:
        return 200, "text/plain", b"ok\n"
    if path == "/readyz":
        ok, why = readiness.ready()
        return (200 if ok else 503), "text/plain", f"{why}\n".encode()
    return None


NOT_FOUND = (404, "text/plain", b"not found\n")


def add_listen_flag(p: argparse._ActionsContainer, default: str) -> None:
    """``--listen HOST:PORT`` of ``make_server``."""
    p.add_argument("--listen", default=default, metavar="HOST:PORT",
                   help="address of /metrics, /healthz and /readyz (default: %(default)s)")


def make_server(listen: str, registry: CollectorRegistry, readiness: Readiness) -> ThreadingHTTPServer:
    """Serve ``/metrics``, ``/healthz`` and ``/readyz`` on ``listen`` (``HOST:PORT``, HOST empty: all
    addresses) in a daemon thread until ``shutdown()``."""
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            code, ctype, body = health_answer(self.path.split("?", 1)[0], registry, readiness) or NOT_FOUND
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            return

    host, _, port = listen.rpartition(":")
    server = ThreadingHTTPServer((host or "0.0.0.0", int(port)), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="podtailor-http", daemon=True).start()
    return server
