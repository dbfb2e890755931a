"""Adapters that read usage history (Prometheus and compatible servers) into the core's value types.

The ``UsageSource`` port they implement is declared by its user, ``recommender.engine``. Layout: ``errors``
(temporary/permanent error tree), ``promql`` (escaping and every query text), ``grid`` (step alignment,
chunking), ``batching`` (namespace batches and pod pages), ``owners`` (pod -> workload), ``samples`` (JSON ->
arrays, dropping, pooling), ``config``, ``transport`` (HTTP POST, auth, retries, metrics) and ``prometheus``
(``PrometheusSource``, one pass).
"""
