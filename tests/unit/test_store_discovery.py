"""Finding the metrics store by its Service: the order, hostile names, the proxy URL and the 403 fallback.

``recommender.sources.discover`` is pure and tested on values; ``recommender.kube.store_service`` is tested
with a small fake of its two lists (``Lister``), which raises the adapter's own ``KubeError`` for a 403.
"""

from __future__ import annotations

import argparse
import logging
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from podtailor.kube.errors import KubeError, PermanentKubeError
from podtailor.runtime.cli import UsageError
from recommender.cli import check_found_store_flags
from recommender.kube.store_service import WELL_KNOWN_NAMESPACES, StoreNotFound, find, with_api_credentials
from recommender.sources.config import PrometheusConfig
from recommender.sources.discover import (
    Backend,
    Candidate,
    Port,
    Rule,
    Scheme,
    Service,
    candidates,
    proxy_path,
    proxy_url,
    service_of,
)

Obj = dict[str, Any]


def raw(namespace: str, name: str, labels: dict[str, str], ports: list[Obj] | None = None) -> Obj:
    return {"metadata": {"namespace": namespace, "name": name, "labels": labels},
            "spec": {"ports": ports if ports is not None else [{"name": "web", "port": 9090, "protocol": "TCP"}]}}


def parsed(*objs: Obj) -> list[Service]:
    out = [service_of(o) for o in objs]
    assert all(s is not None for s in out)
    return [s for s in out if s is not None]


class FakeLister:
    """Services by namespace; namespaces (or cluster-wide, key None) in ``forbidden`` answer 403."""

    def __init__(self, services: list[Obj], forbidden: set[str | None] | None = None,
                 namespaces_forbidden: bool = False) -> None:
        self.items = services
        self.forbidden = forbidden or set()
        self.namespaces_forbidden = namespaces_forbidden
        self.asked: list[str | None] = []

    def services(self, namespace: str | None) -> list[Obj]:
        self.asked.append(namespace)
        if namespace in self.forbidden:
            raise PermanentKubeError("list services: 403 forbidden", status=403)
        return [o for o in self.items if namespace is None or o["metadata"]["namespace"] == namespace]

    def namespaces(self) -> list[Obj]:
        if self.namespaces_forbidden:
            raise PermanentKubeError("list namespaces: 403 forbidden", status=403)
        return [{"metadata": {"name": n}} for n in sorted({o["metadata"]["namespace"] for o in self.items})]


# ------------------------------------------------------------------------------------------------ the order
def test_aggregating_stores_come_before_prometheus_and_krr_selectors_before_the_extra_ones() -> None:
    services = parsed(
        raw("a", "prom-k8s", {"app.kubernetes.io/name": "prometheus"}),               # extra rule, near the end
        raw("b", "kps", {"app": "kube-prometheus-stack-prometheus"}),                 # KRR's first Prometheus
        raw("c", "query", {"app.kubernetes.io/name": "thanos-query"}),                # Thanos
        raw("d", "vm", {"app.kubernetes.io/name": "vmsingle"}))                       # VictoriaMetrics: first
    order = [(c.service.name, c.rule.backend) for c in candidates(services)]
    assert order == [("vm", Backend.VICTORIA_METRICS), ("query", Backend.THANOS), ("kps", Backend.PROMETHEUS),
                     ("prom-k8s", Backend.PROMETHEUS)]


def test_same_rule_ties_break_by_namespace_then_name_and_unlabelled_services_are_ignored() -> None:
    services = parsed(raw("z", "prometheus", {"app": "prometheus-server"}),
                      raw("a", "prometheus-b", {"app": "prometheus-server"}),
                      raw("a", "prometheus-a", {"app": "prometheus-server"}),
                      raw("a", "prometheus", {"app": "something-else"}))
    assert [c.label for c in candidates(services)] == ["a/prometheus-a:9090", "a/prometheus-b:9090",
                                                       "z/prometheus:9090"]


def test_a_multi_label_selector_needs_every_label() -> None:
    half = parsed(raw("m", "mimir", {"app.kubernetes.io/name": "mimir"}))
    assert candidates(half) == []
    whole = parsed(raw("m", "qf", {"app.kubernetes.io/name": "mimir",
                                   "app.kubernetes.io/component": "query-frontend"}))
    assert [(c.rule.backend, c.rule.path) for c in candidates(whole)] == [(Backend.MIMIR, "/prometheus")]


