"""The rollout state machine (pure): the journal of a rollout, its phases and effects, verification, fallback
batches and the steps of a pass, as values in and values out. Nothing here calls the API server, logs, reads the
clock or starts a thread; ``updater.rollout.act`` performs what it decides."""
