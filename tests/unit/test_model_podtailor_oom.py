"""The OOM bump's settings of ``podtailor`` (``OomHandling``): a bad value is refused before any replay or run."""

from __future__ import annotations

import math

import pytest

from recommender.model.podtailor_memory_parts import OomHandling
from recommender.model.registry import get_strategy


@pytest.mark.parametrize("bad", [{"bump_ratio": 0.9}, {"bump_ratio": math.nan}, {"bump_ratio": math.inf},
                                 {"min_bump_bytes": -1.0}, {"min_bump_bytes": math.inf}, {"window_s": math.nan}])
def test_bad_settings_are_refused(bad: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="oom:"):
        OomHandling(**bad)
    with pytest.raises(ValueError, match="oom:"):
        get_strategy("podtailor", **{f"oom.{k}": v for k, v in bad.items()})


def test_the_defaults_and_vpas_bump_are_accepted() -> None:
    assert OomHandling() == OomHandling(min_bump_bytes=100.0 * 1024 * 1024, bump_ratio=1.2, window_s=86400.0)
    assert OomHandling(min_bump_bytes=0.0, bump_ratio=1.0, window_s=0.0).bump_ratio == 1.0  # the edges: no bump
