"""Lease leader election for the continuous recommender (two replicas, one active).

Owns a thin wrapper around the official client's ``kubernetes.leaderelection`` (LeaseLock in
``coordination.k8s.io``): the lock uses our ApiClient (the library's default would use the global one), the
election runs in a daemon thread, and losing the lease calls ``on_stopped`` once; the caller then exits so
the pod restarts as a candidate, as Kubernetes' own controllers do.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from kubernetes import client
from kubernetes.leaderelection import electionconfig, leaderelection
from kubernetes.leaderelection.resourcelock.leaselock import LeaseLock


def start_election(api_client: client.ApiClient, *, name: str, namespace: str, identity: str,
                   on_started: Callable[[], None], on_stopped: Callable[[], None], lease_s: int = 15,
                   renew_s: int = 10, retry_s: int = 2) -> threading.Thread:
    """Campaign in the background; ``on_started`` runs (in its own thread) once this replica leads."""
    if not (lease_s > renew_s > 1.2 * retry_s and retry_s >= 1):
        raise ValueError("need lease > renew deadline > 1.2 x retry period >= 1 second")
    lock = LeaseLock(name, namespace, identity)  # type: ignore[no-untyped-call]
    lock.api_instance = client.CoordinationV1Api(api_client)
    config = electionconfig.Config(  # type: ignore[no-untyped-call]
        lock=lock, lease_duration=lease_s, renew_deadline=renew_s, retry_period=retry_s,
        onstarted_leading=on_started, onstopped_leading=on_stopped)
    election = leaderelection.LeaderElection(config)  # type: ignore[no-untyped-call]
    thread = threading.Thread(target=election.run, name="leader-election", daemon=True)
    thread.start()
    return thread
