"""A node's pool: the one ordered list of node-pool label keys and the one reader of them.

Owns which label says which pool a node is in, for the report's cost review, the updater's snapshot (its
canary batches are per pool) and the node simulator's labels, so that all of them put a node in the same
pool. A key named by the user (the policy's or the report's pool label) is the only one read; otherwise the
first of ``POOL_LABEL_KEYS`` the node has with a non-empty value wins, and a node with none is in the pool
"" (all such nodes form one pool). Pure: no client.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping


class PoolLabel(enum.StrEnum):
    """The node-pool label keys podtailor knows, in the order they are tried."""

    KARPENTER = "karpenter.sh/nodepool"
    """Karpenter (any cloud); first, because a Karpenter node may also carry its cloud's labels."""
    GKE = "cloud.google.com/gke-nodepool"
    """Google Kubernetes Engine node pools."""
    EKS = "eks.amazonaws.com/nodegroup"
    """Amazon EKS managed node groups."""
    EKSCTL = "alpha.eksctl.io/nodegroup-name"
    """EKS node groups made by eksctl (self-managed ones carry only this)."""
    AKS = "kubernetes.azure.com/agentpool"
    """Azure Kubernetes Service node pools."""
    AKS_LEGACY = "agentpool"
    """The same on older AKS clusters."""
    DOKS = "doks.digitalocean.com/node-pool"
    """DigitalOcean Kubernetes node pools."""
    PODTAILOR = "podtailor.io/node-pool"
    """podtailor's own label, for clusters labelled by hand (and the node simulator's default)."""
    INSTANCE_TYPE = "node.kubernetes.io/instance-type"
    """The well-known instance-type label: the last resort, nodes of one type as one pool."""


POOL_LABEL_KEYS: tuple[str, ...] = tuple(PoolLabel)
"""Tried in this order when no pool label is named."""


def node_pool(labels: Mapping[str, str], key: str | None = None) -> str:
    """The pool of a node with these labels: the value of ``key`` when one is named ("" when the node lacks
    it), else the value of the first of POOL_LABEL_KEYS the node has, else ""."""
    if key:
        return labels.get(key, "")
    return next((labels[k] for k in POOL_LABEL_KEYS if labels.get(k)), "")
