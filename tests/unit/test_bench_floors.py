"""Unit tests for the report bench's floors and variants: query texts, escaping, the variant table, goals."""

from __future__ import annotations

import re

from tests.benchmarks import bench_report
from tests.benchmarks.floors import SOURCE_METRICS, Workload, krr_queries, touch_queries

W = Workload(namespace="bench-03", name="app-0003", replicaset="app-0003-5d9c", pods=("app-0003-5d9c-aaaaa",))


def _balanced(q: str) -> bool:
    depth = {"(": 0, "{": 0, "[": 0}
    close = {")": "(", "}": "{", "]": "["}
    for ch in re.sub(r'"(?:[^"\\]|\\.)*"', '""', q):  # brackets inside string literals do not count
        if ch in depth:
            depth[ch] += 1
        elif ch in close:
            depth[close[ch]] -= 1
            if depth[close[ch]] < 0:
                return False
    return not any(depth.values())


def test_krr_queries_are_the_seven_of_krr_for_one_deployment() -> None:
    qs = krr_queries(W)
    assert len(qs) == 7
    assert all(_balanced(q) for q in qs)
    sel = 'namespace="bench-03",pod=~"app-0003-5d9c-aaaaa",container="app"'
    assert qs[0] == ('kube_replicaset_owner{owner_name="app-0003",owner_kind="Deployment",namespace="bench-03"}'
                     "[1209600s]")
    assert qs[1] == ('last_over_time(kube_pod_owner{owner_name=~"app-0003-5d9c",owner_kind="ReplicaSet",'
                     'namespace="bench-03"}[1209600s])')
    assert qs[2] == 'kube_pod_status_phase{phase="Running",pod=~"app-0003-5d9c-aaaaa",namespace="bench-03"} == 1'
    assert qs[3] == (f"quantile_over_time(0.95, max(rate(container_cpu_usage_seconds_total{{{sel}}}[75s])) "
                     "by (container, pod, job)[1209600s:75s])")
    assert qs[4] == (f"count_over_time(max(container_cpu_usage_seconds_total{{{sel}}}) "
                     "by (container, pod, job)[1209600s:75s])")
    assert qs[5].startswith(f"max_over_time(max(container_memory_working_set_bytes{{{sel}}})")
    assert qs[6].startswith(f"count_over_time(max(container_memory_working_set_bytes{{{sel}}})")


def test_krr_pod_regex_escapes_and_joins_every_pod() -> None:
    w = Workload(namespace="n", name="web.v2", replicaset="web.v2-abc", pods=("web.v2-abc-1", "web.v2-abc-0"))
    qs = krr_queries(w, history_s=86400, step_s=60)
    assert 'pod=~"web\\\\.v2-abc-1|web\\\\.v2-abc-0"' in qs[3]  # in the given order, as KRR joins them
    assert 'owner_name=~"web\\\\.v2-abc"' in qs[1]
    assert 'owner_name="web.v2"' in qs[0]  # an equality matcher: not a regex, not escaped
    assert "[86400s:60s]" in qs[3] and "[60s]" in qs[3]


def test_touch_queries_count_every_metric_with_the_sources_matchers() -> None:
    qs = touch_queries(["b", "a"], 8 * 86400)
    assert [q.split("{")[0] for q in qs] == [f"count_over_time({m}" for m in SOURCE_METRICS]
    for q in qs:
        assert q.endswith('{namespace=~"a|b",container!="",container!="POD"}[691200s])')
        assert _balanced(q)


def test_variants_name_each_other_consistently() -> None:
    keys = [v.key for v in bench_report.VARIANTS]
    assert len(keys) == len(set(keys))
    for v in bench_report.VARIANTS:
        assert v.relative_to in (None, *keys) and v.same_as in (None, *keys)
        assert not v.same_requests or v.same_as is not None
    assert {bench_report.HISTORY, bench_report.TOUCH, bench_report.KRR} <= set(keys)
    assert {k for k, _, _ in bench_report.GOALS} <= set(keys)


def test_goal_lines_give_ratio_and_verdict() -> None:
    wall = {"json": 10.0, bench_report.KRR: 40.0, bench_report.TOUCH: 6.0}
    cpu = {"json": 9.0, bench_report.KRR: 70.0, bench_report.TOUCH: 5.0}
    krr, touch = bench_report.goal_lines(wall, cpu)
    assert "≤ 0.2 x the KRR-shaped floor: measured 0.250 x (10.00 s against 40.00 s" in krr
    assert krr.endswith("**not met**.")
    assert "measured 1.667 x (10.00 s against 6.00 s; Prometheus CPU 9.00 s against 5.00 s)" in touch
    assert touch.endswith("**met**.")
