"""Unit tests for the report bench's floors: query texts and escaping."""

from __future__ import annotations

import re

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
