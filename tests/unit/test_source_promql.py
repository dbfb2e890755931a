"""Unit tests for recommender.sources.promql: escaping round trips and the exact query texts."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from recommender.sources import promql
from recommender.sources.promql import Scope

_SIMPLE = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v", "\\": "\\", '"': '"',
           "'": "'"}
_HEX_DIGITS = {"x": 2, "u": 4, "U": 8}


def unquote(literal: str) -> str:
    """A PromQL double-quoted string literal read the way Prometheus' lexer and ``strutil.Unquote`` do:
    the literal ends at the first unescaped quote, a raw newline or U+FFFD (invalid UTF-8 to the lexer)
    is an error, escapes are Go's (simple, octal, \\x, \\u, \\U; surrogates are invalid)."""
    if len(literal) < 2 or literal[0] != '"' or literal[-1] != '"':
        raise ValueError("not a double-quoted literal")
    body, out, i = literal[1:-1], [], 0
    while i < len(body):
        ch = body[i]
        if ch in ('"', "\n", "\ufffd"):
            raise ValueError(f"raw {ch!r} inside the literal")
        if ch != "\\":
            out.append(ch)
            i += 1
            continue
        esc = body[i + 1]
        if esc in _SIMPLE:
            out.append(_SIMPLE[esc])
            i += 2
        elif esc in _HEX_DIGITS:
            digits = body[i + 2:i + 2 + _HEX_DIGITS[esc]]
            if len(digits) != _HEX_DIGITS[esc] or not all(c in "0123456789abcdefABCDEF" for c in digits):
                raise ValueError("bad hex escape")
            code = int(digits, 16)
            if 0xD800 <= code <= 0xDFFF or code > 0x10FFFF or (esc == "x" and code > 0x7F):
                raise ValueError("escape is not a valid rune")
            out.append(chr(code))
            i += 2 + _HEX_DIGITS[esc]
        else:
            raise ValueError(f"unknown escape \\{esc}")
    return "".join(out)


@given(st.text())
def test_quote_round_trips_any_string(s: str) -> None:
    assert unquote(promql.quote(s)) == s


@given(st.text())
def test_regex_escape_matches_exactly_the_string(s: str) -> None:
    assert re.fullmatch(promql.regex_escape(s), s) is not None


@given(st.text(), st.text())
def test_regex_escape_matches_nothing_else(s: str, other: str) -> None:
    matched = re.fullmatch(promql.regex_escape(s), other) is not None
    assert matched == (other == s)


@given(st.lists(st.text(), min_size=1, max_size=4), st.text())
def test_regex_literal_two_layers_match_exactly_the_values(values: list[str], probe: str) -> None:
    pattern = unquote(promql.regex_literal(values))  # string layer off: what RE2 receives
    for v in values:
        assert re.fullmatch(pattern, v) is not None
    assert (re.fullmatch(pattern, probe) is not None) == (probe in values)


def test_escapes_of_special_characters() -> None:
    assert promql.quote('a"b\\c\nd\te\x00\ufffd\u2028') == '"a\\"b\\\\c\\nd\\te\\u0000\\ufffd\\u2028"'
    assert promql.regex_escape("a.b*c(d)|e[f]{g}^h$i+j?k\\l") == (
        "a\\.b\\*c\\(d\\)\\|e\\[f\\]\\{g\\}\\^h\\$i\\+j\\?k\\\\l")
    with pytest.raises(ValueError, match="surrogate"):
        promql.quote("\ud800")


HOSTILE = 'a"}or{__name__=~".+'


def test_hostile_namespace_stays_one_literal() -> None:
    eq = promql.match_any("namespace", [HOSTILE])
    assert eq == 'namespace="a\\"}or{__name__=~\\".+"'
    assert unquote(eq.removeprefix("namespace=")) == HOSTILE
    many = promql.match_any("namespace", [HOSTILE, "b"])
    # Regex layer: "}", "{", ".", "+" escaped; string layer: each backslash doubled, quotes escaped.
    assert many == 'namespace=~"a\\"\\\\}or\\\\{__name__=~\\"\\\\.\\\\+|b"'
    assert re.fullmatch(unquote(many.removeprefix("namespace=~")), HOSTILE) is not None
    assert re.fullmatch(unquote(many.removeprefix("namespace=~")), "a") is None


def test_label_names_are_validated_not_escaped() -> None:
    assert promql.label_name("cluster_id") == "cluster_id"
    for bad in ("", "1x", 'a"}', "a-b"):
        with pytest.raises(ValueError):
            promql.label_name(bad)
    with pytest.raises(ValueError):
        Scope(namespaces=("x",), cluster=("bad label", "v"))


def test_durations() -> None:
    assert promql.duration(300) == "300s"
    assert promql.duration(59.999) == "59999ms"
    assert promql.duration(0.5) == "500ms"


ONE = Scope(namespaces=("shop",))
TWO = Scope(namespaces=("shop", "blog"), cluster=("cluster", "eu-1"))
SEL = 'namespace="shop",container!="",container!="POD"'
SEL2 = 'namespace=~"blog|shop",container!="",container!="POD",cluster="eu-1"'
BY = "max by (namespace, pod, container)"


def test_usage_query_texts() -> None:
    assert promql.cpu_query(ONE, 120) == f"{BY} (rate(container_cpu_usage_seconds_total{{{SEL}}}[120s]))"
    assert promql.memory_peak_query(TWO, 60) == (
        f"{BY} (max_over_time(container_memory_working_set_bytes{{{SEL2}}}[59999ms]))")
    assert promql.throttle_query(ONE, 120) == (
        f"{BY} (rate(container_cpu_cfs_throttled_periods_total{{{SEL}}}[120s])) / "
        f"({BY} (rate(container_cpu_cfs_periods_total{{{SEL}}}[120s])) > 0)")
    assert promql.oom_events_query(ONE) == f"{BY} (container_oom_events_total{{{SEL}}})"
    assert promql.memory_resource_query(ONE, "limits") == (
        f'{BY} (kube_pod_container_resource_limits{{{SEL},resource="memory"}} or '
        f'kube_pod_init_container_resource_limits{{{SEL},resource="memory"}})')


def test_owner_query_texts() -> None:
    assert promql.pod_owner_query(TWO, 86400) == (
        'max by (namespace, pod, owner_kind, owner_name) (last_over_time(kube_pod_owner{namespace=~"blog|shop",'
        'cluster="eu-1",owner_is_controller!="false"}[86400s]))')
    assert promql.replicaset_owner_query(ONE, 3600) == (
        'max by (namespace, replicaset, owner_kind, owner_name) '
        '(last_over_time(kube_replicaset_owner{namespace="shop"}[3600s]))')
    assert promql.job_owner_query(ONE, 3600) == (
        'max by (namespace, job_name, owner_kind, owner_name) '
        '(last_over_time(kube_job_owner{namespace="shop"}[3600s]))')


def test_pod_page_selector() -> None:
    page = Scope(namespaces=("big",), pods=("web-1", "web-2"))
    assert promql.selector("m", page) == 'm{namespace="big",pod=~"web-1|web-2",container!="",container!="POD"}'
    # Owner queries of a ReplicaSet or Job cannot filter by pod: that label is not on those series.
    assert "pod=~" not in promql.replicaset_owner_query(page, 60)
