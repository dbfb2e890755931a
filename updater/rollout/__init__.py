"""Rollouts: the durable journal, the pure state machine, the store that writes, the executor that acts."""
