"""numpy's default (linear) quantiles of an already sorted array, without ``np.quantile``'s per-call overhead.

Owns ``linear_quantiles``: what ``np.quantile(values, q)`` answers (method "linear", Hyndman and Fan's
7th) for a non-empty, NaN-free array, to the last bit, from the array sorted once. ``np.quantile`` costs
tens of microseconds a call in argument handling and a partition; the report and the podtailor memory
margin ask for it once or twice per container, so at 10,000 containers that overhead was a visible part of
the model stage. tests/unit/test_model_quantiles.py compares the two on random arrays.
"""

from __future__ import annotations

import numpy as np

from recommender.model.types import FloatArray


def linear_quantiles(ordered: FloatArray, q: FloatArray) -> FloatArray:
    """``np.quantile(ordered, q)`` for ``ordered`` sorted ascending, non-empty and without NaN; ``q`` in [0, 1].

    Follows numpy's order of operations (numpy/lib/_function_base_impl.py): the virtual index ``(n - 1) * q``
    (``_QuantileMethods['linear']``; ``n * q + (1 - q) - 1`` is the same number in exact arithmetic but can
    land one ulp above an integer), its floor and the next index clipped to the last one (``_get_indexes``),
    and ``_lerp``, which interpolates from the lower value below a fraction of 0.5 and from the upper one
    from 0.5 on."""
    n = ordered.size
    at = (n - 1) * q
    floor = np.floor(at)
    below = np.minimum(np.maximum(floor, 0), n - 1).astype(np.int64)
    above = np.minimum(below + 1, n - 1)
    frac = at - floor
    lower, upper = ordered[below], ordered[above]
    diff = upper - lower
    out: FloatArray = np.where(frac >= 0.5, upper - diff * (1 - frac), lower + diff * frac)
    return out
