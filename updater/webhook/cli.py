"""Command line of ``podtailor-updater webhook``: flags in, a running admission webhook out.

Owns the webhook's flags, their defaults and help, turning them into the frozen configs of ``register``
and ``lifecycle``, and the process: build the client, the certificate (self-managed by default, or mounted
with ``--tls-cert-file``/``--tls-key-file``), the cache, the HTTPS server; then one maintenance tick
before the first ``/readyz`` 200, and a tick every ``--resync``, or at once when the VPA watch sees a change,
until SIGTERM. Exit codes: 0 stopped by a
signal, 2 bad usage (bad flags or unreadable certificate files; nothing was registered).
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from podtailor.runtime.cli import UsageError, add_kube_flags, add_logging_flags, duration_s, kube_client

log = logging.getLogger("podtailor.updater.webhook")
MIN_REFRESH_S = 0.05
"""Shortest time between two refreshes woken by VPA changes."""
DESCRIPTION = """\
Mutating admission webhook: pods being created get the CPU and memory of their workload's VPA target,
under the updater's rules (minAllowed/maxAllowed, LimitRange, limit:request ratio or RequestsOnly, QoS
class kept, native sidecars included, plain init containers untouched). updateMode Off is left alone.
Registered with failurePolicy Ignore: when the webhook is down, pods are created as they are.
"""


def add_webhook_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``webhook`` command to the updater's subparsers and return it."""
    p: argparse.ArgumentParser = subparsers.add_parser(
        "webhook", help="run the mutating admission webhook", description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    add_kube_flags(p)
    add_logging_flags(p)
    p.add_argument("--pool-label", default="", metavar="KEY",
                   help="node label naming the pool of a DaemonSet's per-pool values (default: the common keys)")
    g = p.add_argument_group("Serving")
    g.add_argument("--listen", default="0.0.0.0:9443", metavar="HOST:PORT",
                   help="HTTPS address of /mutate, /healthz, /readyz and /metrics (default: %(default)s)")
    g.add_argument("--resync", type=duration_s, default=15.0, metavar="DURATION",
                   help="refresh VPAs, owners, constraints and quotas this often, and at once when "
                        "the VPA watch sees a change (default: 15s)")
    g = p.add_argument_group("TLS (default: a self-managed CA and certificate, renewed at 80%% of validity)")
    g.add_argument("--tls-cert-file", type=Path, help="mounted serving certificate (e.g. from cert-manager)")
    g.add_argument("--tls-key-file", type=Path, help="its private key (both are reloaded when they change)")
    g.add_argument("--tls-ca-file", type=Path, help="CA to register with mounted files (default: keep the "
                   "registered caBundle, e.g. injected by cert-manager's cainjector)")
    g.add_argument("--cert-dir", type=Path, help="keep the self-managed CA and certificate here across restarts")
    g.add_argument("--cert-validity", type=duration_s, default=365 * 86400.0, metavar="DURATION",
                   help="validity of a self-managed certificate (default: 365d)")
    g.add_argument("--extra-san", action="append", default=[], metavar="NAME",
                   help="extra DNS name or IP address in the self-managed certificate (repeatable)")
    g = p.add_argument_group("Registration (MutatingWebhookConfiguration)")
    g.add_argument("--register", action=argparse.BooleanOptionalAction, default=True,
                   help="create and keep updating the configuration (default: yes)")
    g.add_argument("--webhook-config-name", default="podtailor-updater", help="its name (default: %(default)s)")
    g.add_argument("--namespace", default=os.environ.get("POD_NAMESPACE", "podtailor-system"),
                   help="our own namespace: the Service's, and never mutated (default: $POD_NAMESPACE or "
                        "podtailor-system)")
    g.add_argument("--service-name", default="podtailor-updater-webhook", help="Service in front of us")
    g.add_argument("--service-port", type=int, default=443, help="its port (default: %(default)s)")
    g.add_argument("--webhook-url", help="call this https URL instead of the Service (out-of-cluster, tests)")
    g.add_argument("--webhook-timeout", type=duration_s, default=5.0, metavar="DURATION",
                   help="API server's wait for an answer, capped at 5s (default: 5s)")
    g.add_argument("--exclude-namespace", action="append", default=[], metavar="NAME",
                   help="never mutate pods here (repeatable; kube-system, kube-node-lease, kube-public and "
                        "--namespace always are)")
    g.add_argument("--only-namespace", action="append", default=[], metavar="NAME",
                   help="only mutate pods in these namespaces (repeatable; default: all)")
    return p


def _listen(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) < 65536:
        raise UsageError(f"bad --listen {text!r}: use HOST:PORT")
    return host.strip("[]") or "0.0.0.0", int(port)


def _validate(args: argparse.Namespace) -> None:
    if (args.tls_cert_file is None) != (args.tls_key_file is None):
        raise UsageError("--tls-cert-file and --tls-key-file go together")
    if args.webhook_url is not None and not args.webhook_url.startswith("https://"):
        raise UsageError("--webhook-url must be an https:// URL")
    if args.webhook_timeout > 5:
        log.warning("--webhook-timeout capped at 5s", extra={"asked_s": args.webhook_timeout})


def _build(args: argparse.Namespace) -> tuple[Any, Any, CollectorRegistry, Any]:
    from updater.kube.snapshot import ClusterReader
    from updater.webhook import tls
    from updater.webhook.cache import TargetCache
    from updater.webhook.lifecycle import CertConfig, CertKeeper, Maintainer, names_for
    from updater.webhook.metrics import WebhookMetrics
    from updater.webhook.register import Registrar, Registration
    from updater.webhook.server import WebhookReadiness

    api = kube_client(args)
    mounted = tls.MountedCert(args.tls_cert_file, args.tls_key_file, args.tls_ca_file) \
        if args.tls_cert_file is not None else None
    names = names_for(args.service_name, args.namespace, args.extra_san, args.webhook_url)
    try:
        keeper = CertKeeper(CertConfig(names=names, validity_s=args.cert_validity, cert_dir=args.cert_dir,
                                       mounted=mounted), time.time())
    except tls.CertError as err:
        raise UsageError(str(err)) from None
    registration = Registration(name=args.webhook_config_name, namespace=args.namespace,
                                service_name=args.service_name, service_port=args.service_port,
                                url=args.webhook_url, timeout_s=int(min(5.0, args.webhook_timeout)),
                                excluded_namespaces=tuple(args.exclude_namespace),
                                only_namespaces=tuple(args.only_namespace))
    registry = CollectorRegistry()
    cache = TargetCache(ClusterReader(api).listings, pool_label=args.pool_label)
    maintainer = Maintainer(cache=cache, keeper=keeper, registrar=Registrar(api) if args.register else None,
                            registration=registration, metrics=WebhookMetrics(registry), health=WebhookReadiness())
    return maintainer, keeper, registry, cache


def _wait(stop: threading.Event, changed: threading.Event, timeout_s: float) -> None:
    """Until ``stop``, a VPA change (``changed``, then at most every ``MIN_REFRESH_S``) or ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not stop.is_set() and not changed.is_set():
        left = deadline - time.monotonic()
        if left <= 0:
            return
        changed.wait(min(left, 0.5))
    stop.wait(MIN_REFRESH_S)  # a burst of VPA writes (a recommender pass) costs a few refreshes, not one each


def run_webhook(args: argparse.Namespace) -> int:
    """Serve until SIGTERM/SIGINT (or until ``args.stop``, a threading.Event, is set: for in-process use)."""
    from updater.webhook.server import WebhookServer

    try:
        _validate(args)
        host, port = _listen(args.listen)
        maintainer, keeper, registry, cache = _build(args)
    except UsageError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    stop: threading.Event = getattr(args, "stop", None) or threading.Event()
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        signal.signal(signal.SIGINT, lambda *_: stop.set())
    server = WebhookServer(host, port, keeper.current_context, cache, registry, maintainer.metrics,
                           maintainer.health).start()
    log.info("webhook serving", extra={"address": f"{host}:{server.port}", "config": args.webhook_config_name})
    cache.watch_vpas()
    while not stop.is_set():
        started = time.monotonic()
        try:
            maintainer.tick()
        except Exception as err:  # the one broad catch of the loop: serve on, try again next tick
            log.error("maintenance tick failed; retrying", extra={"error": str(err)[:500]})
        _wait(stop, cache.changed, max(0.0, args.resync - (time.monotonic() - started)))
    cache.stop_watching()
    server.shutdown()
    log.info("webhook stopped")
    if getattr(args, "stop", None) is None:  # a process of its own: not through interpreter finalization
        from podtailor.runtime.loop import leave

        leave(0)
    return 0
