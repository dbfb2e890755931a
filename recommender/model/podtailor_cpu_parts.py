"""The CPU parts of the ``podtailor`` estimator: what level the request is, what time over it costs, the limit.

Owns three frozen parts, each with its own few settings and its checks, composed by ``PodtailorParams``:
``CpuLevel`` (the slow and fast decaying histograms, their percentiles, margin and buckets, and the throttling
correction), ``CpuPrice`` (the price of time over the request, one ``CpuPriceMode`` and its parameters, and the
arithmetic of that price) and ``CpuLimit`` (one ``CpuLimitRule`` and its parameters). As VPA composes its
estimator from a percentile, a margin, a confidence multiplier and a minimum (``logic/estimator.go``), the
strategy composes these; numbers in, numbers out.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass

from recommender.model.types import FleetScale


class CpuPriceMode(enum.StrEnum):
    """What time over the request is priced in (the slow histogram's level is the one that minimises
    provisioned cores plus that price x the share of time above it, ``histogram.cost_share_of``)."""

    FLEET = "fleet"
    """``fleet_ratio`` x the fleet's mean p95 when the caller gives a fleet with CPU (the engine and the
    backtest do), else the ``CONTAINER`` price (the report gives none)."""
    CONTAINER = "container"
    """``container_ratio`` x the container's own p95."""
    ABSOLUTE = "absolute"
    """``cores``, the same for every container of every fleet."""
    OFF = "off"
    """No price: the slow histogram's percentile is the request percentile, as the fast one's."""


class CpuLimitRule(enum.StrEnum):
    """How the CPU limit is recommended. In every case a container without a limit gets none and a Guaranteed
    one stays Guaranteed."""

    PERCENTILE = "percentile"
    """limit = p(``percentile``) x (1 + ``margin_fraction``), at least request x ``min_ratio`` and, with
    ``keep_ratio``, at least VPA's proportional limit, where the container has a limit above its request."""
    PROPORTIONAL = "proportional"
    """VPA's rule: the limit keeps its ratio to the request."""
    NONE = "none"
    """No CPU limit."""


@dataclass(frozen=True, slots=True, kw_only=True)
class CpuLevel:
    """The CPU request's level: max(slow p, fast p) x (1 + margin) over throttling-corrected samples, so it
    rises within hours and falls at the slow pace. Half-lives follow Google Autopilot (12 h)."""

    half_life_s: float = 12 * 3600.0
    """Slow histogram half-life (Autopilot: 12 h)."""
    fast_half_life_s: float = 3600.0
    """Fast histogram half-life; 0 disables the fast histogram. With the 10% CPU up band
    (``ResizeBands.cpu_up_fraction``) the fast rise costs no extra resizes for small wobbles."""
    request_percentile: float = 0.85
    """The fast histogram's percentile (and the slow one's with the price ``OFF``): with max(slow, fast) the
    request already rises within hours, so it need not also cover bursts, which the limit (p99) does."""
    min_request_percentile: float = 0.3
    """Floor of the priced percentile and of a risk budget's (``RiskBudget.cpu_level_factor``)."""
    max_request_percentile: float = 0.95
    """Ceiling of the priced percentile (1: up to the max). Where the price never bites (a small flat
    container), the priced level would be the histogram's max; p95 keeps it near p85 x margin."""
    lower_percentile: float = 0.5
    """The lower bound's percentile (VPA's)."""
    upper_percentile: float = 0.95
    """The upper bound's percentile (VPA's), also the container's size for its own price."""
    margin_fraction: float = 0.10
    """Safety margin on CPU (Autopilot: 10-15%)."""
    throttle_correction: bool = True
    """Record a throttled interval's usage as usage x (1 + throttled fraction)."""
    bucket_first_cores: float = 0.001
    """First histogram bucket: a percentile overestimates by at most a bucket (VPA's is 10m)."""
    bucket_ratio: float = 1.02
    """2% buckets: a percentile overestimates by at most 2% + 1m (VPA's 5% + 10m)."""

    def __post_init__(self) -> None:
        if not 0 < self.min_request_percentile <= self.request_percentile <= 1:  # also rejects NaN
            raise ValueError("cpu: 0 < min_request_percentile <= request_percentile <= 1 is required")
        if not self.min_request_percentile <= self.max_request_percentile <= 1:
            raise ValueError("cpu: max_request_percentile must be in [min_request_percentile, 1]")


