"""The recommender's Kubernetes adapters: VPA objects, workloads behind them, checkpoints, errors.

Only this package talks to the API server; it turns API objects into the core's small value types.
"""
