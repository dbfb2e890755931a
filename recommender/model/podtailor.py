"""The ``podtailor`` strategy: our default estimator, VPA's shape with its known weaknesses fixed.

Owns the arithmetic from a ``PodtailorState`` to an ``Estimate``, composed from the parts of ``PodtailorParams``
(``podtailor_params.py``; each part says why its settings are what they are). Confidence c (days) per resource is
min(span of the real samples, samples x their interval), not VPA's samples/1440, so hourly Prometheus history
counts in full. CPU (``cpu``): request = max(slow pL, fast pF) x (1 + margin) over throttling-corrected samples;
the slow level L is priced (``cpu_price``: the level that minimises provisioned cores plus the price x the share
of time above it, ``histogram.cost_share_of``), F is the request percentile; bounds p50/p95 x margin x VPA's
confidence multipliers; the limit by ``cpu_limit``. Memory (``memory``): a statistic of the peaks x (1 + margin),
by default the priced level of the window's hourly peaks (``memory_price``, ``peaks.cost_level``); the margin per
container from the jumps of its hourly peaks (``memory_margin``, ``peaks.jump_margin``), held between memory
moves so that it never moves a target by itself. Both prices are divided by the risk setting; relative to the
fleet when the caller says what fleet the container is in (``ContainerPolicy.fleet``: the engine, the report and
the backtest do; ``fleet_sums`` gives it as summable parts of the states). The memory target is floored by recent
OOM bumps (``oom``) capped at maxAllowed (the bump never enters the histogram, so a cap cannot feed itself: VPA
#9521). With thin history (``confidence``) a request is never lowered below the current one; both are floored at
the pod's minimum split over its containers (``floors``). Resizes: a resource "moves" when its target leaves its
band (``resize``); a decrease also waits after the last observed change of the applied values, less the deeper it
is (``dwell``; the state notes them on every call; increases never wait). When one resource moves, the other
takes its fresh target in the same update; when neither moves, both keep their current request and limit. With a
risk budget stated (``budget``, ``podtailor_budget``; off by default), the slow CPU histogram's percentile is the
budget's own (1 - the budget share, not the priced one: ``RiskBudget.cpu_level_factor``), and the CPU request's
level and the memory level x margin are multiplied by the container's own margin, calibrated from its overruns
before each recommendation (``PodtailorState.calibrate_budget``), and starting from the fleet's
(``fleet_scale``); the memory one also by a margin pooled over the fleet from every container's kills beyond
budget (``RiskBudget.memory_fleet_eta``, ``PodtailorState.memory_budget_margin``), held between memory moves as
the jump margin is.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any

import numpy as np

from podtailor.resources import CurrentResources
from podtailor.units import format_cpu, format_memory, human_memory
from recommender.model.common import MIB, StrategyBase, lower_multiplier, upper_multiplier
from recommender.model.fleet import FleetSums
from recommender.model.peaks import cost_level, jump_margin
from recommender.model.podtailor_cpu_parts import CpuLimitRule
from recommender.model.podtailor_memory_parts import MemoryMarginMode, MemoryStatistic
from recommender.model.podtailor_params import PodtailorParams, parameters_of
from recommender.model.podtailor_state import BudgetState, PodtailorState
from recommender.model.policy import (
    Estimate,
    LimitRule,
    ResourceEstimate,
    finalize,
    no_recommendation,
    with_floor,
)
from recommender.model.types import ContainerPolicy, ContainerState, FleetScale, HistoryPlan, Recommendation

_LIMIT_RULES = {CpuLimitRule.PERCENTILE: LimitRule.EXPLICIT, CpuLimitRule.PROPORTIONAL: LimitRule.PROPORTIONAL,
                CpuLimitRule.NONE: LimitRule.NONE}


def _max_opt(*values: float | None) -> float | None:
    known = [v for v in values if v is not None]
    return max(known) if known else None


class PodtailorStrategy(StrategyBase[PodtailorParams, PodtailorState]):
    """Our default: real-interval confidence, throttling-aware CPU, Autopilot memory classes, capped OOM bumps."""

    name = "podtailor"

    state_type = PodtailorState

    def __init__(self, params: PodtailorParams | None = None) -> None:
        super().__init__(params or PodtailorParams())

    def parameters(self) -> dict[str, Any]:
        """The flat view, ``{"part.field": value}`` (``podtailor_params.parameters_of``): what ``--set`` takes."""
        return parameters_of(self.params)

    def history_plan(self) -> HistoryPlan:
        """Full resolution for six slow CPU half-lives (3 days at 12 h: all older samples together weigh under
        1/64 of the slow histogram, nothing in the fast one), hourly summaries before that. Memory is read
        hourly there too: the "cost" statistic and the peak histogram take one peak per hour anyway."""
        return HistoryPlan(full_resolution_s=6 * max(self.params.cpu.half_life_s, self.params.cpu.fast_half_life_s))

    def _cpu_percentile(self, state: PodtailorState, p: float) -> float | None:
        fast = state.cpu_fast.percentile(p) if self.params.cpu.fast_half_life_s > 0 else None
        return _max_opt(state.cpu.percentile(p), fast)

    def fleet_sums(self, states: Iterable[ContainerState], now_s: float) -> FleetSums:
        """The fleet of ``states`` as summable parts (``fleet.FleetSums``; ``fleet_scale`` is their means): over
        those with history, their slow CPU histogram's p95 (``cpu.upper_percentile``) and their largest hourly
        memory peak in the window, the sizes the fleet prices are in units of (``cpu_price.fleet_ratio``,
        ``memory_price.fleet_hours``); and the risk budget's log-margins of the states that have one, whose mean
        is where a container without one starts, and their OOM excess, but a container whose memory target the
        pod's floor or minAllowed holds (``BudgetState.memory_floored``) is left out of the excess: its margin
        cannot act, and its months under the budget would dilute the fleet's pooled margin (RESULTS.md, "OOM
        budget, fifth pass")."""
        prm = self.params
        cpu: list[float] = []
        memory: list[float] = []
        margins: list[BudgetState] = []
        for state in states:
            if isinstance(state, PodtailorState):
                p95 = state.cpu.percentile(prm.cpu.upper_percentile)
                peak = state.memory_max.max(now_s=now_s, window_s=prm.memory.window_s)
                cpu.append(math.nan if p95 is None else p95)
                memory.append(math.nan if peak is None else peak)
                margins.append(state.budget)
        return FleetSums.of(cpu, memory,
                            cpu_log_margins=[b.cpu_log_margin for b in margins if b.cpu_log_margin is not None],
                            memory_log_margins=[b.memory_log_margin for b in margins
                                                if b.memory_log_margin is not None],
                            memory_excess=[b.memory_excess for b in margins
                                           if b.memory_log_margin is not None and not b.memory_floored])

    def _cpu(self, state: PodtailorState, c: float, fleet: FleetScale | None,
             budget_margin: float = 1.0) -> ResourceEstimate | None:
        prm = self.params
        level = slow_level = prm.cpu.request_percentile
        if prm.budget.cpu_over_share > 0 and prm.budget.cpu_level_factor > 0:
            # a stated CPU budget sets the slow level itself; the margin then tracks drift (cpu_level_factor)
            slow_level = max(1.0 - prm.budget.cpu_level_factor * prm.budget.cpu_over_share,
                             prm.cpu.min_request_percentile)
        elif (price := prm.cpu_price.price(state.cpu.percentile(prm.cpu.upper_percentile), fleet) / prm.risk) > 0:
            share = state.cpu.cost_share(margin_fraction=prm.cpu.margin_fraction, overrun_cost=price)
            if share is not None:
                # just below the share, so that the slow histogram's percentile is the chosen bucket itself
                slow_level = min(max(share * (1.0 - 1e-9), prm.cpu.min_request_percentile),
                                 prm.cpu.max_request_percentile)
        fast = state.cpu_fast.percentile(level) if prm.cpu.fast_half_life_s > 0 else None
        request = _max_opt(state.cpu.percentile(slow_level), fast)
        request = None if request is None else request * budget_margin
        lower = state.cpu.percentile(prm.cpu.lower_percentile)
        upper = state.cpu.percentile(prm.cpu.upper_percentile)
        if request is None or lower is None or upper is None:
            return None
        margin = 1.0 + prm.cpu.margin_fraction
        limit = None
        if prm.cpu_limit.rule is CpuLimitRule.PERCENTILE:
            peak = self._cpu_percentile(state, prm.cpu_limit.percentile) or request
            limit = max(peak * (1.0 + prm.cpu_limit.margin_fraction), request * margin * prm.cpu_limit.min_ratio)
        return ResourceEstimate(target=request * margin, lower=lower * margin * lower_multiplier(c),
                                upper=upper * margin * upper_multiplier(c),
                                limit_rule=_LIMIT_RULES[prm.cpu_limit.rule], limit=limit)

    def _memory_margin(self, state: PodtailorState, now_s: float, *, refresh: bool) -> float:
        """The memory margin: per container from the jumps of its hourly peaks (``peaks.jump_margin``), or the
        fixed one (quantile 0, or too few hours yet). The per-container margin is held in the state between
        memory moves: only ``refresh`` (the target is about to leave its band, or none is held yet) computes it
        anew, so a margin that changes from hour to hour never moves the target by itself (RESULTS.md, "The
        jump margin held")."""
        prm = self.params
        if prm.memory_margin.mode is MemoryMarginMode.FIXED:
            return prm.memory_margin.fraction
        if not refresh and state.memory_margin is not None:
            return state.memory_margin
        lookback = max(round(prm.memory_margin.jump_lookback_s / prm.memory.slot_s), 1)
        peaks = state.memory_max.series(now_s=now_s, window_s=prm.memory.window_s + prm.memory_margin.jump_lookback_s)
        margin = jump_margin(peaks, lookback=lookback, quantile=prm.memory_margin.jump_quantile,
                             bounds=(prm.memory_margin.min_fraction, prm.memory_margin.fraction))
        state.memory_margin = prm.memory_margin.fraction if margin is None else margin
        return state.memory_margin

    def _memory_statistic(self, state: PodtailorState, now_s: float, margin_fraction: float,
                          fleet: FleetScale | None) -> float | None:
        prm = self.params
        statistic = prm.memory.statistic
        if statistic is MemoryStatistic.LOW:
            return state.memory.hist.percentile(0.98)
        if statistic is MemoryStatistic.COST:
            peaks = np.array(state.memory_max.values(now_s=now_s, window_s=prm.memory.window_s))
            finite = peaks[np.isfinite(peaks)]
            price = prm.memory_price.price(float(finite.max()) if finite.size else 0.0, fleet) / prm.risk
            level = cost_level(peaks, margin_fraction=margin_fraction,
                               overrun_cost=price * 3600.0 / prm.memory.slot_s)
            return level if level is not None else state.memory.hist.percentile(1.0)
        peak = state.memory_max.max(now_s=now_s, window_s=prm.memory.window_s)
        if peak is None:  # nothing inside the window: fall back to the decayed history's top
            peak = state.memory.hist.percentile(1.0)
        if statistic is MemoryStatistic.MINIMAL or peak is None:
            return peak
        p60 = state.memory.hist.percentile(0.6)
        return max(p60 or 0.0, 0.5 * peak)

    def _memory(self, state: PodtailorState, c: float, now_s: float, policy: ContainerPolicy, *,
                refresh: bool, budget_margin: float = 1.0) -> tuple[ResourceEstimate | None, tuple[str, ...]]:
        prm = self.params
        max_allowed = policy.max_allowed.memory_bytes
        margin_fraction = self._memory_margin(state, now_s, refresh=refresh)
        stat = self._memory_statistic(state, now_s, margin_fraction, policy.fleet)
        oom = state.oom_floor(now_s, hold_s=prm.budget.oom_hold_s(prm.oom.window_s),
                              repeat_ratio=prm.budget.oom_repeat())
        if oom is not None and max_allowed is not None:
            oom = min(oom, float(max_allowed))
        if stat is None and oom is None:
            return None, ()
        margin = 1.0 + margin_fraction
        target = (stat or 0.0) * margin * budget_margin
        reasons: tuple[str, ...] = ()
        if oom is not None and oom > target:
            target, reasons = oom, ("memory: OOM bump",)
        p_lower = state.memory.hist.percentile(prm.memory.lower_percentile)
        p_upper = state.memory.hist.percentile(prm.memory.upper_percentile)
        lower = target if p_lower is None else p_lower * margin * lower_multiplier(c)
        upper = target if p_upper is None else p_upper * margin * upper_multiplier(c)
        return ResourceEstimate(target=target, lower=min(lower, target), upper=max(upper, target)), reasons

    def _no_decrease(self, name: str, est: ResourceEstimate | None, c: float,
                     current: float | None) -> tuple[ResourceEstimate | None, tuple[str, ...]]:
        if (est is None or current is None or not self.params.confidence.no_decrease_on_thin_history
                or c >= self.params.confidence.thin_history_days or est.target >= current):
            return est, ()
        return replace(est, target=current, upper=max(est.upper, current)), (f"{name}: low confidence: no decrease",)

    def _decrease_wait_s(self, ratio: float) -> float:
        """How long after the last change a decrease to ``ratio`` x the current request waits (``DecreaseDwell``)."""
        return self.params.dwell.wait_s(ratio, self.params.resize.down_fraction)

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
        return ratio < 1.0 - self.params.resize.down_fraction and waited_s >= self._decrease_wait_s(ratio)

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
        move_cpu = self._moves(cpu, cur_cpu, waited, prm.resize.cpu_up_fraction)
        move_mem = self._moves(memory, cur_mem, waited, prm.resize.memory_up_fraction)
        if (move_mem or (prm.resize.coordinate and move_cpu)) and prm.memory_margin.mode is MemoryMarginMode.JUMP:
            memory, r_memory = memory_estimate(True)
            move_mem = self._moves(memory, cur_mem, waited, prm.resize.memory_up_fraction)
        if prm.resize.coordinate and (move_cpu or move_mem):
            return cpu, (memory, r_memory), ()
        reasons = []  # a target already equal to the request (no-decrease rule, or by itself) is not "kept"
        if not move_cpu:
            if cpu is not None and cur_cpu and cpu.target != cur_cpu:
                reasons.append(self._kept_reason("cpu", _cpu_text(cpu.target), format_cpu(req.cpu_millicores or 0),
                                                 cpu.target / cur_cpu, prm.resize.cpu_up_fraction, waited))
            cpu = self._held(cpu, cur_cpu, None if lim.cpu_millicores is None else lim.cpu_millicores / 1000.0)
        if not move_mem:
            if memory is not None and cur_mem and memory.target != cur_mem:
                reasons.append(self._kept_reason("memory", _memory_text(memory.target),
                                                 human_memory(req.memory_bytes or 0), memory.target / cur_mem,
                                                 prm.resize.memory_up_fraction, waited))
            memory = self._held(memory, cur_mem, None if lim.memory_bytes is None else float(lim.memory_bytes))
        return cpu, (memory, r_memory), tuple(reasons)

    def _kept_reason(self, name: str, target: str, current: str, ratio: float, up: float, waited_s: float) -> str:
        """Why ``name`` keeps its current request: a decrease still waiting out its dwell, or a target inside
        the resize band [1 - down, 1 + up] x the current request."""
        down = self.params.resize.down_fraction
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
        m_cpu = state.calibrate_budget(prm.budget, policy.fleet)
        c_cpu, c_mem = state.cpu_seen.days(), state.memory_seen.days()
        cpu = self._cpu(state, c_cpu, policy.fleet, m_cpu)
        cpu_floor, memory_floor = prm.floors.pod_cpu_millicores / 1000.0 / n, prm.floors.pod_memory_mib * MIB / n
        cpu, r_cpu_floor = _floored("cpu", cpu, cpu_floor, _cpu_text(cpu_floor))
        cpu, r_cpu = self._no_decrease("cpu", cpu, c_cpu, None if cur_cpu is None else cur_cpu / 1000.0)
        ratio = state.note_cpu_limit_ratio(cur_cpu, current.limits.cpu_millicores)
        if cpu is not None and cpu.limit is not None:
            cpu = replace(cpu, limit=max(cpu.limit, prm.cpu_limit.floor(cpu.target, ratio)))
        cur_mem = current.requests.memory_bytes
        # Without a held margin the first estimate computes it anew, so a refresh would repeat the same
        # computation on the same state: the first answer is kept for it (the jump margin is the costliest part).
        held = state.memory_margin is not None or state.budget.memory_fleet_log is not None
        first: list[tuple[ResourceEstimate | None, tuple[str, ...]]] = []
        floored = [False]  # whether the pod's floor raised the last memory estimate (and minAllowed, below)
        jump = prm.memory_margin.mode is MemoryMarginMode.JUMP  # else no refresh comes: the fleet's is taken fresh

        def memory_estimate(refresh: bool) -> tuple[ResourceEstimate | None, tuple[str, ...]]:
            if refresh and first:
                return first[0]
            m_mem = state.memory_budget_margin(prm.budget, policy.fleet, refresh=refresh or not jump)
            est, r_oom = self._memory(state, c_mem, now_s, policy, refresh=refresh, budget_margin=m_mem)
            est, r_floor = _floored("memory", est, memory_floor, _memory_text(memory_floor))
            floored[0] = bool(r_floor)
            est, r_thin = self._no_decrease("memory", est, c_mem, None if cur_mem is None else float(cur_mem))
            if not held and not first:
                first.append((est, r_oom + r_floor + r_thin))
            return est, r_oom + r_floor + r_thin

        cpu, (memory, r_memory), r_kept = self._resize(state, now_s, current, cpu, memory_estimate)
        reasons = r_memory + r_cpu_floor + r_cpu
        missing = tuple(f"no {r} history" for r, e in (("cpu", cpu), ("memory", memory)) if e is None)
        known = [c for c, e in ((c_cpu, cpu), (c_mem, memory)) if e is not None]
        confidence = min(min(known, default=0.0) / prm.confidence.full_days, 1.0)
        estimate = Estimate(cpu=cpu, memory=memory, confidence=confidence,
                            reasons=reasons + r_kept + missing)
        rec = finalize(estimate, policy=policy, current=current)
        if prm.budget.oom_per_month > 0:  # raised by the pod's floor or by the policy's minAllowed
            low = policy.min_allowed.memory_bytes
            state.budget.memory_floored = floored[0] or (low is not None and memory is not None
                                                         and memory.target < low)
        if prm.budget.cpu_over_share > 0:
            # the request that goes out, after the bands, the dwell, the floors and the policy's caps: the one in
            # force while the next samples are taken, which is what the budget is scored against; not counted
            # while thin history holds it (r_cpu): the margin cannot act on it, and its hours under the budget
            # would let the margin overspend later
            cpu_out = rec.target.cpu_millicores
            state.budget.cpu_target_cores = None if cpu_out is None or r_cpu else cpu_out / 1000.0
        return rec, state


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
