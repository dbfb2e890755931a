"""Which in-cluster Service is the metrics store, and the API server's service-proxy URL that reaches it.

Owns the well-known Service labels of Prometheus, Thanos Query, Mimir and VictoriaMetrics (``RULES``, in the
order they are tried), ``Service`` and ``Port`` (a Service as discovery reads it, parsed once from the API's
JSON by ``service_of``), ``candidates`` (every Service a rule matches, in the documented order: rule first,
then namespace and name) and ``proxy_url`` (``<api server>/api/v1/namespaces/NS/services/SCHEME:NAME:PORT/
proxy<path>``). Names come from objects anyone with ``create services`` can write, so every piece that goes
into the URL is checked (namespace and name as DNS labels, the port as a number) and quoted; a Service that
fails the check is no candidate. Pure: the listing and the credentials live in ``recommender.kube.store_service``.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from podtailor.kube.names import is_dns_label
from podtailor.numeric import is_int


class Backend(enum.Enum):
    """The kind of store a rule finds (shown in the log and the error messages)."""

    VICTORIA_METRICS = "VictoriaMetrics"
    THANOS = "Thanos Query"
    MIMIR = "Mimir"
    PROMETHEUS = "Prometheus"


class Scheme(enum.Enum):
    """The scheme the API server uses towards the Service's endpoints."""

    HTTP = "http"
    HTTPS = "https"


@dataclass(frozen=True, slots=True, kw_only=True)
class Rule:
    """Services whose labels include all of ``labels`` are ``backend``, its API under ``path``."""

    backend: Backend
    labels: tuple[tuple[str, str], ...]
    path: str = ""
    """Path below the Service's root where the Prometheus API starts (``/select/0/prometheus`` for vmselect)."""


def _rule(backend: Backend, selector: str, path: str = "") -> Rule:
    pairs = tuple(item.partition("=") for item in selector.split(","))
    return Rule(backend=backend, labels=tuple((key, value) for key, _, value in pairs), path=path)


# The selectors and their order follow KRR's discovery (robusta-dev/krr, robusta_krr/core/integrations/prometheus/
# loader.py ``get_metrics_service``: VictoriaMetrics, Thanos, Mimir, then Prometheus; each backend's list in
# metrics_service/{victoria_metrics,thanos_metrics,mimir_metrics,prometheus_metrics}_service.py
# ``find_metrics_url``; vmselect's path suffix and Mimir's ``/prometheus`` from the same files). Stores that
# aggregate (VictoriaMetrics, Thanos Query, Mimir) come before a Prometheus they may sit in front of.
RULES: tuple[Rule, ...] = (
    _rule(Backend.VICTORIA_METRICS, "app.kubernetes.io/name=vmsingle"),
    _rule(Backend.VICTORIA_METRICS, "app.kubernetes.io/name=victoria-metrics-single"),
    _rule(Backend.VICTORIA_METRICS, "app.kubernetes.io/name=vmselect", "/select/0/prometheus"),
    _rule(Backend.VICTORIA_METRICS, "app.kubernetes.io/component=vmselect", "/select/0/prometheus"),
    _rule(Backend.VICTORIA_METRICS, "app=vmselect", "/select/0/prometheus"),
    _rule(Backend.THANOS, "app.kubernetes.io/component=query,app.kubernetes.io/name=thanos"),
    _rule(Backend.THANOS, "app.kubernetes.io/name=thanos-query"),
    _rule(Backend.THANOS, "app=thanos-query"),
    _rule(Backend.THANOS, "app=thanos-querier"),
    _rule(Backend.MIMIR, "app.kubernetes.io/name=mimir,app.kubernetes.io/component=query-frontend", "/prometheus"),
    _rule(Backend.PROMETHEUS, "app=kube-prometheus-stack-prometheus"),
    _rule(Backend.PROMETHEUS, "app=prometheus,component=server"),
    _rule(Backend.PROMETHEUS, "app=prometheus-server"),
    _rule(Backend.PROMETHEUS, "app=prometheus-operator-prometheus"),
    _rule(Backend.PROMETHEUS, "app=rancher-monitoring-prometheus"),
    _rule(Backend.PROMETHEUS, "app=prometheus-prometheus"),
    _rule(Backend.PROMETHEUS, "app.kubernetes.io/name=prometheus,app.kubernetes.io/component=server"),
    _rule(Backend.PROMETHEUS, "app=stack-prometheus"),
    # Not in KRR: kube-prometheus (jsonnet) labels its Service app.kubernetes.io/name=prometheus with component
    # prometheus, and the Prometheus Operator's governing Service is named prometheus-operated; last, so any
    # Service a KRR selector finds wins over them.
    _rule(Backend.PROMETHEUS, "app.kubernetes.io/name=prometheus"),
    _rule(Backend.PROMETHEUS, "operated-prometheus=true"),
)

