"""RBAC for ResourceQuota awareness: the updater and the webhook may read quotas; the webhook stays read-only."""

from __future__ import annotations

from tests.builders.manifests import grants


def test_the_updater_and_the_webhook_read_resourcequotas() -> None:
    for sa in ("podtailor-updater", "podtailor-webhook"):
        assert all(grants(sa, verb, "", "resourcequotas") for verb in ("get", "list", "watch")), sa
        assert not grants(sa, "update", "", "resourcequotas"), sa


def test_the_webhook_stays_read_only() -> None:
    web = "podtailor-webhook"  # the Event about a pod held by a quota is the updater's to write
    assert not grants(web, "create", "", "events") and grants("podtailor-updater", "create", "", "events")
    assert not grants(web, "patch", "", "pods") and not grants(web, "create", "", "pods")
