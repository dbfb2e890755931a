"""The printers: JSON valid against docs/report-schema.json, YAML the same document, CSV sums, Markdown, table."""

from __future__ import annotations

import csv
import io
import json
from dataclasses import replace
from pathlib import Path

import jsonschema
import yaml

from podtailor.resources import CurrentResources, Resources
from recommender.report.document import SCHEMA_VERSION, to_document
from recommender.report.render import as_csv, as_json, as_markdown, as_yaml, fmt_cpu, fmt_memory, table
from recommender.report.types import PodLevelPlan
from tests.builders.report import sample_report

SCHEMA_PATH = Path(__file__).resolve().parents[2] / "docs" / "report-schema.json"


def validator() -> jsonschema.Draft202012Validator:
    schema = json.loads(SCHEMA_PATH.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker())


def test_json_validates_against_the_schema_and_is_versioned() -> None:
    doc = json.loads(as_json(sample_report()))
    validator().validate(doc)
    assert doc["schemaVersion"] == SCHEMA_VERSION == json.loads(SCHEMA_PATH.read_text())["properties"][
        "schemaVersion"]["const"]
    assert doc["prices"]["cpuPerVcpuHour"] == "0.031611" and doc["prices"]["memoryPerGibHour"] == "0.004237"


def test_the_schema_rejects_what_it_should() -> None:
    doc = json.loads(as_json(sample_report()))
    v = validator()
    broken = json.loads(json.dumps(doc))
    broken["workloads"][0]["disruption"]["action"] = "maybe"
    assert not v.is_valid(broken)
    broken = json.loads(json.dumps(doc))
    broken["workloads"][0]["cost"]["currentMicros"] = 1.5  # money is integer micro-units
    assert not v.is_valid(broken)
    broken = json.loads(json.dumps(doc))
    del broken["schemaVersion"]
    assert not v.is_valid(broken)


def test_yaml_is_the_same_document() -> None:
    report = sample_report()
    assert yaml.safe_load(as_yaml(report)) == json.loads(json.dumps(to_document(report)))


def test_csv_has_one_row_per_container_and_exact_money() -> None:
    report = sample_report()
    rows = list(csv.DictReader(io.StringIO(as_csv(report))))
    assert len(rows) == sum(len(w.containers) for w in report.workloads)
    assert sum(int(r["cost_current_micros"]) for r in rows) == report.total.cost.current
    assert sum(int(r["savings_micros"]) for r in rows) == report.total.cost.savings
    app = next(r for r in rows if r["container"] == "app")
    assert (app["cpu_request_m"], app["memory_limit_bytes"], app["disruption"]) == ("500", str(512 * 2**20),
                                                                                    "in-place")


def test_markdown_for_a_pull_request() -> None:
    text = as_markdown(sample_report())
    assert text.startswith("## podtailor right-sizing report")
    assert "| `shop/Deployment/web` | app | 500m / 256Mi |" in text
    assert "### By namespace" in text and "### By node pool" in text and "| total |" in text


def test_table_shows_every_container_and_the_summaries() -> None:
    text = table(sample_report(), width=250)
    for needle in ("StatefulSet/db", "proxy (sidecar)", "setup (init)", "in-place-restart", "By namespace",
                   "By node pool", "warning: cannot list nodes"):
        assert needle in text


def test_quantity_formatting() -> None:
    assert (fmt_cpu(2000), fmt_cpu(250), fmt_cpu(None)) == ("2", "250m", "-")
    assert (fmt_memory(512 * 2**20), fmt_memory(1.5 * 2**30), fmt_memory(100)) == ("512Mi", "1.5Gi", "100")


def test_every_format_says_why_a_value_was_kept() -> None:
    from dataclasses import replace

    from recommender.report.html import as_html

    report = sample_report()
    why = "cpu: kept at 500m: target 480m is within the resize band (-20% .. +10% of the current request)"
    web = next(w for w in report.workloads if w.name == "web")
    app = next(c for c in web.containers if c.name == "app")
    assert app.recommendation is not None
    kept = replace(app, recommendation=replace(app.recommendation, reasons=(why,)))
    web = replace(web, containers=tuple(kept if c is app else c for c in web.containers))
    report = replace(report, workloads=tuple(web if w.name == "web" else w for w in report.workloads))
    rows = {r["container"]: r for r in csv.DictReader(io.StringIO(as_csv(report)))}
    assert rows["app"]["reasons"] == why
    assert rows["setup"]["reasons"] == "no usage history"  # an init container without samples says so too
    assert why in as_markdown(report)
    assert why in " ".join(table(report, width=400).split())
    assert f"<td class=why>{why}</td>" in as_html(report)
    doc = json.loads(as_json(report))
    assert any(why in c["recommendation"]["reasons"] for w in doc["workloads"] for c in w["containers"]
               if c.get("recommendation"))


def test_pod_level_resources_are_in_the_document_only_where_the_template_declares_them() -> None:
    report = sample_report()
    assert all("podLevel" not in w for w in to_document(report)["workloads"])
    plan = PodLevelPlan(current=CurrentResources(requests=Resources(cpu_millicores=1000, memory_bytes=2 << 30),
                                                 limits=Resources(cpu_millicores=2000, memory_bytes=None)),
                        planned_requests=Resources(cpu_millicores=600, memory_bytes=1 << 30),
                        refused="planned values above the pod-level limits")
    first = replace(report.workloads[0], pod_level=plan)
    doc = json.loads(as_json(replace(report, workloads=(first, *report.workloads[1:]))))
    validator().validate(doc)
    assert doc["workloads"][0]["podLevel"] == {
        "current": {"requests": {"cpuMillicores": 1000, "memoryBytes": 2 << 30},
                    "limits": {"cpuMillicores": 2000, "memoryBytes": None}},
        "plannedRequests": {"cpuMillicores": 600, "memoryBytes": 1 << 30},
        "refused": "planned values above the pod-level limits"}
    del doc["workloads"][0]["podLevel"]["refused"]
    assert not validator().is_valid(doc)
