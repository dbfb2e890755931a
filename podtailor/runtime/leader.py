"""Lease leader election for the continuous commands of both halves (two replicas, one active).

Owns a thin wrapper around the official client's ``kubernetes.leaderelection`` (LeaseLock in
``coordination.k8s.io``): the lock uses our ApiClient (the library's default would use the global one), the
election runs in a daemon thread, and losing the lease calls ``on_stopped`` once; the caller then exits so
the pod restarts as a candidate, as Kubernetes' own controllers do. Every lease call has a client-side
timeout, and a call that gets no answer (timeout, refused, reset) counts as a failed attempt: the library
only handles ``ApiException``, so anything else would end its thread silently, leaving a leader that never
renews and never stops, or a standby that never campaigns again. Also owns the leader-election flags of
both ``run`` commands (``add_leader_election_flags``) and campaigning as they say (``campaign``).
"""

from __future__ import annotations

import argparse
import copy
import logging
import os
import socket
import threading
from collections.abc import Callable
from typing import Any, NoReturn

from kubernetes import client
from kubernetes.leaderelection import electionconfig, leaderelection
from kubernetes.leaderelection.resourcelock.leaselock import LeaseLock

from podtailor.runtime.shards import LeaseTimings


class TimedLeases:
    """The three Lease calls LeaseLock makes, with a timeout; no answer becomes ``ApiException(status=0)``."""

    def __init__(self, api_client: client.ApiClient, timeout_s: float) -> None:
        # Own client without urllib3's default 3 retries, which would stretch one attempt to 4 x the timeout.
        configuration = copy.deepcopy(api_client.configuration)
        configuration.retries = 0
        self.api: Any = client.CoordinationV1Api(client.ApiClient(configuration))
        self.timeout_s = timeout_s

    def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        try:
            return getattr(self.api, method)(*args, _request_timeout=self.timeout_s, **kwargs)
        except client.ApiException:
            raise
        except Exception as err:  # urllib3 timeouts and connection errors: no answer from the API server
            raise client.ApiException(status=0, reason=f"no answer from the API server: {err}") from err

    def read_namespaced_lease(self, name: str, namespace: str) -> Any:
        return self.call("read_namespaced_lease", name, namespace)

    def create_namespaced_lease(self, namespace: str, body: Any) -> Any:
        return self.call("create_namespaced_lease", namespace, body)

    def replace_namespaced_lease(self, name: str, namespace: str, body: Any) -> Any:
        return self.call("replace_namespaced_lease", name=name, namespace=namespace, body=body)


def start_election(api_client: client.ApiClient, *, name: str, namespace: str, identity: str,
                   on_started: Callable[[], None], on_stopped: Callable[[], None], lease_s: int = 15,
                   renew_s: int = 10, retry_s: int = 2,
                   make_lock: Callable[[str, str, str], LeaseLock] = LeaseLock) -> threading.Thread:
    """Campaign in the background; ``on_started`` runs (in its own thread) once this replica leads.
    ``make_lock(name, namespace, identity)`` builds the lock (a shard's lock gates taking it, see shard_leases)."""
    if not (lease_s > renew_s > 1.2 * retry_s and retry_s >= 1):
        raise ValueError("need lease > renew deadline > 1.2 x retry period >= 1 second")
    lock = make_lock(name, namespace, identity)
    # A renew attempt ends within one retry period, so a lost route is noticed by renew deadline + retry.
    lock.api_instance = TimedLeases(api_client, timeout_s=float(retry_s))  # type: ignore[assignment]
    config = electionconfig.Config(  # type: ignore[no-untyped-call]
        lock=lock, lease_duration=lease_s, renew_deadline=renew_s, retry_period=retry_s,
        onstarted_leading=on_started, onstopped_leading=on_stopped)
    election = leaderelection.LeaderElection(config)  # type: ignore[no-untyped-call]
    thread = threading.Thread(target=election.run, name=f"leader-election-{name}", daemon=True)
    thread.start()
    return thread


def add_leader_election_flags(p: argparse._ActionsContainer, default_id: str) -> None:
    """``--leader-elect`` (on by default), ``--leader-election-namespace`` and ``--leader-election-id``
    (the Lease's name, ``default_id`` unless given), read by ``campaign``."""
    p.add_argument("--leader-elect", action=argparse.BooleanOptionalAction, default=True,
                   help="use a Lease so only one replica works (default: on)")
    p.add_argument("--leader-election-namespace", default=os.environ.get("POD_NAMESPACE", "podtailor-system"),
                   help="namespace of the Lease (default: $POD_NAMESPACE or podtailor-system)")
    p.add_argument("--leader-election-id", default=default_id, help="name of the Lease (default: %(default)s)")


def identity() -> str:
    """This replica's name in its Leases: ``HOSTNAME-PID`` (a restarted process is a new candidate)."""
    return f"{socket.gethostname()}-{os.getpid()}"


def campaign(api_client: client.ApiClient, args: argparse.Namespace, *, on_started: Callable[[], None],
             on_stopped: Callable[[], None], timings: LeaseTimings | None = None) -> None:
    """Run ``on_started`` in a thread of its own once this replica leads, as the flags of
    ``add_leader_election_flags`` say: through the Lease (``on_stopped`` once it is lost), or at once with
    ``--no-leader-elect``. The identity is ``identity()``; ``timings`` default to ``LeaseTimings()``."""
    t = timings or LeaseTimings()
    if args.leader_elect:
        start_election(api_client, name=args.leader_election_id, namespace=args.leader_election_namespace,
                       identity=identity(), on_started=on_started, on_stopped=on_stopped, lease_s=t.lease_s,
                       renew_s=t.renew_s, retry_s=t.retry_s)
    else:
        threading.Thread(target=on_started, name="leading", daemon=True).start()


def exit_lost_leadership() -> NoReturn:
    """Leave the process at once after losing the lease, as client-go's controllers do (``klog.Fatal``).

    A pass may still have threads inside requests (its worker pools, which interpreter shutdown would wait
    for, for as long as a cut-off route makes each request last): nothing may be written as a former
    leader, and the journal makes an interrupted pass safe to resume by the new one. Logs are flushed first.
    """
    logging.shutdown()
    os._exit(1)