def test_port_and_scheme_choice() -> None:
    ports = [{"name": "grpc", "port": 10901}, {"name": "http", "port": 10902}]
    (thanos,) = candidates(parsed(raw("t", "q", {"app": "thanos-query"}, ports)))
    assert (thanos.port.number, thanos.scheme) == (10902, Scheme.HTTP)      # the named http port, not the first
    (first,) = candidates(parsed(raw("t", "q", {"app": "thanos-query"}, [{"name": "x", "port": 81},
                                                                           {"name": "y", "port": 82}])))
    assert first.port.number == 81                                          # no known name: the first port
    (tls,) = candidates(parsed(raw("t", "q", {"app": "thanos-query"}, [{"name": "https", "port": 8443}])))
    assert tls.scheme is Scheme.HTTPS


def test_the_found_store_is_logged_and_several_found_is_a_warning_naming_the_others(
        caplog: pytest.LogCaptureFixture) -> None:
    lister = FakeLister([raw("mon", "kps", {"app": "kube-prometheus-stack-prometheus"}),
                         raw("vm", "vmsingle", {"app.kubernetes.io/name": "vmsingle"})])
    with caplog.at_level(logging.INFO, logger="podtailor.report"):
        chosen = find(lister)
    assert chosen.label == "vm/vmsingle:9090"
    (record,) = [r for r in caplog.records if "several metrics store" in r.getMessage()]
    assert record.levelno == logging.WARNING
    assert record.__dict__["service"] == "vm/vmsingle:9090" and record.__dict__["others"] == ["mon/kps:9090"]


def test_none_found_names_the_flag() -> None:
    with pytest.raises(StoreNotFound, match=r"no Prometheus.*found cluster-wide.*--prometheus-url"):
        find(FakeLister([raw("a", "web", {"app": "nginx"})]))


# ------------------------------------------------------------------------------------------ hostile Services
@pytest.mark.parametrize("meta", [
    {"namespace": "mon", "name": "prom/../../../api/v1/secrets"},
    {"namespace": "mon", "name": "Prom"},
    {"namespace": "mon", "name": "prom?x=1"},
    {"namespace": "mon%2F..", "name": "prom"},
    {"namespace": "mon", "name": "p" * 64},
    {"namespace": "mon", "name": ""},
    {"namespace": "mon"},
])
def test_a_service_whose_name_is_not_a_dns_label_is_no_candidate(meta: Obj) -> None:
    obj = {"metadata": {**meta, "labels": {"app": "prometheus-server"}}, "spec": {"ports": [{"port": 9090}]}}
    assert service_of(obj) is None


@pytest.mark.parametrize("ports", [[], [{"port": 0}], [{"port": 70000}], [{"port": "9090"}], [{"port": True}],
                                   [{"port": 9090, "protocol": "UDP"}], "9090"])
def test_a_service_without_a_usable_tcp_port_is_no_candidate(ports: Any) -> None:
    obj = {"metadata": {"namespace": "mon", "name": "prom", "labels": {"app": "prometheus-server"}},
           "spec": {"ports": ports}}
    assert service_of(obj) is None


def test_a_hostile_port_name_never_reaches_the_url() -> None:
    obj = raw("mon", "prom", {"app": "prometheus-server"}, [{"name": "web/../../x?y#z", "port": 9090}])
    (found,) = candidates(parsed(obj))
    assert proxy_path(found) == "/api/v1/namespaces/mon/services/http:prom:9090/proxy"


def test_proxy_path_refuses_what_a_service_cannot_hold() -> None:
    rule = Rule(backend=Backend.PROMETHEUS, labels=())
    bad = Service(namespace="mon", name="a/b", labels={}, ports=(Port(name="", number=9090),))
    with pytest.raises(ValueError, match="not a Service name"):
        proxy_path(Candidate(service=bad, rule=rule, port=bad.ports[0], scheme=Scheme.HTTP))
    ok = Service(namespace="mon", name="prom", labels={}, ports=(Port(name="", number=0),))
    with pytest.raises(ValueError, match="not a port"):
        proxy_path(Candidate(service=ok, rule=rule, port=ok.ports[0], scheme=Scheme.HTTP))


