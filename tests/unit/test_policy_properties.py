"""Properties of plan() over random snapshots, and a (not timed) 10,000-pod sanity run."""

from __future__ import annotations

from collections import Counter, defaultdict

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from podtailor.resize.changes import RESOURCES, get, qos_class
from podtailor.resize.types import ContainerView, LimitRangeView
from podtailor.resources import Resources
from podtailor.vpa import ControlledValues
from tests.builders.policy import GI, MI, NOW, ctarget, node, pod, res, wtarget
from updater.policy.batching import step_counts
from updater.policy.planner import plan
from updater.policy.types import Action, CanaryStep, FallbackMode, HpaView, Plan, PodView, RolloutPolicy, WorkloadTarget

POOLS = ("a", "b", "c")
WORKLOADS = ("web", "api", "db")
RESIZE = frozenset({Action.RESIZE_ONLINE, Action.RESIZE_RESTART})


@st.composite
def amounts(draw: st.DrawFn, low: int, high: int) -> tuple[int | None, int | None]:
    """A valid (request, limit) pair: none, request only, or limit >= request."""
    kind = draw(st.sampled_from(["none", "request", "limit", "equal"]))
    if kind == "none":
        return None, None
    request = draw(st.integers(low, high))
    if kind == "request":
        return request, None
    if kind == "equal":
        return request, request
    return request, draw(st.integers(request, 4 * high))


@st.composite
def containers(draw: st.DrawFn, name: str) -> ContainerView:
    cpu, cpu_lim = draw(amounts(1, 4000))
    mem, mem_lim = draw(amounts(MI, 8 * GI))
    policy = draw(st.dictionaries(st.sampled_from(RESOURCES), st.sampled_from(["NotRequired", "RestartContainer"])))
    return ContainerView(name=name, requests=res(cpu, mem), limits=res(cpu_lim, mem_lim), resize_policy=policy)


@st.composite
def pods(draw: st.DrawFn, index: int) -> PodView:
    pool = draw(st.sampled_from(POOLS))
    cs = [draw(containers(n)) for n in draw(st.sampled_from([("app",), ("app", "side")]))]
    return pod(f"p{index}", workload=draw(st.sampled_from(WORKLOADS)), pool=pool, node=f"{pool}-1", containers=cs,
               priority=draw(st.sampled_from([0, 100, 1000])), created_s=NOW - draw(st.integers(0, 90_000)),
               restart_policy=draw(st.sampled_from(["Always", "Always", "Never"])),
               resize_pending=draw(st.sampled_from([None, None, None, "Infeasible", "Deferred"])),
               resize_pending_since_s=NOW - 1000)


@st.composite
def targets(draw: st.DrawFn, workload: str) -> WorkloadTarget:
    cts = [ctarget(n, cpu=draw(st.integers(1, 6000)), mem=draw(st.integers(MI, 12 * GI)),
                   controlled_values=draw(st.sampled_from(ControlledValues)))
           for n in ("app", "side")]
    return wtarget(*cts, workload=workload, replicas=draw(st.integers(1, 30)), stale=draw(st.booleans()))


@st.composite
def policies(draw: st.DrawFn) -> RolloutPolicy:
    fractions = sorted(draw(st.lists(st.floats(0.0, 1.0), min_size=1, max_size=5)))
    steps = tuple(CanaryStep(fraction=f, bake_s=float(i)) for i, f in enumerate(fractions))
    return RolloutPolicy(steps=steps, max_concurrent_per_pool=draw(st.integers(1, 8)),
                         disruption_budget=draw(st.sampled_from([0.0, 0.1, 0.25, 0.5])),
                         fallback=draw(st.sampled_from(list(FallbackMode))),
                         allow_single_replica_eviction=draw(st.booleans()),
                         keep_limit_ratio=draw(st.booleans()))


