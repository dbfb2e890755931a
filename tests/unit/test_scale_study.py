"""The scale study's RESULTS section (#18 item 7): goal lines marked per trace and scale, drift against 1x."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.benchmarks import results, scale_study


def _figures(cpu: float, mem: float, oom: float, over: float, changes: float) -> dict[str, float]:
    return dict(zip(scale_study.FIGURES, (cpu, mem, oom, over, changes), strict=True))


def _row(p: dict[str, float], v: dict[str, float], gaps: tuple[float, float], **checks: bool) -> dict[str, Any]:
    g = {"cpu_gap_closed": gaps[0], "memory_gap_closed": gaps[1], "ooms_not_above_baseline": True,
         "cpu_over_request_not_above_baseline": True, "changes_not_above_baseline": True,
         "budget_oracle_cpu_gap_closed": 0.7, "budget_oracle_memory_gap_closed": 0.4, **checks}
    g["all_met"] = gaps[0] >= 0.5 and gaps[1] > 0 and all(
        g[k] for k in ("ooms_not_above_baseline", "cpu_over_request_not_above_baseline", "changes_not_above_baseline"))
    return {"podtailor": p, "vpa": v, "goals": {"podtailor": g}}


def test_markdown_marks_each_goal_line_and_the_drift_per_trace_and_scale() -> None:
    vpa = _figures(0.4, 0.8, 0.10, 20.0, 1.0)
    res = {"t1": {
        "0.1": _row(_figures(0.3, 0.7, 0.05, 10.0, 0.5), vpa, (0.6, 0.6)),
        "1": _row(_figures(0.3, 0.7, 0.05, 10.0, 0.5), vpa, (0.6, 0.6)),
        "10": _row(_figures(0.3, 0.9, 0.20, 10.0, 0.5), vpa, (0.6, -0.2), ooms_not_above_baseline=False),
    }}
    text = scale_study.markdown(res, ["podtailor"], series=40, workers=1)
    lines = {line.split(" | ")[1]: line for line in text.splitlines() if line.startswith("| t1 |")}
    assert set(lines) == {"0.1x", "1x", "10x"}
    assert lines["1x"].endswith("| 0.700 / 0.400 | — | yes |")
    assert "**0.700 vs 0.800**" in lines["1x"] and "**0.050 vs 0.100**" in lines["1x"]
    # at 10x the memory slack is above VPA's (gap closed < 0) and the OOMs too: neither is bold, no goal
    assert "| 0.900 vs 0.800 |" in lines["10x"] and "| 0.200 vs 0.100 |" in lines["10x"]
    assert "+300.0% (ooms_per_series_day)" in lines["10x"] and lines["10x"].endswith("| no |")
    assert "+0.0%" in lines["0.1x"]
    assert "Every goal line holds on 2 of 3 trace-scale cells (t1 0.1x, t1 1x)." in text
    assert "Within 5% of its 1x figures on 1 of 2 scaled cells (t1 0.1x)." in text
    assert "the first 40 series" in text


def test_write_without_traces_leaves_results_as_they_were(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    page = tmp_path / "RESULTS.md"
    page.write_text("# Benchmark results\n\nkept\n")
    monkeypatch.setattr(results, "RESULTS", page)
    monkeypatch.setattr(scale_study, "TRACES_DIR", tmp_path / "no-shared")
    assert scale_study.main(["--write", "--series", "2"]) == 0
    assert page.read_text() == "# Benchmark results\n\nkept\n"
    err = capsys.readouterr().err
    assert "absent" in err and "RESULTS.md left as it was" in err
