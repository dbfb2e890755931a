"""Unit tests of the engine's strategy choice per VPA: the ``podtailor.io/risk`` annotation, and what an
unusable one does (the VPA is served at the default risk, with one warning Event per reason).

The store and the source are small fakes of the engine's narrow ports; the API server's behaviour (status
subresource, conflicts) is the integration tests' business, not these."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from prometheus_client import CollectorRegistry

from podtailor.resources import CurrentResources
from podtailor.vpa import TargetRef
from recommender.engine import RISK_CACHE_SIZE, EngineConfig, RecommenderEngine
from recommender.kube.cluster import ContainerTemplate, Workload
from recommender.kube.served import RISK_ANNOTATION, UnparsableVpa, VpaIdentity, VpaSpec, read_vpa
from recommender.metrics import RecommenderMetrics
from recommender.model.registry import at_risk, get_strategy
from recommender.model.types import ContainerKey, Samples, UsageBatch
from tests.builders.engine import StatusStore

NOW = 1_700_000_000.0
HOUR = 3600.0
GIB = float(2**30)


def history(scale: float = 1.0) -> UsageBatch:
    """8 days, hourly: 0.2 cores; memory 2 GiB with 4 GiB in 10 of the 192 hours (all x ``scale``). Every
    container of the fleet alike, the fleet's mean peak is 4 GiB and an OOM costs 40 x 4 GiB-hours. At risk 1
    the top hours are covered (dropping them saves 2 GiB x 1.05 = 2.1 GiB, costs 160 x 10 / 192 = 8.3), at risk
    4 they are not (costs 2.08): 4 GiB x 1.05 against 2 GiB x 1.05. The margin is the default jump margin's 5%
    floor: every day's window holds a 4 GiB hour, so no hour rises above the day before it."""
    i = np.arange(192)
    ts = (NOW - 300.0 - HOUR * i[::-1]).astype(np.float64)
    return UsageBatch(cpu_cores=Samples(timestamps_s=ts, values=np.full(i.size, 0.2 * scale)), cpu_interval_s=HOUR,
                      memory_peak_bytes=Samples(timestamps_s=ts, values=np.where(i % 19 == 5, 4 * GIB, 2 * GIB)
                                                * scale),
                      memory_interval_s=HOUR)


class Store(StatusStore):
    """VPAs named ``v-<workload>`` on Deployments of one container ``app``; status writes kept per VPA."""

    def __init__(self, annotations: Mapping[str, str | None]) -> None:
        super().__init__()
        self.annotations = annotations

    def list_vpas(self, namespaces: Sequence[str] = ()) -> list[VpaSpec | UnparsableVpa]:
        out = []
        for name, risk in self.annotations.items():
            meta: dict[str, Any] = {"namespace": "ns", "name": f"v-{name}", "uid": f"u-{name}", "generation": 1}
            if risk is not None:
                meta["annotations"] = {RISK_ANNOTATION: risk}
            out.append(read_vpa({"metadata": meta, "spec": {"targetRef": {"kind": "Deployment", "name": name},
                                                             "recommenders": [{"name": "podtailor"}]}}))
        return out

    def workload(self, namespace: str, ref: TargetRef) -> Workload | None:
        return Workload(namespace=namespace, kind="Deployment", name=ref.name,
                        containers=(ContainerTemplate(name="app", current=CurrentResources()),))


class Source:
    """The same history for every workload, x ``scales[name]`` where given."""

    def __init__(self, names: Sequence[str], scales: Mapping[str, float] | None = None) -> None:
        self.names, self.scales = names, scales or {}

    def history(self, namespaces: Sequence[str], start_s: float, end_s: float,
                pools: Mapping[tuple[str, str], str] | None = None) -> Mapping[ContainerKey, UsageBatch]:
        return {ContainerKey(namespace="ns", workload_kind="Deployment", workload_name=n, container="app"):
                history(self.scales.get(n, 1.0)) for n in self.names}


class Events:
    def __init__(self) -> None:
        self.recorded: list[tuple[str, str, str, bool]] = []

    def record(self, vpa: VpaIdentity, reason: str, message: str, *, warning: bool = False) -> None:
        self.recorded.append((vpa.name, reason, message, warning))


RISK_1 = math.ceil(4 * GIB * 1.05)
"""The memory target at risk 1 (and 0.5): the 4 GiB top hours covered, x 1.05, rounded up once."""
RISK_4 = math.ceil(2 * GIB * 1.05)
"""At risk 4: the top hours dropped."""


