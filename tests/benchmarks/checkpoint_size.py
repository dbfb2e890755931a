"""Checkpoint bytes per workload container after a given history, without Prometheus: ``python -m
tests.benchmarks.checkpoint_size --containers 1000 --hours 1 192``.

Owns the by-hand sizing of issue #40's checkpoint goal (below 2 KiB per container) over histories the fleet
bench cannot backfill at scale (8 days at a 1-minute resolution). The fleet is the recommender bench's
(``bench_recommender._fleet``: Deployments of 3 pods over 20 namespaces, every other one with a sidecar, each
container's usage its ``Daily`` model); each workload container's state is built by the default strategy from
its 3 pods' samples at a 1-minute step (one batch, the pods' samples side by side), and the checkpoints are
sized by the fleet bench's own ``checkpoint_bytes`` (the body ``KubeAdapter.save_checkpoint`` sends, as
compact JSON). Prints one JSON line per history.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import Any

import numpy as np

from tests.benchmarks import bench_recommender as bench

STEP_S = 60.0
END_S = 1_700_000_000.0


def states(containers: int, hours: float) -> tuple[Any, dict[Any, Any]]:
    """The default strategy and its state per workload container of the bench's fleet of ``containers``."""
    from recommender.model.registry import DEFAULT_STRATEGY, get_strategy
    from recommender.model.types import ContainerKey, Samples, UsageBatch

    strategy = get_strategy(DEFAULT_STRATEGY)
    ts = END_S - STEP_S * np.arange(round(hours * 3600.0 / STEP_S))[::-1]
    by_key: dict[Any, list[Any]] = {}
    for c in bench._fleet(containers)[0]:
        key = ContainerKey(namespace=c.namespace, workload_kind="Deployment", workload_name=c.replicaset_owner_name,
                           container=c.container)
        by_key.setdefault(key, []).append(c.model.sample_many(ts))
    out = {}
    for key, series in by_key.items():
        times = np.tile(ts, len(series))
        cpu = np.concatenate([s.cpu_cores for s in series])
        memory = np.concatenate([s.memory_bytes for s in series]).astype(np.float64)
        state = strategy.new_state()
        state.add(UsageBatch(cpu_cores=Samples(timestamps_s=times, values=cpu), cpu_interval_s=STEP_S,
                             memory_peak_bytes=Samples(timestamps_s=times, values=memory),
                             memory_interval_s=STEP_S))
        out[key] = state
    return strategy, out


def measure(containers: int, hours: float) -> dict[str, Any]:
    strategy, by_key = states(containers, hours)
    sized = bench.checkpoint_bytes(strategy, by_key, END_S)
    return {"containers": containers, "hours": hours, **sized,
            "per_workload_container": sized["bytes"] / sized["keys"], "per_container": sized["bytes"] / containers}


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--containers", type=int, default=1000)
    parser.add_argument("--hours", type=float, nargs="+", default=[1.0, 192.0])
    args = parser.parse_args(argv)
    for hours in args.hours:
        print(json.dumps(measure(args.containers, hours)), flush=True)


if __name__ == "__main__":
    main()
