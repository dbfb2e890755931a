"""The process runtime both CLIs run on: flags and usage errors, logging, leader election, the run loop,
readiness and the HTTP health endpoints."""
