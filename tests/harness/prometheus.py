"""The local Prometheus: Debian's ``prometheus`` on a free loopback port, with backfill.

Owns one Prometheus server for tests and the demo: its own TSDB folder and scrape config (static
targets, for example the node simulator's ``/metrics``), readiness waiting, restart, and backfilling
history from OpenMetrics text with ``promtool tsdb create-blocks-from openmetrics``. Backfilled blocks are
written straight into the TSDB folder while the server is stopped and the server is started again, so
queries see the history at once instead of after the next block reload.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from tests.harness.process import HarnessError, Managed, free_port, http_ok, wait_until


def _binary(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise HarnessError(f"{name} not found on PATH; run `make setup` (installs Debian's prometheus)")
    return path


class LocalPrometheus:
    """One Prometheus server. ``targets`` are ``host:port`` strings scraped at ``scrape_interval_s``."""

    def __init__(
        self,
        workdir: Path,
        *,
        targets: Sequence[str] = (),
        scrape_interval_s: float = 5.0,
        retention: str = "60d",
        detached: bool = False,
        external_labels: Mapping[str, str] | None = None,
        extra_flags: Sequence[str] = (),
        query_log: Path | None = None,
    ) -> None:
        self.workdir = workdir.resolve()
        self.targets = list(targets)
        self.scrape_interval_s = scrape_interval_s
        self.retention = retention
        self.detached = detached
        self.external_labels = dict(external_labels or {})
        self.extra_flags = list(extra_flags)
        """More server flags, e.g. ``--query.max-samples=5000`` for a backend that refuses big queries."""
        self.query_log = query_log
        """Where Prometheus logs every query it answers (JSON lines with the query, start, end and step): how a
        test learns exactly what another client (VPA's recommender) asked."""
        self.port = 0
        self.proc: Managed | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def tsdb(self) -> Path:
        return self.workdir / "tsdb"

    def _write_config(self) -> Path:
        interval = f"{self.scrape_interval_s:g}s"
        config: dict[str, Any] = {
            "global": {"scrape_interval": interval, "evaluation_interval": interval,
                       **({"external_labels": self.external_labels} if self.external_labels else {}),
                       **({"query_log_file": str(self.query_log)} if self.query_log else {})},
            "scrape_configs": [
                {
                    "job_name": "nodesim",
                    "honor_labels": True,
                    "honor_timestamps": True,
                    "static_configs": [{"targets": self.targets}] if self.targets else [],
                }
            ],
        }
        path = self.workdir / "prometheus.yml"
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        return path

    def start(self) -> str:
        """Start (or start again, keeping the TSDB and port) and wait for ``/-/ready``."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.tsdb.mkdir(exist_ok=True)
        if not self.port:
            self.port = free_port()
        config = self._write_config()
        argv = [
            _binary("prometheus"), f"--config.file={config}", f"--storage.tsdb.path={self.tsdb}",
            f"--web.listen-address=127.0.0.1:{self.port}", "--web.enable-lifecycle",
            "--web.enable-admin-api", f"--storage.tsdb.retention.time={self.retention}", "--log.level=warn",
            "--query.lookback-delta=5m", *self.extra_flags,
        ]
        self.proc = Managed(name="prometheus", argv=argv, log_path=self.workdir / "prometheus.log",
                            detached=self.detached)
        self.proc.start()
        wait_until("prometheus /-/ready", lambda: http_ok(f"{self.url}/-/ready"), timeout_s=60,
                   interval_s=0.1, watched=[self.proc])
        return self.url

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.stop()
            self.proc = None

    def set_targets(self, targets: Sequence[str]) -> None:
        """Change the scrape targets and reload the running server."""
        self.targets = list(targets)
        self._write_config()
        if self.proc is not None:
            import urllib.request

            req = urllib.request.Request(f"{self.url}/-/reload", method="POST")
            with urllib.request.urlopen(req, timeout=10) as resp:
                if resp.status != 200:
                    raise HarnessError(f"prometheus reload answered {resp.status}")

    def backfill(self, openmetrics_file: Path, *, max_block_duration: str = "24h") -> float:
        """Turn an OpenMetrics file into TSDB blocks and make them queryable; returns seconds taken.

        The server (if running) is stopped for the write and started again on the same port.
        """
        t0 = time.monotonic()
        was_running = self.proc is not None
        self.stop()
        self.tsdb.mkdir(parents=True, exist_ok=True)
        result = subprocess.run(
            [_binary("promtool"), "tsdb", "create-blocks-from", "openmetrics",
             f"--max-block-duration={max_block_duration}", str(openmetrics_file), str(self.tsdb)],
            capture_output=True, text=True, check=False,
        )
        if result.returncode != 0:
            raise HarnessError(
                f"promtool backfill of {openmetrics_file} failed (exit {result.returncode}):\n"
                f"{result.stderr.strip()[-2000:]}"
            )
        if was_running:
            self.start()
        return time.monotonic() - t0

    def __enter__(self) -> LocalPrometheus:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