@given(st.one_of(st.from_regex(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", fullmatch=True), st.text(max_size=80)))
def test_any_name_either_is_refused_or_stays_one_path_segment(name: str) -> None:
    found = service_of(raw("mon", name, {"app": "prometheus-server"}))
    if found is None:
        return
    path = proxy_path(candidates([found])[0])
    assert path == f"/api/v1/namespaces/mon/services/http:{name}:9090/proxy"
    assert path.count("/") == 7 and "?" not in path and "#" not in path and "%" not in path


# ------------------------------------------------------------------------------------------------ URL building
def test_proxy_url_keeps_the_api_servers_path_prefix_and_adds_the_backends_api_path() -> None:
    (vm,) = candidates(parsed(raw("vm", "vmselect-main", {"app": "vmselect"}, [{"name": "http", "port": 8481}])))
    assert proxy_url("https://k8s.example:6443/prefix/", vm) == (
        "https://k8s.example:6443/prefix/api/v1/namespaces/vm/services/http:vmselect-main:8481/proxy"
        "/select/0/prometheus")
    with pytest.raises(ValueError, match="http"):
        proxy_url("k8s.example:6443", vm)


# ------------------------------------------------------------------------------------------------ 403 fallback
def test_on_403_cluster_wide_the_readable_namespaces_are_searched() -> None:
    lister = FakeLister([raw("apps", "web", {"app": "nginx"}),
                         raw("secret", "prom", {"app": "prometheus-server"}),
                         raw("mon", "kps", {"app": "kube-prometheus-stack-prometheus"})],
                        forbidden={None, "secret"})
    chosen = find(lister)
    assert chosen.label == "mon/kps:9090"           # "secret" matched better but cannot be read
    assert lister.asked == [None, "apps", "mon", "secret"]


def test_when_namespaces_cannot_be_listed_either_the_flags_and_well_known_namespaces_are_tried() -> None:
    lister = FakeLister([raw("team-a", "prom", {"app": "prometheus-server"})], forbidden={None},
                        namespaces_forbidden=True)
    assert find(lister, hint=("team-a",)).label == "team-a/prom:9090"
    assert lister.asked[1:] == sorted({"team-a", *WELL_KNOWN_NAMESPACES})


def test_nothing_readable_is_not_found_and_names_the_flag_and_the_permission() -> None:
    lister = FakeLister([], forbidden={None, *WELL_KNOWN_NAMESPACES}, namespaces_forbidden=True)
    with pytest.raises(StoreNotFound, match=r"cannot list Services.*'list' on 'services'.*--prometheus-url"):
        find(lister)
    assert isinstance(StoreNotFound("x"), UsageError)   # exit 2, as bad flags


def test_other_api_errors_are_not_taken_for_a_missing_permission() -> None:
    class Down(FakeLister):
        def services(self, namespace: str | None) -> list[Obj]:
            raise KubeError("list services: API server unreachable", status=0)

    with pytest.raises(KubeError, match="unreachable"):
        find(Down([]))


# ---------------------------------------------------------------------------------- credentials and flag checks
class FakeConfiguration:
    """The attributes of ``kubernetes.client.Configuration`` the proxied config reads."""

    def __init__(self) -> None:
        self.ssl_ca_cert = "/ca.pem"
        self.cert_file = None
        self.key_file = None
        self.verify_ssl = True
        self.tokens = iter(["Bearer one", "Bearer two"])

    def auth_settings(self) -> dict[str, Obj]:
        return {"BearerToken": {"in": "header", "key": "authorization", "value": next(self.tokens)}}


def test_the_proxied_config_carries_the_kube_clients_tls_and_reads_its_token_per_request() -> None:
    config = with_api_credentials(PrometheusConfig(url="https://k8s:6443/api/v1/namespaces/m/services/p:9/proxy"),
                                  FakeConfiguration())
    assert str(config.ca_file) == "/ca.pem" and config.client_cert_file is None and not config.insecure_skip_verify
    assert config.auth_headers is not None
    assert [config.auth_headers(), config.auth_headers()] == [{"authorization": "Bearer one"},
                                                              {"authorization": "Bearer two"}]
    assert "Bearer" not in repr(config)
    with pytest.raises(ValueError, match="exclude a bearer token file"):
        PrometheusConfig(url="https://k8s", auth_headers=dict, basic_auth_username="u", basic_auth_password="p")


def test_the_stores_own_auth_flags_need_the_url() -> None:
    check_found_store_flags(argparse.Namespace(prometheus_bearer_token_file=None, prometheus_ca_file=None))
    with pytest.raises(UsageError, match="--prometheus-bearer-token-file need --prometheus-url"):
        check_found_store_flags(argparse.Namespace(prometheus_bearer_token_file="t"))
