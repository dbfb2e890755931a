"""The strategy registry: names to strategies, with parameter overrides.

Owns the list of strategy names (``STRATEGIES``, and the ``CANDIDATES`` under study) and
``get_strategy(name, **overrides)``, which builds a strategy with its default parameters replaced by the
overrides (podtailor's by ``"part.field"`` names; unknown names or parameters raise ``ValueError``), so
reports, the CLI and the backtest select and tune strategies the same way, and ``at_risk(name)``: how to build
that strategy at a given risk setting, for the strategies that have one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from recommender.model.autopilot_ml import AutopilotMlParams, AutopilotMlStrategy
from recommender.model.krr import KrrParams, KrrSimpleStrategy
from recommender.model.podtailor import PodtailorStrategy
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


def at_risk(name: str) -> Callable[[float], Strategy] | None:
    """A builder of the named strategy at a given risk setting (its other parameters at their defaults), or None
    when the strategy has no risk setting (only podtailor has: ``PodtailorParams.risk``)."""
    if name not in _FACTORIES:
        raise ValueError(f"unknown strategy {name!r}; known: {', '.join(STRATEGIES)}")
    if "risk" not in {f.name for f in dataclasses.fields(_FACTORIES[name][0])}:
        return None

    def build(risk: float) -> Strategy:
        return get_strategy(name, risk=risk)

    return build
