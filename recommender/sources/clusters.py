"""Many clusters in one pass over a shared store: the cluster-qualified namespace the source keys them by.

Owns ``qualify`` and ``split``, the one spelling of "namespace ``ns`` of the cluster whose cluster label is
``c``" inside a multi-cluster pass (``PrometheusConfig.many_clusters``): ``c/ns``. A Kubernetes namespace
is a DNS-1123 label and never holds a ``/``, so the last ``/`` separates the two whatever the cluster value
holds. Such a pass asks for qualified namespaces; its queries match every cluster value at once
(``cluster=~"a|b"``) and group by the cluster label as well, and every answer's namespace label is
qualified on decoding (``qualified_labels``), so the pass's keys, ``PodKey`` and ``ContainerKey``, keep two
clusters' namespaces of the same name apart without a field of their own. Callers outside the source split
the keys back (``split``) as soon as the batches are in. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping

SEPARATOR = "/"


def qualify(cluster: str, namespace: str) -> str:
    """``namespace`` of ``cluster`` as a multi-cluster pass names it; ValueError for a namespace with a ``/``."""
    if not namespace or SEPARATOR in namespace:
        raise ValueError(f"not a namespace name: {namespace[:64]!r}")
    return f"{cluster}{SEPARATOR}{namespace}"


def split(name: str) -> tuple[str, str]:
    """(cluster, namespace) of a qualified namespace; ValueError when ``name`` is not one."""
    cluster, sep, namespace = name.rpartition(SEPARATOR)
    if not sep or not namespace:
        raise ValueError(f"not a cluster-qualified namespace: {name[:64]!r}")
    return cluster, namespace


def qualified_labels(labels: Mapping[str, str], cluster_label: str) -> dict[str, str]:
    """``labels`` with its namespace qualified by its ``cluster_label`` value (empty when it has none)."""
    out = dict(labels)
    namespace = out.get("namespace", "")
    out["namespace"] = f"{out.get(cluster_label, '')}{SEPARATOR}{namespace}"
    return out
