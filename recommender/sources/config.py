"""Configuration of the Prometheus usage source: connection, authentication, retries and query shape.

Owns ``PrometheusConfig``, a frozen value read in one place (the CLI) and validated here, plus the two
numbers derived from it (the CPU rate window and the OOM look-back). Nothing here does I/O.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from podtailor.numeric import is_int
from recommender.sources.promql import Scope, label_name

READ_APIS = ("auto", "remote-read", "promql")


@dataclass(frozen=True, slots=True, kw_only=True)
class PrometheusConfig:
    """Where and how to read usage history."""

    url: str
    """Base URL including any path prefix, e.g. ``https://mimir.example/prometheus`` (trailing ``/`` ignored);
    requests go to ``<url>/api/v1/...``."""
    bearer_token_file: Path | None = None
    """File holding a bearer token; re-read on every request so that token rotation needs no restart."""
    basic_auth_username: str | None = None
    """Basic-auth user name (with ``basic_auth_password``); exclusive with ``bearer_token_file``."""
    basic_auth_password: str | None = field(default=None, repr=False)
    """Basic-auth password. Never printed."""
    ca_file: Path | None = None
    """PEM bundle used to verify the server instead of the system store."""
    client_cert_file: Path | None = None
    """PEM client certificate for mutual TLS (with ``client_key_file``)."""
    client_key_file: Path | None = None
    """PEM private key of ``client_cert_file``."""
    insecure_skip_verify: bool = False
    """Do not verify the server certificate (test setups only)."""
    extra_headers: Mapping[str, str] = field(default_factory=dict, repr=False)
    """Headers sent with every request, e.g. ``X-Scope-OrgID`` for Mimir tenants. Never printed."""
    auth_headers: Callable[[], Mapping[str, str]] | None = field(default=None, repr=False, compare=False)
    """Headers computed for every request, after ``extra_headers``: the kubeconfig's auth header when the store is
    reached through the API server's service proxy (``recommender.kube.store_service``), read per request so
    that a refreshed token is used. Never printed."""
    cluster_label: str | None = None
    """Label that tells clusters apart in a shared backend (Thanos, Mimir, VictoriaMetrics), e.g. ``cluster``."""
    cluster_value: str | None = None
    """This cluster's value of ``cluster_label``; the matcher is added to every selector."""
    many_clusters: bool = False
    """One pass reads many clusters of the shared backend: the namespaces given to ``history`` are
    cluster-qualified (``clusters.qualify(value of cluster_label, namespace)``), every query matches all
    their clusters at once and is grouped by ``cluster_label`` too, and the batches' keys carry the qualified
    namespaces. Needs ``cluster_label``, and no ``cluster_value``."""
    timeout_s: float = 120.0
    """Per-request timeout in seconds, client side and sent to Prometheus as ``timeout``."""
    retries: int = 3
    """Extra attempts after a temporary failure (connection error, timeout, 429, 5xx); 0 disables."""
    backoff_base_s: float = 1.0
    """First retry delay in seconds; it doubles each attempt (exponential backoff)."""
    backoff_max_s: float = 30.0
    """Cap on one retry delay in seconds (also caps a server's Retry-After)."""
    step_s: int = 60
    """History resolution in whole seconds: one CPU and one memory-peak sample per step per pod."""
    scrape_interval_s: float = 30.0
    """cAdvisor scrape interval; the CPU rate window is max(4 x this, step) so a window always holds
    several samples (KRR's 75 s window over a 60 s scrape holds one or two)."""
    max_points_per_series: int = 11_000
    """Grid points per series per range query; Prometheus refuses more than 11,000, longer ranges are chunked."""
    max_points_per_query: int = 4_000_000
    """Series x points in one range response. A response's series are decoded and converted one at a time,
    so the memory a query takes is its body, held twice (bytes and text, about 30 bytes a point each: 0.25 GB
    at this default), not its decoded JSON. Longer windows over bigger scopes are read in more, shorter time
    chunks. Prometheus's own --query.max-samples default is 50 M. 8 days at a 15-minute step over a scope of
    5,000 containers is 3.8 M: one chunk."""
    max_remote_read_s: float = 3.5 * 86400.0
    """Longest time span one remote read asks for (a chunk holds at most this / step + 1 grid times). A remote
    read's answer is decoded whole, at about 100 bytes per stored sample at its peak (the body, its records,
    their times and values, the grid), so ``krr-simple``, which reads all 8 days at full resolution, read them
    in one answer per scope and peaked at twice the memory of the default strategy, whose ``HistoryPlan``
    reads 3 days so (and up to an hour more, where its summaries align). 3.5 days keeps that in one read and
    every other strategy's answers about as big; the values are the same however the time is cut."""
    max_series_per_query: int = 5_000
    """Containers (namespace, pod, container) per query; namespace batches are packed and paged under this."""
    sparse_signals: bool = True
    """Read the signals that are zero almost everywhere sparsely: OOM counters only for the containers whose
    counter is above zero somewhere in the pass (one instant query per scope finds them; a scope with none
    sends no OOM range query), throttling only at steps where it is above zero. Off: every container's OOM
    counter and throttled fraction at every step, as before; the recommendations are the same either way
    (``test_sparse_signals_change_no_recommendation`` in tests/integration/test_source_prometheus.py replays one
    history both ways)."""
    read_api: str = "auto"
    """How the full-resolution CPU and memory samples are read: ``remote-read`` (``/api/v1/read``: the stored
    samples, turned into the same per-step values client-side, ``raw_grid``), ``promql`` (range queries), or
    ``auto``: remote read where the backend answers it (Prometheus, Mimir, Cortex), asked once with a tiny read;
    PromQL where it does not (Thanos Query and VictoriaMetrics have no remote-read endpoint). Remote read costs
    Prometheus about a tenth of the CPU of the range queries for the same history (tests/benchmarks/RESULTS.md).
    Summaries, owners, throttling and OOM counters always go through PromQL."""
    requests_in_flight: int | None = 1
    """Queries of a pass on the wire at once (1 to 16), or None: sized to the server (``sized_in_flight``: half
    the cores Prometheus reports, 1 to 4), asked once before the first pass; 1 when the backend does not say
    (Thanos, Mimir and VictoriaMetrics have no runtimeinfo page). At 1 each query goes out when the one
    before it has succeeded, and is on the wire while that answer is decoded; at k, up to k run at once in
    the backend, after a failure at most k - 1 more have been sent, and up to k bodies are held in memory
    (see ``max_points_per_query``). The number of queries does not change. Default 1 here (the CLI's default
    is None): drill 10 (a namespace whose queries time out) counts on nothing more going to a failing backend
    after a timeout. Side by side on the 2-core test machine the cold history read of 1,000 workloads took
    0.85x the time at 2 in flight and 0.74x at 4 (tests/benchmarks/RESULTS.md, "Report over 1000 workloads")."""

    def __post_init__(self) -> None:
        if not self.url.startswith(("http://", "https://")):
            raise ValueError("url must start with http:// or https://")
        if self.bearer_token_file is not None and self.basic_auth_username is not None:
            raise ValueError("bearer_token_file and basic auth are mutually exclusive")
        own_auth = self.bearer_token_file is not None or self.basic_auth_username is not None
        if self.auth_headers is not None and own_auth:
            raise ValueError("the API server's credentials (auth_headers) exclude a bearer token file and basic auth")
        if (self.basic_auth_username is None) != (self.basic_auth_password is None):
            raise ValueError("basic auth needs both a user name and a password")
        if (self.client_cert_file is None) != (self.client_key_file is None):
            raise ValueError("mutual TLS needs both client_cert_file and client_key_file")
        if self.many_clusters and (self.cluster_label is None or self.cluster_value is not None):
            raise ValueError("many_clusters needs cluster_label and no cluster_value")
        if not self.many_clusters and (self.cluster_label is None) != (self.cluster_value is None):
            raise ValueError("cluster_label and cluster_value go together")
        if self.cluster_label is not None:
            label_name(self.cluster_label)
        if self.read_api not in READ_APIS:
            raise ValueError(f"read_api must be one of {', '.join(READ_APIS)}")
        flight = self.requests_in_flight
        if flight is not None and (not 1 <= flight <= 16 or flight != int(flight)):
            raise ValueError("requests_in_flight must be a whole number in [1, 16]")
        self._check_numbers()

    def _check_numbers(self) -> None:
        if not 1 <= self.step_s <= 86_400 or self.step_s != int(self.step_s):
            raise ValueError("step_s must be a whole number of seconds in [1, 86400]")
        if not (math.isfinite(self.scrape_interval_s) and self.scrape_interval_s > 0):
            raise ValueError("scrape_interval_s must be positive")
        if not (math.isfinite(self.timeout_s) and self.timeout_s > 0):
            raise ValueError("timeout_s must be positive")
        if self.retries < 0 or self.backoff_base_s < 0 or self.backoff_max_s < 0:
            raise ValueError("retries and backoff must not be negative")
        if not 2 <= self.max_points_per_series <= 11_000:
            raise ValueError("max_points_per_series must be in [2, 11000]")
        if self.max_points_per_query < 2:
            raise ValueError("max_points_per_query must be at least 2")
        if not (math.isfinite(self.max_remote_read_s) and self.max_remote_read_s > 0):
            raise ValueError("max_remote_read_s must be positive")
        if self.max_series_per_query < 1:
            raise ValueError("max_series_per_query must be at least 1")

    @property
    def base_url(self) -> str:
        return self.url.rstrip("/")

    @property
    def cluster(self) -> tuple[str, str] | None:
        if self.cluster_label is None or self.cluster_value is None:
            return None
        return (self.cluster_label, self.cluster_value)

    @property
    def split_by(self) -> str | None:
        """The label a multi-cluster pass splits its answers by (``many_clusters``), else None."""
        return self.cluster_label if self.many_clusters else None

    def scope(self, namespaces: tuple[str, ...], pods: tuple[str, ...] = ()) -> Scope:
        """A query scope of this backend: with the one cluster's matcher, or split by the cluster label."""
        return Scope(namespaces=namespaces, pods=pods, cluster=self.cluster, split_by=self.split_by)

    @property
    def cpu_rate_window_s(self) -> int:
        """Whole seconds: at least 4 scrape intervals and at least one step."""
        return max(math.ceil(4 * self.scrape_interval_s), self.step_s)


def sized_in_flight(runtime_info: object) -> int:
    """Queries in flight for a server whose ``/api/v1/status/runtimeinfo`` data is ``runtime_info``: half its
    GOMAXPROCS (the cores its engine may use), at least 1 and at most 4, so a pass never takes more than half
    of a shared Prometheus; 1 when the answer does not say."""
    procs = runtime_info.get("GOMAXPROCS") if isinstance(runtime_info, dict) else None
    if not is_int(procs) or procs < 1:
        return 1
    return max(1, min(4, procs // 2))
