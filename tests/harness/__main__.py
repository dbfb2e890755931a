"""Command line for the local cluster: ``python -m tests.harness up|down|status``.

Owns the hand-started (detached) cluster in ``.cluster/`` at the repository root: ``up`` starts the
control plane and Prometheus and prints how to use them, ``down`` stops them, ``status`` tells whether
they run. Tests do not use this: their fixtures start a private cluster per test session.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from tests.harness.cluster import REPO_ROOT, ClusterState, LocalCluster, stop_detached
from tests.harness.process import HarnessError, pid_alive, stop_pid
from tests.harness.prometheus import LocalPrometheus

DEFAULT_DIR = REPO_ROOT / ".cluster"


def _up(workdir: Path, targets: list[str]) -> int:
    if (workdir / "cluster.json").exists() and ClusterState.load(workdir).running():
        print(f"a cluster already runs from {workdir}; `python -m tests.harness down` stops it", file=sys.stderr)
        return 1
    t0 = time.monotonic()
    state = LocalCluster(workdir, detached=True).start()
    prom = LocalPrometheus(workdir / "prometheus", targets=targets, detached=True)
    prom.start()
    assert prom.proc is not None
    (workdir / "prometheus.json").write_text(json.dumps({"url": prom.url, "pid": prom.proc.pid}) + "\n")
    print(f"control plane {state.version} and Prometheus up in {time.monotonic() - t0:.1f}s")
    print(f"  export KUBECONFIG={state.kubeconfig}")
    print(f"  API server:  {state.server}")
    print(f"  Prometheus:  {prom.url}")
    print(f"  logs:        {workdir / 'logs'}")
    print("  stop with:   python -m tests.harness down")
    return 0


def _down(workdir: Path) -> int:
    for pid_file in sorted(workdir.glob("*.pid")):  # the demo's webhook and the node simulator
        pid = int(pid_file.read_text())
        if pid_alive(pid):
            stop_pid(pid, timeout_s=30)  # the simulator deletes its nodes on SIGTERM
            print(f"stopped {pid_file.stem}")
        pid_file.unlink()
    prom_state = workdir / "prometheus.json"
    if prom_state.exists():
        pid = int(json.loads(prom_state.read_text())["pid"])
        if pid_alive(pid):
            stop_pid(pid)
            print("stopped prometheus")
    for name in stop_detached(workdir):
        print(f"stopped {name}")
    return 0


def _status(workdir: Path) -> int:
    state = ClusterState.load(workdir)
    for name, pid in state.pids.items():
        print(f"{name:26} pid {pid:<8} {'running' if pid_alive(pid) else 'STOPPED'}")
    print(f"KUBECONFIG={state.kubeconfig}")
    return 0 if state.running() else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.harness",
        description="Start, stop or inspect a local Kubernetes 1.37 control plane (real etcd, kube-apiserver, "
        "kube-controller-manager, kube-scheduler on 127.0.0.1) and a local Prometheus. "
        "The first start builds the binaries from the Go module proxy (slow, cached afterwards).",
    )
    parser.add_argument("command", choices=["up", "down", "status"])
    parser.add_argument("--dir", type=Path, default=DEFAULT_DIR, help="state folder (default: %(default)s)")
    parser.add_argument("--scrape", action="append", default=[], metavar="HOST:PORT",
                        help="a /metrics target for Prometheus to scrape (repeatable)")
    args = parser.parse_args(argv)
    try:
        if args.command == "up":
            return _up(args.dir, args.scrape)
        if args.command == "down":
            return _down(args.dir)
        return _status(args.dir)
    except HarnessError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
