"""Command line of the node simulator: ``python -m tests.nodesim --kubeconfig K --pool web=3:4:16Gi``.

Owns running the simulator as its own process (for the demo and for poking at a cluster by hand) until
SIGINT or SIGTERM, then deleting its nodes. Tests use ``NodeSimulator`` in-process instead.

With ``--real-kubelets`` the pools are real kubelets (hollow nodes of kubelet v1.37.2,
``tests/harness/kubelets.py``) and the simulator only follows them (``tests/nodesim/follow.py``): it feeds
their containers' usage and serves the metrics, while the kubelets run the pods.
"""

from __future__ import annotations

import argparse
import logging
import re
import signal
import sys
import threading
from pathlib import Path

from kubernetes import config
from kubernetes.client import ApiClient

from tests.harness.cluster import ClusterState
from tests.nodesim.follow import UsageFollower
from tests.nodesim.kubelet import NodeSimulator, SimConfig
from tests.nodesim.nodes import POOL_LABEL_KEYS, NodePool
from tests.nodesim.quantity import parse_cpu_millicores, parse_memory_bytes

_POOL = re.compile(r"^(?P<name>[a-z0-9]([-a-z0-9]{0,30}[a-z0-9])?)=(?P<count>\d{1,4}):(?P<cpu>[^:]+):(?P<mem>[^:]+)"
                   r"(:(?P<type>[-a-z0-9.]{1,40}))?$")


def parse_pool(text: str, label_keys: tuple[str, ...]) -> NodePool:
    """``NAME=COUNT:CPU:MEMORY[:INSTANCE_TYPE]``, e.g. ``web=3:4:16Gi:m5.xlarge``."""
    m = _POOL.match(text)
    if m is None:
        raise argparse.ArgumentTypeError(f"bad --pool {text!r}: expected NAME=COUNT:CPU:MEMORY[:INSTANCE_TYPE]")
    try:
        return NodePool(name=m["name"], count=int(m["count"]), cpu_millicores=parse_cpu_millicores(m["cpu"]),
                        memory_bytes=parse_memory_bytes(m["mem"]), instance_type=m["type"] or "sim.large",
                        label_keys=label_keys)
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"bad --pool {text!r}: {err}") from None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.nodesim", description=__doc__)
    parser.add_argument("--kubeconfig", required=True, type=Path)
    parser.add_argument("--pool", action="append", required=True, metavar="NAME=COUNT:CPU:MEMORY[:TYPE]")
    parser.add_argument("--labels", default="podtailor", help="node-pool label styles, comma-separated, of: "
                        + ", ".join(POOL_LABEL_KEYS) + " (default: %(default)s)")
    parser.add_argument("--metrics-port", type=int, default=0, help="/metrics on 127.0.0.1 (0: any free port)")
    parser.add_argument("--clock-speed", type=float, default=1.0, help="simulated seconds per wall second")
    parser.add_argument("--trace-dir", type=Path, help="folder of trace files usage annotations may name")
    parser.add_argument("--name-prefix", default="sim")
    parser.add_argument("--port-file", type=Path, help="write the metrics port here once serving")
    parser.add_argument("--real-kubelets", action="store_true",
                        help="run the pools as real kubelets (hollow nodes of kubelet v1.37.2, tainted "
                        "podtailor.io/hollow-node=true:NoSchedule) and only follow them: usage and metrics; "
                        "needs the cluster state beside the kubeconfig (python -m tests.harness up); "
                        "runs on the wall clock")
    args = parser.parse_args(argv)
    styles = [s.strip() for s in args.labels.split(",") if s.strip()]
    unknown = [s for s in styles if s not in POOL_LABEL_KEYS]
    if unknown:
        parser.error(f"unknown label style(s) {unknown}; choose from {sorted(POOL_LABEL_KEYS)}")
    keys = tuple(POOL_LABEL_KEYS[s] for s in styles)
    try:
        pools = tuple(parse_pool(p, keys) for p in args.pool)
    except argparse.ArgumentTypeError as err:
        parser.error(str(err))
    if args.real_kubelets and args.clock_speed != 1.0:
        parser.error("--real-kubelets runs on the wall clock: drop --clock-speed")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    api = config.new_client_from_config(config_file=str(args.kubeconfig))  # type: ignore[no-untyped-call]
    if args.real_kubelets:
        return _follow_real_kubelets(args, api, pools)
    sim = NodeSimulator(api, SimConfig(pools=pools, name_prefix=args.name_prefix, metrics_port=args.metrics_port,
                                       clock_speed=args.clock_speed, trace_dir=args.trace_dir)).start()
    print(f"simulating {len(sim.nodes)} nodes; metrics on 127.0.0.1:{sim.metrics_port}", flush=True)
    if args.port_file:
        args.port_file.write_text(f"{sim.metrics_port}\n")
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    signal.signal(signal.SIGINT, lambda *_: done.set())
    done.wait()
    sim.stop(delete_nodes=True)
    return 0


def _follow_real_kubelets(args: argparse.Namespace, api: ApiClient, pools: tuple[NodePool, ...]) -> int:
    from tests.harness.kubelets import KubeletPool
    from tests.harness.process import HarnessError

    workdir = args.kubeconfig.resolve().parent
    try:
        kubelets = KubeletPool(cluster=ClusterState.load(workdir), workdir=workdir, pools=pools,
                               name_prefix=args.name_prefix, status_period_s=5.0, sync_period_s=10.0).start()
    except HarnessError as err:
        print(f"nodesim: the real kubelets did not start: {err}", file=sys.stderr)
        return 1
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    signal.signal(signal.SIGINT, lambda *_: done.set())
    follower = UsageFollower(api, kubelets.nodes, trace_dir=args.trace_dir, metrics_port=args.metrics_port)
    try:
        follower.start()
        print(f"running {len(kubelets.nodes)} real kubelets; metrics on 127.0.0.1:{follower.metrics_port}", flush=True)
        if args.port_file:
            args.port_file.write_text(f"{follower.metrics_port}\n")
        done.wait()
    finally:
        follower.stop()
        kubelets.stop(delete_nodes=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
