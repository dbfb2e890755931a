"""The local Thanos: Thanos Query over Thanos sidecars, each in front of its own local Prometheus.

Owns a small multi-cluster Thanos for tests, all on free loopback ports in one folder: one
``LocalPrometheus`` per cluster (with the ``cluster`` external label the sidecar requires, so Thanos adds
``cluster="<name>"`` to every series it serves from it), one ``thanos sidecar`` per Prometheus (the Store
API over gRPC; no object storage, so nothing is uploaded) and one ``thanos query`` with every sidecar as
a static ``--endpoint`` and an optional ``--web.route-prefix``. ``start`` returns once the query knows
every sidecar (``/api/v1/stores``), so the first query already sees every cluster. History goes into a
cluster's Prometheus with promtool, as for the session's Prometheus (``LocalPrometheus.backfill``), which
restarts that Prometheus; the sidecar reconnects by itself. The binary is built and cached by
``scripts/build-tools.sh thanos`` on first use.
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Sequence
from pathlib import Path

from tests.harness.process import HarnessError, Managed, free_port, http_ok, wait_until
from tests.harness.prometheus import LocalPrometheus
from tests.harness.tools import tool_binary


class LocalThanos:
    """Prometheus + sidecar per cluster name, and one Thanos Query; ``url`` includes the route prefix."""

    def __init__(self, workdir: Path, *, clusters: Sequence[str], route_prefix: str = "") -> None:
        if route_prefix and (not route_prefix.startswith("/") or route_prefix.endswith("/")):
            raise ValueError("route_prefix must start with / and not end with /")
        self.workdir = workdir.resolve()
        self.route_prefix = route_prefix
        self.prometheus = {c: LocalPrometheus(self.workdir / f"prometheus-{c}", scrape_interval_s=5.0,
                                              external_labels={"cluster": c}) for c in clusters}
        self.sidecars: dict[str, Managed] = {}
        self.grpc_ports: dict[str, int] = {}
        self.port = 0
        self.query: Managed | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}{self.route_prefix}"

    def start(self) -> str:
        self.workdir.mkdir(parents=True, exist_ok=True)
        for cluster, prom in self.prometheus.items():
            prom.start()
            self.start_sidecar(cluster)
        self.port = self.port or free_port()
        argv = [str(tool_binary("thanos")), "query", f"--http-address=127.0.0.1:{self.port}",
                f"--grpc-address=127.0.0.1:{free_port()}", "--log.level=warn",
                *(f"--endpoint=127.0.0.1:{p}" for p in self.grpc_ports.values())]
        if self.route_prefix:
            argv.append(f"--web.route-prefix={self.route_prefix}")
        self.query = Managed(name="thanos-query", argv=argv, log_path=self.workdir / "thanos-query.log")
        self.query.start()
        wait_until("thanos query /-/ready", lambda: http_ok(f"http://127.0.0.1:{self.port}/-/ready"), timeout_s=60,
                   interval_s=0.2, watched=[self.query])
        wait_until("thanos query to see every sidecar", self.sees_every_store, timeout_s=60, interval_s=0.5,
                   watched=[self.query, *self.sidecars.values()])
        return self.url

    def start_sidecar(self, cluster: str) -> None:
        """Start (or start again, on the same gRPC port) the sidecar of ``cluster``; waits for its readiness."""
        prom = self.prometheus[cluster]
        grpc = self.grpc_ports.setdefault(cluster, free_port())
        http = free_port()
        argv = [str(tool_binary("thanos")), "sidecar", f"--prometheus.url={prom.url}",
                f"--tsdb.path={prom.tsdb}", f"--grpc-address=127.0.0.1:{grpc}",
                f"--http-address=127.0.0.1:{http}", "--log.level=warn"]
        sidecar = Managed(name=f"thanos-sidecar-{cluster}", argv=argv,
                          log_path=self.workdir / f"thanos-sidecar-{cluster}.log")
        sidecar.start()
        self.sidecars[cluster] = sidecar
        wait_until(f"thanos sidecar {cluster} /-/ready", lambda: http_ok(f"http://127.0.0.1:{http}/-/ready"),
                   timeout_s=60, interval_s=0.2, watched=[sidecar])

    def stop_sidecar(self, cluster: str) -> None:
        self.sidecars.pop(cluster).stop()

    def sees_every_store(self) -> bool:
        """Whether the query lists every sidecar as a store without a last error."""
        with urllib.request.urlopen(f"{self.url}/api/v1/stores", timeout=5) as resp:
            doc = json.loads(resp.read())
        if doc.get("status") != "success":
            raise HarnessError(f"thanos query /api/v1/stores: {doc}")
        healthy = {s["name"] for group in (doc.get("data") or {}).values() for s in group or []
                   if not s.get("lastError")}
        return healthy >= {f"127.0.0.1:{p}" for p in self.grpc_ports.values()}

    def stop(self) -> None:
        if self.query is not None:
            self.query.stop()
            self.query = None
        for cluster in list(self.sidecars):
            self.stop_sidecar(cluster)
        for prom in self.prometheus.values():
            prom.stop()

    def __enter__(self) -> LocalThanos:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
