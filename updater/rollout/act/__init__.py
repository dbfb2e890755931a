"""The rollout code that acts: the executor of a pass, its ports, the performer of decided steps, the threads
they run on, the Events and metrics they record, and the grouping of pods by policy. It performs what
``updater.rollout.machine`` decides, through the writes in ``updater.kube.writes``."""
