"""The scale study's RESULTS section (#18 item 7): goal lines marked per trace and scale, drift against 1x."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from recommender.backtest.scoring import Metrics
from tests.benchmarks import results, scale_study


def _figures(cpu: float, mem: float, oom: float, over: float, changes: float, *, over_limit: float = 5.0,
             cpu_cores: float = 1.0, mem_gib: float = 2.0) -> dict[str, float | int | None]:
    """A saved row's figures (``Metrics.to_dict``): the five of #18 given, the rest fixed unless given."""
    return Metrics(series=3, series_days=30, cpu_slack_cores=cpu_cores, cpu_slack_rel=cpu, memory_slack_gib=mem_gib,
                   memory_slack_rel=mem, ooms_per_series_day=oom, oom_free_days=0.9,
                   cpu_over_limit_min_per_day=over_limit, cpu_over_request_min_per_day=over,
                   changes_per_series_day=changes).to_dict()


def _row(p: dict[str, Any], v: dict[str, Any], gaps: tuple[float, float], **checks: bool) -> dict[str, Any]:
    g = {"cpu_gap_closed": gaps[0], "memory_gap_closed": gaps[1], "ooms_not_above_baseline": True,
         "cpu_over_request_not_above_baseline": True, "changes_not_above_baseline": True,
         "budget_oracle_cpu_gap_closed": 0.7, "budget_oracle_memory_gap_closed": 0.4, **checks}
    g["all_met"] = gaps[0] >= 0.5 and gaps[1] > 0 and all(
        g[k] for k in ("ooms_not_above_baseline", "cpu_over_request_not_above_baseline", "changes_not_above_baseline"))
    return {"podtailor": p, "vpa": v, "goals": {"podtailor": g}}


def test_markdown_marks_each_goal_line_and_the_drift_per_trace_and_scale() -> None:
    vpa = _figures(0.4, 0.8, 0.10, 20.0, 1.0)
    res = {"t1": {
        "0.1": _row(_figures(0.3, 0.7, 0.05, 10.0, 0.5, over_limit=5.08), vpa, (0.6, 0.6)),
        "1": _row(_figures(0.3, 0.7, 0.05, 10.0, 0.5), vpa, (0.6, 0.6)),
        "10": _row(_figures(0.3, 0.9, 0.20, 10.0, 0.5, over_limit=4.0, mem_gib=2.5), vpa, (0.6, -0.2),
                   ooms_not_above_baseline=False),
    }}
    text = scale_study.markdown(res, ["podtailor"], series=40, workers=1)
    lines = {line.split(" | ")[1]: line for line in text.splitlines() if line.startswith("| t1 |")}
    assert set(lines) == {"0.1x", "1x", "10x"}
    assert lines["1x"].endswith("| 0.700 / 0.400 | — | yes | yes |")
    assert "**0.700 vs 0.800**" in lines["1x"] and "**0.050 vs 0.100**" in lines["1x"]
    # at 10x the memory slack is above VPA's (gap closed < 0) and the OOMs too: neither is bold, no goal
    assert "| 0.900 vs 0.800 |" in lines["10x"] and "| 0.200 vs 0.100 |" in lines["10x"]
    assert "+300.0% (ooms_per_series_day)" in lines["10x"]
    # #39 item 3 names the lines beyond 2%: OOMs 0.2 vs 0.1, memory slack 2.5 vs 2.0 GiB (the over-limit line,
    # 4.0 vs 5.0, is below VPA's and bold)
    assert lines["10x"].endswith("| no | no: OOMs, memory slack |") and "| **4.000 vs 5.000** |" in lines["10x"]
    # at 0.1x the over-limit line is 1.6% above VPA's (5.08 vs 5.0): not bold, but within #39's 2%
    assert "| 5.080 vs 5.000 |" in lines["0.1x"] and lines["0.1x"].endswith("| yes | yes |")
    assert "+0.0%" in lines["0.1x"]
    assert "Every goal line holds on 2 of 3 trace-scale cells (t1 0.1x, t1 1x)." in text
    assert "Within 5% of its 1x figures on 1 of 2 scaled cells (t1 0.1x)." in text
    assert "No line worse than VPA's beyond 2% on 2 of 3 trace-scale cells (t1 0.1x, t1 1x)." in text
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


