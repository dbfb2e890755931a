"""The risk budget of the ``podtailor`` estimator: the risk a user states per container, and its calibration.

Owns ``RiskBudget`` (a part composed by ``PodtailorParams``: the share of time CPU usage may be above the
request, and the OOM kills a container may take per month; 0 leaves that resource as the prices set it), the
update that holds each container to it (``cpu_step``, ``memory_step``: adaptive conformal inference, Gibbs and
Candes 2021, "Adaptive conformal inference under distribution shift", eq. (2), on the log of a multiplicative
margin: after each observed period ``log m += eta x (overrun - budget)``; for memory also the fleet's pooled
margin, ``memory_fleet_log``, the same update on the fleet's kills), the step size that starts large and
decays with the container's own observed time (``RiskBudget.eta``: a short series still reaches its budget, a
long one does not waste slack after every overrun), and the text form shared by the ``--risk-budget`` flag and
the ``podtailor.io/risk-budget`` annotation (``parse_budget``: "cpu=0.01,oom=0.5"). Numbers in, numbers out.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from recommender.model.types import FleetScale

MONTH_S = 30 * 86400.0
"""A container-month, the unit of the OOM budget."""

CPU_ETA_REFERENCE_SHARE = 0.01
"""The CPU budget the CPU step sizes were chosen at (RESULTS.md, "How the CPU step size was chosen")."""

OOM_ETA_REFERENCE_PER_MONTH = 1.0
"""The OOM budget ``memory_fleet_eta`` is stated at: at another budget it is scaled by this / the budget, so ACI's
bound on the realized rate's error relative to the budget is the same at every budget (as the CPU step's)."""

OOM_HOLD_MAX_S = 90 * 86400.0
"""The longest an OOM bump is held under an OOM budget (``RiskBudget.oom_hold_s``), and how long the state keeps
the bumps it may need."""

OOM_REPEAT_MAX = 4.0
"""The most a repeated kill multiplies its bump by (``RiskBudget.oom_repeat_ratio``)."""

STEP_HOURS_MAX = 24.0
"""The most observed time one calibration step may weigh (a checkpoint restored after a long pause)."""

_ITEM = re.compile(r"(cpu|oom)=((?:[0-9]{1,6}(?:\.[0-9]{0,12})?|\.[0-9]{1,12}))")


@dataclass(frozen=True, slots=True, kw_only=True)
class RiskBudget:
    """The risk a container may take, per resource, held by a margin calibrated from its own overruns: the
    CPU request at the budget's own percentile (``cpu_level_factor``) and the memory target computed by the
    memory price are multiplied by the container's margin m, and after each observed period ``log m += eta x
    (observed rate - budget) x period`` within the bounds. Where a container has no calibrated margin yet, it
    starts from the fleet's (``FleetScale``), else from 1."""

    cpu_over_share: float = 0.0
    """Share of its time (0..1) a container's CPU usage may be above its request; 0: not budgeted (the
    default: the CPU price sets the level alone, as before the budget existed)."""
    oom_per_month: float = 0.0
    """OOM kills a container may take per 30 days; 0: not budgeted (the memory price sets the level alone)."""
    cpu_eta_start: float = 0.5
    """CPU step size (log-margin per hour per unit of over-request share) for a container with no history:
    an hour entirely over the target raises the margin by e^0.5 = 1.65 at first. 2.0 (to 0.3) landed as near
    the budget on the training traces and cost about 0.1-0.2 more relative CPU slack after every overrun
    (RESULTS.md, "Risk budget calibration")."""
    cpu_eta_end: float = 0.1
    """CPU step size after many days."""
    cpu_eta_budget_power: float = 1.0
    """Both CPU step sizes are multiplied by (``CPU_ETA_REFERENCE_SHARE`` / ``cpu_over_share``) to this power: 1
    keeps ACI's bound on the *relative* error of the realized rate, (range of log m + eta) / (eta x T x budget),
    the same at every budget as at the reference the step sizes were chosen at (a 0.5% budget steps twice as
    far, a 2% one half as far); 0 leaves them as stated. 1 landed nearer 0.5% and 2% budgets on the training
    traces than 0, at more CPU slack at 0.5% and less at 2% (RESULTS.md, "CPU budget, second pass")."""
    cpu_level_factor: float = 1.0
    """With a CPU budget, the slow CPU histogram's percentile is 1 - this x ``cpu_over_share`` instead of the
    priced one (0: the priced level, at most ``CpuLevel.max_request_percentile``): at 1 the level whose share
    of the recent history over it is the budget, so the margin starts near where it settles and only tracks
    drift. ACI's realized error is about the distance the log-margin travels over eta x T: from the priced
    level the margins of August's first 150 VMs at 0.5% ended at a median of e^0.77, and the whole Bitbrains
    months overshot 0.5% by 75-85%; from the budget's own level they land within 11% of each of 0.5%, 1% and 2%
    at 1x, with less CPU slack at 0.5% and 1%, and a VM that idles between busy days keeps its level for days,
    not hours (RESULTS.md, "CPU budget, third pass")."""
    memory_eta_start: float = 0.5
    """Memory step size (log-margin per OOM kill) for a container with no history."""
    memory_eta_end: float = 0.1
    """Memory step size after many days: one kill raises the margin by 10.5%."""
    memory_kill_allowance: float = 1.0
    """Budgeted kills a container accrues before its memory margin is first lowered (0: from the start). A
    container's first kill comes before any feedback, so a margin lowered from the start overshoots by about
    one kill per container: 1.1 to 3.5 kills a month at budgets of 0.5 to 2 on the training traces (RESULTS.md,
    "OOM budget, second pass")."""
    memory_fleet_eta: float = 2.0
    """Log-margin per OOM kill beyond the budget, per container, over the fleet, at 1 kill a month (x 1 kill a
    month / the budget at another): every container's memory margin is also multiplied by exp(this x the fleet's
    mean ``BudgetState.memory_excess``, ``FleetScale.memory_excess``), a margin pooled over the fleet that learns
    from every container's kills (0: none, each container alone). A container's own kills are too few to
    calibrate a budget of a kill a month: alone, 0.5, 1 and 2 a month all came to 0.89 on 107 Google jobs and
    2.4-2.5 and 2.8-3.0 on 150 Bitbrains VMs of each month; pooled at 2, to 0.76 / 1.20 / 1.96, 0.66 / 1.09 /
    1.94 and 1.07 / 1.60 / 2.41, at more memory slack where the kills fell. 4 landed no nearer on the Google jobs
    at much more memory slack at 0.5 (RESULTS.md, "OOM budget, third pass")."""
    oom_hold_factor: float = 1.0
    """With an OOM budget, a kill's bump floors the memory target for this / the budget months (at least
    ``OomHandling.window_s``, at most ``OOM_HOLD_MAX_S``): 2 months at 0.5 a month, 15 days at 2. A container whose
    bursts come more often than its budget allows keeps the level that covers them; one whose bursts are rarer
    would stay within its budget with the bump's own day too, and pays the hold in slack. Without it, a
    container's memory falls back a day after each kill and the next burst kills it again, and those repeated
    kills, pooled, raise every container's fleet margin (RESULTS.md, "OOM budget, fourth pass"). 0: the bump's
    own window."""
    oom_repeat_ratio: float = 1.5
    """With an OOM budget, a kill that follows k others within the hold bumps by the bump x this^k (at most x
    ``OOM_REPEAT_MAX``): a kill is seen only at the limit it hit, so a burst far above the limit would otherwise
    cost one kill per bump of x1.2. 1: every kill bumps alike."""
    eta_decay_days: float = 2.0
    """eta = end + (start - end) x d / (d + observed days): half-way down after this many days."""
    min_margin: float = 0.25
    """The smallest margin (a container far under its budget is sized to a quarter of the priced level)."""
    max_margin: float = 4.0
    """The largest margin."""

    def __post_init__(self) -> None:
        if not (0 <= self.cpu_over_share < 1 and 0 <= self.oom_per_month < math.inf):  # also rejects NaN
            raise ValueError("budget: cpu_over_share must be in [0, 1) and oom_per_month finite and >= 0")
        etas = (self.cpu_eta_start, self.cpu_eta_end, self.memory_eta_start, self.memory_eta_end,
                self.cpu_eta_budget_power, self.cpu_level_factor, self.memory_fleet_eta, self.oom_hold_factor)
        if not all(0 <= e < math.inf for e in etas) or not self.eta_decay_days > 0:
            raise ValueError("budget: the step sizes must be finite and >= 0, eta_decay_days > 0")
        if not 0 <= self.memory_kill_allowance < math.inf:
            raise ValueError("budget: memory_kill_allowance must be finite and >= 0")
        if not 1 <= self.oom_repeat_ratio < math.inf:
            raise ValueError("budget: oom_repeat_ratio must be finite and >= 1")
        if not 0 < self.min_margin <= 1 <= self.max_margin < math.inf:
            raise ValueError("budget: 0 < min_margin <= 1 <= max_margin is required")

    @property
    def on(self) -> bool:
        """Whether any resource is budgeted."""
        return self.cpu_over_share > 0 or self.oom_per_month > 0

    def eta(self, start: float, end: float, observed_days: float) -> float:
        """The step size for a container observed ``observed_days``: ``start`` at 0, decaying to ``end``."""
        d = self.eta_decay_days
        return end + (start - end) * d / (d + max(observed_days, 0.0))

    def _clip(self, log_margin: float) -> float:
        return min(max(log_margin, math.log(self.min_margin)), math.log(self.max_margin))

    def cpu_step(self, log_margin: float, *, over_s: float, seen_s: float, observed_days: float) -> float:
        """One update of the CPU log-margin after ``seen_s`` of samples, ``over_s`` of them above the applied
        request: ``eta x (over_s / seen_s - budget) x hours`` (at most ``STEP_HOURS_MAX``), within the bounds."""
        if seen_s <= 0:
            return log_margin
        hours = min(seen_s / 3600.0, STEP_HOURS_MAX)
        eta = self.eta(self.cpu_eta_start, self.cpu_eta_end, observed_days)
        if self.cpu_eta_budget_power > 0 and self.cpu_over_share > 0:
            eta *= (CPU_ETA_REFERENCE_SHARE / self.cpu_over_share) ** self.cpu_eta_budget_power
        return self._clip(log_margin + eta * (over_s / seen_s - self.cpu_over_share) * hours)

    def memory_step(self, log_margin: float, *, kills: int, seen_s: float, observed_days: float) -> float:
        """One update of the memory log-margin after ``seen_s`` of memory samples with ``kills`` OOM kills, the
        container observed ``observed_days`` in all (these samples included): ``eta x (kills - budget x
        months)``, within the bounds, where the months are those past the container's first
        ``memory_kill_allowance`` budgeted kills (``budget_months``)."""
        months = min(self.budget_months(seen_s, observed_days), STEP_HOURS_MAX * 3600.0 / MONTH_S)
        eta = self.eta(self.memory_eta_start, self.memory_eta_end, observed_days)
        return self._clip(log_margin + eta * (kills - self.oom_per_month * months))

    def memory_fleet_log(self, fleet: FleetScale | None) -> float:
        """The fleet's pooled memory log-margin: ``memory_fleet_eta`` x (1 kill a month / the budget) x the
        fleet's mean excess of kills (0 without an OOM budget or a fleet excess)."""
        excess = None if fleet is None else fleet.memory_excess
        if excess is None or self.oom_per_month <= 0:
            return 0.0
        return self.memory_fleet_eta * OOM_ETA_REFERENCE_PER_MONTH / self.oom_per_month * excess

    def memory_margin(self, own: float, fleet_log: float) -> float:
        """The memory margin a container is sized with: exp(its own log-margin + the fleet's), within the bounds."""
        return math.exp(self._clip(own + fleet_log))

    def oom_hold_s(self, window_s: float) -> float:
        """How long a kill's bump floors the memory target: ``window_s`` (``OomHandling``'s) without an OOM
        budget, else ``oom_hold_factor`` / the budget months, at least ``window_s``, at most ``OOM_HOLD_MAX_S``."""
        if self.oom_per_month <= 0 or self.oom_hold_factor <= 0:
            return window_s
        return max(window_s, min(self.oom_hold_factor * MONTH_S / self.oom_per_month, OOM_HOLD_MAX_S))

    def oom_repeat(self) -> float:
        """The ratio a repeated kill's bump is multiplied by per earlier kill within the hold (1 without an OOM
        budget)."""
        return self.oom_repeat_ratio if self.oom_per_month > 0 else 1.0

    def budget_months(self, seen_s: float, observed_days: float) -> float:
        """The months of the last ``seen_s`` (of ``observed_days`` observed in all) that lower the memory
        margin: those after the container has accrued ``memory_kill_allowance`` kills of budget."""
        if self.oom_per_month <= 0:
            return 0.0
        start = self.memory_kill_allowance / self.oom_per_month
        total = max(observed_days * 86400.0, seen_s, 0.0) / MONTH_S
        before = total - max(seen_s, 0.0) / MONTH_S
        return max(total - start, 0.0) - max(before - start, 0.0)


