"""Finding the metrics store by its Service on the real API server, and what its service proxy makes of our
requests (issue #40, deliverable 2).

The test's namespace holds candidate Services of several backends (no selector, so no endpoints). Two users
look for the store: the session's admin, who may list Services cluster-wide, and a user whose only rights
are listing Services and using their proxy in that namespace, so the cluster-wide list is refused (403) and
discovery falls back to the namespaces it may read. Both must pick the VictoriaMetrics Service, the first in
the documented order, and log the others.

Every kind of request the store client sends (instant, range, series, remote read, runtimeinfo) then goes to
the chosen Service's proxy path. Reading through the proxy end to end cannot be tested here: the only place
we may send traffic to is 127.0.0.1, and the API server proxies a Service only to the addresses of its
endpoints that belong to a pod with that IP (``ResourceLocation`` and ``isValidAddress`` in k8s.io/kubernetes
v1.37.2 pkg/registry/core/service/storage/storage.go; pod addresses must be global unicast,
pkg/registry/core/pod/strategy.go, so never loopback). What is tested is that each request reaches the real
API server on the proxy path with our credentials: the server answers 503 "no endpoints available for
service" naming our Service (so authentication and RBAC passed and the path named it), and a user without
the proxy permission is refused by name.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config
from prometheus_client import CollectorRegistry

from recommender.kube.store_service import store_config
from recommender.sources import remote_read
from recommender.sources.config import PrometheusConfig
from recommender.sources.errors import SourceError
from recommender.sources.transport import SourceMetrics, Transport
from tests.harness import certs
from tests.harness.cluster import ClusterState, write_kubeconfig

CANDIDATES = [  # (name, labels, ports): the order discovery must find them in is vm, thanos, prom-server
    ("prom-server", {"app": "prometheus-server"}, [("web", 9090)]),
    ("thanos", {"app.kubernetes.io/name": "thanos-query"}, [("grpc", 10901), ("http", 10902)]),
    ("vm", {"app.kubernetes.io/name": "vmsingle"}, [("http", 8428)]),
    ("web", {"app": "nginx"}, [("http", 80)]),
]


@pytest.fixture
def services(api: client.ApiClient, namespace: str) -> list[str]:
    core = client.CoreV1Api(api)
    for name, labels, ports in CANDIDATES:
        core.create_namespaced_service(namespace, {
            "metadata": {"name": name, "labels": labels},
            "spec": {"ports": [{"name": n, "port": p, "protocol": "TCP"} for n, p in ports]}})
    return [name for name, _, _ in CANDIDATES]


def _user(cluster: ClusterState, tmp_path: Path, name: str) -> client.ApiClient:
    """A client of ``name``, a user of no group: only the RBAC given to it below counts."""
    cert = certs.issue_client(Path(cluster.ca_cert).parent, f"user-{name}", name)
    path = write_kubeconfig(tmp_path / f"{name}.kubeconfig", cluster.server, Path(cluster.ca_cert), cert, name)
    return config.new_client_from_config(config_file=str(path))


@pytest.fixture
def namespaced_user(api: client.ApiClient, cluster: ClusterState, namespace: str,
                    tmp_path: Path) -> Iterator[client.ApiClient]:
    """A user who may list Services and use their proxy in ``namespace`` only (no cluster-wide list, no
    namespace list)."""
    name = f"{namespace}-reader"[:60]
    rbac = client.RbacAuthorizationV1Api(api)
    rbac.create_namespaced_role(namespace, {"metadata": {"name": "store-reader"}, "rules": [
        {"apiGroups": [""], "resources": ["services"], "verbs": ["list"]},
        {"apiGroups": [""], "resources": ["services/proxy"], "verbs": ["get", "create"]}]})
    rbac.create_namespaced_role_binding(namespace, {
        "metadata": {"name": "store-reader"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "store-reader"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": name}]})
    user = _user(cluster, tmp_path, name)
    try:
        yield user
    finally:
        user.close()


def _found(api: client.ApiClient, hint: tuple[str, ...], caplog: pytest.LogCaptureFixture) -> PrometheusConfig:
    with caplog.at_level(logging.INFO, logger="podtailor.report"):
        found = store_config(api, hint, lambda url: PrometheusConfig(url=url, retries=0, timeout_s=10.0))
    return found


def _several(caplog: pytest.LogCaptureFixture) -> dict[str, Any]:
    (record,) = [r for r in caplog.records if "several metrics store Services found" in r.getMessage()]
    return dict(record.__dict__)


def _requests(config: PrometheusConfig) -> dict[str, SourceError]:
    """Each kind of request the store client sends, sent once; the error each one ended with."""
    transport = Transport(config, SourceMetrics(CollectorRegistry()))
    errors: dict[str, SourceError] = {}
    read = remote_read.request_body([([remote_read.Matcher(kind=remote_read.EQ, name="__name__", value="up")], 0, 1)])
    sends: list[tuple[str, Any]] = [("query", [("query", "up")]), ("series", [("match[]", "up")]),
                                    ("query_range", [("query", "up"), ("start", "0"), ("end", "60"), ("step", "60")]),
                                    ("status/runtimeinfo", []), ("read", read)]
    try:
        for endpoint, form in sends:
            with pytest.raises(SourceError) as err:
                transport.fetch(endpoint, form)
            errors[endpoint] = err.value
    finally:
        transport.close()
    return errors


def test_the_admin_finds_the_first_candidate_in_order_and_every_request_reaches_its_proxy(
        api: client.ApiClient, namespace: str, services: list[str], caplog: pytest.LogCaptureFixture) -> None:
    found = _found(api, (), caplog)
    assert found.base_url.endswith(f"/api/v1/namespaces/{namespace}/services/http:vm:8428/proxy")
    assert found.client_cert_file is not None and found.ca_file is not None   # the kubeconfig's own TLS
    several = _several(caplog)
    assert several["service"] == f"{namespace}/vm:8428"
    assert several["others"][:2] == [f"{namespace}/thanos:10902", f"{namespace}/prom-server:9090"]
    errors = _requests(found)
    assert set(errors) == {"query", "series", "query_range", "status/runtimeinfo", "read"}
    for endpoint, err in errors.items():
        assert err.status == 503, (endpoint, err)
        assert 'no endpoints available for service \\"vm\\"' in str(err), (endpoint, err)


def test_a_user_refused_the_cluster_wide_list_finds_it_in_the_namespace_it_may_read(
        namespaced_user: client.ApiClient, namespace: str, services: list[str],
        caplog: pytest.LogCaptureFixture) -> None:
    found = _found(namespaced_user, (namespace,), caplog)
    assert "cannot list Services cluster-wide (403)" in caplog.text
    assert found.base_url.endswith(f"/api/v1/namespaces/{namespace}/services/http:vm:8428/proxy")
    assert _several(caplog)["service"] == f"{namespace}/vm:8428"
    errors = _requests(found)
    assert all(err.status == 503 and "no endpoints available" in str(err) for err in errors.values()), errors


def test_a_user_without_the_proxy_permission_is_refused_by_name(
        api: client.ApiClient, cluster: ClusterState, namespace: str, services: list[str], tmp_path: Path,
        caplog: pytest.LogCaptureFixture) -> None:
    name = f"{namespace}-lister"[:60]
    rbac = client.RbacAuthorizationV1Api(api)
    rbac.create_namespaced_role(namespace, {"metadata": {"name": "lister"}, "rules": [
        {"apiGroups": [""], "resources": ["services"], "verbs": ["list"]}]})
    rbac.create_namespaced_role_binding(namespace, {
        "metadata": {"name": "lister"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "lister"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": name}]})
    user = _user(cluster, tmp_path, name)
    try:
        found = _found(user, (namespace,), caplog)
    finally:
        user.close()
    errors = _requests(found)
    refused = f'services \\"http:vm:8428\\" is forbidden: User \\"{name}\\" cannot'  # the path's service, our user
    for err in errors.values():
        assert err.status == 403 and refused in str(err), err
