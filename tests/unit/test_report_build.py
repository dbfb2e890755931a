"""The report's pure core: recommendations equal the strategy's, worked costs, exact sums, pod-hours, risk flags.

``sample_report()`` (tests/builders/report.py, also used by the render tests) builds a small report from
synthetic usage with the ``krr-simple`` strategy, whose numbers are easy to work out: CPU = p95 of the
samples, memory = peak x 1.15 rounded up to a MiB, floors 10m and 100Mi.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from podtailor.resources import Resources
from recommender.model.registry import get_strategy
from recommender.model.types import ContainerPolicy
from recommender.report.build import HISTOGRAM_BINS, BuildConfig, build_report, distribution, pod_hours_per_month
from recommender.report.pricing import Prices, PriceSheet
from recommender.report.types import Disruption, Inventory, NodeInfo, Report, Risk, Role
from tests.builders.report import DAY, NOW, Gi, Mi, batch, cur, key, sample_inputs, sample_report, spec, workload


def test_recommendations_are_exactly_the_strategys() -> None:
    inv, batches = sample_inputs()
    report = sample_report()
    strategy = get_strategy("krr-simple")
    web = next(w for w in report.workloads if w.name == "web")
    for c in web.containers:
        b = batches.get(key(inv.workloads[0], c.name))
        if b is None:
            assert c.recommendation is None and c.usage is None
            continue
        state = strategy.new_state()
        state.add(b)
        # Two non-init containers share the pod: containers_in_pod = 2, as the engine passes it.
        expected, _ = strategy.recommend(state, now_s=NOW, policy=ContainerPolicy(containers_in_pod=2),
                                         current=c.current)
        assert c.recommendation == expected
    app = web.containers[1]
    assert app.recommendation is not None
    # p95 of a constant 0.2 cores in [200m, 203m]; 300Mi x 1.15 = 345Mi.
    assert 200 <= (app.recommendation.target.cpu_millicores or 0) <= 203
    assert app.recommendation.target.memory_bytes == 345 * Mi
    # Planned limits: the updater keeps the ratio, ceil(1000 x new / 500) and ceil(512Mi x 345Mi / 256Mi).
    new_cpu = app.planned.requests.cpu_millicores or 0
    assert app.planned.limits == Resources(cpu_millicores=-(-1000 * new_cpu // 500), memory_bytes=690 * Mi)


def test_worked_cost_of_one_container() -> None:
    report = sample_report()
    web = next(w for w in report.workloads if w.name == "web")
    app = web.containers[1]
    # 500m x 0.031611 + 0.25 GiB x 0.004237 = 0.01686475 $/h per pod; x 2 replicas x 730 h = $24.622535.
    assert app.cost.current == 24_622_535
    assert web.pod_hours_per_month == 1460
    # Init containers run to completion: no cost.
    assert web.containers[2].cost.current == web.containers[2].cost.recommended == 0


def test_pool_prices_apply_to_the_pool_of_the_pods() -> None:
    cheap = Prices(cpu_per_vcpu_hour=Fraction("0.01"), memory_per_gib_hour=Fraction("0.001"))
    report = sample_report(PriceSheet(pools={"spot": cheap}))
    db = next(w for w in report.workloads if w.name == "db")
    # 1 core x 0.01 + 1 GiB x 0.001 = 0.011 $/h x 730 h = $8.03.
    assert db.pool == "spot" and db.cost.current == 8_030_000


def test_sums_are_exact_at_every_level() -> None:
    report = sample_report()
    assert_additive(report)
    assert [g.name for g in report.pools] == ["general", "spot"]


def assert_additive(report: Report) -> None:
    for w in report.workloads:
        assert w.cost == sum((c.cost for c in w.containers), type(w.cost)())
        for c in w.containers:
            assert c.cost.savings == max(0, c.cost.current - c.cost.recommended)
            assert c.cost.increases == max(0, c.cost.recommended - c.cost.current)
    total = report.total.cost
    assert total == sum((w.cost for w in report.workloads), type(total)())
    assert total == sum((g.cost for g in report.namespaces), type(total)())
    assert total == sum((g.cost for g in report.pools), type(total)())
    assert total.net == total.increases - total.savings


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["a", "b", "c"]), st.integers(1, 4000), st.integers(1, 8 * Gi),
                          st.integers(0, 5), st.floats(0.001, 3.0), st.integers(1, 4 * Gi),
                          st.sampled_from(["n1", "n2", "n3"])), min_size=1, max_size=8))
def test_costs_add_up_for_any_fleet(rows: list[tuple[str, int, int, int, float, int, str]]) -> None:
    workloads, batches = [], {}
    for i, (ns, cpu, mem, replicas, used_cpu, used_mem, node) in enumerate(rows):
        w = workload(ns, f"w{i}", (spec("app", cur(cpu, mem)), spec("side", cur(cpu // 2 or 1, None), Role.SIDECAR)),
                     replicas=replicas, node=node)
        workloads.append(w)
        batches[key(w, "app")] = batch(used_cpu, used_mem, points=200)
    nodes = {n: NodeInfo(name=n, pool=p, allocatable=Resources(cpu_millicores=8000, memory_bytes=32 * Gi))
             for n, p in (("n1", "x"), ("n2", "y"))}  # n3 is unknown: pool ""
    inv = Inventory(workloads=tuple(workloads), nodes=nodes)
    cfg = BuildConfig(now_s=NOW, start_s=NOW - DAY, end_s=NOW, strategy_name="krr-simple")
    assert_additive(build_report(inv, batches, get_strategy("krr-simple"), cfg))


def test_jobs_are_billed_for_the_pod_hours_seen() -> None:
    inv, batches = sample_inputs()
    cron = inv.workloads[2]
    cfg = BuildConfig(now_s=NOW, start_s=NOW - DAY, end_s=NOW, strategy_name="krr-simple")
    # 360 one-minute samples = 6 pod-hours in a 24-hour window: 6 x 730 / 24 = 182.5 pod-hours a month.
    assert pod_hours_per_month(cron, [batches[key(cron, "run")]], cfg) == Fraction(365, 2)
    assert pod_hours_per_month(inv.workloads[0], [], cfg) == 2 * 730


def test_risk_flags() -> None:
    report = sample_report()
    flags = {w.name: {r.risk for r in w.risks} for w in report.workloads}
    assert flags["web"] >= {Risk.OOM_KILLS, Risk.CPU_THROTTLING, Risk.LOW_CONFIDENCE}  # setup has no history
    assert Risk.NO_LIMITS not in flags["web"]  # the sidecar has a memory limit
    assert Risk.BEST_EFFORT in flags["nightly"] and Risk.NO_LIMITS not in flags["nightly"]
    web = next(w for w in report.workloads if w.name == "web")
    assert "app x2" in next(r.message for r in web.risks if r.risk == Risk.OOM_KILLS)


def test_disruption_per_workload() -> None:
    report = sample_report()
    by_name = {w.name: w for w in report.workloads}
    assert by_name["web"].disruption == Disruption.IN_PLACE
    # Guaranteed 1 core / 1Gi -> 400m / 805Mi with limits following: still Guaranteed; memory RestartContainer.
    assert by_name["db"].disruption == Disruption.IN_PLACE_RESTART
    assert by_name["db"].qos_current == by_name["db"].qos_planned == "Guaranteed"
    assert by_name["nightly"].disruption == Disruption.LEFT_ALONE


def test_throttled_fraction_is_the_mean_over_the_steps_the_container_ran() -> None:
    from recommender.report.build import usage_summary

    limited, unlimited = spec("app", cur(500, 256 * Mi, 1000)), spec("app", cur(500, 256 * Mi))
    throttled = usage_summary(batch(0.4, 100 * Mi, throttled=0.25), limited, None)
    assert throttled is not None and throttled.throttled_fraction == 0.25
    # No throttling read (the source reads it only where it is above zero): never throttled if it has a limit,
    # nothing to say if it has none.
    never = usage_summary(batch(0.4, 100 * Mi), limited, None)
    assert never is not None and never.throttled_fraction == 0.0
    unknown = usage_summary(batch(0.4, 100 * Mi), unlimited, None)
    assert unknown is not None and unknown.throttled_fraction is None


def test_a_summary_counts_as_the_steps_it_stands_for_in_the_usage_shown() -> None:
    """History read as a plan's hourly summaries plus a day at the step: hours, throttled share, OOM kills and
    the distribution cover the whole window, each summary standing for its 60 one-minute steps."""
    from dataclasses import replace

    import numpy as np

    from recommender.model.types import Samples, UsageBatch
    from recommender.report.build import at_step, usage_summary

    ts = NOW - 3 * DAY + 3600.0 * np.arange(1, 49)
    summary = UsageBatch(cpu_cores=Samples(timestamps_s=ts, values=np.full(48, 0.8)), cpu_interval_s=3600.0,
                         memory_peak_bytes=Samples(timestamps_s=ts, values=np.full(48, float(200 * Mi))),
                         memory_interval_s=3600.0,
                         cpu_throttled_fraction=Samples(timestamps_s=ts, values=np.full(48, 0.5)))
    recent = batch(0.4, 100 * Mi, throttled=0.0, ooms=1)
    both = replace(recent, summary=replace(summary, oom_kills=recent.oom_kills))
    flat = at_step(both)
    assert len(flat.cpu_cores) == 48 * 60 + 1440 and flat.summary is None and len(flat.oom_kills) == 2
    shown = usage_summary(both, spec("app", cur(500, 256 * Mi, 1000)), None)
    assert shown is not None and shown.observed_pod_hours == 48 + 24 and shown.oom_kills == 2
    assert shown.throttled_fraction == 0.5 * 48 * 60 / (48 * 60 + 1440)
    assert shown.cpu_millicores is not None and shown.cpu_millicores.max == 800


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.floats(1e-6, 1e12), st.just(0.0), st.integers(0, 50).map(float)), min_size=1,
                max_size=300),
       st.lists(st.one_of(st.none(), st.integers(0, 2**40)), max_size=4))
# Found by hypothesis: n = 21 puts numpy's p90 exactly on a sample, which n * q + (1 - q) - 1 missed by an ulp.
@example(values=[0.0] * 9 + [1.0] * 10 + [283.0] * 2, refs=[])
def test_distribution_is_numpys_percentiles_and_histogram(values: list[float], refs: list[int | None]) -> None:
    """The one-sort distribution gives what np.percentile (linear) gives, to the last bits of a float (numpy
    orders its interpolation's operations its own way), and exactly the counts of np.histogram over [0, top].
    (Usage below a millionth is left out: np.histogram itself refuses 24 bins over a range of denormals.)"""
    array = np.array(values)
    got = distribution(array, refs)
    assert got is not None
    want = np.percentile(array, [50, 90, 95, 99])
    assert [got.p50, got.p90, got.p95, got.p99] == pytest.approx(want.tolist(), rel=1e-12, abs=1e-300)
    counts, _ = np.histogram(array, bins=HISTOGRAM_BINS, range=(0.0, got.top))
    assert list(got.counts) == counts.tolist() and got.max == array.max() and got.samples == array.size
