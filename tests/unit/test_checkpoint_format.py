"""Unit tests of the checkpoint format across versions: a checkpoint written by an earlier version
(``tests/data/checkpoints``) restores to the state that gave the recorded recommendation."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from podtailor.resources import CurrentResources
from recommender.kube.checkpoint import restore
from recommender.model.registry import get_strategy
from recommender.model.types import ContainerPolicy

NOW = 1_700_000_000.0  # the fixture's time (tests/data/checkpoints/README.md)
V1 = Path(__file__).parents[1] / "data" / "checkpoints" / "v1-podtailor-vpa.json"


def _recommendation(strategy_name: str, state: Any) -> dict[str, Any]:
    strategy = get_strategy(strategy_name)
    rec, _ = strategy.recommend(state, now_s=NOW, policy=ContainerPolicy(containers_in_pod=1),
                                current=CurrentResources())
    out: dict[str, Any] = json.loads(json.dumps(dataclasses.asdict(rec)))
    return out


@pytest.mark.parametrize("strategy_name", ["podtailor", "vpa"])
def test_a_version_1_checkpoint_restores_to_the_state_it_was_written_from(strategy_name: str) -> None:
    fixture = json.loads(V1.read_text())[strategy_name]
    restored = restore({"spec": fixture["spec"]}, get_strategy(strategy_name))
    assert set(restored.states) == {"app"} and restored.history_until_s == NOW
    assert _recommendation(strategy_name, restored.states["app"]) == fixture["recommendation"]
