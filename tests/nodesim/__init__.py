"""Pure core of the node simulator, a kubelet 1.37 stand-in for integration tests.

The modules here own quantities, usage models, in-place-resize admission, and metric rendering. None of
them touches the network, the Kubernetes API or the wall clock: time is always passed in. The live loop
that writes pod status and serves /metrics lives elsewhere and only calls into these modules.
"""
