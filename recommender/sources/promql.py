"""PromQL text: selectors and every query the Prometheus source sends.

Owns building the recommender's queries. Every label value reaches PromQL through the base's escaping
(``podtailor.promql``: ``quote``, ``regex_literal``; re-exported here for the source's modules), the same
functions the updater's analysis templates use, so there is one escaping, not two. Label *names* are never
escaped but validated. Pure: no I/O, no clock.

Every query is grouped ``by (namespace, pod, container)`` over one namespace batch, so the number of
requests per pass depends on the batch count, never on the number of workloads. A scope of many clusters
(``Scope.split_by``, its namespaces cluster-qualified: ``clusters``) matches all their cluster values at
once and groups by the cluster label too, so the answer is split by cluster and the request count does
not grow with the number of clusters.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from podtailor.promql import label_name as label_name
from podtailor.promql import quote as quote
from podtailor.promql import regex_escape as regex_escape
from podtailor.promql import regex_literal as regex_literal
from recommender.sources import clusters
from recommender.sources.remote_read import EQ, NEQ, RE, Matcher

BY = "namespace, pod, container"
"""The grouping of every usage query: one series per container of each pod."""


def match_any(label: str, values: Sequence[str]) -> str:
    """``label="v"`` for one value, ``label=~"v1|v2"`` (exact alternatives) for several."""
    if len(values) == 1:
        return f"{label_name(label)}={quote(values[0])}"
    return f"{label_name(label)}=~{regex_literal(sorted(set(values)))}"


def duration(seconds: float) -> str:
    """A PromQL duration for a whole number of milliseconds: ``300s`` or ``59999ms``."""
    ms = round(seconds * 1000)
    if ms <= 0:
        raise ValueError("a duration must be positive")
    return f"{ms // 1000}s" if ms % 1000 == 0 else f"{ms}ms"


@dataclass(frozen=True, slots=True, kw_only=True)
class Scope:
    """What one query covers: a namespace batch, optionally a page of pods, optionally one cluster."""

    namespaces: tuple[str, ...]
    pods: tuple[str, ...] = ()
    """Empty: every pod of the namespaces. Otherwise exactly these pods (a page of a big namespace)."""
    cluster: tuple[str, str] | None = None
    """(label name, value) added to every selector for shared backends (Thanos, Mimir, VictoriaMetrics)."""
    split_by: str | None = None
    """The cluster label of a scope over many clusters: ``namespaces`` are then cluster-qualified
    (``clusters.qualify``), the selectors match every cluster value and namespace among them, and the
    queries group by this label too. Exclusive with ``cluster``."""

    def __post_init__(self) -> None:
        if not self.namespaces:
            raise ValueError("a scope needs at least one namespace")
        if self.cluster is not None:
            label_name(self.cluster[0])
        if self.split_by is not None:
            if self.cluster is not None:
                raise ValueError("a scope has one cluster or is split by the cluster label, not both")
            label_name(self.split_by)
            for name in self.namespaces:
                clusters.split(name)

    def parts(self) -> tuple[list[str], list[str]]:
        """(cluster values, namespaces) its selectors match, each sorted once: ([], namespaces) unless split."""
        if self.split_by is None:
            return [], sorted(set(self.namespaces))
        pairs = [clusters.split(n) for n in self.namespaces]
        return sorted({c for c, _ in pairs}), sorted({ns for _, ns in pairs})

    def by(self, labels: str = BY) -> str:
        """The grouping of a query over the scope: ``labels``, and the cluster label when split by it."""
        return labels if self.split_by is None else f"{labels}, {self.split_by}"

    def matchers(self, *, pods: bool = True, containers: bool = True) -> list[str]:
        cluster_values, namespaces = self.parts()
        out = [match_any("namespace", namespaces)]
        if pods and self.pods:
            out.append(match_any("pod", self.pods))
        if containers:
            out += ['container!=""', 'container!="POD"']
        if self.cluster is not None:
            out.append(f"{label_name(self.cluster[0])}={quote(self.cluster[1])}")
        if self.split_by is not None:
            out.append(match_any(self.split_by, cluster_values))
        return out


def selector(metric: str, scope: Scope, *extra: str, pods: bool = True, containers: bool = True) -> str:
    """``metric{...}`` with the scope's matchers and then ``extra`` (already-built matchers)."""
    return metric + "{" + ",".join([*scope.matchers(pods=pods, containers=containers), *extra]) + "}"


def cpu_query(scope: Scope, window_s: float) -> str:
    """Average cores over the last ``window_s`` at each step; max across duplicate scrapes of a container."""
    sel = selector("container_cpu_usage_seconds_total", scope)
    return f"max by ({scope.by()}) (rate({sel}[{duration(window_s)}]))"


