"""A container's realized risk in the report's history window against the risk budget it is held to.

Owns ``BudgetCheck`` (the budget of the strategy the container is recommended by, ``--risk-budget`` or its
VPA's ``podtailor.io/risk-budget``, beside the rate the history shows) and ``budget_check``, which measures
that rate from the history read for the report: CPU, the share of samples above the container's current request
(the one applied while they were taken, as far as the report knows); memory, the OOM kills seen per 30 days
of observed time. Its text is what every format prints after the container's reasons.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from podtailor.resources import CurrentResources
from recommender.model.podtailor_budget import MONTH_S
from recommender.model.types import Strategy, UsageBatch


@dataclass(frozen=True, slots=True, kw_only=True)
class BudgetCheck:
    """Realized rates against the budget, per resource; a budget of None: that resource is not budgeted; a rate
    of None: the history cannot tell (no request, no samples)."""

    cpu_over_share_budget: float | None
    """The share of time CPU usage may be above the request."""
    cpu_over_share: float | None
    """The share of the window's CPU samples above the current request."""
    oom_per_month_budget: float | None
    """OOM kills allowed per 30 days."""
    oom_per_month: float | None
    """OOM kills seen per 30 days of observed time."""

    def text(self) -> str:
        """"risk budget: CPU over the request 1.2% of the time (budget 1%); OOM kills 0.0 / month (budget 1)"."""
        parts = []
        if self.cpu_over_share_budget is not None:
            seen = "n/a" if self.cpu_over_share is None else f"{self.cpu_over_share:.2%}"
            parts.append(f"CPU over the request {seen} of the time (budget {self.cpu_over_share_budget:.2%})")
        if self.oom_per_month_budget is not None:
            seen = "n/a" if self.oom_per_month is None else f"{self.oom_per_month:.2f}"
            parts.append(f"OOM kills {seen} / month (budget {self.oom_per_month_budget:g})")
        return "risk budget: " + "; ".join(parts)


_BUDGETS: dict[int, tuple[Strategy, tuple[float, float]]] = {}
"""``budget_of``'s answers by strategy object (held, so that its id is not reused while it is remembered)."""
_BUDGETS_KEPT = 64


def budget_of(strategy: Strategy) -> tuple[float, float]:
    """The strategy's CPU share and OOM budgets (0: not budgeted; a strategy without a budget has none).
    Remembered per strategy object (a strategy's parameters do not change once it is built, and the engine's
    ``at_risk`` keeps the few it builds): flattening podtailor's parameters for every workload was a tenth of
    the report's model stage at 10,000 workloads."""
    seen = _BUDGETS.get(id(strategy))
    if seen is not None and seen[0] is strategy:
        return seen[1]
    params = strategy.parameters()
    budget = float(params.get("budget.cpu_over_share", 0.0)), float(params.get("budget.oom_per_month", 0.0))
    if len(_BUDGETS) >= _BUDGETS_KEPT:
        _BUDGETS.clear()
    _BUDGETS[id(strategy)] = (strategy, budget)
    return budget


def budget_check(budget: tuple[float, float], batch: UsageBatch | None,
                 current: CurrentResources) -> BudgetCheck | None:
    """The container's realized rates against ``budget`` (``budget_of``) from its history ``batch`` (already at
    the step, summary folded in); None when nothing is budgeted."""
    cpu_budget, oom_budget = budget
    if cpu_budget <= 0 and oom_budget <= 0:
        return None
    request = current.requests.cpu_millicores
    cpu = None if batch is None else batch.cpu_cores.values
    share = None if cpu is None or not cpu.size or request is None else float(np.mean(cpu > request / 1000.0))
    seen_s = 0.0 if batch is None else len(batch.memory_peak_bytes) * batch.memory_interval_s
    ooms = None if batch is None or seen_s <= 0 else len(batch.oom_kills) / (seen_s / MONTH_S)
    return BudgetCheck(cpu_over_share_budget=cpu_budget if cpu_budget > 0 else None,
                       cpu_over_share=share if cpu_budget > 0 else None,
                       oom_per_month_budget=oom_budget if oom_budget > 0 else None,
                       oom_per_month=ooms if oom_budget > 0 else None)