def parse_budget(text: str) -> RiskBudget:
    """``"cpu=0.01,oom=0.5"`` (either item alone, each at most once; plain decimals: no sign, exponent, "nan"
    or "inf") as a ``RiskBudget``; ``ValueError`` saying what is wanted otherwise."""
    shown = repr(text)[:40]
    wanted = "cpu=SHARE (0 to 1, of time over the request) and/or oom=KILLS (per container-month), e.g. cpu=0.01,oom=1"
    values: dict[str, float] = {}
    for item in str(text).split(","):
        match = _ITEM.fullmatch(item.strip())
        if match is None or match.group(1) in values:
            raise ValueError(f"risk budget {shown}: want {wanted}")
        values[match.group(1)] = float(match.group(2))
    try:
        return RiskBudget(cpu_over_share=values.get("cpu", 0.0), oom_per_month=values.get("oom", 0.0))
    except ValueError:
        raise ValueError(f"risk budget {shown}: cpu must be below 1; want {wanted}") from None


def budget_text(budget: RiskBudget) -> str:
    """The text ``parse_budget`` reads back: the budgeted items only ("" when none is)."""
    items = [(k, v) for k, v in (("cpu", budget.cpu_over_share), ("oom", budget.oom_per_month)) if v > 0]
    return ",".join(f"{k}={v:.12f}".rstrip("0").rstrip(".") for k, v in items)
