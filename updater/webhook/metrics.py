"""The webhook's metrics, on an injected prometheus_client registry (labels are bounded: no pod names)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


class WebhookMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.admissions = Counter("podtailor_webhook_admissions", "Pod admissions by outcome (mutation.Outcome)",
                                  ["outcome"], registry=registry)
        self.admission_seconds = Histogram("podtailor_webhook_admission_seconds", "Time to answer one review",
                                           registry=registry,
                                           buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1, 5))
        self.syncs = Counter("podtailor_webhook_cache_syncs", "Cache refreshes by result", ["result"],
                             registry=registry)
        self.last_sync = Gauge("podtailor_webhook_cache_last_sync_timestamp_seconds",
                               "Unix time of the last successful cache refresh", registry=registry)
        self.cached = Gauge("podtailor_webhook_cache_objects", "Objects listed by the last refresh", ["kind"],
                            registry=registry)
        self.cert_expiry = Gauge("podtailor_webhook_certificate_expiry_timestamp_seconds",
                                 "Unix time the serving certificate expires", registry=registry)
        self.registrations = Counter("podtailor_webhook_registrations",
                                     "MutatingWebhookConfiguration reconciles by result", ["result"],
                                     registry=registry)
