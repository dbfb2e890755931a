"""Drill 15, 429 ambiguity: PodDisruptionBudget 429s on evictions and API Priority and Fairness 429s on the
updater's own requests.

The updater runs with a ServiceAccount token and every HTTP request of its client is recorded (status,
Retry-After). Phase 1: a PDB with minAvailable = replicas refuses every eviction: each is requeued with
exponential back-off, none succeeds, and the request rate stays bounded.

Phase 2: API Priority and Fairness rejects the updater's requests. A FlowSchema puts the updater's account
and a noisy account in a PriorityLevelConfiguration with no concurrency of its own (0 shares, nothing
borrowed, Reject): the API server then runs one of its requests only while no other of that level runs.
The noisy account keeps the level busy with dry-run ConfigMap creations that a validating webhook holds
for 4 s each (the webhook's address accepts TCP connections and never answers; failurePolicy Ignore), so
the updater's requests meet real APF 429s with Retry-After. The client's pacing (``podtailor.kube.pacing``)
must wait out every Retry-After, lower its rate, and stay under its configured QPS; once the noise stops
the rollout completes with each pod resized exactly once.
"""

from __future__ import annotations

import itertools
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pytest
from kubernetes import client

from podtailor.kube.pacing import AdaptiveRate, RateConfig, install
from tests.conftest import SimFactory
from tests.drills._rollout_scenario import (
    DrillRow,
    DrillScenario,
    Sampler,
    Workload,
    container_values,
    generation_report,
    open_drill,
)
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
    end: float
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
            log.append(Req(t, time.time(), method, url.split("?")[0], int(err.status or 0),
                           float(retry) if retry else None,
                           str(err.body or "")[:300]))
            raise
        retry, body = None, ""
        if int(resp.status) >= 400:  # read() caches the body, so the caller still gets it
            retry = resp.getheader("Retry-After")
            body = resp.read().decode(errors="replace")[:300]
        log.append(Req(t, time.time(), method, url.split("?")[0], int(resp.status), float(retry) if retry else None,
                       body))
        return resp

    api.rest_client.request = request


