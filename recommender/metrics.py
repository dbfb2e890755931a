"""The recommender's own metrics, on an injected prometheus_client registry.

Owns metric names and labels. Label cardinality is bounded: no pod, container or VPA names as labels.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


class RecommenderMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.passes = Counter("podtailor_recommender_passes", "Recommender passes by outcome", ["outcome"],
                              registry=registry)
        self.pass_seconds = Histogram("podtailor_recommender_pass_seconds", "Wall time of one pass",
                                      registry=registry, buckets=(0.1, 0.5, 1, 2, 5, 10, 30, 60, 120, 300))
        self.vpas_served = Gauge("podtailor_recommender_vpas_served", "VPA objects served in the last pass",
                                 registry=registry)
        self.status_writes = Counter("podtailor_recommender_status_writes", "VPA status writes",
                                     registry=registry)
        self.source_failures = Counter("podtailor_recommender_source_failures",
                                       "Usage-source failures (recommendations kept and marked stale)",
                                       registry=registry)
        self.checkpoints_written = Counter("podtailor_recommender_checkpoints_written", "Checkpoints written",
                                           registry=registry)
        self.checkpoints_restored = Counter("podtailor_recommender_checkpoints_restored",
                                            "States restored from checkpoints", registry=registry)
        self.shards_served = Gauge("podtailor_recommender_shards_served",
                                   "Shards whose namespaces this replica serves now (run --shards above 1)",
                                   registry=registry)
        self.writes_refused = Counter("podtailor_recommender_writes_refused",
                                      "Status and checkpoint writes not sent: the shard's Lease was no longer held",
                                      registry=registry)
        self.last_success = Gauge("podtailor_recommender_last_success_timestamp_seconds",
                                  "Unix time of the last pass that completed", registry=registry)
