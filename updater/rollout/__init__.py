"""Rollouts: ``machine/`` is the pure state machine and its durable journal; ``act/`` is the executor that
performs its steps through the writes in ``updater.kube.writes``."""
