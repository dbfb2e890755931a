"""Builders of the report's inputs, and ``sample_report()``: the report the build, render and HTML tests read.

``sample_report()`` builds a small report from synthetic usage with the ``krr-simple`` strategy, whose numbers
are easy to work out: CPU = p95 of the samples, memory = peak x 1.15 rounded up to a MiB, floors 10m and 100Mi.
"""

from __future__ import annotations

import numpy as np

from podtailor.resources import CurrentResources, Resources
from recommender.model.registry import get_strategy
from recommender.model.types import ContainerKey, OomKill, Samples, UsageBatch
from recommender.report.build import BuildConfig, build_report
from recommender.report.pricing import PriceSheet
from recommender.report.types import ContainerSpec, Inventory, NodeInfo, PodInfo, Report, Role, Workload

Mi, Gi = 2**20, 2**30
NOW = 1_750_000_000.0
DAY = 86400.0


def cur(cpu: int | None, mem: int | None, cpu_lim: int | None = None, mem_lim: int | None = None) -> CurrentResources:
    return CurrentResources(requests=Resources(cpu_millicores=cpu, memory_bytes=mem),
                            limits=Resources(cpu_millicores=cpu_lim, memory_bytes=mem_lim))


def batch(cpu_cores: float, memory: int, *, points: int = 1440, ooms: int = 0,
          throttled: float | None = None) -> UsageBatch:
    ts = NOW - DAY + 60.0 * np.arange(points)
    return UsageBatch(cpu_cores=Samples(timestamps_s=ts, values=np.full(points, cpu_cores)), cpu_interval_s=60.0,
                      memory_peak_bytes=Samples(timestamps_s=ts, values=np.full(points, float(memory))),
                      memory_interval_s=60.0, oom_kills=tuple(OomKill(timestamp_s=NOW - 100) for _ in range(ooms)),
                      cpu_throttled_fraction=Samples.empty() if throttled is None else Samples(
                          timestamps_s=ts, values=np.full(points, throttled)))


def spec(name: str, c: CurrentResources, role: Role = Role.CONTAINER, **policy: str) -> ContainerSpec:
    return ContainerSpec(name=name, role=role, current=c, resize_policy=policy)


def workload(ns: str, name: str, containers: tuple[ContainerSpec, ...], *, kind: str = "Deployment",
             replicas: int = 2, node: str = "n1") -> Workload:
    pods = tuple(PodInfo(name=f"{name}-{i}", node=node, restart_policy="Always",
                         containers=tuple(c for c in containers if c.role != Role.INIT)) for i in range(replicas))
    return Workload(namespace=ns, kind=kind, name=name, replicas=replicas, restart_policy="Always",
                    containers=containers, pods=pods)


def key(w: Workload, container: str) -> ContainerKey:
    return ContainerKey(namespace=w.namespace, workload_kind=w.kind, workload_name=w.name, container=container)


def sample_inputs() -> tuple[Inventory, dict[ContainerKey, UsageBatch]]:
    web = workload("shop", "web", (spec("proxy", cur(100, 64 * Mi, None, 128 * Mi), Role.SIDECAR),
                                   spec("app", cur(500, 256 * Mi, 1000, 512 * Mi)),
                                   spec("setup", cur(50, 32 * Mi), Role.INIT)))
    db = workload("shop", "db", (spec("db", cur(1000, 1 * Gi, 1000, 1 * Gi), memory="RestartContainer"),),
                  kind="StatefulSet", replicas=1, node="n2")
    batchy = workload("jobs", "nightly", (spec("run", cur(None, None)),), kind="CronJob", replicas=1)
    inv = Inventory(workloads=(web, db, batchy),
                    nodes={"n1": NodeInfo(name="n1", pool="general", allocatable=Resources(cpu_millicores=4000,
                                                                                            memory_bytes=16 * Gi)),
                           "n2": NodeInfo(name="n2", pool="spot", allocatable=Resources(cpu_millicores=4000,
                                                                                         memory_bytes=16 * Gi))},
                    warnings=("cannot list nodes: example",))
    batches = {key(web, "proxy"): batch(0.05, 40 * Mi), key(web, "app"): batch(0.2, 300 * Mi, ooms=2, throttled=0.2),
               key(db, "db"): batch(0.4, 700 * Mi), key(batchy, "run"): batch(0.3, 200 * Mi, points=360)}
    return inv, batches


def sample_report(prices: PriceSheet | None = None) -> Report:
    inv, batches = sample_inputs()
    cfg = BuildConfig(now_s=NOW, start_s=NOW - DAY, end_s=NOW, strategy_name="krr-simple",
                      prices=prices or PriceSheet(), settings={"namespaces": [], "selector": "", "kinds": []})
    return build_report(inv, batches, get_strategy("krr-simple"), cfg)
