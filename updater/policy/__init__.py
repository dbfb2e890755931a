"""The updater's pure core: what to resize, how, in which batch. Values in, decisions out.

Nothing here imports a Kubernetes or HTTP client, a logger, or reads the clock.
"""
