"""Parameters and per-container history of the ``podtailor`` strategy (the estimator is in ``podtailor.py``).

Owns ``PodtailorParams`` (every tunable, with its default and why; the backtest overrides them through
``get_strategy("podtailor", **overrides)``) and ``PodtailorState``: a slow and a fast decaying CPU histogram
fed throttling-corrected samples, a decaying histogram of memory peaks per aggregation interval, the raw
memory peaks' maxima per slot (for the "max over the window" statistic), OOM bumps kept apart from the
histograms, and the real observed history per resource (span, and samples x interval) for the confidence.

Throttling model: when a CPU interval had a throttled fraction f > 0 of its CFS periods, the container hit
its quota and the observed usage is censored at the limit; the demand is taken as usage x (1 + f). This is a
first-order correction (f = 1 doubles the sample), an upward bias where the evidence says the container
wanted more, not an estimate of the true demand.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from recommender.model.common import DAY_S, MIB, oom_bump, segments, validate_batch
from recommender.model.histogram import BucketScheme, DecayingHistogram
from recommender.model.peaks import IntervalPeaks, SlotMax, SortedSamples, sort_samples, split_at
from recommender.model.types import FloatArray, OomKill, Samples, UsageBatch

STATE_VERSION = 1
MEMORY_TOLERANCES = ("cost", "low", "minimal", "intermediate")
CPU_LIMIT_RULES = ("percentile", "proportional", "none")


RISK_MIN, RISK_MAX = 0.05, 20.0
"""Bounds of ``PodtailorParams.risk``: prices 20 times cheaper or dearer than set are outside what the prices
were fitted for (and far outside what a sweep of the shared traces has looked at)."""


def check_risk(risk: float) -> float:
    """``risk`` itself when it is a usable risk setting; else ``ValueError`` saying what is allowed."""
    if isinstance(risk, bool) or not isinstance(risk, int | float) or not RISK_MIN <= risk <= RISK_MAX:
        raise ValueError(f"risk must be a number in [{RISK_MIN:g}, {RISK_MAX:g}], got {risk!r}"[:120])
    return float(risk)


@dataclass(frozen=True, slots=True, kw_only=True)
class PodtailorParams:
    """podtailor's tunables. Half-lives follow Google Autopilot (12h CPU, 48h memory)."""

    cpu_half_life_s: float = 12 * 3600.0
    """Slow CPU histogram half-life (Autopilot: 12h)."""
    cpu_fast_half_life_s: float = 3600.0
    """Fast CPU histogram half-life; the request is the max of both percentiles, so it rises within hours
    and falls at the slow pace. 0 disables the fast histogram. 1 h (was 2 h): with the 10% CPU up band
    below, the faster rise costs no extra resizes for small wobbles (odd-series backtest, RESULTS.md)."""
    cpu_request_percentile: float = 0.85
    """p85: with the fast histogram's max(slow, fast) the request already rises within hours, so the percentile
    need not also cover bursts. p80 left more CPU minutes over the request than VPA once the dwell time holds
    requests longer (odd-series backtest: p80 39 min/day, p85 about 30, VPA 30); the limit (p99) covers bursts.
    With ``cpu_over_request_cost_cores`` > 0 (the default) it is the fast histogram's percentile only (the slow
    one's is priced); with ``cpu_over_request_budget`` > 0 it is the start and the ceiling of the calibrated
    percentile."""
    cpu_over_request_cost_cores: float = 1.0
    """Price of CPU time over the request, in cores per unit share of time, used only with
    ``cpu_over_request_cost_ratio`` 0 (both 0 disables the cost level; it was the default before #18). The
    slow histogram's percentile is the level b that minimises b x (1 + ``cpu_margin_fraction``) + this x
    (the decayed share of samples above b) (``histogram.cost_share_of``), between
    ``cpu_min_request_percentile`` and ``cpu_max_request_percentile``: the CPU analogue of
    ``memory_oom_cost_gib_hours``. One fleet-wide price spends time over the request where it saves the most
    cores: a bursty container (a long thin tail) gets a low percentile, a flat one a high one, up to the cap.
    Leaving a share s uncovered must save more than 1 core x s / 1.1, e.g. 1% of the time for 9 millicores.
    The fast histogram keeps its own percentile (``cpu_request_percentile`` or the calibrated one), so the
    request still rises within hours when usage grows. Odd-series backtest (RESULTS.md, hand analysis): 1 core
    closes 52% of the CPU gap with 22.1 min/day over the request (VPA 29.6) and fewer changes than VPA; 0.4
    to 1.5 cores give 26 to 20 min/day at nearly the same slack."""
    cpu_over_request_cost_ratio: float = 2.0
    """The same price per container, in units of its own size: this x the slow histogram's
    ``cpu_upper_percentile`` level (its p95), in place of ``cpu_over_request_cost_cores`` when > 0 (the
    default; 0 falls back to the fleet-wide price in cores). Time over the request hurts an application
    whatever its size, so the choice of level relative to the container's size does not depend on that size
    (issue #18: the absolute price, fitted on 1-64 GiB VMs, gave other policies to the same workload at other
    sizes). 2 with ``memory_oom_cost_peak_hours`` 24 at risk 1: leave-one-trace-out over the three training
    traces (RESULTS.md, "Frontier of the per-container prices"): in every fold, risk 1 is the largest of
    0.25..4 whose OOMs, CPU minutes over the request and changes stay at or below VPA's on both other traces,
    and it stays there on the left-out one too."""
    cpu_over_request_cost_fleet_ratio: float = 2.5
    """The price in units of the fleet's size: this x the fleet's reference CPU (``FleetScale.cpu_cores``, the
    mean over the fleet's containers of their p95), in place of both prices above when the caller gives a fleet
    (``ContainerPolicy.fleet``: the engine and the backtest do) and this is > 0 (0: per container).
    Every container pays the same for its time over the request (it is priced per container, not per core),
    and slack is money, so a container larger than the fleet's mean takes more of the risk, where it saves the
    most cores, and a small one less; the exchange rate is in the fleet's own units, so the same fleet at
    another size gets the same policy (#18 item 2). 2.5 with ``memory_oom_cost_fleet_hours`` 40 (RESULTS.md,
    "Prices relative to the fleet")."""
    cpu_over_request_budget: float = 0.0
    """Share of its time a container may spend using more CPU than its request (0 disables; 0.002 was the
    default before the cost level, which beat it on every set). The request percentile is calibrated online
    per container to spend it (adaptive conformal inference's update, ``adaptive_step``): after each observed
    period, level += ``cpu_calibration_rate`` x (share of the period's samples above the applied request -
    budget) x hours, within [``cpu_min_request_percentile``, ``cpu_request_percentile``]. It starts at the
    ceiling, so only a container that stays under its budget has its percentile lowered (a flat one sheds the
    slack p85 x margin leaves it); a bursty one keeps p85. With the cost level on, the calibrated percentile is
    the fast histogram's only."""
    cpu_calibration_rate: float = 0.2
    """Step of the calibration: percentile points per hour per unit of over-request share (one hour with every
    sample over the request raises the percentile by up to 0.2; an hour with none lowers it by 0.2 x budget)."""
    cpu_min_request_percentile: float = 0.3
    """Floor of the cost level's percentile and of the calibrated one."""
    cpu_max_request_percentile: float = 0.95
    """Ceiling of the cost level's percentile (1: up to the max). Where the price never bites (a small, flat
    container: leaving any share uncovered saves less than the price), the level would be the histogram's max;
    p95 keeps such a container near where p85 x margin had it. Odd-series backtest: ceiling 1 (0.302 cores,
    22.1 min/day over the request, 1.17 changes/day), 0.99 (0.302, 22.3, 1.16), 0.95 (0.299, 25.7, 1.07), 0.9
    (0.297, 30.2, 1.13: over VPA's 29.6 minutes), 0.85 (0.296, 32.8, 1.20)."""
    cpu_lower_percentile: float = 0.5
    cpu_upper_percentile: float = 0.95
    cpu_margin_fraction: float = 0.10
    """Safety margin on CPU (Autopilot: 10-15%)."""
    cpu_limit_rule: str = "percentile"
    """"percentile": limit = p(cpu_limit_percentile) x (1 + cpu_limit_margin_fraction) where the container has
    a limit above its request; "proportional": VPA's ratio rule; "none": recommend no CPU limit. In every
    case a container without a limit gets none and a Guaranteed one stays Guaranteed."""
    cpu_limit_percentile: float = 0.99
    cpu_limit_margin_fraction: float = 0.15
    cpu_limit_min_ratio: float = 1.1
    """The percentile limit is at least request x this, so rounding never makes limit == request, which the
    QoS rule would then keep forever (a burstable container silently turned Guaranteed)."""
    throttle_correction: bool = True
    """Record a throttled interval's usage as usage x (1 + throttled fraction)."""
    memory_half_life_s: float = 48 * 3600.0
    """Memory peak histogram half-life (Autopilot: 48h)."""
    memory_aggregation_interval_s: float = 3600.0
    """One peak per this interval in the memory histogram (VPA: 24h; hourly keeps p98 meaningful)."""
    memory_oom_tolerance: str = "cost"
    """"cost" (default): the hourly peak level of the last ``memory_max_window_s`` that minimises provisioned
    memory plus ``memory_oom_cost_gib_hours`` x the share of hours whose peak exceeds it (``peaks.cost_level``);
    the max when no top hours are rare enough to be worth their risk. Autopilot's classes: "low" = p98 of peaks,
    "minimal" = max peak over ``memory_max_window_s`` (Autopilot's default for small jobs), "intermediate" =
    max(p60, 0.5 x max)."""
    memory_oom_cost_gib_hours: float = 100.0
    """Price of one OOM kill in GiB-hours of provisioned memory (the "cost" class), used only with
    ``memory_oom_cost_peak_hours`` 0 (the default before #18). Leaving the top k of n
    hourly peaks uncovered costs this x k / n per hour, at least 100 / 193 = 0.52 GiB over an 8-day window, so
    a container whose peaks stay below 0.52 / 1.15 = 0.45 GiB always gets its max; a 64 GiB one whose peak
    hour occurred once in 8 days is sized below it when that saves more than 0.52 GiB. Chosen on the odd
    series of the Bitbrains backtest (RESULTS.md, hand analysis): 100 is below VPA's memory slack and OOM
    rate there, 200 keeps fewer OOMs but more slack than VPA."""
    memory_oom_cost_peak_hours: float = 24.0
    """The same price per container, in hours of its own largest peak in the window, in place of
    ``memory_oom_cost_gib_hours`` when > 0 (the default; 0 falls back to the fleet-wide price): an OOM kill
    costs the application the same whatever its size. Leaving the top k of n hourly peaks uncovered costs
    24 x max x k / n, so over an 8-day window (193 hours) a level b below the max is taken only when max - b
    exceeds k x 10.8% of the max (24 / 193 / 1.15): a container with one rare tall hour is sized below it, a
    steady one gets its max. Chosen with ``cpu_over_request_cost_ratio`` (see there)."""
    memory_oom_cost_fleet_hours: float = 40.0
    """The price of an OOM kill in hours of the fleet's reference memory (``FleetScale.memory_bytes``, the mean
    over the fleet's containers of their largest peak), in place of both prices above when the caller gives a
    fleet and this is > 0 (0: per container); why, as ``cpu_over_request_cost_fleet_ratio``. Over an 8-day
    window a container at the fleet's mean is sized below its top k hours only when that saves more than k x
    18% of its peak (40 / 193 / 1.15); one 10 times the mean, k x 1.8%."""
    memory_oom_cost_min_peak_hours: float = 4.0
    """With the fleet price: an OOM kill costs at least this many hours of the container's own largest peak, so
    that a container far larger than its fleet's mean (a database among sidecars) does not take an OOM risk
    without bound: from 10 times the mean up (40 / 4), its price grows with its own size. 4 costs 0.1% to 0.4%
    more memory slack on the Bitbrains months and nothing on the Google jobs (memory-only replay, RESULTS.md
    "Prices relative to the fleet"); 0: no floor."""
    risk: float = 1.0
    """The risk setting: a dimensionless multiplier that divides both overrun prices (CPU time over the request,
    ``cpu_over_request_cost_*``, and an OOM kill, ``memory_oom_cost_*``), so 1 is the prices as set, 2 halves
    them (less slack, more time over the request and more OOM kills) and 0.5 doubles them. It moves only the
    priced levels: the fast CPU histogram's percentile, the percentile bounds, margins, floors and OOM bumps do
    not change, and a price of 0 stays 0. Within [``RISK_MIN``, ``RISK_MAX``]; ``backtest --sweep`` replays a
    range of it, ``run --risk`` sets it for the recommender and the ``podtailor.io/risk`` annotation per VPA."""
    memory_max_window_s: float = 8 * DAY_S
    """Window of the "max" and "cost" statistics (VPA's 8-day memory window)."""
    memory_max_slot_s: float = 3600.0
    """Granularity of that window."""
    memory_margin_fraction: float = 0.15
    """Safety margin on memory: the fixed one (``memory_margin_jump_quantile`` 0, or under two days of hourly
    peaks), and otherwise the ceiling of the per-container one."""
    memory_margin_jump_quantile: float = 1.0
    """> 0 (the default, 1: the largest): the memory margin is per container (``peaks.jump_margin``): this
    quantile, over the window's hourly peaks, of how far an hour's peak rose above the max of the
    ``memory_jump_lookback_s`` before it, within [``memory_margin_min_fraction``, ``memory_margin_fraction``],
    held between memory moves (the strategy's ``_memory_margin``); 0: the fixed margin. In the full replay at 1x
    (RESULTS.md, "The jump margin held") it keeps the OOM rate of the fixed 15% on the Google jobs with 8% less
    memory slack and 30% fewer changes; on the Bitbrains months slack and changes are about the same and OOMs
    3.5% more (still below VPA's)."""
    memory_margin_min_fraction: float = 0.05
    memory_jump_lookback_s: float = DAY_S
    memory_lower_percentile: float = 0.5
    memory_upper_percentile: float = 0.95
    oom_min_bump_bytes: float = 100.0 * MIB
    oom_bump_ratio: float = 1.2
    oom_window_s: float = DAY_S
    """An OOM bump floors the memory target for this long. One day: the killed hour stays in the statistic's
    window anyway (at the limit it was censored at); an 8-day floor held the bumped level long after the
    burst (RESULTS.md, hand analysis). The bump never enters the histogram and is capped at maxAllowed, so a
    capped container cannot inflate its own history (VPA #9521)."""
    resize_up_fraction: float = 0.0
    """Hysteresis on memory: resized up only when its target exceeds the current request by more than this
    fraction (0: any growth is followed at once; memory growth risks OOM kills)."""
    cpu_resize_up_fraction: float = 0.1
    """The same band for CPU: a CPU target less than 10% above the request does not resize the pod by itself
    (such growth is served from the limit's headroom, not killed). Odd-series backtest: changes 1.21 -> 0.95
    per series-day at about the same CPU minutes over the request; the freed resizes pay for the shorter
    dwell time below."""
    resize_down_fraction: float = 0.2
    """Hysteresis: resized down only when the target is below the current request by more than this fraction,
    so noise does not resize (declines are followed late and in larger steps than growth)."""
    coordinate_resizes: bool = True
    """A resize is one pod update whatever it changes, so when one resource must move (its target left its band),
    the other takes its fresh target in the same update instead of waiting for a resize of its own: fewer
    updates, and the passenger resource sheds slack (or gains headroom) for free."""
    resize_down_dwell_s: float = 20 * 3600.0
    """No decrease just past the band (a drop of ``resize_down_fraction``) within this long after the last
    observed change of the applied values (increases are never delayed): a target that just rose is not lowered
    again by the next quiet hour. Deeper decreases wait less (``resize_down_dwell_power``). 0 disables."""
    resize_down_dwell_power: float = 1.0
    """A decrease of d (a share of the request) waits ``resize_down_dwell_s`` x (``resize_down_fraction`` / d) ^
    this: with 1 and 20 h, a 20% drop 20 h, 40% 10 h, 80% 5 h. The slack a decrease sheds is worth a pod update
    sooner the larger it is, and small decreases, which a later rise often undoes, wait. Against one 8 h dwell
    for every decrease (this at 0, the default before 2026-12-06), at 1x with tiny floors: 7 and 8 more points
    of the CPU gap on the Bitbrains months (August 0.515 to 0.587, July 0.559 to 0.641) with 2% fewer changes
    and 1% to 2% more CPU minutes over the request; on the Google jobs the same CPU slack with 1.5% fewer CPU
    minutes over the request and 2% fewer changes (RESULTS.md, "Decreases wait by their depth")."""
    thin_history_days: float = 1.0
    """Below this much real history (days) a resource's request is not lowered below the current one."""
    no_decrease_on_thin_history: bool = True
    confidence_full_days: float = 7.0
    """Recommendation.confidence = min(1, c / this)."""
    pod_min_cpu_millicores: float = 10.0
    """Per-pod floors split over the containers (smaller than VPA's 25m/250MiB: sidecars are small)."""
    pod_min_memory_mib: float = 64.0
    cpu_bucket_first_cores: float = 0.001
    cpu_bucket_ratio: float = 1.02
    """2% buckets: a percentile overestimates by at most 2% + 1m (VPA's 5% + 10m)."""
    memory_bucket_first_bytes: float = float(MIB)
    memory_bucket_ratio: float = 1.02
    """2% + 1 MiB (VPA's 5% + 10 MB, i.e. about 25% for a 50 MB container)."""

    def __post_init__(self) -> None:
        if self.memory_oom_tolerance not in MEMORY_TOLERANCES:
            raise ValueError(f"memory_oom_tolerance must be one of {MEMORY_TOLERANCES}")
        if not (self.resize_up_fraction >= 0 and self.cpu_resize_up_fraction >= 0
                and 0 <= self.resize_down_fraction < 1):
            raise ValueError("resize_up_fractions must be >= 0 and resize_down_fraction in [0, 1)")
        if self.resize_down_dwell_s < 0:
            raise ValueError("resize_down_dwell_s must be >= 0")
        if not (self.resize_down_dwell_power >= 0 and math.isfinite(self.resize_down_dwell_power)):
            raise ValueError("resize_down_dwell_power must be finite and >= 0")
        if not (0 <= self.cpu_over_request_budget < 1 and self.cpu_calibration_rate >= 0
                and 0 < self.cpu_min_request_percentile <= self.cpu_request_percentile <= 1):
            raise ValueError("cpu_over_request_budget must be in [0, 1), cpu_calibration_rate >= 0 and "
                             "0 < cpu_min_request_percentile <= cpu_request_percentile <= 1")
        for name in ("cpu_over_request_cost_cores", "cpu_over_request_cost_ratio", "memory_oom_cost_gib_hours",
                     "memory_oom_cost_peak_hours", "cpu_over_request_cost_fleet_ratio", "memory_oom_cost_fleet_hours",
                     "memory_oom_cost_min_peak_hours"):
            if not 0 <= getattr(self, name) < math.inf:  # also rejects NaN
                raise ValueError(f"{name} must be finite and >= 0")
        check_risk(self.risk)
        jump = self.memory_margin_jump_quantile
        if not (0 <= jump <= 1 and 0 <= self.memory_margin_min_fraction < math.inf
                and self.memory_jump_lookback_s >= self.memory_max_slot_s) or (  # also rejects NaN
                jump > 0 and not self.memory_margin_min_fraction <= self.memory_margin_fraction):
            raise ValueError("memory_margin_jump_quantile must be in [0, 1], memory_margin_min_fraction in "
                             "[0, memory_margin_fraction] and memory_jump_lookback_s at least one slot")
        if not self.cpu_min_request_percentile <= self.cpu_max_request_percentile <= 1:  # also rejects NaN
            raise ValueError("cpu_max_request_percentile must be in [cpu_min_request_percentile, 1]")
        if self.cpu_limit_rule not in CPU_LIMIT_RULES:
            raise ValueError(f"cpu_limit_rule must be one of {CPU_LIMIT_RULES}")


