"""The per-container history of the ``podtailor`` strategy (its parameters: ``podtailor_params.py``).

Owns ``PodtailorState``: a slow and a fast decaying CPU histogram fed throttling-corrected samples
(``observed.throttle_corrected``), a decaying histogram of memory peaks per aggregation interval, the raw memory
peaks' maxima per slot (for the "max over the window" and "cost" statistics), OOM bumps kept apart from the
histograms, the real observed history per resource (span, and samples x interval) for the confidence, the applied
values last seen (for the decrease dwell), the held memory margin, the risk budget's margins and overrun counts
(``BudgetState``, ``podtailor_budget.RiskBudget``), and the checkpoint of all of it (``STATE_VERSION``; fields
added later are optional when restored).
"""

from __future__ import annotations

import copy
import dataclasses
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from podtailor.numeric import is_finite_number
from recommender.model.common import DAY_S, oom_bump, segments, validate_batch
from recommender.model.histogram import BucketScheme, DecayingHistogram
from recommender.model.observed import Observed, SeenSpan, throttle_corrected
from recommender.model.peaks import IntervalPeaks, SlotMax, SortedSamples, sort_samples, split_at
from recommender.model.podtailor_budget import MONTH_S, OOM_HOLD_MAX_S, OOM_REPEAT_MAX, RiskBudget
from recommender.model.podtailor_params import PodtailorParams
from recommender.model.types import FleetScale, FloatArray, OomKill, UsageBatch

STATE_VERSION = 1

OOM_BUMPS_KEPT = 64
"""The most OOM bumps a state keeps (the newest), so that a container killed again and again keeps a small
checkpoint."""