@st.composite
def snapshots(draw: st.DrawFn) -> tuple[Plan, RolloutPolicy, dict[str, PodView]]:
    n = draw(st.integers(0, 40))
    ps = [draw(pods(i)) for i in range(n)]
    policy = draw(policies())
    lrs = [LimitRangeView(namespace="shop", min=res(cpu=draw(st.integers(1, 50))), max=res(mem=10 * GI),
                          max_limit_request_ratio_cpu=draw(st.sampled_from([None, 1.0, 2.0, 3.5])))]
    hpas = [HpaView(namespace="shop", workload_kind="Deployment", workload_name="api",
                    utilization_resources=frozenset({"cpu"}))]
    nodes = [node(f"{p}-1", pool=p, cpu=draw(st.integers(2000, 16000)), ready=draw(st.booleans()) or p != "c")
             for p in POOLS]
    result = plan(pods=ps, targets=[draw(targets(w)) for w in WORKLOADS], hpas=hpas, limit_ranges=lrs,
                  nodes=nodes, policy=policy, now_s=NOW)
    return result, policy, {f"{p.namespace}/{p.name}": p for p in ps}


PROPS = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PROPS
@given(snapshots())
def test_batches_cover_every_resize_exactly_once(snap: tuple[Plan, RolloutPolicy, dict[str, PodView]]) -> None:
    result, _, _ = snap
    batched = Counter(key for b in result.batches for key in b.pods)
    actionable = {d.key for d in result.decisions if d.action in RESIZE}
    assert set(batched) == actionable
    assert all(count == 1 for count in batched.values())
    assert all(b.pods for b in result.batches)
    pools = {d.key: d.pool for d in result.decisions}
    assert all(pools[key] == b.pool for b in result.batches for key in b.pods)


@PROPS
@given(snapshots())
def test_steps_non_decreasing_and_one_pod_first(snap: tuple[Plan, RolloutPolicy, dict[str, PodView]]) -> None:
    result, policy, _ = snap
    by_pool = defaultdict(list)
    for b in result.batches:
        by_pool[b.pool].append(b)
    for batches in by_pool.values():
        steps = [b.step for b in batches]
        assert steps == sorted(steps)
        assert all(0 <= s < len(policy.steps) for s in steps)
        if policy.steps[0].fraction == 0:
            assert len(batches[0].pods) == 1


@PROPS
@given(snapshots())
def test_resizes_keep_qos_and_never_drop_or_zero(snap: tuple[Plan, RolloutPolicy, dict[str, PodView]]) -> None:
    result, _, pods_by_key = snap
    for d in result.decisions:
        p = pods_by_key[d.key]
        new = {c.name: (c.new_requests, c.new_limits) for c in d.changes}
        after = [new.get(c.name, (c.requests, c.limits)) for c in p.containers]
        if d.action in RESIZE:
            assert qos_class(after) == qos_class((c.requests, c.limits) for c in p.containers) == p.qos
        for c in d.changes:
            for name in RESOURCES:
                _check_amounts(name, c.old_requests, c.new_requests, c.old_limits, c.new_limits)


def _check_amounts(name: str, old_req: Resources, new_req: Resources, old_lim: Resources, new_lim: Resources) -> None:
    for old, new in ((get(old_req, name), get(new_req, name)), (get(old_lim, name), get(new_lim, name))):
        assert old is None or new is not None, "removed"
        assert new is None or new >= 1, "zero"
    request, limit = get(new_req, name), get(new_lim, name)
    assert request is None or limit is None or limit >= request


@given(st.lists(st.floats(0.0, 1.0), min_size=1, max_size=6), st.integers(0, 500))
def test_step_counts_grow_by_at_least_one_until_all_are_covered(fractions: list[float], n: int) -> None:
    counts = step_counts(sorted(fractions), n)
    if fractions and max(fractions) == 1.0:
        assert counts[-1] == n
    for prev, cur in zip([0, *counts], counts, strict=False):
        assert cur == n or cur > prev
        assert cur <= n


def test_ten_thousand_pods_in_ten_pools() -> None:
    pools = [f"pool-{i}" for i in range(10)]
    nodes = [node(f"{p}-n{j}", pool=p) for p in pools for j in range(20)]
    ts = [wtarget(ctarget(cpu=750 + w), workload=f"w{w}", replicas=100) for w in range(100)]
    ps = [pod(f"p{i}", workload=f"w{i % 100}", pool=pools[i % 10], node=f"{pools[i % 10]}-n{i % 20}",
              created_s=NOW - 3600 - i) for i in range(10_000)]
    result = plan(pods=ps, targets=ts, hpas=[], limit_ranges=[], nodes=nodes, policy=RolloutPolicy(), now_s=NOW)
    assert len(result.decisions) == 10_000
    assert sum(len(b.pods) for b in result.batches) == 10_000
    assert {b.pool for b in result.batches} == set(pools)