@dataclass(slots=True)
class Observed:
    """Real history of one resource: first/last sample time and sum of sample intervals."""

    first_s: float | None = None
    last_s: float | None = None
    seconds: float = 0.0

    def note(self, timestamps_s: FloatArray, interval_s: float) -> None:
        if timestamps_s.size == 0:
            return
        first, last = float(timestamps_s.min()), float(timestamps_s.max())
        self.first_s = first if self.first_s is None else min(self.first_s, first)
        self.last_s = last if self.last_s is None else max(self.last_s, last)
        self.seconds += float(timestamps_s.size) * interval_s

    def days(self) -> float:
        """c = min(span, samples x interval), in days."""
        if self.first_s is None or self.last_s is None:
            return 0.0
        return min((self.last_s - self.first_s) / DAY_S, self.seconds / DAY_S)


PENDING_WEIGHT_MAX_S = 8 * DAY_S
"""The most time one calibration step may weigh: a cold load's history window."""


def adaptive_step(level: float, error: float, rate: float, bounds: tuple[float, float]) -> float:
    """One online calibration step, level + rate x error clipped to ``bounds`` (the update of adaptive conformal
    inference, Gibbs and Candes 2021, with error = the observed share over the request minus its budget)."""
    low, high = bounds
    return min(max(level + rate * error, low), high)


