"""Unit tests for updater.policy.analysis and updater.policy.selectors: parsing, templating with hostile values,
namespace confinement (checked with the real PromQL parser), conditions, the failure limit and the error policy."""

from __future__ import annotations

import json
import re
from typing import Any

import promql_parser
import pytest
from hypothesis import given
from hypothesis import strategies as st

from updater.kube.policy_crd import PolicyError, parse_policy
from updater.policy.analysis import (
    Analysis,
    AnalysisError,
    Condition,
    Measurement,
    OnError,
    Operator,
    baseline_of,
    failed,
    judge,
    parse_analyses,
    parse_annotation,
)
from updater.policy.selectors import QueryError, check_query, confine

LATENCY = ('histogram_quantile(0.99, sum by (le) (rate(http_request_duration_seconds_bucket'
           '{namespace={{namespace}}, pod=~{{pods}}}[1m])))')
RAW = {"name": "p99", "query": LATENCY, "condition": {"operator": "<=", "baselineRatio": 1.2}, "interval": "30s",
       "failureLimit": 1, "onError": "Skip"}
# Label values that break naive quoting: quotes, backslashes, newlines, regex metacharacters, a placeholder.
HOSTILE = ['a"}) or up{x="', "back\\slash", "new\nline", "dot.star*", "{{pods}}", "ünï\u2028", "\t"]


def selectors_of(query: str) -> list[promql_parser.VectorSelector]:
    out: list[promql_parser.VectorSelector] = []
    promql_parser.walk(promql_parser.parse(query),
                       pre_visit=lambda n: out.append(n) if isinstance(n, promql_parser.VectorSelector) else None)
    return out


def matchers(sel: promql_parser.VectorSelector) -> list[tuple[str, str]]:
    return [(m.name, m.value) for m in sel.matchers.matchers]


# ------------------------------------------------------------------------------------------------ parsing
def test_parses_every_field() -> None:
    (a,) = parse_analyses([RAW], "spec.analyses", namespaced=False)
    assert a == Analysis(name="p99", query=LATENCY, condition=Condition(operator=Operator.LE, baseline_ratio=1.2),
                         interval_s=30.0, failure_limit=1, on_error=OnError.SKIP, namespaced=False)


def test_defaults_are_one_minute_no_tolerance_and_fail_on_error() -> None:
    (a,) = parse_analyses([{"name": "e", "query": "sum(rate(errors_total[1m]))",
                            "condition": {"operator": "<", "threshold": 0.01}}], "x", namespaced=True)
    assert (a.interval_s, a.failure_limit, a.on_error, a.namespaced) == (60.0, 0, OnError.FAIL, True)


@pytest.mark.parametrize(("change", "field"), [
    ({"query": "sum(rate(x[1m])"}, "query"),
    ({"query": "up{{{nope}}}"}, "query"),  # a placeholder we do not have
    ({"query": ""}, "query"),
    ({"condition": {"operator": "<="}}, "condition"),
    ({"condition": {"operator": "<=", "threshold": 1, "baselineRatio": 2}}, "condition"),
    ({"condition": {"operator": "==", "threshold": 1}}, "condition.operator"),
    ({"condition": {"operator": "<", "baselineRatio": 0}}, "condition.baselineRatio"),
    ({"condition": {"operator": "<", "threshold": float("nan")}}, "condition.threshold"),
    ({"interval": "0s"}, "interval"),
    ({"interval": 30}, "interval"),
    ({"failureLimit": -1}, "failureLimit"),
    ({"failureLimit": True}, "failureLimit"),
    ({"onError": "Pass"}, "onError"),
    ({"name": "P99!"}, "name"),
    ({"extra": 1}, "unknown fields"),
])
def test_bad_analysis_is_refused_naming_the_field(change: dict[str, Any], field: str) -> None:
    with pytest.raises(AnalysisError, match=re.escape(field)):
        parse_analyses([{**RAW, **change}], "spec.analyses", namespaced=False)


def test_names_must_be_distinct() -> None:
    with pytest.raises(AnalysisError, match="distinct"):
        parse_analyses([RAW, RAW], "x", namespaced=False)


def test_resize_policy_carries_its_analyses_and_refuses_an_unparsable_query() -> None:
    policy = parse_policy({"metadata": {"name": "p"}, "spec": {"analyses": [RAW]}})
    assert [a.name for a in policy.analyses] == ["p99"] and not policy.analyses[0].namespaced
    with pytest.raises(PolicyError, match=r"ResizePolicy p: spec.analyses\[0\].query: not a PromQL query"):
        parse_policy({"metadata": {"name": "p"}, "spec": {"analyses": [{**RAW, "query": "rate(x[1m]"}]}})


def test_annotation_is_a_json_list_of_namespaced_analyses() -> None:
    (a,) = parse_annotation(json.dumps([RAW]), "Deployment shop/web")
    assert a.namespaced
    with pytest.raises(AnalysisError, match="Deployment shop/web: not JSON"):
        parse_annotation("[{", "Deployment shop/web")


# --------------------------------------------------------------------------------------------- templating
@pytest.mark.parametrize("value", HOSTILE)
def test_placeholders_become_literals_that_read_back_exactly(value: str) -> None:
    a = Analysis(name="t", query="up{namespace={{namespace}}, workload={{workload}}, pod=~{{pods}}}",
                 condition=Condition(operator=Operator.LT, threshold=1))
    text = a.render(namespace=value, workload=value, pods=[value, "web-1"])
    (sel,) = selectors_of(text)
    got = dict(matchers(sel))
    assert got["namespace"] == value and got["workload"] == value
    assert re.fullmatch(got["pod"], value) and re.fullmatch(got["pod"], "web-1")
    assert not re.fullmatch(got["pod"], "web-2")


