"""One recommend path: the report recommends what the engine writes, from the same objects and history.

The engine runs one pass over small fakes of its ports (a store holding raw VPA and Deployment objects, a
source returning fixed batches); the report's pure core gets the same objects through discovery's
``assemble`` and the same batches. Every container's recommendation must be equal, field for field, with a
VPA whose maxAllowed and minAllowed bind, a two-container pod, and a fleet that prices podtailor's choices.
The real API server and Prometheus do the same in tests/integration/test_report_real.py.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from prometheus_client import CollectorRegistry

from podtailor.vpa import TargetRef
from recommender.engine import EngineConfig, RecommenderEngine
from recommender.kube.cluster import Workload, containers_of
from recommender.kube.served import UnparsableVpa, VpaSpec, read_vpa
from recommender.metrics import RecommenderMetrics
from recommender.model.registry import get_strategy
from recommender.model.types import ContainerKey, Samples, UsageBatch
from recommender.recommend import fleet_of
from recommender.report.build import BuildConfig, Recommending, assemble, build_report, recommending, workload_reports
from recommender.report.discovery import assemble as discover
from recommender.report.types import Inventory, Report
from tests.builders.engine import StatusStore

NOW = 1_700_000_000.0
HOUR = 3600.0
GIB = float(2**30)
NS = "ns"


def deployment(name: str, containers: Mapping[str, Mapping[str, str]]) -> dict[str, Any]:
    """A Deployment whose containers have these requests (and limits twice the requests)."""
    def doubled(q: str) -> str:
        return f"{int(q[:-1]) * 2}{q[-1]}" if q[-1] == "m" else f"{int(q[:-2]) * 2}{q[-2:]}"
    spec = [{"name": c, "resources": {"requests": dict(r), "limits": {k: doubled(v) for k, v in r.items()}}}
            for c, r in containers.items()]
    return {"metadata": {"namespace": NS, "name": name, "uid": f"d-{name}"},
            "spec": {"replicas": 2, "template": {"spec": {"containers": spec}}}}


def vpa(name: str, target: str, policies: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": target},
                            "recommenders": [{"name": "podtailor"}], "updatePolicy": {"updateMode": "Off"}}
    if policies is not None:
        spec["resourcePolicy"] = {"containerPolicies": policies}
    return {"metadata": {"namespace": NS, "name": name, "uid": f"v-{name}", "generation": 1}, "spec": spec}


DEPLOYMENTS = [
    deployment("web", {"app": {"cpu": "500m", "memory": "1Gi"}, "proxy": {"cpu": "100m", "memory": "128Mi"}}),
    deployment("db", {"db": {"cpu": "1000m", "memory": "4Gi"}}),
    deployment("big", {"main": {"cpu": "2000m", "memory": "8Gi"}}),
]
VPAS = [
    # app's memory (about 2 GiB) is capped at 1536Mi; proxy's CPU (about 50m) is raised to 300m.
    vpa("web", "web", [{"containerName": "app", "maxAllowed": {"memory": "1536Mi"}},
                       {"containerName": "proxy", "minAllowed": {"cpu": "300m"}}]),
    vpa("db", "db"),
    vpa("big", "big", [{"containerName": "*", "controlledValues": "RequestsOnly"}]),
]
SIZES = {("web", "app"): (0.3, 2.0), ("web", "proxy"): (0.05, 0.1), ("db", "db"): (0.8, 3.0),
         ("big", "main"): (3.0, 12.0)}
"""(CPU cores, memory GiB) per (workload, container): the fleet's sizes span 60x."""


def history(cores: float, gib: float, seed: int) -> UsageBatch:
    """8 days, hourly, noisy around these sizes, with a few memory peaks 30% higher."""
    rng = np.random.default_rng(seed)
    ts = NOW - 300.0 - HOUR * np.arange(192)[::-1]
    cpu = cores * rng.gamma(4.0, 0.25, ts.size)
    memory = gib * GIB * np.where(rng.random(ts.size) < 0.05, 1.3, rng.uniform(0.9, 1.0, ts.size))
    return UsageBatch(cpu_cores=Samples(timestamps_s=ts.astype(np.float64), values=cpu), cpu_interval_s=HOUR,
                      memory_peak_bytes=Samples(timestamps_s=ts.astype(np.float64), values=memory),
                      memory_interval_s=HOUR)


BATCHES = {ContainerKey(namespace=NS, workload_kind="Deployment", workload_name=w, container=c): history(*size, i)
           for i, ((w, c), size) in enumerate(sorted(SIZES.items()))}


class Store(StatusStore):
    """The engine's VPA store over the raw objects above; status writes kept per VPA."""

    def list_vpas(self, namespaces: Sequence[str] = ()) -> list[VpaSpec | UnparsableVpa]:
        return [read_vpa(v) for v in VPAS]  # parsed as the real store parses them

    def workload(self, namespace: str, ref: TargetRef) -> Workload | None:
        obj = next(d for d in DEPLOYMENTS if d["metadata"]["name"] == ref.name)
        return Workload(namespace=namespace, kind=ref.kind, name=ref.name,
                        containers=containers_of(obj["spec"]["template"]["spec"]))



