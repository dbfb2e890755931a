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


def exported() -> set[str]:
    registry = CollectorRegistry()
    RecommenderMetrics(registry)
    UpdaterMetrics(registry)
    SourceMetrics(registry)
    WebhookMetrics(registry)
    return {m.name + s for m in registry.collect() for s in SUFFIXES[m.type]}


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
