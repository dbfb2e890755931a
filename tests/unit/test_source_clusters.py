"""Unit tests of a Prometheus pass over many clusters: qualified namespaces, split scopes and their queries."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from recommender.sources import clusters, promql
from recommender.sources.batching import plan_scopes
from recommender.sources.config import PrometheusConfig
from recommender.sources.forms import Forms
from recommender.sources.promql import Scope
from recommender.sources.remote_read import EQ, NEQ, RE, Matcher

SPLIT = Scope(namespaces=("eu/shop", "us/shop", "us/blog"), split_by="cluster")


@given(st.text(max_size=20), st.from_regex(r"[a-z0-9]([-a-z0-9]{0,20}[a-z0-9])?", fullmatch=True))
def test_a_qualified_namespace_splits_back_whatever_the_cluster_value(cluster: str, namespace: str) -> None:
    assert clusters.split(clusters.qualify(cluster, namespace)) == (cluster, namespace)


def test_names_that_are_not_namespaces_are_refused() -> None:
    for bad in ("", "a/b"):
        with pytest.raises(ValueError, match="not a namespace name"):
            clusters.qualify("eu", bad)
    for bad in ("shop", "eu/"):
        with pytest.raises(ValueError, match="not a cluster-qualified namespace"):
            clusters.split(bad)
    with pytest.raises(ValueError, match="not a cluster-qualified namespace"):
        Scope(namespaces=("shop",), split_by="cluster")
    with pytest.raises(ValueError, match="not both"):
        Scope(namespaces=("eu/shop",), split_by="cluster", cluster=("cluster", "eu"))
    with pytest.raises(ValueError, match="invalid label name"):
        Scope(namespaces=("eu/shop",), split_by="bad label")


def test_a_split_scope_matches_every_cluster_at_once_and_groups_by_the_cluster_label() -> None:
    sel = 'namespace=~"blog|shop",container!="",container!="POD",cluster=~"eu|us"'
    assert promql.cpu_query(SPLIT, 120) == (
        f"max by (namespace, pod, container, cluster) (rate(container_cpu_usage_seconds_total{{{sel}}}[120s]))")
    assert promql.job_owner_query(SPLIT, 3600) == (
        'max by (namespace, job_name, owner_kind, owner_name, cluster) '
        '(last_over_time(kube_job_owner{namespace=~"blog|shop",cluster=~"eu|us"}[3600s]))')
    # One cluster's split scope: plain equality matchers, still grouped by the label.
    one = Scope(namespaces=("eu/shop",), split_by="cluster")
    assert promql.oom_events_query(one) == ('max by (namespace, pod, container, cluster) (container_oom_events_total'
                                            '{namespace="shop",container!="",container!="POD",cluster="eu"})')


def test_a_split_scope_escapes_cluster_values_in_both_layers() -> None:
    scope = Scope(namespaces=('a.b|"c/shop', "d/shop"), split_by="cluster")
    assert scope.matchers()[-1] == 'cluster=~"a\\\\.b\\\\|\\"c|d"'
    assert promql.remote_matchers("m", scope)[-1] == Matcher(kind=RE, name="cluster", value='a\\.b\\|"c|d')


def test_remote_read_matchers_of_a_split_scope() -> None:
    assert promql.remote_matchers("m", SPLIT) == [
        Matcher(kind=EQ, name="__name__", value="m"), Matcher(kind=RE, name="namespace", value="blog|shop"),
        Matcher(kind=NEQ, name="container", value=""), Matcher(kind=NEQ, name="container", value="POD"),
        Matcher(kind=RE, name="cluster", value="eu|us")]


def test_scopes_of_a_split_pass_span_clusters_and_page_one_cluster_namespace() -> None:
    counts = {"eu/shop": {"p1": 1, "p2": 1}, "us/shop": {"p1": 2}, "us/blog": {"q": 1, "r": 1, "s": 1}}
    scopes = plan_scopes(counts, 3, split_by="cluster")
    # Sorted: eu/shop (2) + us/blog (3) > 3, so eu/shop alone; us/blog (3) fills one; us/shop (2) the last.
    assert [s.namespaces for s in scopes] == [("eu/shop",), ("us/blog",), ("us/shop",)]
    assert {s.split_by for s in scopes} == {"cluster"}
    paged = plan_scopes({"eu/big": {"a": 2, "b": 2}}, 3, split_by="cluster")
    assert [(s.namespaces, s.pods) for s in paged] == [(("eu/big",), ("a",)), (("eu/big",), ("b",))]
    assert paged[0].matchers(containers=False) == ['namespace="big"', 'pod="a"', 'cluster="eu"']


def test_a_config_of_many_clusters_needs_the_label_and_no_one_value() -> None:
    url = "http://127.0.0.1:9090"
    with pytest.raises(ValueError, match="many_clusters needs cluster_label"):
        PrometheusConfig(url=url, many_clusters=True)
    with pytest.raises(ValueError, match="many_clusters needs cluster_label"):
        PrometheusConfig(url=url, many_clusters=True, cluster_label="cluster", cluster_value="eu")
    config = PrometheusConfig(url=url, many_clusters=True, cluster_label="cluster")
    assert config.split_by == "cluster" and config.cluster is None
    assert config.scope(("eu/shop",)).split_by == "cluster"
    assert PrometheusConfig(url=url, cluster_label="cluster", cluster_value="eu").scope(("shop",)).cluster == (
        "cluster", "eu")


def test_decoded_namespaces_are_qualified_and_other_pairs_dropped() -> None:
    forms = Forms(PrometheusConfig(url="http://127.0.0.1:9090", many_clusters=True, cluster_label="cluster"),
                  transport=None)  # type: ignore[arg-type]  # the label work touches no transport
    data: list[dict[object, object]] = [
        {"namespace": "shop", "pod": "p", "container": "c", "cluster": "eu"},
        {"namespace": "blog", "pod": "p", "container": "c", "cluster": "eu"},  # eu/blog was not asked for
        {"namespace": "blog", "pod": "p", "container": "c", "cluster": "us"}]
    assert [d["namespace"] for d in forms.series_labels(data, ("eu/shop", "us/blog"))] == ["eu/shop", "us/blog"]
    keys = [("eu/shop", "p", "c"), ("eu/blog", "p", "c"), ("us/blog", "p", "c")]
    assert forms.inside(Scope(namespaces=("eu/shop", "us/blog"), split_by="cluster"), keys) == [True, False, True]
    page = Scope(namespaces=("eu/shop",), pods=("q",), split_by="cluster")
    assert forms.inside(page, [("eu/shop", "p", "c"), ("eu/shop", "q", "c")]) == [False, True]
