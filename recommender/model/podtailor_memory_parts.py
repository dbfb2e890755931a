"""The memory parts of the ``podtailor`` estimator: the level, the price of an OOM kill, the margin, OOM bumps.

Owns four frozen parts, each with its own few settings and its checks, composed by ``PodtailorParams``:
``MemoryLevel`` (the histogram of hourly peaks, the window of slot maxima and the ``MemoryStatistic`` taken
from them), ``MemoryPrice`` (the price of an OOM kill for the "cost" statistic, one ``MemoryPriceMode`` and its
parameters, and the arithmetic of that price), ``MemoryMargin`` (fixed, or per container from the jumps of its
hourly peaks: one ``MemoryMarginMode``) and ``OomHandling`` (the bump after a kill and how long it floors the
target). Numbers in, numbers out.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass

from recommender.model.common import DAY_S, GIB, MIB
from recommender.model.types import FleetScale


class MemoryStatistic(enum.StrEnum):
    """The memory level taken from the peaks, before the margin (the OOM-tolerance classes)."""

    COST = "cost"
    """The hourly peak level of the window that minimises provisioned memory plus the price of an OOM kill x
    the share of hours whose peak exceeds it (``peaks.cost_level``): the max when no top hours are rare enough
    to be worth their risk."""
    LOW = "low"
    """Autopilot's low tolerance: p98 of the peak histogram."""
    MINIMAL = "minimal"
    """Autopilot's default for small jobs: the max peak over the window."""
    INTERMEDIATE = "intermediate"
    """Autopilot's intermediate tolerance: max(p60, 0.5 x the max peak)."""


class MemoryPriceMode(enum.StrEnum):
    """What an OOM kill is priced in (the ``COST`` statistic)."""

    FLEET = "fleet"
    """``fleet_hours`` x the fleet's mean peak, at least ``min_peak_hours`` x the container's own, when the
    caller gives a fleet with memory (the engine and the backtest do), else the ``CONTAINER`` price."""
    CONTAINER = "container"
    """``peak_hours`` x the container's own largest peak in the window."""
    ABSOLUTE = "absolute"
    """``gib_hours`` GiB-hours, the same for every container of every fleet."""


class MemoryMarginMode(enum.StrEnum):
    """How the memory margin is chosen."""

    JUMP = "jump"
    """Per container (``peaks.jump_margin``): the ``jump_quantile`` of how far an hour's peak rose above the
    max of the ``jump_lookback_s`` before it, within [``min_fraction``, ``fraction``], held between memory
    moves; ``fraction`` until two days of hourly peaks are seen."""
    FIXED = "fixed"
    """``fraction`` for every container."""


@dataclass(frozen=True, slots=True, kw_only=True)
class MemoryLevel:
    """The memory level: a statistic of the peaks (``MemoryStatistic``). Half-life after Autopilot (48 h)."""

    statistic: MemoryStatistic = MemoryStatistic.COST
    """``COST``: the level is priced, so a steady container gets its max and a spiky one may be sized below
    rare top hours; Autopilot's classes remain for comparison."""
    half_life_s: float = 48 * 3600.0
    """Peak histogram half-life (Autopilot: 48 h)."""
    aggregation_interval_s: float = 3600.0
    """One peak per this interval in the peak histogram (VPA: 24 h; hourly keeps p98 meaningful)."""
    window_s: float = 8 * DAY_S
    """Window of the "max" and "cost" statistics (VPA's 8-day memory window)."""
    slot_s: float = 3600.0
    """Granularity of that window: one peak per slot."""
    lower_percentile: float = 0.5
    """The lower bound's percentile of the peak histogram (VPA's)."""
    upper_percentile: float = 0.95
    """The upper bound's percentile of the peak histogram (VPA's)."""
    bucket_first_bytes: float = float(MIB)
    """First histogram bucket."""
    bucket_ratio: float = 1.02
    """2% + 1 MiB (VPA's 5% + 10 MB, i.e. about 25% for a 50 MB container)."""

    def __post_init__(self) -> None:
        if not isinstance(self.statistic, MemoryStatistic):
            raise ValueError(f"memory: statistic must be one of {', '.join(s.value for s in MemoryStatistic)}")


