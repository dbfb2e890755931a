"""Soak run of recommender and updater together on the local cluster: ``python -m tests.soak --minutes 5``."""
