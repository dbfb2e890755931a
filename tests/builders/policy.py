"""Builders of planner inputs shared by the test_policy_* tests (and the rollout and webhook tests).

NOW = 1_700_000_000.0 is Tuesday 2023-11-14 22:13:20 UTC (weekday 1, minute 1333). Defaults: one pod
``shop/web-0`` of Deployment ``shop/web`` (3 replicas) on node ``n1`` of pool ``general`` (4 cores, 16 GiB),
one hour old, Ready, one container ``app`` with cpu 500m and memory 512 MiB requests and no limits. The node
declares both resize features (``updater.answers.NodeFeature``), as a 1.37 kubelet's does.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from podtailor.resize.changes import qos_class
from podtailor.resize.types import ContainerTarget, ContainerView, LimitRangeView
from podtailor.resources import Resources
from podtailor.vpa import UpdateMode
from updater.answers import NodeFeature
from updater.policy.planner import plan
from updater.policy.types import HpaView, NodeView, Plan, PodDecision, PodView, RolloutPolicy, WorkloadTarget

NOW = 1_700_000_000.0
MI = 1024**2
GI = 1024**3
BIG = 10**14


def res(cpu: int | None = None, mem: int | None = None) -> Resources:
    return Resources(cpu_millicores=cpu, memory_bytes=mem)


def container(name: str = "app", *, cpu: int | None = 500, mem: int | None = 512 * MI, cpu_lim: int | None = None,
              mem_lim: int | None = None, policy: Mapping[str, str] | None = None,
              sidecar: bool = False, init: bool = False) -> ContainerView:
    return ContainerView(name=name, requests=res(cpu, mem), limits=res(cpu_lim, mem_lim),
                         resize_policy=dict(policy or {}), sidecar=sidecar, init=init)


def pod(name: str = "web-0", *, ns: str = "shop", workload: str = "web", kind: str = "Deployment",
        node: str = "n1", pool: str = "general", containers: Iterable[ContainerView] | None = None,
        created_s: float = NOW - 3600, **kw: Any) -> PodView:
    cs = tuple(containers) if containers is not None else (container(),)
    qos = kw.pop("qos", qos_class((c.requests, c.limits) for c in cs))
    fields: dict[str, Any] = {"resource_version": "1", "generation": 1, "observed_generation": 1, "priority": 0,
                              "restart_policy": "Always", "ready": True}
    fields.update(kw)
    return PodView(namespace=ns, name=name, uid=f"uid-{ns}-{name}", node=node, pool=pool, workload_kind=kind,
                   workload_name=workload, qos=qos, created_s=created_s, containers=cs, **fields)


def ctarget(name: str = "app", *, cpu: int | None = 750, mem: int | None = 512 * MI,
            lower: Resources | None = None, upper: Resources | None = None, **kw: Any) -> ContainerTarget:
    return ContainerTarget(name=name, target=res(cpu, mem), lower_bound=lower or res(1, 1),
                           upper_bound=upper or res(BIG, BIG), **kw)


def wtarget(*containers: ContainerTarget, ns: str = "shop", workload: str = "web", kind: str = "Deployment",
            mode: UpdateMode = UpdateMode.IN_PLACE_OR_RECREATE, replicas: int = 3,
            stale: bool = False) -> WorkloadTarget:
    cs = containers or (ctarget(),)
    return WorkloadTarget(namespace=ns, workload_kind=kind, workload_name=workload, vpa_name=f"{workload}-vpa",
                          update_mode=mode, containers={c.name: c for c in cs}, stale=stale, replicas=replicas)


def node(name: str = "n1", *, pool: str = "general", cpu: int = 4000, mem: int = 16 * GI, ready: bool = True,
         pressure: bool = False, declared: Iterable[str] = tuple(NodeFeature)) -> NodeView:
    return NodeView(name=name, pool=pool, ready=ready, memory_pressure=pressure, allocatable=res(cpu, mem),
                    declared_features=frozenset(declared))


def run(pods: Iterable[PodView] | None = None, targets: Iterable[WorkloadTarget] | None = None, *,
        hpas: Iterable[HpaView] = (), limit_ranges: Iterable[LimitRangeView] = (),
        nodes: Iterable[NodeView] | None = None, policy: RolloutPolicy | None = None, now_s: float = NOW,
        **kw: Any) -> Plan:
    return plan(pods=list(pods) if pods is not None else [pod()],
                targets=list(targets) if targets is not None else [wtarget()], hpas=hpas,
                limit_ranges=limit_ranges, nodes=list(nodes) if nodes is not None else [node()],
                policy=policy or RolloutPolicy(), now_s=now_s, **kw)


def only(result: Plan) -> PodDecision:
    assert len(result.decisions) == 1
    return result.decisions[0]


def decide_one(p: PodView | None = None, t: WorkloadTarget | None = None, **kw: Any) -> PodDecision:
    return only(run([p or pod()], [t or wtarget()], **kw))