def _service_account_client(s: DrillScenario, name: str = SA, bind: bool = True) -> client.ApiClient:
    if bind:
        s.core.create_namespaced_service_account(s.ns, {"metadata": {"name": name}})
        client.RbacAuthorizationV1Api(s.api).create_cluster_role_binding({
            "metadata": {"name": f"{s.ns}-{name}"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": s.ns}]})
    token = s.core.create_namespaced_service_account_token(name, s.ns,
                                                           {"spec": {"expirationSeconds": 3600}}).status.token
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
        client.RbacAuthorizationV1Api(s.api).delete_cluster_role_binding(f"{s.ns}-{SA}")
    row.passed()


# ------------------------------------------------------------------------------------------- phase 2: APF
FLOWCONTROL = ("flowcontrol.apiserver.k8s.io", "v1")
NOISY = "noisy-neighbour"
HOLD_S = 4  # how long the webhook holds each noisy request (its timeoutSeconds)
APF_WINDOW_S = 20.0
QPS, BURST = 5.0, 10


@contextmanager
def tight_priority_level(s: DrillScenario, accounts: list[str]) -> Iterator[None]:
    """A FlowSchema sending ``accounts`` to a level with no concurrency of its own: one request at a time."""
    name = f"{s.ns}-tight"
    custom = client.CustomObjectsApi(s.api)
    level = {"apiVersion": "/".join(FLOWCONTROL), "kind": "PriorityLevelConfiguration", "metadata": {"name": name},
             "spec": {"type": "Limited", "limited": {"nominalConcurrencyShares": 0, "lendablePercent": 0,
                                                     "borrowingLimitPercent": 0, "limitResponse": {"type": "Reject"}}}}
    schema = {"apiVersion": "/".join(FLOWCONTROL), "kind": "FlowSchema", "metadata": {"name": name},
              "spec": {"priorityLevelConfiguration": {"name": name}, "matchingPrecedence": 100,
                       "distinguisherMethod": {"type": "ByUser"},
                       "rules": [{"subjects": [{"kind": "ServiceAccount",
                                                "serviceAccount": {"name": a, "namespace": s.ns}} for a in accounts],
                                  "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"],
                                                     "clusterScope": True, "namespaces": ["*"]}],
                                  "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}]}]}}
    custom.create_cluster_custom_object(*FLOWCONTROL, "prioritylevelconfigurations", level)
    custom.create_cluster_custom_object(*FLOWCONTROL, "flowschemas", schema)
    try:
        yield
    finally:
        custom.delete_cluster_custom_object(*FLOWCONTROL, "flowschemas", name)
        custom.delete_cluster_custom_object(*FLOWCONTROL, "prioritylevelconfigurations", name)


@contextmanager
def holding_webhook(s: DrillScenario) -> Iterator[None]:
    """A validating webhook on this namespace's ConfigMaps whose address accepts connections and never answers:
    the API server waits HOLD_S seconds for it, then admits (failurePolicy Ignore)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(512)  # connections complete in the kernel's queue; nothing ever reads them
    name = f"{s.ns}-hold"
    admission = client.AdmissionregistrationV1Api(s.api)
    admission.create_validating_webhook_configuration({
        "metadata": {"name": name},
        "webhooks": [{"name": "hold.drill.podtailor.io", "admissionReviewVersions": ["v1"], "sideEffects": "None",
                      "failurePolicy": "Ignore", "timeoutSeconds": HOLD_S,
                      "clientConfig": {"url": f"https://127.0.0.1:{sock.getsockname()[1]}/hold"},
                      "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": s.ns}},
                      "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"],
                                 "resources": ["configmaps"]}]}]})
    try:
        yield
    finally:
        admission.delete_validating_webhook_configuration(name)
        sock.close()


class Noise:
    """Keeps the tight level busy: dry-run creates held by the webhook, one after another. One thread is enough
    (the level runs one request at a time) and keeps the noise's own rejections, which raise the Retry-After
    the API server hands out (it grows with the level's recent rejections), near zero."""

    def __init__(self, api: client.ApiClient, ns: str, threads: int = 1) -> None:
        self.core, self.ns = client.CoreV1Api(api), ns
        self.stop = threading.Event()
        self.held = self.rejected = 0
        self.threads = [threading.Thread(target=self._loop, daemon=True) for _ in range(threads)]

    def _loop(self) -> None:
        while not self.stop.is_set():
            try:
                self.core.create_namespaced_config_map(self.ns, {"metadata": {"generateName": "noise-"}},
                                                       dry_run="All")
                self.held += 1
            except client.ApiException as err:
                self.rejected += err.status == 429
                self.stop.wait(0.25)

    def __enter__(self) -> Noise:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(timeout=HOLD_S + 5)


def test_drill_15_apf_429s_pause_the_client_and_lower_its_rate(drill: tuple[DrillScenario, DrillRow]) -> None:
    s, row = drill
    row.fault = (f"APF: a 0-share Reject level for the updater, kept busy by a noisy account for {APF_WINDOW_S:.0f} s "
                 f"(real 429s with Retry-After)")
    s.pool("a", nodes=2, cpu=8000)
    s.deployment("api", "a", replicas=3)
    s.bounded_vpa("api", {"cpu": "300m", "memory": "256Mi"})
    s.policy(steps=[{"fraction": 1, "bake": "1s"}])
    sa_api = _service_account_client(s)
    requests: list[Req] = []
    _record_requests(sa_api, requests)  # innermost: records when each request really went out
    limiter = AdaptiveRate(RateConfig(qps=QPS, burst=BURST))
    install(sa_api, limiter)
    probe = client.CoreV1Api(_service_account_client(s, bind=False))  # the same account, unpaced
    s.core.create_namespaced_service_account(s.ns, {"metadata": {"name": NOISY}})
    client.RbacAuthorizationV1Api(s.api).create_namespaced_role_binding(s.ns, {
        "metadata": {"name": NOISY},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
        "subjects": [{"kind": "ServiceAccount", "name": NOISY, "namespace": s.ns}]})
    noisy_api = _service_account_client(s, NOISY, bind=False)
    ex = s.counting_executor(sa_api)

    def rejected() -> bool:
        try:
            probe.list_namespaced_pod(s.ns, limit=1)
            return False
        except client.ApiException as err:
            return err.status == 429

    try:
        with Sampler(s, [Workload(app="api", floor=3, budget=1)]) as sampler:
            with tight_priority_level(s, [SA, NOISY]), holding_webhook(s), Noise(noisy_api, s.ns) as noise:
                eventually("the API server rejects the updater's account (APF 429)", rejected, timeout_s=30)
                start = time.time()
                # Passes 0.2 s apart: any longer wait between requests is the client's pacing.
                failed = s.drive(ex, APF_WINDOW_S, interval_s=0.2)
                end, lowered = time.time(), limiter.rate
            assert s.rollouts() == [] or all(r.phase.value != "Completed" for r in s.rollouts())
            s.drive(ex, 60, until=lambda: bool(s.rollouts()) and all(r.phase.value == "Completed"
                                                                     for r in s.rollouts()),
                    interval_s=PASS_INTERVAL_S)
        sampler.assert_clean()
        window = [r for r in requests if start <= r.t <= end]
        apf = [r for r in window if r.status == 429 and "DisruptionBudget" not in r.body]
        assert apf, "no APF 429 reached the updater: the drill did not inject its fault"
        assert all(r.retry_after for r in apf), [r.retry_after for r in apf]
        # Every request waited out the Retry-After of every APF 429 answered before it was sent.
        early = [(a.end, a.retry_after, b.t) for a in apf for b in window
                 if a.retry_after and a.end < b.t < a.end + a.retry_after - 0.05]
        assert not early, f"requests sent inside a Retry-After: {early[:5]}"
        assert len(window) <= BURST + QPS * (end - start), f"{len(window)} requests in {end - start:.1f} s"
        assert limiter.throttled >= len(apf) and lowered < QPS
        row.notes.append("requests in the window (s from start, status, duration s): " + ", ".join(
            f"{r.t - start:.2f} {r.status} {r.end - r.t:.2f}" for r in window))
        # Done, afterwards, and exactly once: each pod's generation = base + 1 and the kubelet reports 300m.
        assert generation_report(s, sampler.base_generation) == []
        for pod in s.running("api"):
            spec, _, status, _ = container_values(pod)
            assert spec["cpu"] == status["cpu"] == "300m", (pod.metadata.name, spec, status)
        row.prove(f"phase 2, {end - start:.0f} s of APF rejection: {len(window)} requests "
                  f"({len(window) / (end - start):.2f}/s, limit {QPS:.0f}/s + burst {BURST}), {len(apf)} APF 429 with "
                  f"Retry-After {sorted({r.retry_after for r in apf})} s, none followed early; client rate lowered to "
                  f"{lowered:.2f}/s; {failed} passes failed; noise: {noise.held} held, {noise.rejected} rejected; "
                  "afterwards the rollout completed, each pod resized once")
    finally:
        client.RbacAuthorizationV1Api(s.api).delete_cluster_role_binding(f"{s.ns}-{SA}")
    row.passed()
