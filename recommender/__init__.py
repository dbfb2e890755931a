"""podtailor's recommender: Prometheus usage history in, per-container CPU and memory targets out.

It writes targets into VerticalPodAutoscaler status, and prints dry-run reports and cost reviews.
"""

__version__ = "0.1.0"