def _saved(tmp_path: Path, trace: str, *, series: int | None = None, copy: str = "",
           vpa_floors: tuple[tuple[str, float], ...] = ()) -> Path:
    """A ``--json`` document of one trace's run, as ``scale_study.document`` writes it."""
    vpa = _figures(0.4, 0.8, 0.10, 20.0, 1.0)
    res = {"1": _row(_figures(0.3, 0.7, 0.05, 10.0, 0.5), vpa, (0.6, 0.6))}
    args = scale_study._parser().parse_args(["--trace", trace, "--workers", "2"]
                                            + ([] if series is None else ["--series", str(series)]))
    doc = scale_study.document({trace: res}, f"Machine: facts of {trace}.", args, {"podtailor": [("x", 1)]}, vpa_floors)
    path = tmp_path / f"{trace}-{series}{copy}.json"
    path.write_text(json.dumps(doc))
    return path


def test_from_json_writes_one_section_from_runs_saved_one_trace_at_a_time(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    written: dict[str, str] = {}
    monkeypatch.setattr(scale_study, "write_section", lambda name, title, body: written.update({name: body}))
    docs = [str(_saved(tmp_path, "google-odd")), str(_saved(tmp_path, "bitbrains-07"))]
    assert scale_study.main(["--from-json", *docs, "--write"]) == 0
    body = written["scale"]
    assert "| google-odd | 1x |" in body and "| bitbrains-07 | 1x |" in body
    assert "from saved per-trace runs (--from-json)" in body  # not this machine's facts
    assert "- google-odd: Machine: facts of google-odd. Ended " in body
    assert "Not in this section (no saved run: not run, or not finished when the section was written): " \
           "bitbrains-08." in body
    assert "(every series of each training trace" in body and "2 workers" in body


@pytest.mark.parametrize(("case", "says"), [("same trace twice", "trace google-odd is in two documents"),
                                           ("other settings", "differ from the first document's"),
                                           ("not a document", "not a scale_study --json document"),
                                           ("with --trace", "--trace, --json, --set")])
def test_from_json_refuses_documents_that_are_not_one_study(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                            monkeypatch: pytest.MonkeyPatch, case: str,
                                                            says: str) -> None:
    written: list[str] = []
    monkeypatch.setattr(scale_study, "write_section", lambda name, title, body: written.append(name))
    first = str(_saved(tmp_path, "google-odd"))
    other = tmp_path / "other.json"
    other.write_text("{\"google-odd\": {}}")
    argv = {"same trace twice": [first, str(_saved(tmp_path, "google-odd", copy="-again"))],
            "other settings": [first, str(_saved(tmp_path, "bitbrains-07", series=5))],
            "not a document": [str(other)],
            "with --trace": [first, "--trace", "google-odd"]}[case]
    with pytest.raises(SystemExit) as e:
        scale_study.main(["--from-json", *argv, "--write"])
    assert e.value.code == 2 and says in capsys.readouterr().err and not written


def test_runs_with_vpas_floors_lowered_never_write_the_section(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """The section compares with VPA as it is: a run (or saved runs) with VPA's floors lowered is refused
    before anything is replayed or written; the lowered floors are VPA's own parameters, and they are saved."""
    written: list[str] = []
    monkeypatch.setattr(scale_study, "write_section", lambda name, title, body: written.append(name))
    monkeypatch.setattr(scale_study, "run_series", lambda *a, **k: pytest.fail("replayed"))
    assert dict(scale_study.tiny_floors("vpa")) == {"pod_min_cpu_millicores": 0.01, "pod_min_memory_mib": 0.01,
                                                     "oom_min_bump_bytes": 1.0}
    lowered = _saved(tmp_path, "google-odd", vpa_floors=tuple(scale_study.tiny_floors("vpa")))
    assert json.loads(lowered.read_text())["vpa"][1] == ["pod_min_memory_mib", 0.01]
    for argv in (["--vpa-tiny-floors", "--write"], ["--from-json", str(lowered), "--write"]):
        with pytest.raises(SystemExit) as e:
            scale_study.main(argv)
        assert e.value.code == 2 and "VPA as it is" in capsys.readouterr().err
    assert not written
