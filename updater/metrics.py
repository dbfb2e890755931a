"""The updater's own metrics, on an injected prometheus_client registry (no pod names as labels).

Label values are bounded: ``outcome`` of a pass is ok|failed; of a resize or a fallback, ok (accepted),
retry (a temporary refusal: 409, 429 such as a PodDisruptionBudget's, 5xx, no answer; tried again later),
quota (a resize refused by ResourceQuota admission: skipped, never handed to the fallback) or refused
(permanent: RBAC, validation, no evictor or patcher configured). Pods held back by a quota in the plan are a
gauge by ``action`` resize|fallback. A fallback's ``mode`` is
evict|template. Open rollouts are counted by node ``pool`` (bounded by the cluster's pools) and ``state``
(the rollout's phase). Canary analyses are counted by ``source`` policy|workload (where the analysis is
declared, not its name, which a namespace's owners choose) and ``outcome`` pass|fail|skip.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


class UpdaterMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.passes = Counter("podtailor_updater_passes", "Updater passes by outcome", ["outcome"], registry=registry)
        self.pass_seconds = Histogram("podtailor_updater_pass_seconds", "Wall time of one pass", registry=registry,
                                      buckets=(0.05, 0.1, 0.5, 1, 2, 5, 10, 30, 60))
        self.resizes = Counter("podtailor_updater_resizes", "Resize requests sent, by outcome", ["outcome"],
                               registry=registry)
        self.writes = Counter("podtailor_updater_api_writes", "API writes (journal, resizes, objects)",
                              registry=registry)
        self.rollouts_started = Counter("podtailor_updater_rollouts_started", "Rollouts started",
                                        registry=registry)
        self.fallbacks = Counter("podtailor_updater_fallbacks", "Fallbacks performed (pods evicted, templates "
                                 "patched) by mode and outcome", ["mode", "outcome"], registry=registry)
        self.open_rollouts = Gauge("podtailor_updater_open_rollouts", "Rollouts not yet completed, by pool and "
                                   "state (phase)", ["pool", "state"], registry=registry)
        self.quota_held = Gauge("podtailor_updater_quota_held_pods", "Pods whose in-place resize or fallback "
                                "a ResourceQuota holds back in the last pass's plans (reason quota), by action",
                                ["action"], registry=registry)
        self.analysis_measurements = Counter(
            "podtailor_updater_analysis_measurements", "Canary analysis measurements during bakes, by where the "
            "analysis is declared (source policy|workload) and outcome pass|fail|skip", ["source", "outcome"],
            registry=registry)
        self.analysis_failed = Counter("podtailor_updater_analysis_failed", "Batches failed by a canary analysis "
                                       "(rolled back, pool halted), by source policy|workload", ["source"],
                                       registry=registry)
        self.last_success = Gauge("podtailor_updater_last_success_timestamp_seconds",
                                  "Unix time of the last pass that completed", registry=registry)
