"""Kubernetes client pieces both halves use: errors, request pacing, listing, events, field parsing."""