class PodtailorState(SeenSpan):
    """podtailor's per-container history."""

    def __init__(self, params: PodtailorParams) -> None:
        cpu_scheme = BucketScheme(first_bucket_size=params.cpu.bucket_first_cores, ratio=params.cpu.bucket_ratio,
                                  max_value=1000.0)
        mem_scheme = BucketScheme(first_bucket_size=params.memory.bucket_first_bytes,
                                  ratio=params.memory.bucket_ratio, max_value=1e12)
        self.params = params
        self.cpu = DecayingHistogram(cpu_scheme, params.cpu.half_life_s)
        self.cpu_fast = DecayingHistogram(cpu_scheme, params.cpu.fast_half_life_s or params.cpu.half_life_s)
        self.memory = IntervalPeaks(DecayingHistogram(mem_scheme, params.memory.half_life_s),
                                    params.memory.aggregation_interval_s, aligned=True)
        self.memory_max = SlotMax(slot_s=params.memory.slot_s,
                                  retention_s=params.memory.window_s + params.memory_margin.jump_lookback_s
                                  + params.memory.slot_s)
        self.oom_bumps: list[tuple[float, float]] = []
        self.cpu_seen = Observed()
        self.memory_seen = Observed()
        self.applied: list[int | None] | None = None
        """The applied values (CPU/memory request/limit) last seen by ``note_applied``."""
        self.applied_since_s: float | None = None
        """When they were first seen (the time of the last observed change)."""
        self.cpu_limit_ratio: float | None = None
        """The container's own CPU limit:request ratio, from the first applied values seen with both (before
        any resize of ours: the user's, which VPA's proportional rule keeps; ``CpuLimit.keep_ratio``)."""
        self.memory_margin: float | None = None
        """The per-container memory margin (``MemoryMarginMode.JUMP``) held since it was last refreshed:
        when the memory target last left its band (None: not yet computed)."""
        self.budget = BudgetState()
        """The risk budget's margins and counts (``RiskBudget``; untouched while no budget is stated)."""

    def successor(self) -> PodtailorState:
        """A copy for ``recommend`` to note the applied values, calibrate and hold the margin on, so that the
        state it is given stays as it was. The histories (which ``recommend`` only reads) are shared, not copied
        (a deep copy costs more than the recommendation): the caller goes on with the successor only. The
        budget's few numbers, which ``recommend`` calibrates, are copied."""
        out = copy.copy(self)
        out.budget = dataclasses.replace(self.budget)
        return out

    def note_applied(self, values: list[int | None], now_s: float) -> float | None:
        """Record the applied values seen at ``now_s``; the time they were first seen (None: unknown)."""
        if self.applied != values:
            self.applied_since_s = now_s if self.applied is not None else None
            self.applied = values
        return self.applied_since_s

    def note_cpu_limit_ratio(self, request_millicores: int | None, limit_millicores: int | None) -> float | None:
        """Keep the first CPU limit:request ratio seen (``cpu_limit_ratio``); the one kept (None: not yet)."""
        if self.cpu_limit_ratio is None and request_millicores and limit_millicores:
            self.cpu_limit_ratio = max(limit_millicores / request_millicores, 1.0)
        return self.cpu_limit_ratio

    def calibrate_budget(self, budget: RiskBudget, fleet: FleetScale | None) -> float:
        """Fold the overruns counted since the last call into the log-margins of the resources ``budget``
        budgets (``RiskBudget.cpu_step``, ``memory_step``); a resource budgeted for the first time starts from
        the fleet's margin (else 1), and from then on its overruns are counted. The budget is the recommending
        strategy's (a VPA's annotation may state one the state's own parameters do not). Returns the CPU margin
        to multiply the priced level by (1 where not budgeted); the memory margin is ``memory_budget_margin``'s,
        which also takes the fleet's pooled part."""
        b = self.budget
        cpu = 1.0
        if budget.cpu_over_share > 0:
            if b.cpu_log_margin is None:
                b.cpu_log_margin = _fleet_margin(fleet, "cpu_log_margin")
            elif b.cpu_seen_s > 0:
                b.cpu_log_margin = budget.cpu_step(b.cpu_log_margin, over_s=b.cpu_over_s, seen_s=b.cpu_seen_s,
                                                   observed_days=b.total_cpu_seen_s / DAY_S)
            cpu = math.exp(b.cpu_log_margin)
        if budget.oom_per_month > 0:
            if b.memory_log_margin is None:
                b.memory_log_margin = _fleet_margin(fleet, "memory_log_margin")
            elif b.memory_seen_s > 0 or b.memory_kills:
                b.memory_log_margin = budget.memory_step(b.memory_log_margin, kills=b.memory_kills,
                                                         seen_s=b.memory_seen_s,
                                                         observed_days=b.total_memory_seen_s / DAY_S)
                b.total_memory_allowed += budget.oom_per_month * b.memory_seen_s / MONTH_S
        if b != BudgetState():
            b.cpu_over_s = b.cpu_seen_s = b.memory_seen_s = 0.0
            b.memory_kills = 0
        return cpu

    def memory_budget_margin(self, budget: RiskBudget, fleet: FleetScale | None, *, refresh: bool) -> float:
        """The memory margin to size with: the container's own (``calibrate_budget``) times the fleet's pooled
        one (``RiskBudget.memory_fleet_log``), which is held as the jump margin is: taken afresh only when
        ``refresh`` (the memory target goes out anyway) or when none is held, so the fleet's moves never resize
        a container by themselves. 1 while memory is not budgeted."""
        b = self.budget
        if budget.oom_per_month <= 0 or b.memory_log_margin is None:
            return 1.0
        if refresh or b.memory_fleet_log is None:
            b.memory_fleet_log = budget.memory_fleet_log(fleet)
        return budget.memory_margin(b.memory_log_margin, b.memory_fleet_log)

    def _count_budget(self, cpu: FloatArray, memory_samples: int, batch: UsageBatch) -> None:
        """Count the overruns of a batch of a budgeted resource (one with a log-margin): CPU time above the CPU
        request last recommended (after the resize bands, the dwell and the floors: the request in force while
        the batch was taken, which the realized rate is scored against; ACI holds the long-run rate of the error
        it integrates, so a request held above or below the budgeted level moves the margin to make up for
        it), OOM kills."""
        b = self.budget
        if b.cpu_log_margin is not None and b.cpu_target_cores is not None and cpu.size:
            over = float(np.count_nonzero(cpu > b.cpu_target_cores)) * batch.cpu_interval_s
            seen = float(cpu.size) * batch.cpu_interval_s
            b.cpu_over_s, b.cpu_seen_s = b.cpu_over_s + over, b.cpu_seen_s + seen
            b.total_cpu_over_s, b.total_cpu_seen_s = b.total_cpu_over_s + over, b.total_cpu_seen_s + seen
        if b.memory_log_margin is not None:
            # while the pod's floor or minAllowed holds the memory target (``memory_floored``) its time is not
            # counted: the margin cannot act on it, and months under the budget there would lower the margin for
            # the day the usage outgrows the floor and pull the fleet's pooled excess down; its kills still count
            kills = len(batch.oom_kills)
            seen = 0.0 if b.memory_floored else float(memory_samples) * batch.memory_interval_s
            b.memory_kills, b.memory_seen_s = b.memory_kills + kills, b.memory_seen_s + seen
            b.total_memory_kills, b.total_memory_seen_s = b.total_memory_kills + kills, b.total_memory_seen_s + seen

    def add(self, batch: UsageBatch) -> None:
        validate_batch(batch)
        for part, weight in segments(batch):
            self._add_segment(part, weight)

    def _add_segment(self, batch: UsageBatch, cpu_weight: float) -> None:
        cpu = self._add_cpu(batch, cpu_weight)
        mem = sort_samples(batch.memory_peak_bytes.timestamps_s, batch.memory_peak_bytes.values)
        if self.memory_seen.last_s is not None:
            _, mem = split_at(mem, self.memory_seen.last_s)
        self._count_budget(cpu, mem.values.size, batch)
        for oom in sorted(batch.oom_kills, key=lambda o: o.timestamp_s):
            before, mem = split_at(mem, oom.timestamp_s)
            self._add_memory(before, batch.memory_interval_s)
            self._record_oom(oom)
        self._add_memory(mem, batch.memory_interval_s)

    def _add_cpu(self, batch: UsageBatch, weight: float = 1.0) -> FloatArray:
        """Fold the batch's new CPU samples in; those samples (as fed to the histograms)."""
        values = batch.cpu_cores.values
        if self.params.cpu.throttle_correction:
            values = throttle_corrected(batch.cpu_cores, batch.cpu_throttled_fraction)
        cpu = sort_samples(batch.cpu_cores.timestamps_s, values)
        if self.cpu_seen.last_s is not None:  # a new batch holds only samples newer than the previous one
            _, cpu = split_at(cpu, self.cpu_seen.last_s)
        self.cpu.add(cpu.values, cpu.timestamps_s, weight)
        if self.params.cpu.fast_half_life_s > 0:
            self.cpu_fast.add(cpu.values, cpu.timestamps_s, weight)
        self.cpu_seen.note(cpu.timestamps_s, batch.cpu_interval_s)
        return cpu.values

    def _add_memory(self, mem: SortedSamples, interval_s: float) -> None:
        self.memory.add(mem)
        self.memory_max.add(mem)
        self.memory_seen.note(mem.timestamps_s, interval_s)

    def _record_oom(self, oom: OomKill) -> None:
        """The kill happened at the limit, so ``used`` is the limit when known (VPA uses the request)."""
        used = max(float(oom.memory_limit_bytes or 0), float(oom.memory_request_bytes or 0), self.memory.usage_peak)
        bump = oom_bump(used, min_bump_bytes=self.params.oom.min_bump_bytes, ratio=self.params.oom.bump_ratio)
        self.oom_bumps = _kept_bumps([*self.oom_bumps, (oom.timestamp_s, bump)], self.params.oom.window_s)

    def oom_floor(self, now_s: float, *, hold_s: float | None = None, repeat_ratio: float = 1.0) -> float | None:
        """The memory floor the OOM bumps of the last ``hold_s`` (``OomHandling.window_s`` when None) set at
        ``now_s``: the largest bump, each multiplied by ``repeat_ratio``^k (at most ``OOM_REPEAT_MAX``) for the k
        kills within ``hold_s`` before it (``RiskBudget.oom_repeat_ratio``). None: no bump in force."""
        hold = self.params.oom.window_s if hold_s is None else hold_s
        out: float | None = None
        for i, (t, bump) in enumerate(self.oom_bumps):  # sorted by time
            if not now_s - hold <= t <= now_s:
                continue
            k = sum(1 for u, _ in self.oom_bumps[:i] if u >= t - hold)
            value = bump * min(repeat_ratio ** k, OOM_REPEAT_MAX)
            out = value if out is None else max(out, value)
        return out

    def to_checkpoint(self) -> dict[str, Any]:
        return {"strategy": "podtailor", "version": STATE_VERSION, "cpu": self.cpu.to_checkpoint(),
                "cpu_fast": self.cpu_fast.to_checkpoint(), "memory": self.memory.to_checkpoint(),
                "memory_max": self.memory_max.to_checkpoint(), "oom_bumps": [list(b) for b in self.oom_bumps],
                "cpu_seen": [self.cpu_seen.first_s, self.cpu_seen.last_s, self.cpu_seen.seconds],
                "memory_seen": [self.memory_seen.first_s, self.memory_seen.last_s, self.memory_seen.seconds],
                "applied": self.applied, "applied_since_s": self.applied_since_s,
                "memory_margin": self.memory_margin, "cpu_limit_ratio": self.cpu_limit_ratio,
                **self.budget.to_checkpoint()}

    def restore_from(self, data: dict[str, Any]) -> None:
        if data.get("strategy") != "podtailor" or data.get("version") != STATE_VERSION:
            raise ValueError("not a podtailor v1 checkpoint")
        self.cpu = DecayingHistogram.from_checkpoint(data["cpu"])
        self.cpu_fast = DecayingHistogram.from_checkpoint(data["cpu_fast"])
        self.memory = IntervalPeaks.from_checkpoint(data["memory"])
        self.memory_max = SlotMax.from_checkpoint(data["memory_max"])
        self.oom_bumps = _oom_bumps(data["oom_bumps"], self.params.oom.window_s)
        self.cpu_seen = _observed(data["cpu_seen"])
        self.memory_seen = _observed(data["memory_seen"])
        applied = data.get("applied")  # absent in checkpoints written before the dwell time existed
        self.applied = None if applied is None else [None if v is None else int(v) for v in applied]
        since = data.get("applied_since_s")
        self.applied_since_s = None if since is None else float(since)
        margin = data.get("memory_margin")  # absent before the jump margin was held: refreshed on the next call
        self.memory_margin = None if margin is None else float(margin)
        ratio = data.get("cpu_limit_ratio")  # absent before the limit kept it: taken anew from the applied values
        self.cpu_limit_ratio = None if ratio is None else _limit_ratio(ratio)
        # "cpu_level", "pending_cpu" and "pending_cpu_s" (the CPU percentile calibration the risk budget replaced,
        # in checkpoints written before 2026-12-07) are not read: the CPU budget is RiskBudget's
        self.budget = BudgetState.from_checkpoint(data.get("budget"))  # absent before the budget existed


