"""Polling helper for tests against real servers: wait for a condition, fail with what was last seen."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def eventually(what: str, probe: Callable[[], T | None], timeout_s: float = 60.0, interval_s: float = 0.1) -> T:
    """Return the first truthy value of ``probe()``; raise AssertionError after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    last: T | None = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(interval_s)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}; last value: {last!r}")
