"""Autopilot's ML recommender for one resource: a family of arg-min models and the choice among them.

Owns the arithmetic of Rzadca et al. (EuroSys 2020, §3.2 "ML recommender"), made scale-free. Candidate levels
are the upper edges of a geometric ``BucketScheme`` (the first bucket tiny, so that a level x 10 is a level
within one bucket). Usage arrives in chunks (one per aligned hour, or less), and each chunk gives, per level L,

- the overrun o(L): the share of the chunk's samples above L (CPU: time over the request), or, with
  ``peak_overrun``, 1 when the chunk's peak is above L (memory: the hour would see an OOM kill);
- the underrun u(L): the mean relative slack, mean over samples of max(L - x, 0) / L, a share of L itself,

both shares, so a container 10 times larger has the same vectors 116 buckets further up (at 2% buckets). Each
model m has a half-life h_m and a margin M_m. Per half-life the vectors are summed with weight
2^(-age / h) (time-weighted), and the model's level is

    L_m = argmin_L  w_o x O_h(L) + U_h(L) + w_dL x [L != L_m previous]     (O, U: decayed means per hour)

with its recommendation R_m = L_m x (1 + M_m), in whole buckets. Each model's realised cost is what its last
recommendation would have cost on the next chunk, w_o x o(R_m) + u(R_m), plus w_dL when R_m changed, decayed
with ``selection_half_life_s``; the ensemble recommends R of the model with the lowest decayed mean realised
cost, and leaves its current model only for one cheaper by more than w_dm. State is a few arrays of fixed
size (half-lives x buckets, models), whatever the history's length. Pure numpy; nothing here knows about
CPU, memory, containers or Kubernetes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from recommender.model.histogram import BucketScheme
from recommender.model.types import FloatArray

IntArray = NDArray[np.int64]
HOUR_S = 3600.0


@dataclass(frozen=True, slots=True, kw_only=True)
class EnsembleParams:
    """The prices and the model family of one resource's ensemble."""

    half_lives_s: tuple[float, ...]
    """Decay of each model family member's level costs (Autopilot: d_m)."""
    margins: tuple[float, ...]
    """Safety margins M_m, as fractions; every half-life is tried with every margin."""
    overrun_cost: float
    """w_o: the price of a unit share of overrun, in units of relative slack (w_u = 1)."""
    change_cost: float
    """w_dL: what a level change must save, in the decayed mean hourly cost; also added to a model's realised
    cost when its recommendation changes."""
    switch_cost: float
    """w_dm: how much cheaper (decayed mean hourly realised cost) another model must be to be chosen."""
    selection_half_life_s: float
    """Decay of the models' realised costs."""
    default_model: int = 0
    """The model recommended before any model has a realised cost (index into half-lives x margins)."""
    peak_overrun: bool = False
    """Overrun per chunk: its peak above the level (1 or 0) instead of the share of samples above it."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Chunk:
    """One chunk's cost vectors, per candidate level (bucket)."""

    overrun: FloatArray
    underrun: FloatArray
    hours: float
    end_s: float


def chunk_costs(scheme: BucketScheme, values: FloatArray, *, peak: float | None = None,
                peak_overrun: bool = False) -> tuple[FloatArray, FloatArray]:
    """The overrun and underrun vectors of one chunk's ``values`` (module docstring). ``peak`` replaces the
    chunk's own maximum in the peak overrun (an OOM kill: the censored peak understates the need)."""
    n = scheme.num_buckets
    buckets = scheme.find_buckets(values)
    counts = np.cumsum(np.bincount(buckets, minlength=n).astype(np.float64))
    sums = np.cumsum(np.bincount(buckets, weights=values, minlength=n))
    edges = level_values(scheme)
    total = float(values.size)
    underrun = (counts - sums / edges) / total
    if peak_overrun:
        top = float(values.max()) if peak is None else max(peak, float(values.max()))
        overrun = (edges < top).astype(np.float64)
    else:
        overrun = (total - counts) / total
    return overrun, underrun


def level_values(scheme: BucketScheme) -> FloatArray:
    """The candidate level of each bucket: its upper edge (the last, open-ended bucket: its start)."""
    edges = scheme.starts[1:].copy()
    edges[-1] = scheme.starts[-2]
    return edges


