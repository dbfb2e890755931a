"""The HTTPS server on 127.0.0.1, the certificate lifecycle (issue, rotate after registering, reload mounted
files) and the registered configuration's shape, with a fake registrar and a fake cache."""

from __future__ import annotations

import base64
import http.client
import json
import os
import ssl
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from prometheus_client import CollectorRegistry

from tests.builders.webhook import pod, review, snapshot, vpa
from updater.webhook import tls
from updater.webhook.lifecycle import CertConfig, CertKeeper, Maintainer, names_for
from updater.webhook.metrics import WebhookMetrics
from updater.webhook.register import Registration, configuration, registered_bundle
from updater.webhook.server import MAX_BODY_BYTES, WebhookReadiness, WebhookServer

NOW = 1_800_000_000.0
YEAR = 365 * 86400.0


class FakeCache:
    def __init__(self, fail: bool = False) -> None:
        self.snapshot, self.fail = snapshot(vpa()), fail

    def refresh(self) -> Any:
        if self.fail:
            raise RuntimeError("API server down")
        return self.snapshot

    def resolve(self, namespace: str, meta: Any) -> Any:
        return self.snapshot.resolve(namespace, meta)


class FakeRegistrar:
    def __init__(self) -> None:
        self.objects: dict[str, Any] = {}
        self.fail = False

    def ensure(self, name: str, build: Callable[[Any], Any]) -> str:
        if self.fail:
            raise RuntimeError("403")
        have = self.objects.get(name)
        body = build(have)
        self.objects[name] = body
        return "created" if have is None else "unchanged" if have == body else "updated"


def maintainer(keeper: CertKeeper, registrar: FakeRegistrar | None = None, cache: FakeCache | None = None
               ) -> tuple[Maintainer, CollectorRegistry]:
    registry = CollectorRegistry()
    m = Maintainer(cache=cache or FakeCache(), keeper=keeper, registrar=registrar,  # type: ignore[arg-type]
                   registration=Registration(name="pt", namespace="podtailor-system", url="https://127.0.0.1:1/mutate"),
                   metrics=WebhookMetrics(registry), health=WebhookReadiness())
    return m, registry


@pytest.fixture
def served() -> Iterator[tuple[WebhookServer, ssl.SSLContext, CollectorRegistry, WebhookReadiness]]:
    keeper = CertKeeper(CertConfig(names=("127.0.0.1", "localhost")), time.time())
    registry, health = CollectorRegistry(), WebhookReadiness()
    server = WebhookServer("127.0.0.1", 0, keeper.current_context, FakeCache(), registry,
                           WebhookMetrics(registry), health).start()
    ctx = ssl.create_default_context(cadata=keeper.cert.ca_pem.decode())
    try:
        yield server, ctx, registry, health
    finally:
        server.shutdown()