class Source:
    def history(self, namespaces: Sequence[str], start_s: float, end_s: float,
                pools: Mapping[tuple[str, str], str] | None = None) -> Mapping[ContainerKey, UsageBatch]:
        return BATCHES


def inventory(vpas: list[dict[str, Any]]) -> Inventory:
    return discover({"Deployment": DEPLOYMENTS, "VerticalPodAutoscaler": vpas}, [], frozenset({"Deployment"}), None)


def report(inv: Inventory) -> Report:
    cfg = BuildConfig(now_s=NOW, start_s=NOW - 8 * 86400.0, end_s=NOW - 120.0, strategy_name="podtailor")
    return build_report(inv, BATCHES, get_strategy("podtailor"), cfg)


def test_the_report_recommends_exactly_what_the_engine_writes() -> None:
    engine = RecommenderEngine(store=Store(), source=Source(), strategy=get_strategy("podtailor"),
                               config=EngineConfig(namespaces=(NS,)),
                               metrics=RecommenderMetrics(CollectorRegistry()))
    written = engine.run_pass(NOW).recommendations
    reported = {(NS, w.vpa, c.name): c.recommendation for w in report(inventory(VPAS)).workloads
                for c in w.containers}
    assert len(written) == 4 and reported == written
    web = {c: written[(NS, "web", c)] for c in ("app", "proxy")}
    assert web["app"].target.memory_bytes == 1536 * 2**20 < (web["app"].uncapped_target.memory_bytes or 0)
    assert web["proxy"].target.cpu_millicores == 300 > (web["proxy"].uncapped_target.cpu_millicores or 0)
    assert written[(NS, "big", "main")].limits.memory_bytes is None  # RequestsOnly: no limit recommended


def test_the_fleet_is_every_container_whatever_the_read_groups() -> None:
    inv = inventory(VPAS)
    strategy = get_strategy("podtailor")
    cfg = BuildConfig(now_s=NOW, start_s=NOW - 8 * 86400.0, end_s=NOW - 120.0, strategy_name="podtailor")
    whole = recommending(inv.workloads, BATCHES, strategy, NOW)
    assert whole.fleet is not None and whole.fleet.memory_bytes > 2 * GIB  # the mean of 2, 0.1, 3 and 12 GiB peaks
    one_read = workload_reports(inv, inv.workloads, BATCHES, whole, cfg)
    # Read in two groups, each folded on its own: the states are the same, and so is their fleet.
    first, second = inv.workloads[:1], inv.workloads[1:]
    states = {**recommending(first, BATCHES, strategy, NOW).states,
              **recommending(second, BATCHES, strategy, NOW).states}
    grouped = Recommending(strategy=strategy, states=states, fleet=fleet_of(strategy, states.values(), NOW))
    assert grouped.fleet == whole.fleet
    by_group = [*workload_reports(inv, first, BATCHES, grouped, cfg), *workload_reports(inv, second, BATCHES,
                                                                                         grouped, cfg)]
    assert sorted(by_group, key=lambda w: w.name) == sorted(one_read, key=lambda w: w.name)
    # Alone in its own fleet a workload would be priced otherwise: the fleet is what makes the groups agree.
    alone = recommending(first, BATCHES, strategy, NOW)
    assert alone.fleet != whole.fleet


def test_a_workload_without_a_vpa_gets_the_default_policy_and_the_report_says_so() -> None:
    bad = vpa("db", "db", [{"containerName": "db", "minAllowed": {"cpu": "2"}, "maxAllowed": {"cpu": "1"}}])
    second = vpa("web-2", "web")
    inv = inventory([VPAS[0], second, bad])
    assert set(inv.vpas) == {(NS, "Deployment", "web")} and inv.vpas[(NS, "Deployment", "web")].name == "web"
    assert any("VPA ns/db is not served (spec.resourcePolicy.containerPolicies[0]: minAllowed is above "
               "maxAllowed)" in w for w in inv.warnings)
    assert any("VPA ns/web-2 is left out: VPA web already targets Deployment web" in w for w in inv.warnings)
    out = report(inv)
    assert {w.name: w.vpa for w in out.workloads} == {"big": None, "db": None, "web": "web"}
    assert "2 of 3 workloads have no VPA: recommended with the default container policy" in " ".join(out.warnings)
    # The default policy: RequestsAndLimits, so big's limits are recommended (RequestsOnly above left them out).
    big = next(w for w in out.workloads if w.name == "big").containers[0].recommendation
    assert big is not None and big.limits.memory_bytes is not None


def test_assemble_alone_adds_no_vpa_warning_when_every_workload_has_one() -> None:
    inv = inventory(VPAS)
    cfg = BuildConfig(now_s=NOW, start_s=NOW - 8 * 86400.0, end_s=NOW - 120.0, strategy_name="podtailor")
    items = workload_reports(inv, inv.workloads, BATCHES, recommending(inv.workloads, BATCHES,
                                                                       get_strategy("podtailor"), NOW), cfg)
    assert not any("no VPA" in w for w in assemble(inv, items, cfg).warnings)
