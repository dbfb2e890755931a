"""Client-side pacing of Kubernetes API requests: a token bucket that slows down when the server says so.

Owns the request rate of one ``ApiClient``. Every request first takes a token from a bucket of ``burst``
tokens refilled at the current rate (client-go's ``--kube-api-qps``/``--kube-api-burst`` model). When the
API server answers 429 because API Priority and Fairness rejected the request (a ``Retry-After`` header and
no ``DisruptionBudget`` cause), every request of this client waits until the Retry-After has passed, and
the rate is halved (down to ``min_qps``); it climbs back by a tenth of the configured rate for each
``recover_after_s`` without such a 429. A 429 from an eviction refused by a PodDisruptionBudget is not a
sign of an overloaded server: it leaves the rate alone (the fallback requeues that pod with its own
back-off).

``AdaptiveRate`` is pure bookkeeping with an injected clock, so its arithmetic is unit-tested without
sleeping; ``install`` wraps an ``ApiClient``'s REST layer with it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kubernetes import client

log = logging.getLogger(__name__)
DEFAULT_RETRY_AFTER_S = 1.0
"""The pause after an APF 429 that carries no usable Retry-After header."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RateConfig:
    qps: float = 50.0
    """Sustained requests per second to the API server; 0 switches pacing off (Retry-After still honoured)."""
    burst: int = 100
    """Requests allowed back to back before the rate applies (the bucket's size)."""
    min_qps: float = 1.0
    """The floor the rate is halved towards after repeated APF 429s."""
    recover_after_s: float = 10.0
    """Each such quiet period without an APF 429 gives back a tenth of ``qps``."""


class AdaptiveRate:
    """Token bucket plus Retry-After pause; thread-safe. Times are seconds on ``clock``."""

    def __init__(self, cfg: RateConfig, clock: Callable[[], float] = time.monotonic) -> None:
        if cfg.qps < 0 or cfg.burst < 1 or cfg.min_qps <= 0 or cfg.recover_after_s <= 0:
            raise ValueError(f"bad API rate configuration: {cfg}")
        self.cfg, self.clock = cfg, clock
        self.rate = cfg.qps
        self.tokens = float(cfg.burst)
        self.paused_until = self.last_refill = self.last_cut = clock()
        self.throttled = 0
        self._lock = threading.Lock()

    def acquire(self) -> float:
        """Reserve the next request's slot; return how many seconds the caller must wait before sending it."""
        with self._lock:
            now = self.clock()
            self._recover(now)
            start = max(now, self.paused_until)
            if self.cfg.qps == 0:
                return start - now
            self.tokens = min(float(self.cfg.burst), self.tokens + (now - self.last_refill) * self.rate)
            self.last_refill = now
            self.tokens -= 1.0  # may go negative: the debt is the queue of callers already waiting
            debt_s = -self.tokens / self.rate if self.tokens < 0 else 0.0
            return max(start, now + debt_s) - now

    def paused_for(self) -> float:
        """Seconds left of a Retry-After pause (0 when none): a caller that slept for its slot checks this again
        before sending, since another request's 429 may have paused everyone meanwhile."""
        with self._lock:
            return max(0.0, self.paused_until - self.clock())

    def observe(self, status: int, retry_after_s: float | None, budget_refusal: bool) -> None:
        """Record a response: an APF 429 pauses everyone for Retry-After and halves the rate."""
        if status != 429 or budget_refusal:
            return
        with self._lock:
            now = self.clock()
            wait = retry_after_s if retry_after_s is not None and retry_after_s > 0 else DEFAULT_RETRY_AFTER_S
            self.paused_until = max(self.paused_until, now + wait)
            if self.cfg.qps > 0:
                self.rate = max(self.cfg.min_qps, self.rate / 2.0)
            self.last_cut = now
            self.throttled += 1

    def _recover(self, now: float) -> None:
        if self.cfg.qps == 0 or self.rate >= self.cfg.qps:
            return
        steps = int((now - self.last_cut) // self.cfg.recover_after_s)
        if steps > 0:
            self.rate = min(self.cfg.qps, self.rate + steps * self.cfg.qps / 10.0)
            self.last_cut += steps * self.cfg.recover_after_s


def retry_after_seconds(value: str | None) -> float | None:
    """The Retry-After header as seconds (the API server sends an integer); None if absent or unreadable."""
    if value is None:
        return None
    try:
        seconds = float(value.strip())
    except ValueError:
        return None
    return seconds if 0 <= seconds < 3600 else None


def install(api: client.ApiClient, limiter: AdaptiveRate, sleep: Callable[[float], None] = time.sleep) -> None:
    """Pace every request ``api`` makes through ``limiter`` (watches included: each (re)connect is one)."""
    rest: Any = api.rest_client
    inner = rest.request

    def request(method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        wait = limiter.acquire()
        while wait > 0:
            sleep(wait)
            wait = limiter.paused_for()  # a 429 that came while we waited pauses this request too
        resp = inner(method, url, *args, **kwargs)
        status = int(getattr(resp, "status", 0) or 0)
        if status == 429:
            body = resp.read() or b""  # RESTResponse caches it: the caller still gets the body
            text = body.decode(errors="replace") if isinstance(body, bytes) else str(body)
            retry_after, budget = retry_after_seconds(resp.getheader("Retry-After")), "DisruptionBudget" in text
            limiter.observe(status, retry_after, budget_refusal=budget)
            if not budget:
                log.warning("API server asked us to slow down (429); pausing and lowering the request rate",
                            extra={"method": method, "retry_after_s": retry_after, "qps": round(limiter.rate, 2)})
        return resp

    rest.request = request
