"""The updater's Kubernetes adapter: reads the cluster into the policy core's values.

``snapshot.ClusterReader`` lists pods, nodes, workloads, VPAs, HPAs, LimitRanges and ResizePolicies
once per pass and returns a ``Snapshot``; ``policy_crd`` turns ResizePolicy objects into
``RolloutPolicy`` values and picks the one for a namespace. Nothing outside this package sees a raw
API dict.
"""