def memory_peak_query(scope: Scope, step_s: float) -> str:
    """Peak working set per step. The window is one millisecond shorter than the step because Prometheus
    2.x range selectors are closed at both ends: this way every raw sample belongs to exactly one step."""
    sel = selector("container_memory_working_set_bytes", scope)
    return f"max by ({scope.by()}) (max_over_time({sel}[{duration(step_s - 0.001)}]))"


def throttle_query(scope: Scope, window_s: float, *, sparse: bool = False) -> str:
    """Fraction of CFS periods throttled; steps without any period (idle or no limit) yield no sample, and
    with ``sparse`` neither do steps without throttling (a zero and no sample mean the same to every reader:
    ``throttle_corrected`` leaves both unchanged, the report counts both as unthrottled)."""
    w = duration(window_s)
    throttled = selector("container_cpu_cfs_throttled_periods_total", scope)
    periods = selector("container_cpu_cfs_periods_total", scope)
    by = scope.by()
    ratio = f"max by ({by}) (rate({throttled}[{w}])) / (max by ({by}) (rate({periods}[{w}])) > 0)"
    return f"({ratio}) > 0" if sparse else ratio


def oom_events_query(scope: Scope) -> str:
    """The cAdvisor OOM-event counter itself; increases are counted client-side between steps."""
    return f"max by ({scope.by()}) ({selector('container_oom_events_total', scope)})"


def oom_seen_query(scope: Scope, range_s: float) -> str:
    """The containers whose OOM-event counter is above zero somewhere in the last ``range_s`` (an instant
    query): only they can show an increase, so only they need ``oom_events_query`` at every step."""
    sel = selector("container_oom_events_total", scope)
    return f"max by ({scope.by()}) (max_over_time({sel}[{duration(range_s)}])) > 0"


def memory_resource_query(scope: Scope, kind: str) -> str:
    """kube-state-metrics memory ``requests`` or ``limits`` of each container, in bytes: regular containers and
    sidecars from ``kube_pod_container_resource_*``, plain init containers from
    ``kube_pod_init_container_resource_*`` (kube-state-metrics' pod metrics keep them apart; same labels)."""
    if kind not in ("requests", "limits"):
        raise ValueError("kind must be 'requests' or 'limits'")
    sel = selector(f"kube_pod_container_resource_{kind}", scope, 'resource="memory"')
    init = selector(f"kube_pod_init_container_resource_{kind}", scope, 'resource="memory"')
    return f"max by ({scope.by()}) ({sel} or {init})"


def pod_owner_query(scope: Scope, range_s: float) -> str:
    """Controller owner of every pod seen in the range (pods that are gone still map)."""
    sel = selector("kube_pod_owner", scope, 'owner_is_controller!="false"', containers=False)
    by = scope.by("namespace, pod, owner_kind, owner_name")
    return f"max by ({by}) (last_over_time({sel}[{duration(range_s)}]))"


def replicaset_owner_query(scope: Scope, range_s: float) -> str:
    """Owner (usually a Deployment) of every ReplicaSet seen in the range."""
    sel = selector("kube_replicaset_owner", scope, pods=False, containers=False)
    return (f"max by ({scope.by('namespace, replicaset, owner_kind, owner_name')}) "
            f"(last_over_time({sel}[{duration(range_s)}]))")


def job_owner_query(scope: Scope, range_s: float) -> str:
    """Owner (usually a CronJob) of every Job seen in the range."""
    sel = selector("kube_job_owner", scope, pods=False, containers=False)
    by = scope.by("namespace, job_name, owner_kind, owner_name")
    return f"max by ({by}) (last_over_time({sel}[{duration(range_s)}]))"


def series_matchers(scope: Scope) -> list[str]:
    """``match[]`` selectors for the series endpoint, which plans the batches (an index-only lookup)."""
    return [selector("container_cpu_usage_seconds_total", scope),
            selector("container_memory_working_set_bytes", scope)]


def remote_matchers(metric: str, scope: Scope) -> list[Matcher]:
    """The matchers of ``selector(metric, scope)`` for a remote read: the same labels and values, with only the
    regex layer of escaping (a remote-read matcher's value is not a PromQL string literal)."""

    def any_of(label: str, values: Sequence[str]) -> Matcher:
        if len(values) == 1:
            return Matcher(kind=EQ, name=label_name(label), value=values[0])
        return Matcher(kind=RE, name=label_name(label), value="|".join(regex_escape(v) for v in sorted(set(values))))

    cluster_values, namespaces = scope.parts()
    out = [Matcher(kind=EQ, name="__name__", value=metric), any_of("namespace", namespaces)]
    if scope.pods:
        out.append(any_of("pod", scope.pods))
    out += [Matcher(kind=NEQ, name="container", value=""), Matcher(kind=NEQ, name="container", value="POD")]
    if scope.cluster is not None:
        out.append(Matcher(kind=EQ, name=label_name(scope.cluster[0]), value=scope.cluster[1]))
    if scope.split_by is not None:
        out.append(any_of(scope.split_by, cluster_values))
    return out