def throttle_corrected(cpu: Samples, throttled: Samples) -> FloatArray:
    """CPU values x (1 + f), f matched by timestamp (elementwise when both arrays share their timestamps;
    otherwise the largest f seen at that timestamp). Samples with no throttling data are unchanged."""
    if len(throttled) == 0:
        return cpu.values
    if throttled.timestamps_s.shape == cpu.timestamps_s.shape and np.array_equal(throttled.timestamps_s,
                                                                                cpu.timestamps_s):
        return cpu.values * (1.0 + throttled.values)
    th = sort_samples(throttled.timestamps_s, throttled.values)
    starts = np.flatnonzero(np.concatenate([[True], th.timestamps_s[1:] != th.timestamps_s[:-1]]))
    keys, fmax = th.timestamps_s[starts], np.maximum.reduceat(th.values, starts)
    idx = np.clip(np.searchsorted(keys, cpu.timestamps_s), 0, keys.size - 1)
    f = np.where(keys[idx] == cpu.timestamps_s, fmax[idx], 0.0)
    return cpu.values * (1.0 + f)


class SeenSpan:
    """The first and last real sample over both resources, for a state that keeps ``cpu_seen`` and
    ``memory_seen``."""

    cpu_seen: Observed
    memory_seen: Observed

    @property
    def first_sample_s(self) -> float | None:
        known = [t for t in (self.cpu_seen.first_s, self.memory_seen.first_s) if t is not None]
        return min(known) if known else None

    @property
    def last_sample_s(self) -> float | None:
        known = [t for t in (self.cpu_seen.last_s, self.memory_seen.last_s) if t is not None]
        return max(known) if known else None