def call(server: WebhookServer, ctx: ssl.SSLContext, method: str, path: str, body: bytes | None = None,
         headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    conn = http.client.HTTPSConnection("127.0.0.1", server.port, context=ctx, timeout=5)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def test_mutate_over_tls_verified_by_our_ca(served: Any) -> None:
    server, ctx, registry, _ = served
    status, body = call(server, ctx, "POST", "/mutate", review(pod(), uid="u9"),
                        {"Content-Type": "application/json"})
    answer = json.loads(body)
    assert status == 200 and answer["response"]["uid"] == "u9" and answer["response"]["patchType"] == "JSONPatch"
    assert registry.get_sample_value("podtailor_webhook_admissions_total", {"outcome": "mutated"}) == 1
    assert registry.get_sample_value("podtailor_webhook_admission_seconds_count") == 1


def test_keep_alive_serves_several_reviews_on_one_connection(served: Any) -> None:
    server, ctx, _, _ = served
    conn = http.client.HTTPSConnection("127.0.0.1", server.port, context=ctx, timeout=5)
    for uid in ("a", "b", "c"):
        conn.request("POST", "/mutate", body=review(pod(), uid=uid))
        assert json.loads(conn.getresponse().read())["response"]["uid"] == uid
    conn.close()


def test_huge_body_is_refused_unread_and_counted(served: Any) -> None:
    server, ctx, registry, _ = served
    status, _ = call(server, ctx, "POST", "/mutate", b"", {"Content-Length": str(MAX_BODY_BYTES + 1)})
    assert status == 413
    assert registry.get_sample_value("podtailor_webhook_admissions_total", {"outcome": "too-large"}) == 1
    status, body = call(server, ctx, "POST", "/mutate", b"not json")
    assert status == 200 and json.loads(body)["response"]["allowed"] is True  # garbage: allowed, fail open


def test_health_readiness_and_metrics(served: Any) -> None:
    server, ctx, _, health = served
    assert call(server, ctx, "GET", "/healthz")[0] == 200
    assert call(server, ctx, "GET", "/readyz") == (503, b"cache not synced yet\n")
    health.synced.set()
    health.registered.set()
    assert call(server, ctx, "GET", "/readyz") == (200, b"ok\n")
    assert b"# HELP podtailor_webhook_admissions_total" in call(server, ctx, "GET", "/metrics")[1]
    assert call(server, ctx, "GET", "/nope")[0] == 404


def test_self_managed_certificate_names_and_validity() -> None:
    names = names_for("pt-webhook", "podtailor-system", ["10.0.0.7"], "https://127.0.0.1:9443/mutate")
    cert = tls.issue(names, YEAR, NOW)
    leaf = x509.load_pem_x509_certificate(cert.cert_pem)
    san = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "pt-webhook.podtailor-system.svc" in san.get_values_for_type(x509.DNSName)
    assert {str(ip) for ip in san.get_values_for_type(x509.IPAddress)} == {"10.0.0.7", "127.0.0.1"}
    assert cert.renew_at_s() == pytest.approx(cert.not_before_s + 0.8 * (cert.not_after_s - cert.not_before_s))
    assert tls.covers(cert, names) and not tls.covers(cert, ["other.example"])


def test_rotation_registers_the_new_ca_before_serving_the_new_certificate() -> None:
    keeper = CertKeeper(CertConfig(names=("127.0.0.1",), validity_s=1000.0), NOW)
    registrar = FakeRegistrar()
    m, registry = maintainer(keeper, registrar)
    m.tick(NOW)
    first = keeper.cert
    assert registered_bundle(registrar.objects["pt"]) == first.ca_pem and m.health.ready() == (True, "ok")
    registrar.fail = True
    m.tick(first.renew_at_s() + 1)  # due, but the registration fails: keep serving the old certificate
    assert keeper.cert is first and keeper.pending is not None
    registrar.fail = False
    m.tick(first.renew_at_s() + 2)
    assert keeper.cert is not first and keeper.pending is None
    bundle = registered_bundle(registrar.objects["pt"])
    assert keeper.cert.ca_pem in bundle and first.ca_pem in bundle  # old CA kept until it expires
    assert registry.get_sample_value("podtailor_webhook_registrations_total", {"result": "failed"}) == 1


def test_a_failing_cache_keeps_serving_and_is_counted() -> None:
    keeper = CertKeeper(CertConfig(names=("127.0.0.1",)), NOW)
    m, registry = maintainer(keeper, None, FakeCache(fail=True))
    m.tick(NOW)
    assert m.health.ready() == (False, "cache not synced yet")
    assert registry.get_sample_value("podtailor_webhook_cache_syncs_total", {"result": "failed"}) == 1


def test_cert_dir_is_reused_across_restarts(tmp_path: Path) -> None:
    cfg = CertConfig(names=("svc.ns.svc",), cert_dir=tmp_path / "certs")
    a, b = CertKeeper(cfg, NOW), CertKeeper(cfg, NOW + 60)
    assert a.cert.ca_pem == b.cert.ca_pem
    assert oct((tmp_path / "certs" / "tls.key").stat().st_mode & 0o777) == "0o600"


def test_mounted_files_are_reloaded_when_they_change(tmp_path: Path) -> None:
    one, two = tls.issue(["a.example"], YEAR, NOW), tls.issue(["a.example"], YEAR, NOW + 10)
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    cert.write_bytes(one.cert_pem)
    key.write_bytes(one.key_pem)
    keeper = CertKeeper(CertConfig(names=(), mounted=tls.MountedCert(cert, key)), NOW)
    assert keeper.cert.cert_pem == one.cert_pem and keeper.bundle(b"", NOW) == b""
    cert.write_bytes(two.cert_pem)
    key.write_bytes(two.key_pem)
    os.utime(cert, ns=(time.time_ns() + 10**9, time.time_ns() + 10**9))
    keeper.step(NOW + 20)
    assert keeper.cert.cert_pem == two.cert_pem


def test_bundle_merge_keeps_valid_cas_and_drops_expired_ones() -> None:
    old, expired, ours = (tls.issue(["x"], YEAR, NOW - 100), tls.issue(["x"], 50.0, NOW - 100),
                          tls.issue(["x"], YEAR, NOW))
    merged = tls.merge_bundle(ours.ca_pem, old.ca_pem + expired.ca_pem, NOW)
    assert merged == ours.ca_pem + old.ca_pem
    assert tls.merge_bundle(ours.ca_pem, b"garbage", NOW) == ours.ca_pem


def test_configuration_shape() -> None:
    reg = Registration(name="pt", namespace="podtailor", timeout_s=30, excluded_namespaces=("istio-system",))
    obj = configuration(reg, b"PEM")
    (hook,) = obj["webhooks"]
    assert hook["failurePolicy"] == "Ignore" and hook["timeoutSeconds"] == 5 and hook["sideEffects"] == "None"
    assert hook["admissionReviewVersions"] == ["v1"] and hook["reinvocationPolicy"] == "IfNeeded"
    assert hook["rules"] == [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                              "resources": ["pods"], "scope": "Namespaced"}]
    assert hook["namespaceSelector"] == {"matchExpressions": [{
        "key": "kubernetes.io/metadata.name", "operator": "NotIn",
        "values": ["kube-system", "kube-node-lease", "kube-public", "podtailor", "istio-system"]}]}
    assert hook["clientConfig"] == {"service": {"name": "podtailor-updater-webhook", "namespace": "podtailor",
                                                "path": "/mutate", "port": 443},
                                    "caBundle": base64.b64encode(b"PEM").decode()}
    assert "caBundle" not in configuration(reg, b"")["webhooks"][0]["clientConfig"]