PREFERRED_PORT_NAMES = ("http-web", "web", "http", "http-api", "http-query", "http-metrics")
"""A Service with several ports is reached on the first of these names it has, else on its first port."""
_MAX_PORT = 65535


@dataclass(frozen=True, slots=True, kw_only=True)
class Port:
    name: str
    number: int
    app_protocol: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class Service:
    """A Service as discovery reads it."""

    namespace: str
    name: str
    labels: Mapping[str, str]
    ports: tuple[Port, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class Candidate:
    """A Service a rule matched, with the port and scheme it would be reached on."""

    service: Service
    rule: Rule
    port: Port
    scheme: Scheme

    @property
    def label(self) -> str:
        """``namespace/name:port`` (for logs and messages)."""
        return f"{self.service.namespace}/{self.service.name}:{self.port.number}"


def service_of(obj: Mapping[str, Any]) -> Service | None:
    """The Service of a raw API object; None when it is not one discovery can use (no name, no TCP port,
    a namespace or name that is not a DNS label, a port out of range)."""
    meta, spec = obj.get("metadata") or {}, obj.get("spec") or {}
    namespace, name = meta.get("namespace"), meta.get("name")
    if not (is_dns_label(namespace) and is_dns_label(name)):
        return None
    labels = meta.get("labels") or {}
    ports = tuple(p for p in (_port(raw) for raw in spec.get("ports") or []) if p is not None)
    if not ports or not isinstance(labels, Mapping):
        return None
    return Service(namespace=namespace, name=name, ports=ports,
                   labels={str(k): str(v) for k, v in labels.items()})


def _port(raw: Any) -> Port | None:
    if not isinstance(raw, Mapping) or raw.get("protocol", "TCP") != "TCP":
        return None
    number = raw.get("port")
    if not is_int(number) or not 1 <= number <= _MAX_PORT:
        return None
    return Port(name=str(raw.get("name") or ""), number=number, app_protocol=str(raw.get("appProtocol") or ""))


def _matches(rule: Rule, service: Service) -> bool:
    return all(service.labels.get(key) == value for key, value in rule.labels)


def _chosen_port(service: Service) -> Port:
    by_name = {p.name: p for p in service.ports}
    return next((by_name[n] for n in PREFERRED_PORT_NAMES if n in by_name), service.ports[0])


def _scheme(port: Port) -> Scheme:
    https = port.app_protocol.lower() == "https" or port.name.startswith("https") or port.number == 443
    return Scheme.HTTPS if https else Scheme.HTTP


def candidates(services: Iterable[Service]) -> list[Candidate]:
    """Every (Service, first rule it matches), in the order discovery prefers them: by rule (``RULES``), then
    by namespace and name, so the same cluster always gives the same pick."""
    ordered = sorted(services, key=lambda s: (s.namespace, s.name))
    out: list[tuple[int, Candidate]] = []
    for service in ordered:
        index = next((i for i, rule in enumerate(RULES) if _matches(rule, service)), None)
        if index is not None:
            port = _chosen_port(service)
            out.append((index, Candidate(service=service, rule=RULES[index], port=port, scheme=_scheme(port))))
    return [c for _, c in sorted(out, key=lambda pair: pair[0])]


def proxy_path(candidate: Candidate) -> str:
    """The API server path that proxies to ``candidate``'s Prometheus API root, checked and quoted
    (``/api/v1/namespaces/NS/services/SCHEME:NAME:PORT/proxy`` plus the rule's path); ValueError when a
    piece is not what a Service may hold."""
    service, port = candidate.service, candidate.port
    if not (is_dns_label(service.namespace) and is_dns_label(service.name)):
        raise ValueError(f"not a Service name: {service.namespace[:64]!r}/{service.name[:64]!r}")
    if not 1 <= port.number <= _MAX_PORT:
        raise ValueError(f"not a port: {port.number}")
    target = f"{candidate.scheme.value}:{service.name}:{port.number}"
    return (f"/api/v1/namespaces/{quote(service.namespace, safe='')}/services/{quote(target, safe=':')}/proxy"
            f"{candidate.rule.path}")


def proxy_url(api_host: str, candidate: Candidate) -> str:
    """``proxy_path`` under the API server's URL (a kubeconfig ``server``, with any path prefix)."""
    if not api_host.startswith(("http://", "https://")):
        raise ValueError("the API server URL must start with http:// or https://")
    return api_host.rstrip("/") + proxy_path(candidate)