@given(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=20))
def test_any_namespace_round_trips_through_the_real_parser(value: str) -> None:
    (sel,) = selectors_of(confine("up", value))
    assert matchers(sel) == [("namespace", value)]


# ------------------------------------------------------------------------------------------- confinement
@pytest.mark.parametrize("query", [
    "up",
    'sum by (le) (rate(http_bucket{job="a", namespace="other"}[1m]))',
    'histogram_quantile(0.9, sum(rate(x_bucket{pod=~"a|b"}[5m])) by (le)) / on(le) group_left sum(up)',
    'count({__name__=~"x.*"} offset 5m) + rate(foo[5m:1m]) > bool 1',
    'label_replace(up, "dst", "$1", "src", "(.*)") unless on() vector(1)',
    "max_over_time(rate(a[1m])[10m:]) atan2 b @ start()",
    "sum without (instance) (a) # a comment {b}\n + topk(3, c{}) + time() + Inf",
])
def test_every_selector_is_confined_to_the_namespace(query: str) -> None:
    confined = confine(query, 'sh"op')
    sels = selectors_of(confined)
    assert len(sels) == len(selectors_of(query)) > 0
    for sel in sels:
        assert ("namespace", 'sh"op') in matchers(sel)


def test_another_namespaces_matcher_stays_and_cannot_widen_the_query() -> None:
    (sel,) = selectors_of(confine('up{namespace=~".+"}', "shop"))
    assert matchers(sel) == [("namespace", "shop"), ("namespace", ".+")]  # both must hold: only shop's series


def test_or_between_matcher_groups_is_refused_when_confined() -> None:
    with pytest.raises(QueryError, match="'or'"):
        confine('{job="a" or job="b"}', "shop")


def test_a_hostile_namespace_cannot_break_out_of_its_literal() -> None:
    a = Analysis(name="t", query="sum(rate(errors_total[1m]))", condition=Condition(operator=Operator.LT,
                                                                                     threshold=1), namespaced=True)
    text = a.render(namespace='x"} or vector(1) or up{a="', workload="w", pods=["p"])
    assert [s.name for s in selectors_of(text)] == ["errors_total"]  # no injected selector


def test_check_query_gives_the_parsers_message() -> None:
    with pytest.raises(QueryError, match=r"not a PromQL query: .*parenthesis"):
        check_query("sum(rate(x[1m])")


# --------------------------------------------------------------------------------- conditions and counting
def analysis(**kw: Any) -> Analysis:
    base: dict[str, Any] = {"name": "a", "query": "up", "condition": Condition(operator=Operator.LE, threshold=0.5)}
    return Analysis(**{**base, **kw})


def test_fixed_threshold_judges_the_worst_series() -> None:
    v = judge(analysis(), Measurement(values=(0.2, 0.7)), None)  # <= judges the largest: 0.7 > 0.5
    assert (v.passed, v.value, v.bound) == (False, 0.7, 0.5)
    assert "value 0.7 breaks <= 0.5" in v.reason
    v = judge(analysis(condition=Condition(operator=Operator.GE, threshold=0.5)), Measurement(values=(0.6, 0.9)), None)
    assert (v.passed, v.value) == (True, 0.6)  # >= judges the smallest


def test_ratio_to_baseline() -> None:
    a = analysis(condition=Condition(operator=Operator.LE, baseline_ratio=1.2))
    base = baseline_of(a, Measurement(values=(0.100, 0.080)))
    assert base == 0.100
    assert judge(a, Measurement(values=(0.119,)), base).passed is True  # 0.119 <= 1.2 * 0.100 = 0.12
    v = judge(a, Measurement(values=(0.121,)), base)
    assert v.passed is False and v.bound == pytest.approx(0.12)


def test_strict_operators_at_the_bound() -> None:
    assert judge(analysis(condition=Condition(operator=Operator.LT, threshold=1)), Measurement(values=(1.0,)),
                 None).passed is False
    assert judge(analysis(condition=Condition(operator=Operator.GT, threshold=1)), Measurement(values=(1.0,)),
                 None).passed is False


@pytest.mark.parametrize("m", [Measurement(error="prometheus answered 400: bad_data"), Measurement(),
                               Measurement(values=(float("nan"),))])
def test_error_or_no_data_follows_the_policy_never_a_pass(m: Measurement) -> None:
    fail = judge(analysis(on_error=OnError.FAIL), m, None)
    skip = judge(analysis(on_error=OnError.SKIP), m, None)
    assert fail.passed is False and "onError Fail" in fail.reason
    assert skip.passed is None and "onError Skip" in skip.reason


def test_ratio_without_a_baseline_follows_the_policy() -> None:
    a = analysis(condition=Condition(operator=Operator.LE, baseline_ratio=1.2))
    assert baseline_of(a, Measurement()) is None
    v = judge(a, Measurement(values=(0.1,)), None)
    assert v.passed is False and "no baseline" in v.reason


def test_failure_limit_is_the_failures_tolerated() -> None:
    a = analysis(failure_limit=2)
    assert [failed(a, n) for n in range(4)] == [False, False, False, True]
    assert failed(analysis(), 1)  # the default limit 0: the first failure fails
