"""The ``podtailor`` strategy: our default estimator, VPA's shape with its known weaknesses fixed.

Owns the arithmetic from a ``PodtailorState`` to an ``Estimate``. Confidence c (days) per resource is
min(span of the real samples, samples x their interval), not VPA's samples/1440, so hourly Prometheus history
counts in full. CPU: request = max(slow pL, fast pF) x (1 + margin) over throttling-corrected samples
(rises within hours, falls at the 12h half-life pace). The slow histogram's level L is priced: the level that
minimises provisioned cores plus a price x the share of time above it (``histogram.cost_share_of``; bursty
containers get low percentiles, flat ones high ones); the price is per container,
``cpu_over_request_cost_ratio`` x its own p95 (with the ratio at 0, ``cpu_over_request_cost_cores`` for the
whole fleet), between
``cpu_min_request_percentile`` and ``cpu_max_request_percentile``; both prices (CPU and OOM) are divided by
the risk setting ``risk`` (1 by default). When the caller says what fleet the container is in
(``ContainerPolicy.fleet``, a ``FleetScale``: the engine, the report and the backtest do), both
prices are in units of the fleet's mean size instead (``cpu_over_request_cost_fleet_ratio`` x the fleet's mean p95,
``memory_oom_cost_fleet_hours`` x its mean peak, at least ``memory_oom_cost_min_peak_hours`` of the container's
own peak): every container pays the same for an overrun, so one larger
than the fleet's mean takes more of the risk, where it saves the most, and the same fleet at another size gets
the same policy (``fleet_scale`` computes the fleet from the states). The fast histogram's F is p85
(``cpu_request_percentile``; with ``cpu_over_request_budget`` > 0 calibrated per container to a budget of
time over the request, ``PodtailorState.calibrate``; with the price at 0 that F is the slow one's too);
bounds p50/p95 x
margin x VPA's confidence multipliers; limit by ``cpu_limit_rule`` (the percentile limit at least
request x ``cpu_limit_min_ratio``).
Memory: the statistic of the OOM-tolerance class x (1 + margin). The margin is per container
(``memory_margin_jump_quantile``): the largest rise of an hourly peak above the day before it, over the window,
within 5%..15% (``peaks.jump_margin``), held between memory moves so that it never moves a target by itself;
15% under two days of history. The default "cost" class takes, from the
hourly peaks of the last 8 days, the level that minimises provisioned memory plus the price of an OOM x the
share of hours above it (``peaks.cost_level``): the max for steady containers, below rare top hours for spiky
ones. The price is relative to the fleet (above), else per container, ``memory_oom_cost_peak_hours`` x its own
largest peak in the window (with it at 0, ``memory_oom_cost_gib_hours`` for the whole fleet), so the choice does
not depend on the size of the fleet (#18).
Autopilot's classes remain (p98 of peaks, max peak over
8 days, or max(p60, 0.5 max)). The target is floored by recent OOM bumps capped at maxAllowed (the bump never
enters the histogram, so a cap cannot feed itself: VPA #9521). With thin history
(c below ``thin_history_days``) a request is never lowered below the current one. Resizes: a resource
"moves" when its target leaves the band [1 - ``resize_down_fraction``, 1 + up] x the current request, with
up = ``resize_up_fraction`` for memory (0) and ``cpu_resize_up_fraction`` for CPU (hysteresis, so noise does
not resize it); a decrease also waits after the last observed change of the applied values (the state
notes them on every call; increases never wait), ``resize_down_dwell_s`` for one just past the band and less
the deeper it is (``resize_down_dwell_power``: a decrease twice as deep waits half as long). When one
resource moves, the other takes its fresh target in the same update (``coordinate_resizes``: one pod update
either way); when neither moves, both keep their current request and limit. Parameters and state live in
``podtailor_state.py``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import replace

import numpy as np

from podtailor.resources import CurrentResources
from podtailor.units import format_cpu, format_memory
from recommender.model.common import GIB, MIB, StrategyBase, fleet_from_sizes, lower_multiplier, upper_multiplier
from recommender.model.peaks import cost_level, jump_margin
from recommender.model.podtailor_state import PodtailorParams, PodtailorState
from recommender.model.policy import (
    Estimate,
    LimitRule,
    ResourceEstimate,
    finalize,
    no_recommendation,
    with_floor,
)
from recommender.model.types import ContainerPolicy, ContainerState, FleetScale, HistoryPlan, Recommendation

_LIMIT_RULES = {"percentile": LimitRule.EXPLICIT, "proportional": LimitRule.PROPORTIONAL, "none": LimitRule.NONE}


def _max_opt(*values: float | None) -> float | None:
    known = [v for v in values if v is not None]
    return max(known) if known else None


class PodtailorStrategy(StrategyBase[PodtailorParams, PodtailorState]):
    """Our default: real-interval confidence, throttling-aware CPU, Autopilot memory classes, capped OOM bumps."""

    name = "podtailor"

    state_type = PodtailorState

    def __init__(self, params: PodtailorParams | None = None) -> None:
        super().__init__(params or PodtailorParams())

    def history_plan(self) -> HistoryPlan:
        """Full resolution for six slow CPU half-lives (3 days at 12 h: all older samples together weigh under
        1/64 of the slow histogram, nothing in the fast one), hourly summaries before that. Memory is read
        hourly there too: the "cost" statistic and the peak histogram take one peak per hour anyway."""
        return HistoryPlan(full_resolution_s=6 * max(self.params.cpu_half_life_s, self.params.cpu_fast_half_life_s))

    def _cpu_percentile(self, state: PodtailorState, p: float) -> float | None:
        fast = state.cpu_fast.percentile(p) if self.params.cpu_fast_half_life_s > 0 else None
        return _max_opt(state.cpu.percentile(p), fast)

    def fleet_scale(self, states: Iterable[ContainerState], now_s: float) -> FleetScale | None:
        """The mean over ``states`` (those with history) of their slow CPU histogram's p95
        (``cpu_upper_percentile``) and of their largest hourly memory peak in the window: the sizes the fleet
        prices are in units of (``cpu_over_request_cost_fleet_ratio``, ``memory_oom_cost_fleet_hours``)."""
        prm = self.params
        cpu: list[float] = []
        memory: list[float] = []
        for state in states:
            if isinstance(state, PodtailorState):
                p95 = state.cpu.percentile(prm.cpu_upper_percentile)
                peak = state.memory_max.max(now_s=now_s, window_s=prm.memory_max_window_s)
                cpu.append(math.nan if p95 is None else p95)
                memory.append(math.nan if peak is None else peak)
        return fleet_from_sizes(cpu, memory)

    def _cpu(self, state: PodtailorState, c: float, fleet: FleetScale | None) -> ResourceEstimate | None:
        prm = self.params
        level = state.cpu_level if prm.cpu_over_request_budget > 0 else prm.cpu_request_percentile
        slow_level = level
        price = prm.cpu_over_request_cost_cores
        if prm.cpu_over_request_cost_fleet_ratio > 0 and fleet is not None and fleet.cpu_cores > 0:
            price = prm.cpu_over_request_cost_fleet_ratio * fleet.cpu_cores
        elif prm.cpu_over_request_cost_ratio > 0:
            price = prm.cpu_over_request_cost_ratio * (state.cpu.percentile(prm.cpu_upper_percentile) or 0.0)
        price /= prm.risk
        if price > 0:
            share = state.cpu.cost_share(margin_fraction=prm.cpu_margin_fraction, overrun_cost=price)
            if share is not None:
                # just below the share, so that the slow histogram's percentile is the chosen bucket itself
                slow_level = min(max(share * (1.0 - 1e-9), prm.cpu_min_request_percentile),
                                 prm.cpu_max_request_percentile)
        fast = state.cpu_fast.percentile(level) if prm.cpu_fast_half_life_s > 0 else None
        request = _max_opt(state.cpu.percentile(slow_level), fast)
        lower = state.cpu.percentile(prm.cpu_lower_percentile)
        upper = state.cpu.percentile(prm.cpu_upper_percentile)
        if request is None or lower is None or upper is None:
            return None
        margin = 1.0 + prm.cpu_margin_fraction
        limit = None
        if prm.cpu_limit_rule == "percentile":
            peak = self._cpu_percentile(state, prm.cpu_limit_percentile) or request
            limit = max(peak * (1.0 + prm.cpu_limit_margin_fraction), request * margin * prm.cpu_limit_min_ratio)
        return ResourceEstimate(target=request * margin, lower=lower * margin * lower_multiplier(c),
                                upper=upper * margin * upper_multiplier(c),
                                limit_rule=_LIMIT_RULES[prm.cpu_limit_rule], limit=limit)

    def _memory_margin(self, state: PodtailorState, now_s: float, *, refresh: bool) -> float:
        """The memory margin: per container from the jumps of its hourly peaks (``peaks.jump_margin``), or the
        fixed one (quantile 0, or too few hours yet). The per-container margin is held in the state between
        memory moves: only ``refresh`` (the target is about to leave its band, or none is held yet) computes it
        anew, so a margin that changes from hour to hour never moves the target by itself (RESULTS.md, "The
        jump margin held")."""
        prm = self.params
        if prm.memory_margin_jump_quantile <= 0:
            return prm.memory_margin_fraction
        if not refresh and state.memory_margin is not None:
            return state.memory_margin
        lookback = max(round(prm.memory_jump_lookback_s / prm.memory_max_slot_s), 1)
        peaks = state.memory_max.series(now_s=now_s, window_s=prm.memory_max_window_s + prm.memory_jump_lookback_s)
        margin = jump_margin(peaks, lookback=lookback, quantile=prm.memory_margin_jump_quantile,
                             bounds=(prm.memory_margin_min_fraction, prm.memory_margin_fraction))
        state.memory_margin = prm.memory_margin_fraction if margin is None else margin
        return state.memory_margin

    def _memory_statistic(self, state: PodtailorState, now_s: float, margin_fraction: float,
                          fleet: FleetScale | None) -> float | None:
        prm = self.params
        peak = state.memory_max.max(now_s=now_s, window_s=prm.memory_max_window_s)
        if prm.memory_oom_tolerance == "low":
            return state.memory.hist.percentile(0.98)
        if prm.memory_oom_tolerance == "cost":
            peaks = np.array(state.memory_max.values(now_s=now_s, window_s=prm.memory_max_window_s))
            price = prm.memory_oom_cost_gib_hours * GIB
            finite = peaks[np.isfinite(peaks)]
            own = float(finite.max()) if finite.size else 0.0
            if prm.memory_oom_cost_fleet_hours > 0 and fleet is not None and fleet.memory_bytes > 0:
                price = max(prm.memory_oom_cost_fleet_hours * fleet.memory_bytes,
                            prm.memory_oom_cost_min_peak_hours * own)
            elif prm.memory_oom_cost_peak_hours > 0:
                price = prm.memory_oom_cost_peak_hours * own
            price /= prm.risk
            level = cost_level(peaks, margin_fraction=margin_fraction,
                               overrun_cost=price * 3600.0 / prm.memory_max_slot_s)
            return level if level is not None else state.memory.hist.percentile(1.0)
        if peak is None:  # nothing inside the window: fall back to the decayed history's top
            peak = state.memory.hist.percentile(1.0)
        if prm.memory_oom_tolerance == "minimal" or peak is None:
            return peak
        p60 = state.memory.hist.percentile(0.6)
        return max(p60 or 0.0, 0.5 * peak)

    def _memory(self, state: PodtailorState, c: float, now_s: float, policy: ContainerPolicy, *,
                refresh: bool) -> tuple[ResourceEstimate | None, tuple[str, ...]]:
        prm = self.params
        max_allowed = policy.max_allowed.memory_bytes
        margin_fraction = self._memory_margin(state, now_s, refresh=refresh)
        stat = self._memory_statistic(state, now_s, margin_fraction, policy.fleet)
        oom = state.oom_floor(now_s)
        if oom is not None and max_allowed is not None:
            oom = min(oom, float(max_allowed))
        if stat is None and oom is None:
            return None, ()
        margin = 1.0 + margin_fraction
        target = (stat or 0.0) * margin
        reasons: tuple[str, ...] = ()
        if oom is not None and oom > target:
            target, reasons = oom, ("memory: OOM bump",)
        p_lower = state.memory.hist.percentile(prm.memory_lower_percentile)
        p_upper = state.memory.hist.percentile(prm.memory_upper_percentile)
        lower = target if p_lower is None else p_lower * margin * lower_multiplier(c)
        upper = target if p_upper is None else p_upper * margin * upper_multiplier(c)
        return ResourceEstimate(target=target, lower=min(lower, target), upper=max(upper, target)), reasons

    def _no_decrease(self, name: str, est: ResourceEstimate | None, c: float,
                     current: float | None) -> tuple[ResourceEstimate | None, tuple[str, ...]]:
        if (est is None or current is None or not self.params.no_decrease_on_thin_history
                or c >= self.params.thin_history_days or est.target >= current):
            return est, ()
        return replace(est, target=current, upper=max(est.upper, current)), (f"{name}: low confidence: no decrease",)

    def _decrease_wait_s(self, ratio: float) -> float:
        """How long after the last change a decrease to ``ratio`` x the current request waits: the dwell
        ``resize_down_dwell_s`` x (``resize_down_fraction`` / the drop) ^ ``resize_down_dwell_power``. With power
        1 a decrease just past the band waits the whole dwell and one twice as deep half of it: the more slack a
        decrease sheds, the sooner it goes, and a small one waits long enough to be rarely worth a pod update."""
        prm = self.params
        drop = 1.0 - ratio
        if prm.resize_down_dwell_power <= 0 or drop <= 0:
            return prm.resize_down_dwell_s
        share: float = (prm.resize_down_fraction / drop) ** prm.resize_down_dwell_power
        return prm.resize_down_dwell_s * min(share, 1.0)

    def _moves(self, est: ResourceEstimate | None, request: float | None, waited_s: float, up: float) -> bool:
        """Whether this resource's target left its resize band (or it has no request yet); a decrease also waits
        ``_decrease_wait_s`` after the last change (``waited_s`` since it; infinite when none was seen)."""
        if est is None:
            return False
        if request is None or request <= 0:
            return True
        ratio = est.target / request
        if ratio > 1.0 + up:
            return True
        return ratio < 1.0 - self.params.resize_down_fraction and waited_s >= self._decrease_wait_s(ratio)

    @staticmethod
    def _held(est: ResourceEstimate | None, request: float | None, limit: float | None) -> ResourceEstimate | None:
        """The estimate with the current request and limit kept."""
        if est is None or request is None or request <= 0:
            return est
        return replace(est, target=request, limit=limit if est.limit is not None else None)

    def _resize(self, state: PodtailorState, now_s: float, current: CurrentResources, cpu: ResourceEstimate | None,
                memory_estimate: Callable[[bool], tuple[ResourceEstimate | None, tuple[str, ...]]],
                ) -> tuple[ResourceEstimate | None, tuple[ResourceEstimate | None, tuple[str, ...]], tuple[str, ...]]:
        """Hysteresis, dwell time and coordination (module docstring): which targets go out, which are held,
        and for each held one why (its fresh target, and the band or the wait that keeps it). Memory comes from
        ``memory_estimate(refresh)``: first with the held margin; when memory is to go out (it moves, or CPU
        moves and takes it along), again with the margin refreshed."""
        prm = self.params
        req, lim = current.requests, current.limits
        since = state.note_applied([req.cpu_millicores, lim.cpu_millicores, req.memory_bytes, lim.memory_bytes],
                                   now_s)
        waited = math.inf if since is None else now_s - since
        cur_cpu = None if req.cpu_millicores is None else req.cpu_millicores / 1000.0
        cur_mem = None if req.memory_bytes is None else float(req.memory_bytes)
        memory, r_memory = memory_estimate(False)
        move_cpu = self._moves(cpu, cur_cpu, waited, prm.cpu_resize_up_fraction)
        move_mem = self._moves(memory, cur_mem, waited, prm.resize_up_fraction)
        if (move_mem or (prm.coordinate_resizes and move_cpu)) and prm.memory_margin_jump_quantile > 0:
            memory, r_memory = memory_estimate(True)
            move_mem = self._moves(memory, cur_mem, waited, prm.resize_up_fraction)
        if prm.coordinate_resizes and (move_cpu or move_mem):
            return cpu, (memory, r_memory), ()
        reasons = []  # a target already equal to the request (no-decrease rule, or by itself) is not "kept"
        if not move_cpu:
            if cpu is not None and cur_cpu and cpu.target != cur_cpu:
                reasons.append(self._kept_reason("cpu", _cpu_text(cpu.target), format_cpu(req.cpu_millicores or 0),
                                                 cpu.target / cur_cpu, prm.cpu_resize_up_fraction, waited))
            cpu = self._held(cpu, cur_cpu, None if lim.cpu_millicores is None else lim.cpu_millicores / 1000.0)
        if not move_mem:
            if memory is not None and cur_mem and memory.target != cur_mem:
                reasons.append(self._kept_reason("memory", _memory_text(memory.target),
                                                 format_memory(req.memory_bytes or 0), memory.target / cur_mem,
                                                 prm.resize_up_fraction, waited))
            memory = self._held(memory, cur_mem, None if lim.memory_bytes is None else float(lim.memory_bytes))
        return cpu, (memory, r_memory), tuple(reasons)

    def _kept_reason(self, name: str, target: str, current: str, ratio: float, up: float, waited_s: float) -> str:
        """Why ``name`` keeps its current request: a decrease still waiting out its dwell, or a target inside
        the resize band [1 - down, 1 + up] x the current request."""
        down = self.params.resize_down_fraction
        need = self._decrease_wait_s(ratio)
        if ratio < 1.0 - down and waited_s < need:
            return (f"{name}: kept at {current}: target {target} is a decrease of {1.0 - ratio:.0%}, and such a "
                    f"decrease waits {_hours(need)} after the last change ({_hours(need - waited_s)} to go)")
        return (f"{name}: kept at {current}: target {target} is within the resize band "
                f"(-{down:.0%} .. +{up:.0%} of the current request)")

    def recommend(self, state: ContainerState, *, now_s: float, policy: ContainerPolicy,
                  current: CurrentResources) -> tuple[Recommendation, ContainerState]:
        if not isinstance(state, PodtailorState):
            raise TypeError("podtailor strategy needs a PodtailorState")
        state = state.successor()  # noted, calibrated and margin-held below; the given state stays as it was
        if state.first_sample_s is None and not state.oom_bumps:
            return no_recommendation("no history"), state
        prm, n = self.params, max(policy.containers_in_pod, 1)
        cur_cpu = current.requests.cpu_millicores
        state.calibrate(None if cur_cpu is None else cur_cpu / 1000.0)
        c_cpu, c_mem = state.cpu_seen.days(), state.memory_seen.days()
        cpu = self._cpu(state, c_cpu, policy.fleet)
        cpu_floor, memory_floor = prm.pod_min_cpu_millicores / 1000.0 / n, prm.pod_min_memory_mib * MIB / n
        cpu, r_cpu_floor = _floored("cpu", cpu, cpu_floor, _cpu_text(cpu_floor))
        cpu, r_cpu = self._no_decrease("cpu", cpu, c_cpu, None if cur_cpu is None else cur_cpu / 1000.0)
        cur_mem = current.requests.memory_bytes

        def memory_estimate(refresh: bool) -> tuple[ResourceEstimate | None, tuple[str, ...]]:
            est, r_oom = self._memory(state, c_mem, now_s, policy, refresh=refresh)
            est, r_floor = _floored("memory", est, memory_floor, _memory_text(memory_floor))
            est, r_thin = self._no_decrease("memory", est, c_mem, None if cur_mem is None else float(cur_mem))
            return est, r_oom + r_floor + r_thin

        cpu, (memory, r_memory), r_kept = self._resize(state, now_s, current, cpu, memory_estimate)
        reasons = r_memory + r_cpu_floor + r_cpu
        missing = tuple(f"no {r} history" for r, e in (("cpu", cpu), ("memory", memory)) if e is None)
        known = [c for c, e in ((c_cpu, cpu), (c_mem, memory)) if e is not None]
        confidence = min(min(known, default=0.0) / prm.confidence_full_days, 1.0)
        estimate = Estimate(cpu=cpu, memory=memory, confidence=confidence,
                            reasons=reasons + r_kept + missing)
        return finalize(estimate, policy=policy, current=current), state


def _floored(name: str, est: ResourceEstimate | None, floor: float,
             text: str) -> tuple[ResourceEstimate | None, tuple[str, ...]]:
    """``est`` raised to ``floor`` (the per-container share of the pod's minimum), and the reason if it was."""
    if est is None:
        return None, ()
    reasons = (f"{name}: raised to the minimum {text} (per container, of the pod's minimum)",) \
        if est.target < floor else ()
    return with_floor(est, floor), reasons


def _cpu_text(cores: float) -> str:
    """Cores as kubectl prints them, rounded up to a millicore ("250m", "2")."""
    return format_cpu(math.ceil(round(cores * 1000.0, 6)))


def _memory_text(memory_bytes: float) -> str:
    """Bytes as kubectl prints them, rounded up to a MiB ("512Mi", "2Gi")."""
    return format_memory(math.ceil(round(memory_bytes / MIB, 6)) * MIB)


def _hours(seconds: float) -> str:
    return f"{seconds / 3600.0:.1f}h"
