"""The frontier study's RESULTS section (#39 item 4): rows read back from a sweep's JSON and one line per trace."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from recommender.backtest.equal_risk import at_baseline_risk
from recommender.backtest.scoring import Metrics
from recommender.backtest.sweep import FrontierRow
from tests.benchmarks import frontier_study


def _metrics(cpu: float, mem: float, ooms: float, over_request: float, changes: float) -> Metrics:
    return Metrics(series=7, series_days=70, cpu_slack_cores=cpu, cpu_slack_rel=0.5, memory_slack_gib=mem,
                   memory_slack_rel=0.5, ooms_per_series_day=ooms, oom_free_days=0.9, cpu_over_limit_min_per_day=0.0,
                   cpu_over_request_min_per_day=over_request, changes_per_series_day=changes)


ROWS = (FrontierRow(label="podtailor risk=1", strategy="podtailor", risk=1.0, metrics=_metrics(0.3, 2.0, 0.1, 20, 1)),
        FrontierRow(label="podtailor risk=2", strategy="podtailor", risk=2.0, metrics=_metrics(0.2, 1.0, 0.3, 25, 1)),
        FrontierRow(label="vpa", strategy="vpa", risk=None, metrics=_metrics(0.5, 2.5, 0.2, 30, 2)))


def _doc(rows: tuple[FrontierRow, ...]) -> dict[str, object]:
    """The shape of ``backtest --sweep --json``'s rows (``sweep_report``), written out as test data."""
    return {"sweep": {"subsets": {"all": {"rows": [
        {"row": r.label, "strategy": r.strategy, "risk": r.risk, "reference": r.reference,
         "memory_efficient": r.memory_efficient, "cpu_efficient": r.cpu_efficient, **r.metrics.to_dict()}
        for r in rows]}}}}


def test_rows_read_back_from_a_sweep_json_are_the_rows_written() -> None:
    assert tuple(frontier_study.rows_of_json(json.loads(json.dumps(_doc(ROWS))))) == ROWS


def test_a_trace_line_gives_the_default_and_the_point_at_vpa_risk() -> None:
    t = frontier_study.TraceFrontier(trace="t1", source="here", rows=ROWS, equal=at_baseline_risk(ROWS))
    # OOMs reach VPA's 0.2 half way from risk 1 (0.1) to 2 (0.3): risk sqrt(2) = 1.41, CPU slack 0.25 (-50% vs
    # 0.5), memory 1.5 (-40% vs 2.5); the default (risk 1) has 0.3 and 2.0: -40% and -20%.
    assert frontier_study.markdown_row(t) == (
        "| t1 (7) | 1, 2 | -40.0% / -20.0% | 1.41 | none | OOMs per series-day | -50.0% | -40.0% | 0.2 vs 0.2 | "
        "22.5 vs 30 | 0 vs 0 | 1 vs 2 |")


def test_from_json_enters_the_section_through_the_same_function(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    doc = tmp_path / "sweep.json"
    doc.write_text(json.dumps(_doc(ROWS)))
    written: dict[str, str] = {}
    monkeypatch.setattr(frontier_study, "write_section", lambda name, title, body: written.update({name: body}))
    assert frontier_study.main(["--trace", "google-odd", "--from-json", f"google-odd={doc}", "--write"]) == 0
    assert "google-odd: risk 1.41 (between 1 and 2, linear in log risk)" in capsys.readouterr().out
    assert "| google-odd (7) | 1, 2 | -40.0% / -20.0% | 1.41 | none | OOMs per series-day |" in written["frontier"]
    assert "UTC from saved sweep rows (--from-json)" in written["frontier"]  # not this machine's facts


def test_a_bad_from_json_is_a_usage_error() -> None:
    with pytest.raises(SystemExit):
        frontier_study.main(["--from-json", "nope=x.json"])


def test_rows_written_by_the_study_are_read_back() -> None:
    assert tuple(frontier_study.rows_of_json(json.loads(json.dumps(frontier_study.rows_json(ROWS))))) == ROWS
