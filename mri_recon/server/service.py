"""The TCP server: one thread per connection, reconstructions taking turns on the device.

:class:`Server` listens on ``127.0.0.1`` unless told otherwise (another address is logged as a warning: the
protocol has no authentication), serves up to ``max_clients`` connections at once (more are answered with an
``ERROR`` TEXT and CLOSE), drops a connection idle for ``idle_timeout`` seconds, and on :meth:`stop` stops
accepting, lets the running connections finish their scans and returns from :meth:`serve_forever`.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import functools
import ipaddress
import logging
import os
import socket
import threading
from typing import Any

from ..errors import printable
from .peers import peer_uid, user_name
from .protocol import DEFAULT_LIMITS, Limits, MessageWriter
from .recon import Reconstructor
from .session import Configure, Session

log = logging.getLogger(__name__)


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback addresses (127.0.0.0/8, ::1)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class Server:
    """An MRD streaming server bound to ``(host, port)`` (port 0: any free port, see :attr:`address`).

    Parameters
    ----------
    recon
        The :class:`~mri_recon.server.recon.Reconstructor` every connection shares.
    configure
        Settings from a connection's config messages.
    host, port
        Where to listen.
    limits
        Per message and per connection sizes (:class:`~mri_recon.server.protocol.Limits`).
    idle_timeout
        Seconds a connection may stay silent (or not read what it is sent) before it is closed.
    max_clients
        Connections served at once.
    allowed_users
        The uids served (default: this process's own); None serves every peer, remote ones too.
    header_timeout
        Seconds a new connection may take to send its XML header.
    """

    def __init__(self, recon: Reconstructor, configure: Configure, host: str = "127.0.0.1", port: int = 9002, *,
                 limits: Limits = DEFAULT_LIMITS, idle_timeout: float = 60.0, max_clients: int = 16,
                 allowed_users: frozenset[int] | None = frozenset({os.getuid()}),
                 header_timeout: float = 10.0) -> None:
        self.recon, self.configure, self.limits = recon, configure, limits
        self.idle_timeout, self.max_clients = idle_timeout, max_clients
        self.allowed_users, self.header_timeout = allowed_users, min(header_timeout, idle_timeout)
        if not is_loopback(host):
            log.warning("listening on %s: reachable beyond this machine; the MRD protocol has no "
                        "authentication or encryption", printable(host))
        self._socket = socket.create_server((host, port), reuse_port=False)
        self._socket.settimeout(0.2)
        self._address = self._socket.getsockname()[:2]
        self._stop = threading.Event()
        self._threads: set[threading.Thread] = set()
        self._sessions: dict[threading.Thread, tuple[socket.socket, Session]] = {}
        self._lock = threading.Lock()
        self.served = 0
        self.endings: dict[str, int] = {}

    @property
    def address(self) -> tuple[str, int]:
        """The bound ``(host, port)``."""
        return self._address

    def serve_forever(self) -> None:
        """Accept connections until :meth:`stop`; then wait for the running ones to finish."""
        log.info("MRD server listening on %s:%d", *self.address)
        try:
            while not self._stop.is_set():
                try:
                    conn, peer = self._socket.accept()
                except TimeoutError:
                    continue
                except OSError as exc:  # too many open files, ...: keep serving
                    log.error("accept failed: %s", exc)
                    self._stop.wait(0.2)
                    continue
                self._start(conn, f"{peer[0]}:{peer[1]}")
            self._accept_waiting()
        finally:
            self._socket.close()
            self.wait()
            log.info("MRD server stopped after %d connection(s)", self.served)

    def _accept_waiting(self) -> None:
        """Serve the connections that reached the listening queue before the stop (closing the socket would
        reset them)."""
        self._socket.setblocking(False)
        while True:
            try:
                conn, peer = self._socket.accept()
            except OSError:  # BlockingIOError: the queue is empty
                return
            conn.setblocking(True)
            self._start(conn, f"{peer[0]}:{peer[1]}")

    def stop(self) -> None:
        """Stop accepting; :meth:`serve_forever` returns once the running connections are done."""
        self._stop.set()

    def wait(self, timeout: float | None = None) -> None:
        """Wait for the running connections."""
        with self._lock:
            threads = list(self._threads)
        for thread in threads:
            thread.join(timeout)

    def _start(self, conn: socket.socket, name: str) -> None:
        refusal = self._refusal(conn)
        if refusal is not None:
            log.warning("%s: refused: %s", name, refusal)
            self._answer(conn, refusal)
            return
        with self._lock:
            busy = len(self._threads) >= self.max_clients and not self._make_way(name)
            if not busy:
                thread = threading.Thread(target=self._serve, args=(conn, name), name=f"mrd {name}")
                self._threads.add(thread)
        if busy:
            log.warning("%s: refused, %d connections are being served (--max-clients)", name, self.max_clients)
            self._answer(conn, f"server busy: {self.max_clients} connections are being served; try again")
            return
        thread.start()

    def _refusal(self, conn: socket.socket) -> str | None:
        """Why this peer is not served (None: it is): its user is not one the server allows."""
        if self.allowed_users is None:
            return None
        uid = peer_uid(conn)
        if uid in self.allowed_users:
            return None
        allowed = ", ".join(user_name(u) for u in sorted(self.allowed_users))
        return (f"this server serves user {allowed} only, and this connection's user is {user_name(uid)}; the "
                f"server's owner can widen it with serve --allow-users")

    def _make_way(self, name: str) -> bool:
        """When full: close the oldest connection that has not sent its XML header (an idle socket must not
        starve a real client); True when one was closed. Called holding the lock."""
        waiting = [(session.connected_at, conn, session) for conn, session in self._sessions.values()
                   if session.header is None]
        if not waiting:
            return False
        _, conn, session = min(waiting, key=lambda item: item[0])
        log.warning("%s: the server is full; closing %s, the oldest connection that has sent no header", name,
                    session.name)
        self._sessions = {t: entry for t, entry in self._sessions.items() if entry[1] is not session}  # once
        with contextlib.suppress(OSError):
            session.writer.send("ERROR    the server is full and this connection sent no XML header; closed to "
                                "serve another")
            session.writer.close()
        with contextlib.suppress(OSError):
            conn.shutdown(socket.SHUT_RDWR)
        return True

    def _answer(self, conn: socket.socket, error: str) -> None:
        conn.settimeout(5.0)
        try:
            with conn.makefile("wb") as out:
                writer = MessageWriter(out)
                writer.send(f"ERROR    {error}")
                writer.close()
        except OSError:
            pass
        finally:
            conn.close()

    def _serve(self, conn: socket.socket, name: str) -> None:
        log.info("%s: connected", name)
        ending, done = "error", threading.Event()
        try:
            conn.settimeout(self.idle_timeout)  # bounds each send; the session times the waits for input
            with conn.makefile("wb") as out:
                session = Session(SocketInput(conn, done), MessageWriter(out), self.recon, self.configure,
                                  limits=self.limits, idle_timeout=self.idle_timeout, name=name,
                                  header_timeout=self.header_timeout)
                with self._lock:
                    self._sessions[threading.current_thread()] = (conn, session)
                ending = session.run()
        except OSError as exc:
            log.warning("%s: connection lost (%s)", name, exc)
        except Exception:  # a bug must not take the server down: logged with its traceback
            log.exception("%s: internal error; connection closed", name)
        finally:
            done.set()
            _close(conn)
            with self._lock:
                self._threads.discard(threading.current_thread())
                self._sessions.pop(threading.current_thread(), None)
                self.served += 1
                self.endings[ending] = self.endings.get(ending, 0) + 1
            release_free_memory()


@functools.lru_cache(maxsize=1)
def _malloc_trim() -> Any:
    """glibc's ``malloc_trim``, or None where the C library has none (musl, macOS)."""
    try:
        return ctypes.CDLL(ctypes.util.find_library("c")).malloc_trim
    except (OSError, AttributeError, TypeError):
        return None


def release_free_memory() -> None:
    """Give back to the system the memory the allocator holds free (glibc's ``malloc_trim(0)``), as a connection
    ends. glibc keeps what a thread freed in that thread's arena, for that arena's later allocations only, so
    connections served one after another on different arenas each left their peak behind: the process grew
    past what its connections may hold at once. Nothing where the C library has no such call."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


class SocketInput:
    """A socket's input as a stream for :func:`~mri_recon.server.protocol.read_message`: ``read(n)`` returns
    what ``recv`` gives (at most 1 MiB at a time), waiting through the socket's timeouts until ``done``."""

    def __init__(self, conn: socket.socket, done: threading.Event) -> None:
        self._conn, self._done = conn, done

    def read(self, n: int) -> bytes:
        while not self._done.is_set():
            try:
                return self._conn.recv(min(n, 2 ** 20))
            except TimeoutError:
                continue
        return b""


def _close(conn: Any, drain_bytes: int = 2 ** 24, drain_seconds: float = 1.0) -> None:
    """Close a connection so that its peer reads what it was sent: stop sending, then read and drop what the
    peer still sends (up to ``drain_bytes`` or ``drain_seconds`` per read) before closing; closing with unread
    input would reset the connection and could discard the answer in flight."""
    try:
        conn.shutdown(socket.SHUT_WR)
        conn.settimeout(drain_seconds)
        left = drain_bytes
        while left > 0:
            chunk = conn.recv(min(left, 2 ** 16))
            if not chunk:
                break
            left -= len(chunk)
        conn.shutdown(socket.SHUT_RDWR)  # wakes the session's reading thread
    except OSError:
        pass
    conn.close()
