"""The webhook's maintenance tick: refresh the cache, renew or reload the certificate, reconcile registration.

Owns the order that keeps the API server trusting us through a rotation: a new self-managed certificate
is issued at ``renew_fraction`` of its validity, its CA is registered *next to* the CA(s) already in the
caBundle (``tls.merge_bundle``), and only once that write succeeded does the server present the new
certificate (the old one stays in use meanwhile, unless it has expired). Mounted files (cert-manager) are
reloaded when their modification time changes and used at once; their CA is registered when
``--tls-ca-file`` is given, otherwise the registered caBundle is left to whoever injects it. The
configuration is reconciled at every tick, so a deleted or edited object comes back. Each step has its
own catch: a failing API server never stops the server from answering with the last good cache.
"""

from __future__ import annotations

import logging
import ssl
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from updater.kube.fields import Obj
from updater.webhook import tls
from updater.webhook.cache import KINDS, TargetCache
from updater.webhook.metrics import WebhookMetrics
from updater.webhook.register import Registrar, Registration, configuration, registered_bundle
from updater.webhook.server import WebhookReadiness

log = logging.getLogger("podtailor.updater.webhook")


@dataclass(frozen=True, slots=True, kw_only=True)
class CertConfig:
    names: tuple[str, ...]
    """DNS names and IP addresses of a self-managed serving certificate."""
    validity_s: float = 365 * 86400.0
    """Validity of a self-managed certificate (and its CA); renewed at 80% of it."""
    cert_dir: Path | None = None
    """Keep the self-managed pair here, so a restart reuses it (None: memory only)."""
    mounted: tls.MountedCert | None = None
    """Use these files instead of issuing anything."""


class CertKeeper:
    """The certificate in use, and the next one while its CA is being registered."""

    def __init__(self, cfg: CertConfig, now_s: float) -> None:
        self.cfg = cfg
        self.cert = self._initial(now_s)
        self.context = tls.server_context(self.cert)
        self.pending: tls.ServingCert | None = None

    def _initial(self, now_s: float) -> tls.ServingCert:
        if self.cfg.mounted is not None:
            return self.cfg.mounted.load()
        if self.cfg.cert_dir is not None:
            kept = tls.load_dir(self.cfg.cert_dir)
            if kept is not None and now_s < kept.renew_at_s() and tls.covers(kept, self.cfg.names):
                return kept
        return self._issue(now_s)

    def _issue(self, now_s: float) -> tls.ServingCert:
        cert = tls.issue(self.cfg.names, self.cfg.validity_s, now_s)
        if self.cfg.cert_dir is not None:
            tls.save_dir(self.cfg.cert_dir, cert)
        log.info("issued a serving certificate", extra={"names": list(self.cfg.names),
                                                         "not_after": int(cert.not_after_s)})
        return cert

    def current_context(self) -> ssl.SSLContext:
        return self.context

    def activate(self, cert: tls.ServingCert) -> None:
        self.context, self.cert, self.pending = tls.server_context(cert), cert, None

    def step(self, now_s: float) -> None:
        """Reload mounted files that changed; issue the next self-managed certificate when due."""
        mounted = self.cfg.mounted
        if mounted is not None:
            if mounted.changed():
                self.activate(mounted.load())
                log.info("reloaded the mounted certificate", extra={"not_after": int(self.cert.not_after_s)})
            return
        if self.pending is None and now_s >= self.cert.renew_at_s():
            self.pending = self._issue(now_s)
        if self.pending is not None and now_s >= self.cert.not_after_s:
            self.activate(self.pending)  # expired: nothing to lose by switching before the CA is registered

    def bundle(self, existing: bytes, now_s: float) -> bytes:
        """The caBundle to register (b"" for mounted files without a CA file: leave it alone)."""
        ours = (self.pending or self.cert).ca_pem
        if not ours:
            return b""
        if self.pending is not None:
            ours += self.cert.ca_pem
        return tls.merge_bundle(ours, existing, now_s)


class Maintainer:
    def __init__(self, *, cache: TargetCache, keeper: CertKeeper, registrar: Registrar | None,
                 registration: Registration, metrics: WebhookMetrics, health: WebhookReadiness) -> None:
        self.cache, self.keeper, self.registrar = cache, keeper, registrar
        self.registration, self.metrics, self.health = registration, metrics, health

    def tick(self, now_s: float | None = None) -> None:
        now_s = time.time() if now_s is None else now_s
        self.sync()
        self.certs(now_s)
        self.register(now_s)

    def sync(self) -> None:
        try:
            snapshot = self.cache.refresh()
        except Exception as err:  # keep serving the last good snapshot
            self.metrics.syncs.labels("failed").inc()
            log.error("cache refresh failed; serving the previous one", extra={"error": str(err)[:500]})
            return
        self.metrics.syncs.labels("ok").inc()
        self.metrics.last_sync.set_to_current_time()
        for kind in KINDS:
            self.metrics.cached.labels(kind).set(snapshot.counts.get(kind, 0))
        self.health.synced.set()

    def certs(self, now_s: float) -> None:
        try:
            self.keeper.step(now_s)
        except Exception as err:
            log.error("certificate renewal failed; keeping the current one", extra={"error": str(err)[:500]})
        self.metrics.cert_expiry.set(self.keeper.cert.not_after_s)

    def _body(self, existing: Obj | None, now_s: float) -> Obj:
        return configuration(self.registration, self.keeper.bundle(registered_bundle(existing), now_s))

    def register(self, now_s: float) -> None:
        if self.registrar is None:
            self.health.registered.set()
            return
        try:
            result = self.registrar.ensure(self.registration.name, lambda existing: self._body(existing, now_s))
        except Exception as err:
            self.metrics.registrations.labels("failed").inc()
            log.error("webhook registration failed; retrying next tick", extra={"error": str(err)[:500]})
            return
        self.metrics.registrations.labels(result).inc()
        if result != "unchanged":
            log.info("webhook configuration reconciled", extra={"config": self.registration.name, "result": result})
        if self.keeper.pending is not None:
            self.keeper.activate(self.keeper.pending)
            log.info("serving the renewed certificate", extra={"not_after": int(self.keeper.cert.not_after_s)})
        self.health.registered.set()


def names_for(service: str, namespace: str, extra: Sequence[str], url: str | None) -> tuple[str, ...]:
    """Service DNS names, the ``--extra-san`` values and the host of ``--webhook-url``."""
    host = urlsplit(url).hostname if url else None
    return tuple(dict.fromkeys([*tls.service_names(service, namespace), *extra, *([host] if host else [])]))
