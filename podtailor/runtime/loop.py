"""The run loop of both halves' ``run`` commands: passes one at a time on APScheduler, until a signal.

Owns when passes run and how a process in ``run`` stops. ``RunLoop`` runs its pass function on an APScheduler
``BackgroundScheduler``: the first pass at ``start()``, each next one when the pass says (seconds after its
start) or ``interval_s`` after its start; a pass that overran its interval is followed at once, or, with
``skip_missed``, at the next multiple of the interval from its start (the recommender's passes keep to
their grid, as APScheduler's interval trigger does). ``wake()`` brings the next pass forward when the last
pass asked for it (``Due.woken_after_s``: the updater, while a batch waits for the kubelets' answer). An
exception in a pass is logged, counted (``failed``) and retried at the next interval, or once the
``retry_after_s`` it carries (API Priority and Fairness) is waited out; it never ends the loop. Each pass
runs in a daemon thread, so a pass in progress never holds a stopping process. ``until_stopped`` is the
process around it: signal handlers, leader election and leaving the process when the lease is lost.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import logging
import math
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NoReturn

from apscheduler.executors.base import BaseExecutor, run_job
from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.interval import IntervalTrigger

from podtailor.runtime.leader import campaign, exit_lost_leadership
from podtailor.runtime.shards import LeaseTimings

JOB = "pass"
PARKED_WEEKS = 5200
"""After each run APScheduler parks the job this far ahead; the loop then sets the real next run time."""
_scheduler_log = logging.getLogger("podtailor.runtime.loop.scheduler")
_scheduler_log.setLevel(logging.WARNING)  # APScheduler logs every run at INFO: only its warnings and errors


class _DaemonThreads(BaseExecutor):  # type: ignore[misc]
    """Runs each job in a daemon thread of its own (APScheduler's thread pool is joined at interpreter exit,
    which would hold a stopping process until the pass in progress ends)."""

    def start(self, scheduler: Any, alias: str) -> None:
        super().start(scheduler, alias)
        self._logger = _scheduler_log

    def _do_submit_job(self, job: Any, run_times: Any) -> None:
        def target() -> None:
            try:
                events = run_job(job, job._jobstore_alias, run_times, self._logger.name)
            except BaseException as exc:
                self._run_job_error(job.id, exc, exc.__traceback__)
            else:
                self._run_job_success(job.id, events)

        threading.Thread(target=target, name=f"podtailor-{job.name}", daemon=True).start()


def _nothing(_: Exception) -> None:
    return


@dataclass(frozen=True, slots=True)
class Due:
    """When the next pass is due, in seconds after the start of the pass that returns it."""

    after_s: float
    woken_after_s: float | None = None
    """If set, ``wake()`` (during the pass or after it) brings the next pass forward to this, not sooner."""


class RunLoop:
    """Runs ``run_pass`` from ``start()`` until ``stop()``; ``run_pass`` returns when the next pass is due
    (None: ``interval_s`` after its start)."""

    def __init__(self, run_pass: Callable[[], Due | None], *, interval_s: float, log: logging.Logger,
                 failed: Callable[[Exception], None] = _nothing, skip_missed: bool = False,
                 name: str = "pass") -> None:
        self.run_pass, self.interval_s, self.log, self.failed = run_pass, interval_s, log, failed
        self.skip_missed, self.name = skip_missed, name
        self._lock = threading.Lock()
        self._scheduler: BackgroundScheduler | None = None
        self._next_due: float | None = None
        """``time.monotonic()`` of the next pass; in the past while it runs."""
        self._woken_from: float | None = None
        """``time.monotonic()`` to which ``wake()`` brings the next pass (None: it does not)."""
        self._woken = False
        """``wake()`` was called since the pass in progress, or the last one, started."""
        self._stopped = threading.Event()
        self._idle = threading.Event()
        self._idle.set()
        self.started = False

    def start(self) -> None:
        """The first pass at once, the next ones as above. Nothing after ``stop()``, or a second time."""
        with self._lock:
            if self._stopped.is_set() or self.started:
                return
            self.started = True
            scheduler = BackgroundScheduler(executors={"default": _DaemonThreads()}, timezone=dt.UTC, daemon=True,
                                            logger=_scheduler_log)
            scheduler.start()
            self._next_due = time.monotonic()
            scheduler.add_job(self._pass, IntervalTrigger(weeks=PARKED_WEEKS, timezone=dt.UTC), id=JOB, name=self.name,
                              next_run_time=_wall(self._next_due), coalesce=True, misfire_grace_time=None,
                              max_instances=2)  # 2: the next run may be set as the one before returns
            self._scheduler = scheduler

    def wake(self) -> None:
        """Something the last pass waits for happened: if it returned a ``Due`` with ``woken_after_s``, the next
        pass comes forward to then (or now, if later). Called while a pass runs, it counts for that pass."""
        with self._lock:
            self._woken = True
            now = time.monotonic()
            if self._next_due is None or self._next_due <= now or self._woken_from is None:
                return  # not started, running (it reads _woken when it ends) or not wakeable
            self._set_next_locked(min(self._next_due, max(now, self._woken_from)))
            self._woken_from = None

    def stop(self) -> None:
        """No pass starts from now on; one in progress goes on in its thread (see ``join``)."""
        with self._lock:
            self._stopped.set()
            scheduler, self._scheduler = self._scheduler, None
        if scheduler is not None:
            scheduler.shutdown(wait=False)

    def join(self, timeout_s: float | None = None) -> bool:
        """Wait until stopped and no pass runs; False if ``timeout_s`` ran out first."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        if not self._stopped.wait(timeout_s):
            return False
        return self._idle.wait(None if deadline is None else max(0.0, deadline - time.monotonic()))

    def _pass(self) -> None:
        with self._lock:
            if self._stopped.is_set():
                return
            self._idle.clear()
            self._woken, self._woken_from = False, None
        started = time.monotonic()
        woken_from = None
        try:
            try:
                due = self.run_pass() or Due(self.interval_s)
                next_due = started + due.after_s
                woken_from = None if due.woken_after_s is None else started + due.woken_after_s
            except Exception as err:  # the one broad catch: a failed pass is retried, never fatal
                retry_after = float(getattr(err, "retry_after_s", 0.0) or 0.0)  # API Priority and Fairness
                self.log.error("pass failed; retrying at the next interval",
                               extra={"error": str(err), "retry_after_s": retry_after})
                self.failed(err)
                next_due = max(started + self.interval_s, time.monotonic() + retry_after - self.interval_s)
            now = time.monotonic()
            if next_due < now and self.skip_missed:
                next_due = started + math.ceil((now - started) / self.interval_s) * self.interval_s
            with self._lock:
                if woken_from is not None and self._woken:
                    next_due, woken_from = min(next_due, woken_from), None
                self._woken_from = woken_from
                self._set_next_locked(max(now, next_due))
        finally:
            self._idle.set()

    def _set_next_locked(self, due: float) -> None:
        if self._scheduler is None or self._stopped.is_set():
            return
        self._next_due = due
        self._scheduler.modify_job(JOB, next_run_time=_wall(due))


