"""A loopback TCP proxy whose route can be cut on demand: the network faults of the drills.

Owns one listening socket on 127.0.0.1 that forwards every connection to one upstream on 127.0.0.1 (TLS
passes through untouched: it is only TCP), and a mode the test switches at any time:

- ``PASS``: forward both ways.
- ``DROP``: a blackhole without FIN or RST. Bytes are read and thrown away in both directions, so the
  peers see a silent, open connection. Connections that lived through a drop stay black-holed after the
  route is back (like a lost conntrack entry: only new connections get through), which is what makes a
  client without a client-side timeout hang forever.
- ``STALL``: nothing is read, so the kernel buffers fill and the peers block; the bytes are delivered
  when the mode goes back to ``PASS``. New connections are accepted and held: they are connected upstream
  only when the route passes again, so a client sees a slow server, not a refused one.
- ``HOLD``: like ``STALL`` for new connections, but every open connection is first closed with FIN, so
  clients reconnect (a pooled keep-alive connection is seen as dropped) and wait on a held connection: the
  shape of a server that is restarting behind a load balancer that queues.
- ``RESET``: every open connection is closed with RST (SO_LINGER 0), and so is every new one.

Counters (bytes let through each way, counted when the route lets them through, connections accepted, the
monotonic time of the last byte let through upstream) let a drill prove that nothing from a client reached the
server after some instant.
"""

from __future__ import annotations

import contextlib
import enum
import select
import socket
import struct
import threading
import time
from dataclasses import dataclass, field

LOOPBACK = "127.0.0.1"
POLL_S = 0.1
"""How often a pump looks at the mode again while it waits for bytes."""


class Mode(enum.StrEnum):
    PASS = "pass"
    DROP = "drop"
    STALL = "stall"
    HOLD = "hold"
    RESET = "reset"


@dataclass(frozen=True, slots=True, kw_only=True)
class Counters:
    bytes_up: int
    """Client -> upstream bytes actually delivered to the upstream."""
    bytes_down: int
    accepted: int
    last_up_monotonic: float | None
    """``time.monotonic()`` when a byte was last delivered upstream (None: never)."""


@dataclass(eq=False)
class _Conn:
    client: socket.socket
    upstream: socket.socket | None
    dead: bool = False
    """Black-holed for good: everything read is thrown away."""
    closed: threading.Event = field(default_factory=threading.Event)


def _rst_close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


class FaultProxy:
    """``FaultProxy(upstream_port).start()``; ``set_mode(Mode.DROP)``; ``counters()``; ``stop()``."""

    def __init__(self, upstream_port: int, *, name: str = "proxy") -> None:
        self.upstream_port = upstream_port
        self.name = name
        self._lock = threading.Lock()
        self._mode = Mode.PASS
        self._mode_changed = threading.Condition(self._lock)
        self._conns: set[_Conn] = set()
        self._bytes_up = 0
        self._bytes_down = 0
        self._accepted = 0
        self._last_up: float | None = None
        self._stopping = threading.Event()
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind((LOOPBACK, 0))
        self.port = int(self._listener.getsockname()[1])
        self._acceptor = threading.Thread(target=self._accept_loop, name=f"{name}-accept", daemon=True)

    @property
    def url(self) -> str:
        return f"https://{LOOPBACK}:{self.port}"

    # -- control ---------------------------------------------------------------------------------------
    def start(self) -> FaultProxy:
        self._listener.listen(128)
        self._listener.settimeout(POLL_S)
        self._acceptor.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        self._acceptor.join(timeout=5)
        self._listener.close()
        with self._lock:
            conns = list(self._conns)
            self._conns.clear()
        for c in conns:
            self._close(c)

    @property
    def mode(self) -> Mode:
        with self._lock:
            return self._mode

    def set_mode(self, mode: Mode) -> None:
        with self._lock:
            self._mode = mode
            conns = list(self._conns)
            if mode == Mode.DROP:
                for c in conns:
                    c.dead = True
            self._mode_changed.notify_all()
        if mode in (Mode.RESET, Mode.HOLD):
            for c in conns:
                self._close(c, reset=mode == Mode.RESET)

    def counters(self) -> Counters:
        with self._lock:
            return Counters(bytes_up=self._bytes_up, bytes_down=self._bytes_down, accepted=self._accepted,
                            last_up_monotonic=self._last_up)

    # -- forwarding ------------------------------------------------------------------------------------
    def _accept_loop(self) -> None:
        while not self._stopping.is_set():
            try:
                sock, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            sock.settimeout(None)
            mode = self.mode
            if mode == Mode.RESET:
                _rst_close(sock)
                continue
            upstream: socket.socket | None = None
            if mode == Mode.PASS:
                try:
                    upstream = self._connect()
                except OSError:
                    _rst_close(sock)  # the upstream refused: so does the proxy
                    continue
            conn = _Conn(client=sock, upstream=upstream, dead=mode == Mode.DROP)
            with self._lock:
                self._conns.add(conn)
                self._accepted += 1
            threading.Thread(target=self._pump, args=(conn, True), daemon=True, name=f"{self.name}-up").start()
            threading.Thread(target=self._pump, args=(conn, False), daemon=True, name=f"{self.name}-down").start()

    def _connect(self) -> socket.socket:
        upstream = socket.create_connection((LOOPBACK, self.upstream_port), timeout=5)
        upstream.settimeout(None)
        return upstream

    def _pump(self, conn: _Conn, up: bool) -> None:
        try:
            while not conn.closed.is_set() and not self._stopping.is_set():
                with self._lock:
                    if self._mode in (Mode.STALL, Mode.HOLD) and not conn.dead:
                        self._mode_changed.wait(POLL_S)
                        continue
                    connect = up and conn.upstream is None and not conn.dead
                if connect:  # held while stalled: connect now that the route passes
                    conn.upstream = self._connect()
                src = conn.client if up else conn.upstream
                dst = conn.upstream if up else conn.client
                if src is None:  # not connected (held, or black-holed before): nothing comes from upstream
                    conn.closed.wait(POLL_S)
                    continue
                readable, _, _ = select.select([src], [], [], POLL_S)
                if not readable:
                    continue
                data = src.recv(65536)
                if not data:
                    break
                # Decided and counted under the lock that ``set_mode`` takes: bytes read before a cut but
                # checked after it are dropped, and bytes let through are counted before ``set_mode(DROP)``
                # returns, so a drill's counters taken after the cut never grow by bytes of before it (they did,
                # by one 517-byte request, when the count followed the send).
                with self._lock:
                    if conn.dead or dst is None:
                        continue
                    if up:
                        self._bytes_up += len(data)
                        self._last_up = time.monotonic()
                    else:
                        self._bytes_down += len(data)
                dst.sendall(data)
        except (OSError, ValueError):
            pass
        self._close(conn)

    def _close(self, conn: _Conn, *, reset: bool = False) -> None:
        if conn.closed.is_set():
            return
        conn.closed.set()
        with self._lock:
            self._conns.discard(conn)
        for sock in (conn.client, conn.upstream):
            if sock is None:
                continue
            if reset:
                _rst_close(sock)
            else:
                with contextlib.suppress(OSError):
                    sock.close()
