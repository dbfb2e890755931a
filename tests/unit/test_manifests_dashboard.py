"""The Grafana dashboard (manifests/base/monitoring/podtailor-dashboard.json) queries only real metrics.

Every metric name in a panel query must be one the code registers (the metric classes of the recommender,
the updater, the Prometheus source and the webhook, instantiated here on a private registry), so the
dashboard cannot drift from the code; and every metric the issue names must be on the dashboard.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from recommender.metrics import RecommenderMetrics
from recommender.sources.transport import SourceMetrics
from updater.metrics import UpdaterMetrics
from updater.webhook.metrics import WebhookMetrics

DASHBOARD = Path(__file__).resolve().parents[2] / "manifests" / "base" / "monitoring" / "podtailor-dashboard.json"
REQUIRED = {
    "podtailor_recommender_passes_total", "podtailor_recommender_pass_seconds_bucket",
    "podtailor_recommender_vpas_served", "podtailor_recommender_status_writes_total",
    "podtailor_recommender_source_failures_total", "podtailor_source_requests_total",
    "podtailor_source_request_seconds_bucket", "podtailor_source_samples_dropped_total",
    "podtailor_updater_passes_total", "podtailor_updater_resizes_total", "podtailor_updater_api_writes_total",
    "podtailor_updater_rollouts_started_total", "podtailor_updater_open_rollouts",
    "podtailor_updater_fallbacks_total",
}
SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",),
            "summary": ("_sum", "_count")}


def registry() -> CollectorRegistry:
    reg = CollectorRegistry()
    RecommenderMetrics(reg)
    UpdaterMetrics(reg)
    SourceMetrics(reg)
    WebhookMetrics(reg)
    return reg


def exported() -> set[str]:
    return {m.name + s for m in registry().collect() for s in SUFFIXES[m.type]}


SCRAPE_LABELS = {"namespace", "pod", "instance", "job"}
"""Added by Prometheus from the scrape target (the ServiceMonitor), not by our code."""


def label_names() -> dict[str, set[str]]:
    """Exposed metric name -> the label names our code gives it (``le`` on histogram buckets)."""
    out: dict[str, set[str]] = {}
    # prometheus_client has no public accessor for a collector's label names, and a labelled metric exposes
    # no sample before its first .labels(): read them from the collectors themselves.
    for collector in set(registry()._collector_to_names):
        for family in collector.describe():
            names = set(getattr(collector, "_labelnames", ()))
            for suffix in SUFFIXES[family.type]:
                out[family.name + suffix] = names | ({"le"} if suffix == "_bucket" else set())
    return out


def dashboard() -> dict[str, Any]:
    body: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return body


def panels() -> list[dict[str, Any]]:
    return [p for p in dashboard()["panels"] if p["type"] != "row"]


def queried() -> set[str]:
    return {m for p in panels() for t in p["targets"] for m in re.findall(r"\bpodtailor_[a-z_]+", t["expr"])}


def test_the_dashboard_is_valid_grafana_json() -> None:
    d = dashboard()
    assert d["uid"] == "podtailor" and d["title"]
    ids = [p["id"] for p in d["panels"]]
    assert len(ids) == len(set(ids))
    names = {v["name"] for v in d["templating"]["list"]}
    assert {"datasource", "namespace"} <= names
    for p in panels():
        assert p["title"] and p["targets"], p
        assert p["datasource"]["uid"] == "${datasource}"
        g = p["gridPos"]
        assert g["x"] >= 0 and g["x"] + g["w"] <= 24 and g["h"] > 0
        for t in p["targets"]:
            assert t["expr"].count("(") == t["expr"].count(")"), t["expr"]
            assert 'namespace=~"$namespace"' in t["expr"], t["expr"]


def test_every_queried_metric_is_exported_by_the_code() -> None:
    unknown = queried() - exported()
    assert not unknown, f"the dashboard queries metrics nothing exports: {sorted(unknown)}"


def test_the_dashboard_covers_the_metrics_the_issue_names() -> None:
    assert exported() >= REQUIRED
    missing = REQUIRED - queried()
    assert not missing, sorted(missing)
    titles = " ".join(p["title"].lower() for p in panels())
    for topic in ("recommender passes", "resizes by outcome", "rollouts by pool and state", "fallbacks",
                  "backend request", "query seconds"):
        assert topic in titles, topic


def test_every_label_a_panel_groups_by_or_shows_is_one_the_metric_has() -> None:
    labels = label_names()
    wrong = []
    for p in panels():
        for t in p["targets"]:
            metrics = set(re.findall(r"\bpodtailor_[a-z_]+", t["expr"]))
            have = set().union(*(labels[m] for m in metrics)) | SCRAPE_LABELS
            used = {name.strip() for group in re.findall(r"\bby \(([^)]*)\)", t["expr"]) for name in group.split(",")}
            used |= set(re.findall(r"\{\{(\w+)\}\}", t.get("legendFormat", "")))
            if used - have:
                wrong.append(f"{p['title']}: {sorted(used - have)} not on {sorted(metrics)}")
    assert not wrong, wrong


def test_the_label_check_sees_labels() -> None:
    """Guards the check above against reading nothing: known label names, exactly."""
    labels = label_names()
    assert labels["podtailor_updater_fallbacks_total"] == {"mode", "outcome"}
    assert labels["podtailor_updater_passes_total"] == {"outcome"}
    assert labels["podtailor_updater_pass_seconds_bucket"] == {"le"}