@dataclass(slots=True, kw_only=True)
class BudgetState:
    """The risk budget's part of the state: the log-margins (None: not calibrated yet, the fleet's is used),
    the overruns counted since the last calibration step, and the totals since counting began (the realized
    rates ``report`` shows against the budget). Mutable, as the rest of the state; a few numbers, so the
    checkpoint stays small."""

    cpu_log_margin: float | None = None
    memory_log_margin: float | None = None
    cpu_target_cores: float | None = None
    """The CPU request last recommended with the budget, after the resize bands (what overruns count against)."""
    cpu_over_s: float = 0.0
    cpu_seen_s: float = 0.0
    memory_kills: int = 0
    memory_seen_s: float = 0.0
    total_cpu_over_s: float = 0.0
    total_cpu_seen_s: float = 0.0
    total_memory_kills: int = 0
    total_memory_seen_s: float = 0.0
    total_memory_allowed: float = 0.0
    """The kills the budget allowed over the same time (budget x months, step by step, at the budget of each)."""
    memory_fleet_log: float | None = None
    """The fleet's pooled memory log-margin as last taken (``memory_budget_margin``: held between memory moves)."""
    memory_floored: bool = False
    """Whether the pod's floor or the policy's minAllowed raised the memory target last recommended with an OOM
    budget (the margin could not lower it): until the next recommendation the container's memory time is not
    counted against the budget (``_count_budget``) and its excess is left out of the fleet's
    (``PodtailorStrategy.fleet_sums``)."""

    @property
    def memory_excess(self) -> float:
        """OOM kills beyond the budget since counting began (negative: under it); the fleet pools these."""
        return self.total_memory_kills - self.total_memory_allowed

    def to_checkpoint(self) -> dict[str, Any]:
        """``{"budget": {...}}``, or nothing while the budget has never counted (the checkpoint of a state
        without a budget is what it was before the budget existed)."""
        if self == BudgetState():
            return {}
        return {"budget": {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}}

    @classmethod
    def from_checkpoint(cls, raw: object) -> BudgetState:
        if raw is None:
            return cls()
        if not isinstance(raw, dict) or not set(raw) <= {f.name for f in dataclasses.fields(cls)}:
            raise ValueError("bad budget in a podtailor checkpoint")
        out = cls()
        for f in dataclasses.fields(cls):
            value = raw.get(f.name, getattr(out, f.name))
            if f.name == "memory_floored":
                if not isinstance(value, bool):
                    raise ValueError("bad budget.memory_floored in a podtailor checkpoint")
                out.memory_floored = value
                continue
            if value is not None and not is_finite_number(value):
                raise ValueError(f"bad budget.{f.name} in a podtailor checkpoint")
            kind = int if f.name.endswith("kills") else float
            setattr(out, f.name, None if value is None else kind(value))
        return out


