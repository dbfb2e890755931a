"""Child processes of the test harness: start with a log file, wait until healthy, stop cleanly.

Owns the lifecycle of the long-running servers the tests start (etcd, the Kubernetes components,
Prometheus, the node simulator). Each child writes stdout and stderr to its own log file for debugging.
Attached children get ``PR_SET_PDEATHSIG`` so they die with the harness even when it is killed with
SIGKILL; detached children (``python -m tests.harness up``) get their own session and outlive it.
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

_PR_SET_PDEATHSIG = 1


class HarnessError(RuntimeError):
    """A server of the local test environment could not be started or did not become healthy."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _die_with_parent() -> None:
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def log_tail(path: Path, lines: int = 25) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return "(no log)"
    return "\n".join(text[-lines:])


@dataclass
class Managed:
    """One child process and its log file."""

    name: str
    argv: Sequence[str]
    log_path: Path
    detached: bool = False
    env: dict[str, str] | None = None
    proc: subprocess.Popen[bytes] | None = field(default=None, init=False)

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                list(self.argv),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self.env,
                start_new_session=self.detached,
                preexec_fn=None if self.detached else _die_with_parent,
            )

    @property
    def pid(self) -> int:
        if self.proc is None:
            raise HarnessError(f"{self.name} was never started")
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def check_alive(self) -> None:
        if not self.alive():
            code = None if self.proc is None else self.proc.returncode
            raise HarnessError(
                f"{self.name} exited (code {code}); last lines of {self.log_path}:\n{log_tail(self.log_path)}"
            )

    def stop(self, timeout_s: float = 15.0) -> None:
        if self.proc is None:
            return
        stop_pid(self.proc.pid, timeout_s=timeout_s, popen=self.proc)


def stop_pid(pid: int, *, timeout_s: float = 15.0, popen: subprocess.Popen[bytes] | None = None) -> None:
    """SIGTERM, wait up to ``timeout_s``, then SIGKILL. A process already gone is fine."""
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if popen is not None:
            if popen.poll() is not None:
                return
        elif not pid_alive(pid):
            return
        time.sleep(0.05)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return
    if popen is not None:
        popen.wait(timeout=10)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child of ours still answers kill(0); look at its state.
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except OSError:
        return False
    return state != "Z"


def wait_until(
    what: str,
    probe: Callable[[], bool],
    *,
    timeout_s: float,
    interval_s: float = 0.1,
    watched: Sequence[Managed] = (),
) -> None:
    """Poll ``probe`` until it returns True; fail early if a watched process died."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for proc in watched:
            proc.check_alive()
        try:
            if probe():
                return
        except (OSError, urllib.error.URLError, ssl.SSLError):
            pass
        time.sleep(interval_s)
    raise HarnessError(f"timed out after {timeout_s:.0f}s waiting for {what}")


def http_ok(url: str, context: ssl.SSLContext | None = None, timeout_s: float = 2.0) -> bool:
    try:
        with urllib.request.urlopen(url, context=context, timeout=timeout_s) as resp:
            return bool(resp.status == 200)
    except urllib.error.HTTPError:
        return False
