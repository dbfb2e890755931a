"""Finding the cluster's metrics store by its Service, and the config that reaches it through the API server.

Owns ``find`` (list the Services, cluster-wide or, on 403, in the namespaces this user may read, and pick the
first candidate in ``recommender.sources.discover``'s order, logging which and what else matched),
``with_api_credentials`` (a ``PrometheusConfig`` that sends every request with the kubeconfig's own TLS
settings and auth header, the header read per request so a refreshed token is used) and ``store_config``,
the two together for the commands that take ``--prometheus-url`` or find the store without it. A cluster
where nothing can be listed, or nothing matches, is ``StoreNotFound``, a usage problem whose message names
``--prometheus-url``; an API server that fails otherwise raises ``KubeError``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol

from podtailor.kube.errors import KubeError
from podtailor.kube.names import is_dns_label
from podtailor.runtime.cli import UsageError
from recommender.sources.config import PrometheusConfig
from recommender.sources.discover import Candidate, Service, candidates, proxy_url, service_of

log = logging.getLogger("podtailor.report")
Obj = dict[str, Any]
WELL_KNOWN_NAMESPACES = ("cattle-monitoring-system", "kube-prometheus-stack", "mimir", "monitoring",
                         "observability", "prometheus", "thanos", "victoria-metrics", "vm")
"""Tried, with the command's own ``-n`` namespaces, when neither Services nor namespaces may be listed
cluster-wide."""
FLAG = "--prometheus-url"


class StoreNotFound(UsageError):
    """No metrics store could be found through this API server; the message says why and names the flag (a
    usage problem: exit code 2, as for bad flags)."""


class Lister(Protocol):
    """The two lists discovery reads (``podtailor.kube.listing`` in production, fakes in tests)."""

    def services(self, namespace: str | None) -> list[Obj]: ...
    def namespaces(self) -> list[Obj]: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class Listed:
    services: tuple[Service, ...]
    scope: str
    """Where they were listed: ``cluster-wide`` or ``in namespaces a, b``."""


def _forbidden(err: KubeError) -> bool:
    return err.status == 403


def list_services(lister: Lister, hint: Sequence[str] = ()) -> Listed:
    """Every usable Service cluster-wide; on 403 those of each namespace this user may read (every namespace
    when namespaces may be listed, else ``hint`` and ``WELL_KNOWN_NAMESPACES``), a namespace that answers
    403 skipped. StoreNotFound when no namespace could be read."""
    try:
        return Listed(services=_parsed(lister.services(None)), scope="cluster-wide")
    except KubeError as err:
        if not _forbidden(err):
            raise
    try:
        names = sorted({str((ns.get("metadata") or {}).get("name")) for ns in lister.namespaces()})
    except KubeError as err:
        if not _forbidden(err):
            raise
        names = sorted({*hint, *WELL_KNOWN_NAMESPACES})
    log.warning("cannot list Services cluster-wide (403); looking in the namespaces this user may read",
                extra={"namespaces": len(names)})
    found: list[Obj] = []
    readable: list[str] = []
    for name in (n for n in names if is_dns_label(n)):
        try:
            found.extend(lister.services(name))
        except KubeError as err:
            if not _forbidden(err):
                raise
            continue
        readable.append(name)
    if not readable:
        raise StoreNotFound(f"cannot list Services cluster-wide nor in any of {', '.join(names)} (403: RBAC verb "
                            f"'list' on 'services' is missing), so the metrics store cannot be found: give {FLAG}")
    return Listed(services=_parsed(found), scope=f"in namespaces {', '.join(readable)}")


def _parsed(items: Sequence[Obj]) -> tuple[Service, ...]:
    return tuple(s for s in (service_of(obj) for obj in items) if s is not None)


def pick(listed: Listed) -> Candidate:
    """The first candidate in the documented order (``discover.candidates``); the choice is logged, as a
    warning when others matched too. StoreNotFound when none did."""
    found = candidates(listed.services)
    if not found:
        raise StoreNotFound(f"no Prometheus, Thanos Query, Mimir or VictoriaMetrics Service found {listed.scope} "
                            f"by the well-known labels (docs/commands.md, \"Finding Prometheus\"): give {FLAG}")
    chosen = found[0]
    fields = {"backend": chosen.rule.backend.value, "service": chosen.label,
              "labels": ",".join(f"{k}={v}" for k, v in chosen.rule.labels)}
    if len(found) > 1:
        log.warning("several metrics store Services found; using the first in the documented order "
                    f"(give {FLAG} to choose)", extra={**fields, "others": [c.label for c in found[1:6]]})
    else:
        log.info("metrics store Service found", extra=fields)
    return chosen


def find(lister: Lister, hint: Sequence[str] = ()) -> Candidate:
    """``pick`` over ``list_services``."""
    return pick(list_services(lister, hint))


class _Listing:
    """``Lister`` over an ``ApiClient``: paged raw lists (``podtailor.kube.listing``)."""

    def __init__(self, api: Any) -> None:
        from podtailor.kube.listing import builtin_listing

        self._services = builtin_listing(api, "", "v1", "services")
        self._namespaces = builtin_listing(api, "", "v1", "namespaces", namespaced=False)

    def services(self, namespace: str | None) -> list[Obj]:
        from podtailor.kube.listing import list_raw

        return list_raw(self._services, namespace)

    def namespaces(self) -> list[Obj]:
        from podtailor.kube.listing import list_raw

        return list_raw(self._namespaces)


def api_headers(configuration: Any) -> Callable[[], Mapping[str, str]]:
    """The kubeconfig's auth header(s), read on each call: the client's ``auth_settings`` runs its refresh hook
    (an exec plugin's or OIDC token is renewed as the kube client would renew it)."""
    def headers() -> Mapping[str, str]:
        settings = configuration.auth_settings().values()
        return {str(s["key"]): str(s["value"]) for s in settings if s.get("in") == "header" and s.get("value")}
    return headers


def with_api_credentials(config: PrometheusConfig, configuration: Any) -> PrometheusConfig:
    """``config`` sent as the kube client sends its own requests: its CA bundle (or none, for the system's),
    client certificate and key, certificate checking on or off, and its auth header on every request."""
    def path(value: object) -> Path | None:
        return Path(str(value)) if value else None

    return replace(config, ca_file=path(configuration.ssl_ca_cert), client_cert_file=path(configuration.cert_file),
                   client_key_file=path(configuration.key_file),
                   insecure_skip_verify=not configuration.verify_ssl, auth_headers=api_headers(configuration))


def store_config(api: Any, hint: Sequence[str], build: Callable[[str], PrometheusConfig],
                 lister: Lister | None = None) -> PrometheusConfig:
    """The config of the store found through ``api`` (an ``ApiClient``): ``build(url)`` for its service-proxy
    URL, with the API server's credentials. Raises StoreNotFound or KubeError."""
    chosen = find(lister if lister is not None else _Listing(api), hint)
    configuration = api.configuration
    try:
        url = proxy_url(str(configuration.host), chosen)
    except ValueError as err:
        raise StoreNotFound(f"cannot build the service-proxy URL of {chosen.label}: {err}; give {FLAG}") from None
    return with_api_credentials(build(url), configuration)
