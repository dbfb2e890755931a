"""Failure drills of ``reliability.md`` ("Drills to demand"), each against its own real control plane."""
