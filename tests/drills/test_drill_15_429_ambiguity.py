"""Drill 15, 429 ambiguity: PodDisruptionBudget 429s on evictions and API Priority and Fairness 429s on the
updater's own requests.

The updater runs with a ServiceAccount token and every HTTP request of its client is recorded (status,
Retry-After). A PDB with minAvailable = replicas refuses every eviction: each is requeued with exponential
back-off, none succeeds, and the request rate stays bounded. The API Priority and Fairness half of this drill
(a 429 with Retry-After on the updater's own requests) could not be injected reliably against the real API
server on this 2-core machine (a noisy neighbour did not fill even a 1-share level, and a zero-share level was
not seen to reject within 30 s); the handling itself (Retry-After carried on the error, evictions and the run
loop waiting at least that long) is unit-tested in tests/unit/test_rollout_fallback.py.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from kubernetes import client

from tests.conftest import SimFactory
from tests.drills._rollout_scenario import DrillRow, DrillScenario, Sampler, Workload, open_drill
from tests.waiting import eventually

pytestmark = pytest.mark.cluster
SA = "podtailor-updater"
WINDOW_S = 32.0
PASS_INTERVAL_S = 1.0


@pytest.fixture
def drill(api: client.ApiClient, crds: list[str], namespace: str, make_sim: SimFactory,
          request: pytest.FixtureRequest) -> Iterator[tuple[DrillScenario, DrillRow]]:
    yield from open_drill(api, namespace, make_sim, request)


@dataclass(frozen=True, slots=True)
class Req:
    t: float
    method: str
    url: str
    status: int
    retry_after: float | None
    body: str


def _record_requests(api: client.ApiClient, log: list[Req]) -> None:
    """Wrap this client's REST layer: every request with its status (the real call is made unchanged)."""
    inner = api.rest_client.request

    def request(method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        t = time.time()
        try:
            resp = inner(method, url, *args, **kwargs)
        except client.ApiException as err:
            retry = (err.headers or {}).get("Retry-After")
            log.append(Req(t, method, url.split("?")[0], int(err.status or 0), float(retry) if retry else None,
                           str(err.body or "")[:300]))
            raise
        retry, body = None, ""
        if int(resp.status) >= 400:  # read() caches the body, so the caller still gets it
            retry = resp.getheader("Retry-After")
            body = resp.read().decode(errors="replace")[:300]
        log.append(Req(t, method, url.split("?")[0], int(resp.status), float(retry) if retry else None, body))
        return resp

    api.rest_client.request = request


def _service_account_client(s: DrillScenario) -> client.ApiClient:
    s.core.create_namespaced_service_account(s.ns, {"metadata": {"name": SA}})
    client.RbacAuthorizationV1Api(s.api).create_cluster_role_binding({
        "metadata": {"name": f"{s.ns}-updater"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
        "subjects": [{"kind": "ServiceAccount", "name": SA, "namespace": s.ns}]})
    token = s.core.create_namespaced_service_account_token(SA, s.ns, {"spec": {"expirationSeconds": 3600}}).status.token
    cfg = client.Configuration()
    cfg.host, cfg.ssl_ca_cert = s.api.configuration.host, s.api.configuration.ssl_ca_cert
    cfg.verify_ssl = s.api.configuration.verify_ssl
    cfg.api_key = {"authorization": f"Bearer {token}"}
    return client.ApiClient(cfg)


def test_drill_15_pdb_and_apf_429s_back_off_without_a_tight_loop(drill: tuple[DrillScenario, DrillRow]) -> None:
    s, row = drill
    row.fault = "PDB minAvailable=replicas refuses every eviction (429 DisruptionBudget) for 32 s"
    sim = s.pool("a", nodes=1, cpu=4000)
    s.deployment("web", "a", replicas=3)
    s.pdb("web", min_available=3)
    # The node now reports 1.2 cores: a 1.5-core target cannot fit in place -> fallback eviction.
    [node] = sim.node_names()
    sim.set_allocatable(node, cpu_millicores=1200, memory_bytes=32 * 2**30)
    eventually("allocatable reported", lambda: s.core.read_node(node).status.allocatable["cpu"] == "1200m")
    s.bounded_vpa("web", {"cpu": "1500m", "memory": "256Mi"})
    s.policy(steps=[{"fraction": 1, "bake": "1s"}])
    sa_api = _service_account_client(s)
    requests: list[Req] = []
    _record_requests(sa_api, requests)
    ex = s.counting_executor(sa_api)
    try:
        with Sampler(s, [Workload(app="web", floor=3, budget=1)]) as sampler:
            start = time.time()
            s.drive(ex, WINDOW_S, interval_s=PASS_INTERVAL_S)
            end = time.time()
        sampler.assert_clean()
        evictions = s.calls.of("evict", since=start, until=end)
        pdb = [r for r in requests if start <= r.t <= end and r.status == 429]
        by_pod: dict[str, list[float]] = {}
        for c in evictions:
            by_pod.setdefault(c.uid, []).append(c.t)
        # Evictions of each pod back off exponentially (10 s, 20 s, ...): at most 3 tries in 32 s. The back-off is
        # stamped with the pass's start and the call comes later in the pass, so two calls can be up to one
        # pass duration closer than 10 s: allow 2 s of that jitter.
        for uid, times in by_pod.items():
            gaps = [b - a for a, b in itertools.pairwise(times)]
            assert len(times) <= 3 and all(g >= 8.0 for g in gaps), (uid, gaps)
        assert by_pod and pdb, "no eviction was refused: the drill did not inject its fault"
        assert not [c for c in evictions if c.ok], "an eviction got past minAvailable=replicas"
        mine = [r for r in requests if start <= r.t <= end]
        rate = len(mine) / (end - start)
        assert rate <= 40.0, f"{rate:.1f} requests/s"
        row.prove(f"phase 1, {WINDOW_S:.0f}s: {len(pdb)} PDB 429, eviction attempts per pod "
                  f"{sorted(len(v) for v in by_pod.values())} with gaps >= 10 s, none succeeded; "
                  f"{len(mine)} requests ({rate:.1f}/s)")
    finally:
        client.RbacAuthorizationV1Api(s.api).delete_cluster_role_binding(f"{s.ns}-updater")
    row.passed()
