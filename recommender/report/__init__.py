"""Dry-run recommendation reports and cost reviews (``podtailor-recommender report``).

Read-only: workloads come from the API server (``discovery``, the one adapter that talks to Kubernetes),
usage history from Prometheus through the recommender's own batched source, and recommendations from the
same strategies the recommender serves. The pure core (``build``, ``pricing``, ``disruption``) turns them
into a ``Report`` value; ``document`` (JSON/YAML, schema in docs/report-schema.json), ``render``
(table, CSV, Markdown) and ``html`` print it. Nothing here writes to the cluster.
"""
