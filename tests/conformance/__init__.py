"""Conformance: the node simulator held to the real kubelet v1.37.2 (hollow nodes) on the same scenarios."""