def engine(annotations: Mapping[str, str | None], strategy: str = "podtailor",
           scales: Mapping[str, float] | None = None) -> tuple[RecommenderEngine, Events, Store]:
    events, store = Events(), Store(annotations)
    return RecommenderEngine(store=store, source=Source(list(annotations), scales),
                             strategy=get_strategy(strategy), config=EngineConfig(checkpoint_every_s=1e9),
                             metrics=RecommenderMetrics(CollectorRegistry()), events=events,
                             strategy_at_risk=at_risk(strategy)), events, store


def memory(report: Any, name: str) -> int | None:
    value: int | None = report.recommendations[("ns", f"v-{name}", "app")].target.memory_bytes
    return value


def warnings(events: Events) -> list[tuple[str, str, str, bool]]:
    return [e for e in events.recorded if e[3]]


def test_each_vpa_is_served_at_its_own_risk() -> None:
    eng, events, _ = engine({"plain": None, "risky": "4", "careful": "0.5"})
    report = eng.run_pass(NOW)
    assert report.served == 3 and report.unsupported == 0
    assert memory(report, "plain") == memory(report, "careful") == RISK_1
    assert memory(report, "risky") == RISK_4
    assert warnings(events) == []


def test_an_unusable_annotation_serves_the_default_and_warns_once_per_reason() -> None:
    annotations = {"plain": None, "typo": "4x"}
    eng, events, store = engine(annotations)
    report = eng.run_pass(NOW)
    assert report.served == 2 and report.unsupported == 0
    assert memory(report, "typo") == memory(report, "plain") == RISK_1  # the default risk, not 4, not nothing
    [written] = store.status["v-typo"]["recommendation"]["containerRecommendations"]
    assert written["containerName"] == "app" and "memory" in written["target"]
    [(vpa, reason, message, _)] = warnings(events)
    assert (vpa, reason) == ("v-typo", "RiskAnnotationIgnored")
    assert message == (f"annotation {RISK_ANNOTATION}='4x' is not a decimal number in [0.05, 20]; served at the "
                       "recommender's own risk setting (--risk)")
    eng.run_pass(NOW + 60)
    assert len(warnings(events)) == 1  # the same reason is not repeated every pass
    annotations["typo"] = "99"
    eng.run_pass(NOW + 120)
    assert [e[2].split(";")[0] for e in warnings(events)][1:] == [f"annotation {RISK_ANNOTATION}='99' is outside "
                                                                  "[0.05, 20]"]
    annotations["typo"] = "4"
    report = eng.run_pass(NOW + 180)
    assert memory(report, "typo") == RISK_4 and len(warnings(events)) == 2  # fixed: served at 4, no new warning


def test_a_strategy_without_a_risk_setting_ignores_the_annotation_and_says_so() -> None:
    eng, events, _ = engine({"plain": None, "risky": "4"}, strategy="vpa")
    report = eng.run_pass(NOW)
    assert memory(report, "risky") == memory(report, "plain")
    [(vpa, reason, message, _)] = warnings(events)
    assert (vpa, reason) == ("v-risky", "RiskAnnotationIgnored")
    assert "ignored: the vpa strategy has no risk setting" in message


def test_distinct_risks_keep_a_bounded_number_of_strategies() -> None:
    names = {f"w{i}": f"{1 + i / 10:g}" for i in range(RISK_CACHE_SIZE + 4)}
    eng, _, _ = engine(names)
    report = eng.run_pass(NOW)
    assert report.served == len(names) and len(eng._by_risk) == RISK_CACHE_SIZE


def test_prices_are_in_units_of_the_fleet_the_engine_serves() -> None:
    # Alone, "app" is its own fleet and covers its top hours (RISK_1). Beside nine workloads a tenth of its
    # size the fleet's mean peak is 0.19 x 4 GiB: an OOM costs 40 x 0.76 GiB-hours, dropping its top hours
    # costs 30.4 x 10 / 192 = 1.6 GiB against 2.1 saved, so the larger container takes the risk (RISK_4),
    # while each small one, 4 GiB x 0.1 = 0.41 GiB at its peak, still covers its own (saving 0.21 GiB).
    alone = engine({"app": None})[0].run_pass(NOW)
    assert memory(alone, "app") == RISK_1
    small = {f"s{i}": None for i in range(9)}
    mixed = engine({"app": None, **small}, scales=dict.fromkeys(small, 0.1))[0].run_pass(NOW)
    assert memory(mixed, "app") == RISK_4
    assert memory(mixed, "s0") == math.ceil(0.4 * GIB * 1.05)
    # The same fleet at 10 times the size gets the same policy: the fleet's prices scale with it.
    big = engine({"app": None, **small}, scales={"app": 10.0, **dict.fromkeys(small, 1.0)})[0].run_pass(NOW)
    assert memory(big, "app") == math.ceil(20 * GIB * 1.05)
    assert memory(big, "s0") == math.ceil(4 * GIB * 1.05)