@dataclass(frozen=True, slots=True, kw_only=True)
class CpuPrice:
    """The price of CPU time over the request, in cores per unit share of time. One price for every container
    spends time over the request where it saves the most cores: a bursty container (a long thin tail) gets a
    low percentile, a flat one a high one, up to ``CpuLevel.max_request_percentile``. Leaving a share s
    uncovered must save more than the price x s / (1 + margin)."""

    mode: CpuPriceMode = CpuPriceMode.FLEET
    """What the price is in units of (``CpuPriceMode``). Relative to the fleet: every container pays the same
    for its time over the request and slack is money, so one larger than the fleet's mean takes more of the
    risk, where it saves the most cores; in the fleet's own units, the same fleet at another size gets the
    same policy (RESULTS.md, "Prices relative to the fleet")."""
    fleet_ratio: float = 2.5
    """``FLEET``: the price in units of the fleet's reference CPU (``FleetScale.cpu_cores``, the mean over its
    containers of their p95). 2.5 with ``MemoryPrice.fleet_hours`` 40 (RESULTS.md, "Prices relative to the
    fleet")."""
    container_ratio: float = 2.0
    """``CONTAINER`` (and ``FLEET`` without a fleet): the price in units of the container's own size, its slow
    histogram's p95. Time over the request hurts an application whatever its size, so the level relative to
    the container's size does not depend on that size (#18). 2 with ``MemoryPrice.peak_hours`` 24 at risk 1
    (RESULTS.md, "Frontier of the per-container prices")."""
    cores: float = 1.0
    """``ABSOLUTE``: the price in cores, whatever the container's or the fleet's size."""

    def __post_init__(self) -> None:
        if not isinstance(self.mode, CpuPriceMode):
            raise ValueError(f"cpu_price: mode must be one of {', '.join(m.value for m in CpuPriceMode)}")
        for name in ("fleet_ratio", "container_ratio", "cores"):
            if not 0 <= getattr(self, name) < math.inf:  # also rejects NaN
                raise ValueError(f"cpu_price: {name} must be finite and >= 0")

    def price(self, own_cores: float | None, fleet: FleetScale | None) -> float:
        """The price before the risk setting: ``own_cores`` is the container's p95 (None: no history)."""
        if self.mode is CpuPriceMode.OFF:
            return 0.0
        if self.mode is CpuPriceMode.ABSOLUTE:
            return self.cores
        if self.mode is CpuPriceMode.FLEET and fleet is not None and fleet.cpu_cores > 0:
            return self.fleet_ratio * fleet.cpu_cores
        return self.container_ratio * (own_cores or 0.0)


@dataclass(frozen=True, slots=True, kw_only=True)
class CpuLimit:
    """The CPU limit recommended beside the request (``CpuLimitRule``)."""

    rule: CpuLimitRule = CpuLimitRule.PERCENTILE
    """``PERCENTILE`` covers bursts that the request (priced, or p85) leaves to the limit's headroom."""
    percentile: float = 0.99
    """``PERCENTILE``: the max of the slow and fast histograms' percentile."""
    margin_fraction: float = 0.15
    """``PERCENTILE``: the margin above that percentile."""
    min_ratio: float = 1.1
    """``PERCENTILE``: the limit is at least request x this, so rounding never makes limit == request, which
    the QoS rule would then keep forever (a burstable container silently turned Guaranteed)."""
    keep_ratio: bool = True
    """``PERCENTILE``: the limit is also at least the request x the container's own limit:request ratio, the
    one first seen (``PodtailorState.cpu_limit_ratio``, before any resize of ours): VPA's proportional limit
    (``PROPORTIONAL``). Without it the p99 limit sat far below VPA's where the user's ratio is wide (2:1 in the
    backtest) and spent about 4x VPA's CPU minutes over the limit (issue #39; RESULTS.md, "The CPU limit at
    least VPA's"). The percentile still raises the limit where bursts outgrow that ratio."""

    def __post_init__(self) -> None:
        if not isinstance(self.rule, CpuLimitRule):
            raise ValueError(f"cpu_limit: rule must be one of {', '.join(r.value for r in CpuLimitRule)}")
        if not isinstance(self.keep_ratio, bool):
            raise ValueError("cpu_limit: keep_ratio must be true or false")

    def floor(self, request: float, ratio: float | None) -> float:
        """The least limit ``keep_ratio`` allows for ``request`` (cores): request x the container's own
        ``ratio``; 0 without ``keep_ratio`` or a known ratio. VPA's rule, as in
        ``pkg/utils/vpa/limit_and_request_scaling.go`` (``getProportionalResourceLimit``)."""
        if not self.keep_ratio or ratio is None:
            return 0.0
        if not 1.0 <= ratio < math.inf:  # also rejects NaN
            raise ValueError(f"cpu_limit: a limit:request ratio must be finite and >= 1, got {ratio}")
        return request * ratio
