"""The base both halves stand on: value types and quantities, Kubernetes client pieces, the process runtime.

Layout: ``units`` (one quantity parser and formatter) and ``resources`` (CPU and memory amounts and their
quantity maps); ``numeric`` (the number checks every parser shares: an int, not a bool; a finite
number); ``resize`` (the vocabulary and arithmetic of an in-place resize, which the updater plans
with and the report forecasts with); ``kube`` (errors, request pacing, listing, events, field parsing);
``runtime`` (CLI plumbing, logging, leader election, the HTTP health and metrics server). Nothing here
imports ``recommender`` or ``updater`` (the import-linter layers contract holds this).
"""
