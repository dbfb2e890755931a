"""Plain init containers are recommended from their own (short) history, by the engine and the report alike.

A Deployment with a native sidecar, a regular container and two plain init containers: ``migrate`` ran for ten
minutes a day ago (ten one-minute samples), ``wait`` left no history. The engine runs one pass over small fakes
of its ports; the report's pure core gets the same objects and batches. Expected numbers are worked out from
VPA's rules (``recommender/model/vpa.py``, vpa.md 1.2): target = p90 x 1.15 at the upper edge of its bucket.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pytest
from prometheus_client import CollectorRegistry

from podtailor.vpa import TargetRef
from recommender.engine import EngineConfig, RecommenderEngine
from recommender.kube.cluster import Workload, containers_of
from recommender.kube.served import UnparsableVpa, VpaSpec, read_vpa
from recommender.kube.vpa_status import build_status
from recommender.metrics import RecommenderMetrics
from recommender.model.registry import get_strategy
from recommender.model.types import ContainerKey, Recommendation, Resources, Samples, UsageBatch
from recommender.report.build import BuildConfig, build_report
from recommender.report.discovery import assemble as discover
from recommender.report.types import Role
from tests.builders.engine import StatusStore

NOW = 1_700_000_000.0
MIB = 2**20
NS = "ns"


def template(*, with_init: bool = True) -> dict[str, Any]:
    def c(name: str, cpu: str, memory: str, **extra: Any) -> dict[str, Any]:
        return {"name": name, "resources": {"requests": {"cpu": cpu, "memory": memory}}, **extra}

    init = [c("proxy", "50m", "64Mi", restartPolicy="Always")]
    if with_init:
        init += [c("migrate", "100m", "128Mi"), c("wait", "10m", "16Mi")]
    return {"initContainers": init, "containers": [c("app", "500m", "1Gi")]}


def deployment(spec: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"namespace": NS, "name": "web", "uid": "d-web"},
            "spec": {"replicas": 1, "template": {"spec": spec}}}


VPA = {"metadata": {"namespace": NS, "name": "web", "uid": "v-web", "generation": 1},
       "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                "recommenders": [{"name": "podtailor"}], "updatePolicy": {"updateMode": "Off"}}}


def constant(cores: float, memory_bytes: float, ts: np.ndarray[Any, np.dtype[np.float64]],
             step_s: float) -> UsageBatch:
    return UsageBatch(cpu_cores=Samples(timestamps_s=ts, values=np.full(ts.size, cores)), cpu_interval_s=step_s,
                      memory_peak_bytes=Samples(timestamps_s=ts, values=np.full(ts.size, memory_bytes)),
                      memory_interval_s=step_s)


def key(container: str) -> ContainerKey:
    return ContainerKey(namespace=NS, workload_kind="Deployment", workload_name="web", container=container)


EIGHT_DAYS = NOW - 300.0 - 3600.0 * np.arange(192, dtype=np.float64)[::-1]
TEN_MINUTES = NOW - 86400.0 + 60.0 * np.arange(10, dtype=np.float64)
BATCHES = {key("app"): constant(0.3, 600 * MIB, EIGHT_DAYS, 3600.0),
           key("proxy"): constant(0.001, 20 * MIB, EIGHT_DAYS, 3600.0),
           key("migrate"): constant(0.4, 300 * MIB, TEN_MINUTES, 60.0)}


class Store(StatusStore):
    def __init__(self, spec: dict[str, Any]) -> None:
        super().__init__()
        self.spec = spec

    def list_vpas(self, namespaces: Sequence[str] = ()) -> list[VpaSpec | UnparsableVpa]:
        return [read_vpa(VPA)]

    def workload(self, namespace: str, ref: TargetRef) -> Workload | None:
        return Workload(namespace=namespace, kind=ref.kind, name=ref.name, containers=containers_of(self.spec))


class Source:
    def history(self, namespaces: Sequence[str], start_s: float, end_s: float,
                pools: Mapping[tuple[str, str], str] | None = None) -> Mapping[ContainerKey, UsageBatch]:
        return BATCHES


def engine_pass(spec: dict[str, Any], strategy: str) -> tuple[dict[str, Recommendation], dict[str, Any]]:
    store = Store(spec)
    engine = RecommenderEngine(store=store, source=Source(), strategy=get_strategy(strategy),
                               config=EngineConfig(namespaces=(NS,)), metrics=RecommenderMetrics(CollectorRegistry()))
    recs = engine.run_pass(NOW).recommendations
    return {c: r for (_, _, c), r in recs.items()}, store.status["web"]


def test_containers_of_marks_plain_init_containers_and_keeps_sidecars_apart() -> None:
    got = [(c.name, c.sidecar, c.init) for c in containers_of(template())]
    assert got == [("proxy", True, False), ("app", False, False), ("migrate", False, True), ("wait", False, True)]


@pytest.mark.parametrize("strategy", ["vpa", "podtailor"])
def test_the_engine_writes_the_init_containers_recommendation_and_the_report_shows_the_same(strategy: str) -> None:
    written, status = engine_pass(template(), strategy)
    assert set(written) == {"proxy", "app", "migrate"}  # wait: no history, so no recommendation (never a floor)
    entries = {e["containerName"]: e for e in status["recommendation"]["containerRecommendations"]}
    assert set(entries) == {"proxy", "app", "migrate"}
    conditions = {c["type"]: c for c in status["conditions"]}
    # The conditions speak of the containers that run together: wait's missing history and migrate's ten
    # minutes unset neither.
    assert conditions["RecommendationProvided"]["status"] == "True", conditions
    assert "migrate" not in conditions["LowConfidence"]["message"]
    assert written["migrate"].confidence < written["app"].confidence

    inv = discover({"Deployment": [deployment(template())], "VerticalPodAutoscaler": [VPA]}, [],
                   frozenset({"Deployment"}), None)
    cfg = BuildConfig(now_s=NOW, start_s=NOW - 8 * 86400.0, end_s=NOW - 120.0, strategy_name=strategy)
    (report,) = build_report(inv, BATCHES, get_strategy(strategy), cfg).workloads
    by_name = {c.name: c for c in report.containers}
    assert by_name["migrate"].role == Role.INIT and by_name["migrate"].recommendation == written["migrate"]
    assert by_name["wait"].recommendation is None
    assert {n: c.recommendation for n, c in by_name.items() if c.recommendation} == written


def test_vpa_numbers_for_ten_minutes_of_an_init_container() -> None:
    written, _ = engine_pass(template(), "vpa")
    target = written["migrate"].target
    # CPU: p90 of ten 0.4-core samples = 0.4 cores, x 1.15 = 460m, at most 5.5% more for the upper edge of its
    # bucket (first bucket 0.01 core, ratio 1.05: width / start = 0.05 r^n / (r^n - 1), r^n = 1 + 0.4 x 5 = 3).
    assert target.cpu_millicores is not None and 460 <= target.cpu_millicores <= 460 * 1.075 + 1
    # Memory: one daily peak of 300Mi, x 1.15 = 345Mi, at most 8.2% more for its bucket edge (first 1e7 B).
    assert target.memory_bytes is not None and 345 * MIB <= target.memory_bytes <= 345 * MIB * 1.082 + 1


def test_init_containers_take_no_share_of_the_floors_of_the_others() -> None:
    with_init, _ = engine_pass(template(), "vpa")
    without, _ = engine_pass(template(with_init=False), "vpa")
    # proxy uses 1m and 20Mi: it sits on its share of VPA's pod floor (25m and 250Mi over the 2 containers that
    # run together: 12.5m, which VPA's integer amounts truncate to 12m, and 125Mi), the same with or without the
    # two init containers in the pod (over 4 containers it would be 6m and 62.5Mi).
    assert with_init["proxy"] == without["proxy"] and with_init["app"] == without["app"]
    assert with_init["proxy"].target == Resources(cpu_millicores=12, memory_bytes=125 * MIB)


def test_build_status_counts_only_running_containers_in_its_conditions() -> None:
    rec = Recommendation(target=Resources(cpu_millicores=100, memory_bytes=64 * MIB),
                         lower_bound=Resources(cpu_millicores=90, memory_bytes=60 * MIB),
                         upper_bound=Resources(cpu_millicores=200, memory_bytes=99 * MIB),
                         uncapped_target=Resources(cpu_millicores=100, memory_bytes=64 * MIB), confidence=0.01)
    init_missing = build_status({}, 1, {"app": rec, "migrate": rec}, ["app", "migrate", "wait"],
                                init={"migrate", "wait"})
    assert init_missing is not None
    conditions = {c["type"]: c for c in init_missing["conditions"]}
    assert conditions["RecommendationProvided"]["status"] == "True"
    assert conditions["LowConfidence"]["message"] == "less history than the strategy wants for: app"
    assert [e["containerName"] for e in init_missing["recommendation"]["containerRecommendations"]] == [
        "app", "migrate"]
    # The same without init: wait's missing history is a missing recommendation again.
    plain = build_status({}, 1, {"app": rec, "migrate": rec}, ["app", "migrate", "wait"])
    assert plain is not None
    provided = next(c for c in plain["conditions"] if c["type"] == "RecommendationProvided")
    assert (provided["status"], provided["message"]) == ("False", "no usage history yet for container(s) wait")
