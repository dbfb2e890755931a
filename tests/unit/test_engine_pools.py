"""A DaemonSet recommended per node pool: the source splits its usage by the pool of each pod's node, the
engine recommends each pool on the one path, the status carries the majority pool and the annotation every
pool's (``recommender.pools``, ``podtailor.poolrecs``). The store and the source are small fakes of the
engine's ports; the API server's side is the integration test's business."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from prometheus_client import CollectorRegistry

from podtailor.poolrecs import decode
from podtailor.resources import CurrentResources
from podtailor.vpa import TargetRef
from recommender.engine import EngineConfig, RecommenderEngine
from recommender.kube.cluster import ContainerTemplate, Workload
from recommender.kube.served import UnparsableVpa, VpaIdentity, VpaSpec, read_vpa
from recommender.metrics import RecommenderMetrics
from recommender.model.registry import get_strategy
from recommender.model.types import ContainerKey, Samples, UsageBatch
from recommender.pools import pool_outcome
from recommender.sources.owners import OwnerIndex
from recommender.sources.owners import Workload as Workload_
from recommender.sources.samples import PodUsage, build_batches
from tests.builders.engine import StatusStore

NOW = 1_700_000_000.0
HOUR = 3600.0
MIB = float(2**20)
PODS = {"agent-a": "small", "agent-b": "small", "agent-c": "large", "agent-d": ""}
"""Two pods on the 2-CPU pool, one on the 32-CPU pool, one on a node without a pool label."""


def batch(cores: float) -> UsageBatch:
    """8 days, hourly, flat: ``cores`` and 100 MiB per core."""
    ts = (NOW - 300.0 - HOUR * np.arange(192)[::-1]).astype(np.float64)
    return UsageBatch(cpu_cores=Samples(timestamps_s=ts, values=np.full(ts.size, cores)), cpu_interval_s=HOUR,
                      memory_peak_bytes=Samples(timestamps_s=ts, values=np.full(ts.size, cores * 100 * MIB)),
                      memory_interval_s=HOUR)


def key(kind: str, name: str, pool: str = "") -> ContainerKey:
    return ContainerKey(namespace="ns", workload_kind=kind, workload_name=name, container="agent", pool=pool)


class Store(StatusStore):
    def __init__(self) -> None:
        super().__init__()
        self.annotation: dict[str, str | None] = {}
        self.pool_reads: list[tuple[str, str, str]] = []
        self.pods = PODS

    def list_vpas(self, namespaces: Sequence[str] = ()) -> list[VpaSpec | UnparsableVpa]:
        return [read_vpa({"metadata": {"namespace": "ns", "name": f"v-{name}", "uid": f"u-{name}", "generation": 1},
                          "spec": {"targetRef": {"kind": kind, "name": name}, "recommenders": [{"name": "podtailor"}]}})
                for kind, name in (("DaemonSet", "agent"), ("Deployment", "web"))]

    def workload(self, namespace: str, ref: TargetRef) -> Workload | None:
        return Workload(namespace=namespace, kind=ref.kind, name=ref.name,
                        containers=(ContainerTemplate(name="agent", current=CurrentResources()),))

    def pod_pools(self, namespace: str, daemonset: str, pool_label: str) -> Mapping[str, str]:
        self.pool_reads.append((namespace, daemonset, pool_label))
        return self.pods

    def write_pool_annotation(self, vpa: VpaIdentity, value: str | None) -> bool:
        self.annotation[vpa.name] = value
        return True


class Source:
    """The DaemonSet uses 0.1 core on the small pool, 1.6 on the large one, 0.5 workload-wide."""

    def __init__(self) -> None:
        self.pools: list[Mapping[tuple[str, str], str] | None] = []

    def history(self, namespaces: Sequence[str], start_s: float, end_s: float,
                pools: Mapping[tuple[str, str], str] | None = None) -> Mapping[ContainerKey, UsageBatch]:
        self.pools.append(pools)
        return {key("DaemonSet", "agent"): batch(0.5), key("DaemonSet", "agent", "small"): batch(0.1),
                key("DaemonSet", "agent", "large"): batch(1.6), key("Deployment", "web"): batch(0.3)}


def cpu_target(entry: Mapping[str, object]) -> object:
    target = entry["target"]
    assert isinstance(target, dict)
    return target["cpu"]


def test_a_daemonset_gets_a_value_per_pool_and_its_status_the_majority_pools() -> None:
    store, source = Store(), Source()
    eng = RecommenderEngine(store=store, source=source, strategy=get_strategy("krr-simple"),
                            config=EngineConfig(checkpoint_every_s=1e9, pool_label="example.com/pool"),
                            metrics=RecommenderMetrics(CollectorRegistry()))
    report = eng.run_pass(NOW)
    assert store.pool_reads == [("ns", "agent", "example.com/pool")]  # the Deployment's pods are not read
    # the pods on a named pool only; agent-d's node has no pool label, so it counts workload-wide only
    assert source.pools == [{("ns", "agent-a"): "small", ("ns", "agent-b"): "small", ("ns", "agent-c"): "large"}]
    per_pool = decode(store.annotation["v-agent"])
    small, large = per_pool.pools["small"]["agent"].target, per_pool.pools["large"]["agent"].target
    assert set(per_pool.pools) == {"small", "large"}
    assert small.cpu_millicores is not None and large.cpu_millicores is not None
    # krr-simple: the 95th percentile of flat usage, rounded up to its histogram bucket (within 1%); memory the
    # peak x 1.15 with a 100 MiB floor: 10 MiB x 1.15 -> 100 MiB on the small pool, 160 MiB x 1.15 = 184 MiB
    assert 100 <= small.cpu_millicores <= 101 and 1600 <= large.cpu_millicores <= 1616
    assert (small.memory_bytes, large.memory_bytes) == (100 * MIB, 184 * MIB)
    [entry] = store.status["v-agent"]["recommendation"]["containerRecommendations"]
    assert entry["target"] == per_pool.pools["small"]["agent"].to_status()["target"]  # two of three pods: small
    assert report.recommendations[("ns", "v-agent", "agent")].target == small
    assert "v-web" not in store.annotation  # only DaemonSets carry per-pool values

    store.pods = {"agent-a": "small", "agent-b": "small"}  # the large node is gone
    eng.run_pass(NOW + 60)
    assert set(decode(store.annotation["v-agent"]).pools) == {"small"}  # its pool is dropped, states and value
    assert set(eng.served["u-agent"].pool_states) == {"small"}


def test_without_pool_values_the_status_is_workload_wide_and_the_annotation_removed() -> None:
    overall = {"agent": batch(0.5)}
    out = pool_outcome(overall, {}, PODS)  # type: ignore[arg-type]  # any value stands for a recommendation
    assert out.status is overall and out.annotation is None and out.problem == ""


def test_an_unencodable_value_keeps_the_status_workload_wide_and_says_why() -> None:
    bad = pool_outcome({}, {"not a label value!": {}}, {"p": "not a label value!"})
    assert bad.annotation is None and "not a label value" in bad.problem and bad.status == {}


def test_the_source_counts_a_daemonset_pod_workload_wide_and_under_its_pool() -> None:
    owners = OwnerIndex(pods={("ns", "agent-a"): Workload_(kind="DaemonSet", name="agent"),
                              ("ns", "agent-c"): Workload_(kind="DaemonSet", name="agent"),
                              ("ns", "web-1"): Workload_(kind="StatefulSet", name="web")})
    ts = np.array([NOW])

    def usage(cores: float) -> PodUsage:
        return PodUsage(cpu=[Samples(timestamps_s=ts, values=np.array([cores]))])

    raw = {("ns", "agent-a", "agent"): usage(0.1), ("ns", "agent-c", "agent"): usage(1.6),
           ("ns", "web-1", "agent"): usage(0.3)}
    pools = {("ns", "agent-a"): "small", ("ns", "agent-c"): "large", ("ns", "web-1"): "small"}
    out = build_batches(raw, owners, cpu_interval_s=60.0, memory_interval_s=60.0, pools=pools)
    assert sorted(out[key("DaemonSet", "agent")].cpu_cores.values) == [0.1, 1.6]
    assert list(out[key("DaemonSet", "agent", "small")].cpu_cores.values) == [0.1]
    assert list(out[key("DaemonSet", "agent", "large")].cpu_cores.values) == [1.6]
    web = ContainerKey(namespace="ns", workload_kind="StatefulSet", workload_name="web", container="agent")
    assert set(out) == {key("DaemonSet", "agent"), key("DaemonSet", "agent", "small"),
                        key("DaemonSet", "agent", "large"), web}  # only DaemonSets are split by pool
