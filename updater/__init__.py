"""podtailor's updater: applies recommended targets to running pods through in-place pod resize.

Canary batches per node pool, verification of every step, rollback, and fallback to replacement.
"""

__version__ = "0.1.0"
