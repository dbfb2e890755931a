"""What the commands print for a person: quantities as kubectl shows them, never a raw byte count.

The sample is the one a new user met in the demo: a target of 574m and 1323708601 bytes (1.23 GiB), which
``once`` printed as ``574m / 1323708601`` and ``plan`` as ``memory 1Gi→1323708601``. Each test runs the
command's own printing code on it and looks for a run of seven or more digits, which no rounded quantity
has; the machine-readable outputs keep the exact number. The demo's rollout progress is checked here too.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import sys
from functools import cache
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

from podtailor.resources import Resources, human, human_quantities, quantities
from podtailor.units import QuantityError, human_memory
from recommender.engine import PassReport
from recommender.model.types import Recommendation
from recommender.pass_summary import print_pass
from tests.builders.policy import GI, container, ctarget, node, pod, run, wtarget
from updater import __main__ as updater_main
from updater.policy.types import Plan

ODD_BYTES = 1_323_708_601  # 1323708601 / 2^30 = 1.2328 GiB: "1.2Gi" for a person
RAW = re.compile(r"(?<![\d.])\d{7,}(?![\d.])")  # a bare count of a million or more: bytes nobody rounded
REPO = Path(__file__).resolve().parents[2]


def _rec() -> Recommendation:
    return Recommendation(target=Resources(cpu_millicores=574, memory_bytes=ODD_BYTES),
                          lower_bound=Resources(cpu_millicores=400, memory_bytes=ODD_BYTES - 12_345),
                          upper_bound=Resources(cpu_millicores=2000, memory_bytes=3 * ODD_BYTES),
                          uncapped_target=Resources(cpu_millicores=574, memory_bytes=ODD_BYTES), confidence=1.0)


def test_human_memory_rounds_to_the_largest_binary_unit_with_one_decimal() -> None:
    assert human_memory(ODD_BYTES) == "1.2Gi"
    assert (human_memory(512 * 2**20), human_memory(1.5 * 2**30), human_memory(1536), human_memory(100)) == (
        "512Mi", "1.5Gi", "1.5Ki", "100")
    assert human_memory(3 * ODD_BYTES) == "3.7Gi"  # 3971125803 / 2^30 = 3.698
    with pytest.raises(QuantityError):
        human_memory(-1)


def test_human_pairs_show_cpu_exact_and_memory_rounded_and_dashes_where_unset() -> None:
    res = Resources(cpu_millicores=574, memory_bytes=ODD_BYTES)
    assert human(res) == "574m / 1.2Gi"
    assert human_quantities(res) == {"cpu": "574m", "memory": "1.2Gi"}
    assert human(Resources(memory_bytes=2 * GI)) == "- / 2Gi"
    assert quantities(res) == {"cpu": "574m", "memory": "1323708601"}  # the API write stays exact


def test_once_prints_the_target_as_a_person_reads_it(capsys: pytest.CaptureFixture[str]) -> None:
    report = PassReport(served=1, written=1, stale=0, unsupported=0,
                        recommendations={("shop", "web-vpa", "app"): _rec()})
    print_pass(report, "table")
    out = capsys.readouterr().out
    assert "574m / 1.2Gi" in out, out
    assert RAW.findall(out) == [], out


def test_once_json_keeps_the_exact_quantities(capsys: pytest.CaptureFixture[str]) -> None:
    report = PassReport(served=1, written=1, stale=0, unsupported=0,
                        recommendations={("shop", "web-vpa", "app"): _rec()})
    print_pass(report, "json")
    row = json.loads(capsys.readouterr().out)["recommendations"][0]
    assert row["target"] == {"cpu": "574m", "memory": "1323708601"}


class _Policy:
    name = "default"
    analyses = ()


class _Snapshot:
    analyses: dict[tuple[str, str, str], object] = {}  # noqa: RUF012 (read only)


class _Executor:
    def __init__(self, plan: Plan) -> None:
        self._plan = plan

    def plan(self, now_s: float) -> tuple[_Snapshot, list[tuple[_Policy, Plan]]]:
        return _Snapshot(), [(_Policy(), self._plan)]


def _plan_output(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], output: str) -> str:
    # The pod asks for 500m and 1Gi; the VPA's target is 574m and 1323708601 bytes: a resize of both.
    plan = run([pod(containers=[container(cpu=500, mem=GI)])], [wtarget(ctarget(cpu=574, mem=ODD_BYTES))])
    assert plan.decisions[0].changes, plan.decisions[0]

    def build_executor(args: argparse.Namespace, metrics: Any = None) -> SimpleNamespace:
        return SimpleNamespace(executor=_Executor(plan))  # cmd_plan reads only the wiring's executor

    monkeypatch.setattr(updater_main, "build_executor", build_executor)
    monkeypatch.setenv("COLUMNS", "250")
    assert updater_main.cmd_plan(argparse.Namespace(output=output)) == 0
    return capsys.readouterr().out


def test_plan_prints_the_changes_as_a_person_reads_them(monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    out = _plan_output(monkeypatch, capsys, "table")
    assert "memory 1Gi→1.2Gi" in out and "cpu 500m→574m" in out, out
    assert RAW.findall(out) == [], out


def test_plan_json_keeps_the_exact_quantities(monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    doc = json.loads(_plan_output(monkeypatch, capsys, "json"))
    assert "memory 1Gi→1323708601" in doc["plans"][0]["decisions"][0]["changes"]


@cache
def test_plan_says_a_target_above_the_node_in_quantities(monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    # A 1 GiB node; the target 1323708601 bytes does not fit: the plan's message names both as quantities.
    plan = run([pod(containers=[container(cpu=500, mem=GI)])], [wtarget(ctarget(cpu=574, mem=ODD_BYTES))],
               nodes=[node(mem=GI)])
    assert "memory requests 1.2Gi > node n1 allocatable 1Gi" in plan.decisions[0].message, plan.decisions[0]
    assert RAW.findall(plan.decisions[0].message) == []


@cache
def _demo() -> ModuleType:
    """``scripts/demo.py`` as a module (scripts/ is no package), registered so its dataclasses resolve."""
    spec = importlib.util.spec_from_file_location("podtailor_demo_script", REPO / "scripts" / "demo.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_the_demo_never_counts_a_batch_past_the_last() -> None:
    batch_progress = _demo().batch_progress
    # status.currentBatch counts from 0 and ends at the number of batches once the last is baked: a rollout of
    # 2 batches goes 0, 1, 2, which the demo printed as 1/2, 2/2, 3/2.
    for count in range(1, 6):
        shown = [batch_progress(current, count) for current in range(count + 1)]
        assert shown == [f"{i}/{count}" for i in range(1, count + 1)] + [f"{count}/{count}"], shown
    assert batch_progress(0, 0) == "0/0"


def test_the_demo_summary_prints_requests_as_quantities() -> None:
    demo = _demo()
    before = {"a": {"cpu_m": 1500, "memory_b": 2 * GI}, "b": {"cpu_m": 250, "memory_b": ODD_BYTES}}
    after = {"a": {"cpu_m": 574, "memory_b": ODD_BYTES}, "b": {"cpu_m": 250, "memory_b": ODD_BYTES}}
    cpu = demo.requested_line(before, after, "cpu_m", "CPU requested:   ")
    memory = demo.requested_line(before, after, "memory_b", "memory requested:")
    assert cpu.split() == ["CPU", "requested:", "1750m", "->", "824m"]
    # 2 GiB + 1323708601 = 3471224249 bytes = 3.23 GiB; twice 1323708601 = 2647417202 = 2.47 GiB.
    assert memory.split() == ["memory", "requested:", "3.2Gi", "->", "2.5Gi"]
