"""The recommender's Kubernetes adapters: VPA objects and their status, workloads behind
them, checkpoints, events. The error tree they raise is the base's (``podtailor.kube.errors``).

Only this package talks to the API server; it turns API objects into the core's small value types.
"""