class ArgminEnsemble:
    """The models' decayed level costs, levels, recommendations and realised costs, and the chosen model."""

    __slots__ = ("chosen", "last_s", "levels", "margin_buckets", "overrun", "params", "realised", "realised_w",
                 "recs", "scheme", "underrun", "weight")

    def __init__(self, scheme: BucketScheme, params: EnsembleParams) -> None:
        h, k = len(params.half_lives_s), len(params.margins)
        if not (h and k and all(x > 0 for x in params.half_lives_s) and all(m >= 0 for m in params.margins)):
            raise ValueError("an ensemble needs positive half-lives and non-negative margins")
        if not 0 <= params.default_model < h * k:
            raise ValueError("default_model must index a model (half-lives x margins)")
        self.scheme, self.params = scheme, params
        self.margin_buckets: IntArray = np.array(
            [round(math.log1p(m) / math.log(scheme.ratio)) for m in params.margins], dtype=np.int64)
        self.overrun: FloatArray = np.zeros((h, scheme.num_buckets))
        self.underrun: FloatArray = np.zeros((h, scheme.num_buckets))
        self.weight: FloatArray = np.zeros(h)
        self.levels: IntArray = np.full(h, -1, dtype=np.int64)
        self.recs: IntArray = np.full(h * k, -1, dtype=np.int64)
        self.realised: FloatArray = np.zeros(h * k)
        self.realised_w = 0.0
        self.chosen = -1
        self.last_s: float | None = None

    @property
    def models(self) -> int:
        return int(self.recs.size)

    def add(self, chunk: Chunk) -> None:
        """Fold one chunk in: realised costs of the standing recommendations, then the level costs, levels and
        recommendations, then the choice of model."""
        prm = self.params
        age = 0.0 if self.last_s is None else max(chunk.end_s - self.last_s, 0.0)
        self.last_s = chunk.end_s if self.last_s is None else max(self.last_s, chunk.end_s)
        if self.recs[0] >= 0:
            decay = math.exp2(-age / prm.selection_half_life_s)
            cost = prm.overrun_cost * chunk.overrun[self.recs] + chunk.underrun[self.recs]
            self.realised = decay * self.realised + cost * chunk.hours
            self.realised_w = decay * self.realised_w + chunk.hours
        decay_h = np.exp2(-age / np.asarray(prm.half_lives_s))
        self.overrun = decay_h[:, None] * self.overrun + chunk.overrun[None, :] * chunk.hours
        self.underrun = decay_h[:, None] * self.underrun + chunk.underrun[None, :] * chunk.hours
        self.weight = decay_h * self.weight + chunk.hours
        self._relevel()
        self._choose()

    def _relevel(self) -> None:
        prm = self.params
        cost = (prm.overrun_cost * self.overrun + self.underrun) / self.weight[:, None]
        held = self.levels >= 0
        rows = np.flatnonzero(held)
        cost[rows, self.levels[held]] -= prm.change_cost  # staying put is worth the change cost
        # ties go to the lower level: only a window of zeros ties (every level is all slack there), and the
        # lowest level is then the one that provisions least
        self.levels = np.argmin(cost, axis=1).astype(np.int64)
        recs = np.minimum(self.levels[:, None] + self.margin_buckets[None, :], self.scheme.num_buckets - 1).ravel()
        moved = (self.recs >= 0) & (recs != self.recs)
        self.realised = self.realised + prm.change_cost * moved
        self.recs = recs

    def _choose(self) -> None:
        if self.realised_w <= 0:
            self.chosen = self.params.default_model
            return
        mean = self.realised / self.realised_w
        best = int(np.argmin(mean))
        if self.chosen < 0 or mean[self.chosen] - mean[best] > self.params.switch_cost:
            self.chosen = best

    def recommendation(self) -> float | None:
        """The chosen model's recommended level, or None before any chunk."""
        if self.chosen < 0 or self.recs[self.chosen] < 0:
            return None
        return float(level_values(self.scheme)[self.recs[self.chosen]])

    def spread(self) -> tuple[float, float] | None:
        """The lowest and the highest of the models' recommendations (the bounds), or None before any chunk."""
        if self.recs[0] < 0:
            return None
        edges = level_values(self.scheme)
        return float(edges[self.recs.min()]), float(edges[self.recs.max()])

    def to_checkpoint(self) -> dict[str, Any]:
        def sparse(rows: FloatArray) -> list[dict[str, float]]:
            return [{str(int(i)): float(r[i]) for i in np.flatnonzero(r)} for r in rows]

        return {"overrun": sparse(self.overrun), "underrun": sparse(self.underrun),
                "weight": self.weight.tolist(), "levels": self.levels.tolist(), "recs": self.recs.tolist(),
                "realised": self.realised.tolist(), "realised_w": self.realised_w, "chosen": self.chosen,
                "last_s": self.last_s}

    def restore_from(self, data: dict[str, Any]) -> None:
        def dense(rows: list[dict[str, float]]) -> FloatArray:
            out = np.zeros((len(rows), self.scheme.num_buckets))
            for i, row in enumerate(rows):
                for key, value in row.items():
                    out[i, int(key)] = float(value)
            return out

        self.overrun, self.underrun = dense(data["overrun"]), dense(data["underrun"])
        self.weight = np.array(data["weight"], dtype=np.float64)
        self.levels = np.array(data["levels"], dtype=np.int64)
        self.recs = np.array(data["recs"], dtype=np.int64)
        self.realised = np.array(data["realised"], dtype=np.float64)
        self.realised_w = float(data["realised_w"])
        self.chosen = int(data["chosen"])
        self.last_s = None if data.get("last_s") is None else float(data["last_s"])
        if self.overrun.shape != self.underrun.shape or self.overrun.shape[0] != len(self.params.half_lives_s) \
                or self.recs.size != len(self.params.half_lives_s) * len(self.params.margins):
            raise ValueError("checkpoint does not match the ensemble's model family")