def _fleet_margin(fleet: FleetScale | None, name: str) -> float:
    """The fleet's log-margin ``name`` (0, a margin of 1, when the fleet has none)."""
    value = None if fleet is None else getattr(fleet, name)
    return 0.0 if value is None else float(value)


def _observed(raw: list[Any]) -> Observed:
    first, last, seconds = raw
    return Observed(None if first is None else float(first), None if last is None else float(last), float(seconds))


def _oom_bumps(raw: Any, window_s: float) -> list[tuple[float, float]]:
    """A checkpoint's OOM bumps as the state keeps them (``_kept_bumps``): (time, bump) pairs with a finite
    time and a finite positive bump (others are dropped: a bump that is not a size could not floor a target)."""
    pairs = [(float(t), float(b)) for t, b in raw]
    return _kept_bumps([(t, b) for t, b in pairs if math.isfinite(t) and math.isfinite(b) and b > 0], window_s)


def _kept_bumps(bumps: list[tuple[float, float]], window_s: float) -> list[tuple[float, float]]:
    """``bumps`` sorted by time, those within the longest hold a budget may ask of the newest
    (``RiskBudget.oom_hold_s``: ``OOM_HOLD_MAX_S``, or ``OomHandling.window_s`` when longer), the newest
    ``OOM_BUMPS_KEPT`` at most (``oom_floor`` reads every pair against every earlier one)."""
    if not bumps:
        return []
    newest = max(t for t, _ in bumps)
    keep_s = max(window_s, OOM_HOLD_MAX_S)
    return sorted(b for b in bumps if b[0] >= newest - keep_s)[-OOM_BUMPS_KEPT:]


MAX_CPU_LIMIT_RATIO = 1000.0
"""A checkpoint's CPU limit:request ratio above this (or not finite, or below 1) is refused: it would set an
absurd limit, and a real pod's ratio is far below it."""


def _limit_ratio(raw: object) -> float:
    ratio = float(raw)  # type: ignore[arg-type]  # a bad type raises, and the checkpoint is refused whole
    if not (1.0 <= ratio <= MAX_CPU_LIMIT_RATIO):  # also refuses NaN
        raise ValueError(f"checkpoint CPU limit ratio {ratio!r} outside [1, {MAX_CPU_LIMIT_RATIO:g}]")
    return ratio
