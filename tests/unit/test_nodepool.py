"""The one reader of node-pool labels: the named key alone, else the first known key, else ""."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from podtailor.nodepool import POOL_LABEL_KEYS, PoolLabel, node_pool
from recommender.report.objects import node_info
from updater.kube.objects import convert_node


def test_pool_of_node_labels() -> None:
    labels = {"karpenter.sh/nodepool": "spot", "team": "x"}
    assert node_pool(labels) == "spot"
    assert node_pool(labels, "team") == "x"
    assert node_pool(labels, "absent") == ""  # a named key is the only one read
    assert node_pool({"cloud.google.com/gke-nodepool": "default-pool"}) == "default-pool"
    assert node_pool({}) == ""


def test_the_order_is_karpenter_first_and_the_instance_type_last() -> None:
    assert POOL_LABEL_KEYS[0] == "karpenter.sh/nodepool"
    assert POOL_LABEL_KEYS[-1] == "node.kubernetes.io/instance-type"
    assert len(set(POOL_LABEL_KEYS)) == len(POOL_LABEL_KEYS) == 9
    both = {PoolLabel.EKS: "managed", PoolLabel.KARPENTER: "spot", PoolLabel.INSTANCE_TYPE: "m5.large"}
    assert node_pool(both) == "spot"
    assert node_pool({PoolLabel.INSTANCE_TYPE: "m5.large", PoolLabel.DOKS: "pool-1"}) == "pool-1"
    assert node_pool({PoolLabel.INSTANCE_TYPE: "m5.large"}) == "m5.large"


def test_an_empty_value_does_not_name_a_pool() -> None:
    assert node_pool({PoolLabel.KARPENTER: "", PoolLabel.AKS_LEGACY: "agents"}) == "agents"


@given(st.dictionaries(st.sampled_from([*POOL_LABEL_KEYS, "team", "zone"]), st.text(max_size=8), max_size=6),
       st.sampled_from([None, "team"]))
def test_the_report_and_the_updater_put_a_node_in_the_same_pool(labels: dict[str, str], key: str | None) -> None:
    node = {"metadata": {"name": "n1", "labels": labels}, "status": {"allocatable": {"cpu": "4", "memory": "8Gi"}}}
    expected = node_pool(labels, key)
    assert node_info(node, key).pool == expected
    assert convert_node(node, key).pool == expected
