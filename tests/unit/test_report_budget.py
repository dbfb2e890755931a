"""The report's risk-budget column: each container's realized rate in the window against its budget, in every
format; nothing added when no budget is stated."""

from __future__ import annotations

import json

import pytest

from recommender.model.podtailor_budget import parse_budget
from recommender.model.registry import get_strategy
from recommender.report.budget import BudgetCheck, budget_check, budget_of
from recommender.report.build import BuildConfig, build_report
from recommender.report.html import as_html
from recommender.report.render import as_csv, as_json, as_markdown, as_yaml, table
from recommender.report.types import Report
from tests.builders.report import DAY, NOW, Mi, batch, cur, key, sample_inputs

TEXT = "risk budget: CPU over the request 25.00% of the time (budget 1.00%); OOM kills 60.00 / month (budget 1)"


def budgeted_report(budget: str | None) -> Report:
    inv, batches = sample_inputs()
    web = inv.workloads[0]
    # app: request 500m; a day of 0.2 cores with 2 OOM kills. Make a quarter of its samples 0.6 cores.
    b = batch(0.2, 300 * Mi, ooms=2)
    b.cpu_cores.values[: b.cpu_cores.values.size // 4] = 0.6
    batches[key(web, "app")] = b
    overrides = {} if budget is None else {"budget": parse_budget(budget)}
    cfg = BuildConfig(now_s=NOW, start_s=NOW - DAY, end_s=NOW, strategy_name="podtailor",
                      settings={"namespaces": [], "selector": "", "kinds": []})
    return build_report(inv, batches, get_strategy("podtailor", **overrides), cfg)


def test_the_check_measures_the_window_against_the_current_request() -> None:
    b = batch(0.2, 300 * Mi, ooms=2)  # 1440 one-minute samples: one day
    b.cpu_cores.values[:360] = 0.6
    check = budget_check((0.01, 1.0), b, cur(500, 256 * Mi))
    # 360 of 1440 samples above 500m = 25%; 2 kills in 1 day = 60 per 30 days
    assert check == BudgetCheck(cpu_over_share_budget=0.01, cpu_over_share=0.25, oom_per_month_budget=1.0,
                                oom_per_month=pytest.approx(60.0))
    assert check is not None and check.text() == TEXT
    only_cpu = budget_check((0.01, 0.0), b, cur(None, None))
    assert only_cpu is not None and only_cpu.text() == ("risk budget: CPU over the request n/a of the time "
                                                        "(budget 1.00%)")
    assert budget_check((0.0, 0.0), b, cur(500, 256 * Mi)) is None


def test_every_format_shows_it_when_a_budget_is_stated_and_none_does_otherwise() -> None:
    report = budgeted_report("cpu=0.01,oom=1")
    app = next(c for w in report.workloads if w.name == "web" for c in w.containers if c.name == "app")
    assert app.budget is not None and app.budget.text() == TEXT
    for text in (table(report, width=400), as_csv(report), as_markdown(report), as_html(report)):
        assert "risk budget: CPU over the request 25.00% of the time (budget 1.00%)" in text
    doc = json.loads(as_json(report))
    [web] = [w for w in doc["workloads"] if w["name"] == "web"]
    [app_doc] = [c for c in web["containers"] if c["name"] == "app"]
    assert app_doc["riskBudget"] == {"cpu_over_share_budget": 0.01, "cpu_over_share": 0.25,
                                     "oom_per_month_budget": 1.0, "oom_per_month": pytest.approx(60.0)}
    assert "riskBudget" in as_yaml(report)
    plain = budgeted_report(None)
    assert all(c.budget is None for w in plain.workloads for c in w.containers)
    assert "risk budget" not in table(plain, width=400) + as_csv(plain) + as_markdown(plain) + as_json(plain)


def test_each_strategy_object_answers_its_own_budget() -> None:
    # budget_of remembers its answer per strategy object: two strategies, asked in turn, keep their own budgets.
    plain, budgeted = get_strategy("podtailor"), get_strategy("podtailor", budget=parse_budget("cpu=0.01,oom=1"))
    for _ in range(2):
        assert budget_of(plain) == (0.0, 0.0)
        assert budget_of(budgeted) == (0.01, 1.0)