def _wall(monotonic_s: float) -> dt.datetime:
    return dt.datetime.now(dt.UTC) + dt.timedelta(seconds=monotonic_s - time.monotonic())


def until_stopped(api_client: Any, args: argparse.Namespace, *, start_work: Callable[[], None],
                  log: logging.Logger, timings: LeaseTimings | None = None) -> None:
    """Campaign as the leader-election flags say (``leader.campaign``), run ``start_work`` in its own thread
    once leading, and return at SIGTERM or SIGINT. Losing the lease after leading leaves the process at once
    with exit code 1 (``leader.exit_lost_leadership``): the pod restarts as a candidate."""
    stop, leading, lost = threading.Event(), threading.Event(), threading.Event()

    def started() -> None:
        leading.set()
        start_work()

    def stopped() -> None:
        if leading.is_set():
            log.error("leadership lost; exiting so the pod restarts as a candidate")
            lost.set()
        stop.set()

    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    campaign(api_client, args, on_started=started, on_stopped=stopped, timings=timings)
    stop.wait()
    if lost.is_set():  # the new leader holds the state now: nothing more from here
        exit_lost_leadership()


def until_signalled() -> None:
    """Return at SIGTERM or SIGINT (a sharded ``run``, whose Leases never end the process)."""
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    stop.wait()


def leave(code: int) -> NoReturn:
    """End a long-running process with ``code`` once its own orderly shutdown is done (the pass joined or left to
    the journal, the checkpoint written, the servers shut down), without interpreter finalization.

    Daemon threads outlive that shutdown: the kubernetes client's leader-election loop in the middle of a lease
    renewal, an informer's watch, an updater pass left to its journal. CPython 3.11 ends such a thread with
    ``pthread_exit`` when it next takes the GIL during finalization (Python/ceval_gil.c, ``take_gil`` calling
    ``PyThread_exit_thread``), and that forced unwind through an extension module's frames can abort the whole
    process (SIGABRT, exit -6; CPython gh-87135): a clean stop reported as a crash, seen once in CI. Logs and the
    standard streams are flushed first, so nothing written is lost."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed or broken stream takes nothing more anyway
            stream.flush()
    os._exit(code)
