"""The local VictoriaMetrics: a single-node server built from its Go module, on a free loopback port.

Owns one ``victoria-metrics`` process for tests: its data folder, an optional ``-http.pathPrefix``, readiness
waiting, and importing history. History comes from the same OpenMetrics files the Prometheus tests backfill
with promtool; VictoriaMetrics takes it through ``/api/v1/import/prometheus`` (the Prometheus text format,
whose timestamps are milliseconds, so the file's second timestamps are converted), optionally with
``extra_label`` pairs added to every series (how a test gives the samples a cluster label), followed by
``/internal/force_flush`` so that queries see the samples at once. The binary is built and cached by
``scripts/build-tools.sh victoria-metrics`` on first use. The query cache is off (``-search.disableCache``)
because tests import history into the past after querying, which a real scrape never does.
"""

from __future__ import annotations

import time
import urllib.parse
import urllib.request
from collections.abc import Mapping
from pathlib import Path

from tests.harness.process import HarnessError, Managed, free_port, http_ok, wait_until
from tests.harness.tools import tool_binary


def _to_prometheus_text(openmetrics_file: Path, out_file: Path) -> None:
    """Sample lines with their trailing timestamp turned from seconds into whole milliseconds."""
    with openmetrics_file.open() as src, out_file.open("w") as out:
        for line in src:
            if not line.strip() or line.startswith("#"):
                continue
            head, _, stamp = line.rstrip("\n").rpartition(" ")
            out.write(f"{head} {round(float(stamp) * 1000)}\n")


class LocalVictoriaMetrics:
    """One VictoriaMetrics server; ``url`` includes the path prefix."""

    def __init__(self, workdir: Path, *, path_prefix: str = "") -> None:
        if path_prefix and (not path_prefix.startswith("/") or path_prefix.endswith("/")):
            raise ValueError("path_prefix must start with / and not end with /")
        self.workdir = workdir.resolve()
        self.path_prefix = path_prefix
        self.port = 0
        self.proc: Managed | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}{self.path_prefix}"

    def start(self) -> str:
        """Start (or start again on the same port and data) and wait for ``/health``."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        if not self.port:
            self.port = free_port()
        argv = [str(tool_binary("victoria-metrics")), f"-storageDataPath={self.workdir / 'data'}",
                f"-httpListenAddr=127.0.0.1:{self.port}", "-retentionPeriod=1y", "-search.disableCache",
                "-loggerLevel=WARN", "-http.shutdownDelay=0s"]
        if self.path_prefix:
            argv.append(f"-http.pathPrefix={self.path_prefix}")
        self.proc = Managed(name="victoria-metrics", argv=argv, log_path=self.workdir / "victoria-metrics.log")
        self.proc.start()
        wait_until("victoria-metrics /health", lambda: http_ok(f"{self.url}/health"), timeout_s=60,
                   interval_s=0.1, watched=[self.proc])
        return self.url

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.stop()
            self.proc = None

    def import_openmetrics(self, openmetrics_file: Path, *, extra_labels: Mapping[str, str] | None = None) -> float:
        """Import an OpenMetrics history file (as written for promtool) and flush; returns seconds taken."""
        if self.proc is None:
            raise HarnessError("victoria-metrics is not running")
        t0 = time.monotonic()
        text = openmetrics_file.with_suffix(".prom.txt")
        _to_prometheus_text(openmetrics_file, text)
        query = urllib.parse.urlencode([("extra_label", f"{k}={v}") for k, v in (extra_labels or {}).items()])
        with text.open("rb") as body:
            req = urllib.request.Request(f"{self.url}/api/v1/import/prometheus?{query}", data=body, method="POST",
                                         headers={"Content-Length": str(text.stat().st_size)})
            with urllib.request.urlopen(req, timeout=300) as resp:
                if resp.status not in (200, 204):
                    raise HarnessError(f"victoria-metrics import of {openmetrics_file} answered {resp.status}")
        text.unlink()
        with urllib.request.urlopen(f"{self.url}/internal/force_flush", timeout=60) as resp:
            if resp.status != 200:
                raise HarnessError(f"victoria-metrics force_flush answered {resp.status}")
        return time.monotonic() - t0

    def __enter__(self) -> LocalVictoriaMetrics:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
