"""The strategy registry: names to strategies, with parameter overrides.

Owns the list of strategy names (``STRATEGIES``, and the ``CANDIDATES`` under study) and
``get_strategy(name, **overrides)``, which builds a strategy with its default parameters replaced by the
overrides (podtailor's by ``"part.field"`` names; unknown names or parameters raise ``ValueError``), so
reports, the CLI and the backtest select and tune strategies the same way, and ``at_risk(name)``: how to build
that strategy at a given risk setting (and risk budget), for the strategies that have one (``AtRisk``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, Protocol

from recommender.model.autopilot_ml import AutopilotMlParams, AutopilotMlStrategy
from recommender.model.krr import KrrParams, KrrSimpleStrategy
from recommender.model.podtailor import PodtailorStrategy
from recommender.model.podtailor_budget import RiskBudget
from recommender.model.podtailor_params import PodtailorParams, with_overrides
from recommender.model.types import Strategy
from recommender.model.vpa import VpaParams, VpaStrategy

_FACTORIES: dict[str, tuple[type[Any], Callable[[Any], Strategy]]] = {
    "vpa": (VpaParams, VpaStrategy),
    "krr-simple": (KrrParams, KrrSimpleStrategy),
    "podtailor": (PodtailorParams, PodtailorStrategy),
    "autopilot-ml": (AutopilotMlParams, AutopilotMlStrategy),
}

CANDIDATES: tuple[str, ...] = ("autopilot-ml",)
"""Strategies under study (issue #18): built by ``get_strategy`` and ``backtest --strategies``, but not in the
default rows of a backtest nor offered to the recommender's ``run``."""
STRATEGIES: tuple[str, ...] = tuple(n for n in _FACTORIES if n not in CANDIDATES)
DEFAULT_STRATEGY = "podtailor"


def get_strategy(name: str, **overrides: Any) -> Strategy:
    """The named strategy with ``overrides`` replacing its default parameters."""
    if name not in _FACTORIES:
        raise ValueError(f"unknown strategy {name!r}; known: {', '.join(STRATEGIES)}")
    params_type, factory = _FACTORIES[name]
    if params_type is PodtailorParams:  # composed of parts: "part.field" names (``podtailor_params``)
        return factory(with_overrides(PodtailorParams(), overrides))
    known = {f.name for f in dataclasses.fields(params_type) if f.init}
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise ValueError(f"unknown parameter(s) for {name}: {', '.join(unknown)}")
    return factory(params_type(**overrides))


class AtRisk(Protocol):
    """Builds a strategy at a risk setting and, when given, a risk budget (``PodtailorParams.budget``)."""

    def __call__(self, risk: float, budget: RiskBudget | None = None) -> Strategy: ...


def at_risk(name: str) -> AtRisk | None:
    """A builder of the named strategy at a given risk setting and risk budget (its other parameters at their
    defaults; no budget: the default, none), or None when the strategy has no risk setting (only podtailor has:
    ``PodtailorParams.risk``, ``PodtailorParams.budget``)."""
    if name not in _FACTORIES:
        raise ValueError(f"unknown strategy {name!r}; known: {', '.join(STRATEGIES)}")
    if "risk" not in {f.name for f in dataclasses.fields(_FACTORIES[name][0])}:
        return None

    def build(risk: float, budget: RiskBudget | None = None) -> Strategy:
        return get_strategy(name, risk=risk) if budget is None else get_strategy(name, risk=risk, budget=budget)

    return build