class PodtailorState(SeenSpan):
    """podtailor's per-container history."""

    def __init__(self, params: PodtailorParams) -> None:
        cpu_scheme = BucketScheme(first_bucket_size=params.cpu_bucket_first_cores, ratio=params.cpu_bucket_ratio,
                                  max_value=1000.0)
        mem_scheme = BucketScheme(first_bucket_size=params.memory_bucket_first_bytes,
                                  ratio=params.memory_bucket_ratio, max_value=1e12)
        self.params = params
        self.cpu = DecayingHistogram(cpu_scheme, params.cpu_half_life_s)
        self.cpu_fast = DecayingHistogram(cpu_scheme, params.cpu_fast_half_life_s or params.cpu_half_life_s)
        self.memory = IntervalPeaks(DecayingHistogram(mem_scheme, params.memory_half_life_s),
                                    params.memory_aggregation_interval_s, aligned=True)
        self.memory_max = SlotMax(slot_s=params.memory_max_slot_s,
                                  retention_s=params.memory_max_window_s + params.memory_jump_lookback_s
                                  + params.memory_max_slot_s)
        self.oom_bumps: list[tuple[float, float]] = []
        self.cpu_seen = Observed()
        self.memory_seen = Observed()
        self.applied: list[int | None] | None = None
        """The applied values (CPU/memory request/limit) last seen by ``note_applied``."""
        self.applied_since_s: float | None = None
        """When they were first seen (the time of the last observed change)."""
        self.memory_margin: float | None = None
        """The per-container memory margin (``memory_margin_jump_quantile``) held since it was last refreshed:
        when the memory target last left its band (None: not yet computed)."""
        self.cpu_level = params.cpu_request_percentile
        """The calibrated request percentile (``cpu_over_request_budget``)."""
        self.pending_cpu: list[FloatArray] = []
        """CPU samples (as fed to the histograms) not yet folded into ``cpu_level``: the newest day of them at
        most, in one array."""
        self.pending_cpu_s = 0.0
        """The time they stand for (samples x interval, including samples dropped beyond a day), at most
        ``PENDING_WEIGHT_MAX_S``: the weight of the next calibration step."""

    def successor(self) -> PodtailorState:
        """A copy for ``recommend`` to note the applied values, calibrate and hold the margin on, so that the
        state it is given stays as it was. The histories (which ``recommend`` only reads) are shared, not copied
        (a deep copy costs more than the recommendation): the caller goes on with the successor only."""
        return copy.copy(self)

    def note_applied(self, values: list[int | None], now_s: float) -> float | None:
        """Record the applied values seen at ``now_s``; the time they were first seen (None: unknown)."""
        if self.applied != values:
            self.applied_since_s = now_s if self.applied is not None else None
            self.applied = values
        return self.applied_since_s

    def calibrate(self, cpu_request: float | None) -> None:
        """Fold the CPU samples seen since the last call into ``cpu_level``, against ``cpu_request``: the request
        applied while they were taken (the current one; it changes only when a recommendation is applied). No
        request (or calibration off): the samples are dropped and the level stays."""
        prm = self.params
        if prm.cpu_over_request_budget > 0 and cpu_request is not None and self.pending_cpu:
            values = np.concatenate(self.pending_cpu)
            over = float(np.mean(values > cpu_request))
            self.cpu_level = adaptive_step(self.cpu_level, over - prm.cpu_over_request_budget,
                                           prm.cpu_calibration_rate * self.pending_cpu_s / 3600.0,
                                           (prm.cpu_min_request_percentile, prm.cpu_request_percentile))
        self.pending_cpu, self.pending_cpu_s = [], 0.0

    def add(self, batch: UsageBatch) -> None:
        validate_batch(batch)
        for part, weight in segments(batch):
            self._add_segment(part, weight)

    def _add_segment(self, batch: UsageBatch, cpu_weight: float) -> None:
        self._add_cpu(batch, cpu_weight)
        mem = sort_samples(batch.memory_peak_bytes.timestamps_s, batch.memory_peak_bytes.values)
        if self.memory_seen.last_s is not None:
            _, mem = split_at(mem, self.memory_seen.last_s)
        for oom in sorted(batch.oom_kills, key=lambda o: o.timestamp_s):
            before, mem = split_at(mem, oom.timestamp_s)
            self._add_memory(before, batch.memory_interval_s)
            self._record_oom(oom)
        self._add_memory(mem, batch.memory_interval_s)

    def _add_cpu(self, batch: UsageBatch, weight: float = 1.0) -> None:
        values = batch.cpu_cores.values
        if self.params.throttle_correction:
            values = throttle_corrected(batch.cpu_cores, batch.cpu_throttled_fraction)
        cpu = sort_samples(batch.cpu_cores.timestamps_s, values)
        if self.cpu_seen.last_s is not None:  # a new batch holds only samples newer than the previous one
            _, cpu = split_at(cpu, self.cpu_seen.last_s)
        self.cpu.add(cpu.values, cpu.timestamps_s, weight)
        if self.params.cpu_fast_half_life_s > 0:
            self.cpu_fast.add(cpu.values, cpu.timestamps_s, weight)
        self.cpu_seen.note(cpu.timestamps_s, batch.cpu_interval_s)
        if self.params.cpu_over_request_budget > 0 and cpu.values.size:
            # Memory stays bounded: at most the last day's samples are kept, in one array of our own (a copy: a
            # cold load's 8 days arrive as one array per container, which must not stay alive until the next
            # calibration). They stand for the whole pending time, which still weighs the step (up to
            # PENDING_WEIGHT_MAX_S): the share over the request is estimated from the newest day.
            kept = np.concatenate([*self.pending_cpu, cpu.values])
            limit = max(1, int(DAY_S // max(batch.cpu_interval_s, 1e-9)))
            self.pending_cpu = [kept[-limit:].copy() if kept.size > limit else kept]
            self.pending_cpu_s = min(self.pending_cpu_s + float(cpu.values.size) * batch.cpu_interval_s,
                                     PENDING_WEIGHT_MAX_S)

    def _add_memory(self, mem: SortedSamples, interval_s: float) -> None:
        self.memory.add(mem)
        self.memory_max.add(mem)
        self.memory_seen.note(mem.timestamps_s, interval_s)

    def _record_oom(self, oom: OomKill) -> None:
        """The kill happened at the limit, so ``used`` is the limit when known (VPA uses the request)."""
        used = max(float(oom.memory_limit_bytes or 0), float(oom.memory_request_bytes or 0), self.memory.usage_peak)
        bump = oom_bump(used, min_bump_bytes=self.params.oom_min_bump_bytes, ratio=self.params.oom_bump_ratio)
        self.oom_bumps.append((oom.timestamp_s, bump))
        newest = max(t for t, _ in self.oom_bumps)
        self.oom_bumps = sorted(b for b in self.oom_bumps if b[0] >= newest - self.params.oom_window_s)

    def oom_floor(self, now_s: float) -> float | None:
        recent = [b for t, b in self.oom_bumps if now_s - self.params.oom_window_s <= t <= now_s]
        return max(recent) if recent else None

    def to_checkpoint(self) -> dict[str, Any]:
        return {"strategy": "podtailor", "version": STATE_VERSION, "cpu": self.cpu.to_checkpoint(),
                "cpu_fast": self.cpu_fast.to_checkpoint(), "memory": self.memory.to_checkpoint(),
                "memory_max": self.memory_max.to_checkpoint(), "oom_bumps": [list(b) for b in self.oom_bumps],
                "cpu_seen": [self.cpu_seen.first_s, self.cpu_seen.last_s, self.cpu_seen.seconds],
                "memory_seen": [self.memory_seen.first_s, self.memory_seen.last_s, self.memory_seen.seconds],
                "applied": self.applied, "applied_since_s": self.applied_since_s, "cpu_level": self.cpu_level,
                "memory_margin": self.memory_margin,
                "pending_cpu": [float(v) for a in self.pending_cpu for v in a], "pending_cpu_s": self.pending_cpu_s}

    def restore_from(self, data: dict[str, Any]) -> None:
        if data.get("strategy") != "podtailor" or data.get("version") != STATE_VERSION:
            raise ValueError("not a podtailor v1 checkpoint")
        self.cpu = DecayingHistogram.from_checkpoint(data["cpu"])
        self.cpu_fast = DecayingHistogram.from_checkpoint(data["cpu_fast"])
        self.memory = IntervalPeaks.from_checkpoint(data["memory"])
        self.memory_max = SlotMax.from_checkpoint(data["memory_max"])
        self.oom_bumps = [(float(t), float(b)) for t, b in data["oom_bumps"]]
        self.cpu_seen = _observed(data["cpu_seen"])
        self.memory_seen = _observed(data["memory_seen"])
        applied = data.get("applied")  # absent in checkpoints written before the dwell time existed
        self.applied = None if applied is None else [None if v is None else int(v) for v in applied]
        since = data.get("applied_since_s")
        self.applied_since_s = None if since is None else float(since)
        # absent in checkpoints written before the calibration existed: start from the ceiling
        self.cpu_level = float(data.get("cpu_level", self.params.cpu_request_percentile))
        margin = data.get("memory_margin")  # absent before the jump margin was held: refreshed on the next call
        self.memory_margin = None if margin is None else float(margin)
        pending = data.get("pending_cpu") or []
        self.pending_cpu = [np.array(pending, dtype=np.float64)] if pending else []
        self.pending_cpu_s = float(data.get("pending_cpu_s", 0.0))


def _observed(raw: list[Any]) -> Observed:
    first, last, seconds = raw
    return Observed(None if first is None else float(first), None if last is None else float(last), float(seconds))