@dataclass(frozen=True, slots=True, kw_only=True)
class MemoryPrice:
    """The price of one OOM kill, in bytes-hours of provisioned memory, for the ``COST`` statistic: leaving
    the top k of n hourly peaks uncovered costs the price x k / n per hour."""

    mode: MemoryPriceMode = MemoryPriceMode.FLEET
    """What the price is in units of (``MemoryPriceMode``); relative to the fleet for the reason given at
    ``CpuPrice.mode``."""
    fleet_hours: float = 40.0
    """``FLEET``: hours of the fleet's reference memory (``FleetScale.memory_bytes``, the mean over its
    containers of their largest peak). Over an 8-day window a container at the fleet's mean is sized below its
    top k hours only when that saves more than k x 18% of its peak (40 / 193 / 1.15); one 10 times the mean,
    k x 1.8%."""
    min_peak_hours: float = 4.0
    """``FLEET``: an OOM kill costs at least this many hours of the container's own largest peak, so that a
    container far larger than its fleet's mean (a database among sidecars) does not take an OOM risk without
    bound: from 10 times the mean up (40 / 4), its price grows with its own size. 0: no floor."""
    peak_hours: float = 24.0
    """``CONTAINER`` (and ``FLEET`` without a fleet): hours of the container's own largest peak in the window:
    an OOM kill costs the application the same whatever its size. Over an 8-day window (193 hours) a level b
    below the max is taken only when max - b exceeds k x 10.8% of the max (24 / 193 / 1.15)."""
    gib_hours: float = 100.0
    """``ABSOLUTE``: GiB-hours, whatever the container's size: at least 100 / 193 = 0.52 GiB over an 8-day
    window, so a container whose peaks stay below 0.45 GiB always gets its max."""

    def __post_init__(self) -> None:
        if not isinstance(self.mode, MemoryPriceMode):
            raise ValueError(f"memory_price: mode must be one of {', '.join(m.value for m in MemoryPriceMode)}")
        for name in ("fleet_hours", "min_peak_hours", "peak_hours", "gib_hours"):
            if not 0 <= getattr(self, name) < math.inf:  # also rejects NaN
                raise ValueError(f"memory_price: {name} must be finite and >= 0")

    def price(self, own_peak_bytes: float, fleet: FleetScale | None) -> float:
        """The price in bytes-hours before the risk setting; ``own_peak_bytes``: the container's largest peak in
        the window (0 without one)."""
        if self.mode is MemoryPriceMode.ABSOLUTE:
            return self.gib_hours * GIB
        if self.mode is MemoryPriceMode.FLEET and fleet is not None and fleet.memory_bytes > 0:
            return max(self.fleet_hours * fleet.memory_bytes, self.min_peak_hours * own_peak_bytes)
        return self.peak_hours * own_peak_bytes


@dataclass(frozen=True, slots=True, kw_only=True)
class MemoryMargin:
    """The safety margin on memory (``MemoryMarginMode``)."""

    mode: MemoryMarginMode = MemoryMarginMode.JUMP
    """``JUMP``: a container whose peaks rise little from one day to the next needs less room above its level
    than a fixed margin gives; held between memory moves, a margin that changes from hour to hour never moves a
    target by itself. It keeps the OOM rate of the fixed 15% on the Google jobs with less memory slack and
    fewer changes, and stays below VPA's OOMs on the Bitbrains months (RESULTS.md, "The jump margin held")."""
    fraction: float = 0.15
    """The fixed margin, and with ``JUMP`` its ceiling and its value under two days of hourly peaks."""
    min_fraction: float = 0.05
    """``JUMP``: the floor of the per-container margin."""
    jump_quantile: float = 1.0
    """``JUMP``: the quantile of the hourly jumps taken (1: the largest)."""
    jump_lookback_s: float = DAY_S
    """``JUMP``: an hour's peak is compared with the max of this long before it (at least one slot)."""

    def __post_init__(self) -> None:
        if not isinstance(self.mode, MemoryMarginMode):
            raise ValueError(f"memory_margin: mode must be one of {', '.join(m.value for m in MemoryMarginMode)}")
        if not (0 <= self.jump_quantile <= 1 and 0 <= self.min_fraction < math.inf and self.fraction >= 0) or (
                self.mode is MemoryMarginMode.JUMP and not self.min_fraction <= self.fraction):  # also rejects NaN
            raise ValueError("memory_margin: jump_quantile must be in [0, 1], fraction >= 0 and min_fraction in "
                             "[0, fraction]")


@dataclass(frozen=True, slots=True, kw_only=True)
class OomHandling:
    """After an OOM kill, the memory target is floored at max(used + ``min_bump_bytes``, used x
    ``bump_ratio``) (VPA's bump) for ``window_s``. The bump never enters the histogram and is capped at
    maxAllowed, so a capped container cannot inflate its own history (VPA #9521)."""

    min_bump_bytes: float = 100.0 * MIB
    """VPA's minimum bump."""
    bump_ratio: float = 1.2
    """VPA's bump ratio."""
    window_s: float = DAY_S
    """How long a bump floors the target: the killed hour stays in the statistic's window anyway (at the limit
    it was censored at), and a longer floor holds the bumped level long after the burst. With an OOM budget
    stated the bump is held for the budget's interval instead, at least this long (``RiskBudget.oom_hold_s``)."""

    def __post_init__(self) -> None:
        if not (0 <= self.min_bump_bytes < math.inf and 1 <= self.bump_ratio < math.inf
                and 0 <= self.window_s < math.inf):  # also rejects NaN
            raise ValueError("oom: min_bump_bytes and window_s must be finite and >= 0, bump_ratio finite and >= 1")
