"""Maintenance windows: whether a restarting change may start at ``now_s``.

Owns the weekly-window arithmetic in UTC. A window covers minutes [start_minute, end_minute) on each of its
days (0 = Monday). A window whose end is before its start runs over midnight: it opens on its listed days
at ``start_minute`` and closes the next day at ``end_minute``. A window with start == end is empty. No
windows configured means restarting changes may start at any time.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from updater.policy.types import MaintenanceWindow

MINUTES_PER_DAY = 24 * 60


def in_window(window: MaintenanceWindow, now_s: float) -> bool:
    moment = datetime.fromtimestamp(now_s, tz=UTC)
    day, minute = moment.weekday(), moment.hour * 60 + moment.minute
    start, end = window.start_minute, window.end_minute
    if start < end:
        return day in window.days and start <= minute < end
    if start > end:
        yesterday = (day - 1) % 7
        return (day in window.days and minute >= start) or (yesterday in window.days and minute < end)
    return False


def restart_allowed_now(windows: Sequence[MaintenanceWindow], now_s: float) -> bool:
    """True when no windows are configured or ``now_s`` falls inside one of them."""
    return not windows or any(in_window(w, now_s) for w in windows)


def describe(windows: Sequence[MaintenanceWindow]) -> str:
    names = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
    parts = []
    for w in windows:
        days = ",".join(names[d] for d in sorted(w.days) if 0 <= d < 7)
        parts.append(f"{days} {w.start_minute // 60:02d}:{w.start_minute % 60:02d}-"
                     f"{w.end_minute // 60:02d}:{w.end_minute % 60:02d} UTC")
    return "; ".join(parts)
