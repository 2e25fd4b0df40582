"""Hostile clients of an ``mri-recon serve`` process on loopback, and the server's resident memory under them.

Shared by tests/test_server_memory.py and scripts/server_memory.py. A case opens its connections at once,
each on a thread of its own, and waits for the server's answers; the server's peak RSS (``VmHWM`` of
``/proc/PID/status``, restarted through ``/proc/PID/clear_refs`` before each case) is compared with what its
limits let a connection hold (:func:`connection_bound`).
"""

from __future__ import annotations

import os
import re
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import ismrmrd
import numpy as np

from mri_recon.server.inbox import ACQUISITION_OVERHEAD

ROOT = Path(__file__).resolve().parents[1]
CLOSE = struct.pack("<H", 4)


def _sized(n: int, payload: bytes) -> bytes:
    return struct.pack("<H", n) + struct.pack("<I", len(payload)) + payload


def _acquisition(acq) -> bytes:
    return struct.pack("<H", 1008) + acq.to_bytes()


def start_server(log: Path, *options: str, timeout: float = 60.0) -> tuple[subprocess.Popen, tuple[str, int]]:
    """``mri-recon serve --port 0 --device cpu OPTIONS`` in its own process, logging to ``log``: the process
    and its address."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
    with open(log, "wb") as stream:
        server = subprocess.Popen([sys.executable, "-m", "mri_recon", "serve", "--port", "0", "--device", "cpu",
                                   *options], stderr=stream, env=env)
    deadline = time.time() + timeout
    while time.time() < deadline and server.poll() is None:
        found = re.search(r"listening on [^\s]+:(\d+)", log.read_text())
        if found:
            return server, ("127.0.0.1", int(found.group(1)))
        time.sleep(0.1)
    server.kill()
    raise RuntimeError(f"the server did not start: {log.read_text()[-2000:]}")


def memory(pid: int, key: str) -> int:
    """``VmRSS`` or ``VmHWM`` of process ``pid``, in bytes."""
    return int(re.search(key + r":\s+(\d+) kB", Path(f"/proc/{pid}/status").read_text()).group(1)) * 1024


def peak_growth(pid: int, case: Callable[[], None]) -> tuple[int, int]:
    """Run ``case``: the growth of process ``pid``'s peak RSS over its RSS before, and of its RSS after."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")  # the peak RSS restarts from the current RSS
    before = memory(pid, "VmRSS")
    case()
    time.sleep(0.3)
    return memory(pid, "VmHWM") - before, memory(pid, "VmRSS") - before


def _answer(conn: socket.socket, timeout: float = 30.0) -> bytes:
    """What the server sends until it closes (an ERROR, images, CLOSE), then the socket closed."""
    conn.settimeout(timeout)
    out = b""
    try:
        while chunk := conn.recv(65536):
            out += chunk
    except OSError:
        pass
    conn.close()
    return out


def _at_once(count: int, client: Callable[[], None]) -> None:
    threads = [threading.Thread(target=client) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)


def idle_sockets(address: tuple[str, int], count: int, seconds: float) -> None:
    """``count`` connections that send nothing for ``seconds`` (past the header timeout), then close."""
    conns = [socket.create_connection(address) for _ in range(count)]
    time.sleep(seconds)
    for conn in conns:
        conn.close()


def large_texts(address: tuple[str, int], xml: bytes, clients: int, size: int, count: int) -> None:
    """``clients`` connections each sending the header and ``count`` TEXT messages of ``size`` bytes, then
    CLOSE (no data: answered with an ERROR)."""
    text = _sized(5, b"x" * (size - 1) + b"\x00")

    def client() -> None:
        conn = socket.create_connection(address)
        try:
            conn.sendall(_sized(3, xml) + text * count + CLOSE)
        except OSError:
            pass
        _answer(conn)

    _at_once(clients, client)


def tiny_acquisitions(address: tuple[str, int], xml: bytes, clients: int, max_scan_bytes: int) -> None:
    """``clients`` connections each sending the header and one-sample acquisitions until the server refuses
    more than ``max_scan_bytes`` (each counts its data, trajectory and the 1 KiB overhead)."""
    acq = ismrmrd.Acquisition.from_array(np.zeros((1, 1), np.complex64), np.zeros((1, 2), np.float32))
    stream = _sized(3, xml) + _acquisition(acq) * (max_scan_bytes // ACQUISITION_OVERHEAD + 64) + CLOSE

    def client() -> None:
        conn = socket.create_connection(address)
        try:
            conn.sendall(stream)
        except OSError:  # refused, and reset while still sending
            pass
        _answer(conn)

    _at_once(clients, client)


def disconnects(address: tuple[str, int], xml: bytes, acquisitions: list, clients: int, nbytes: int) -> None:
    """``clients`` connections each sending the header and about ``nbytes`` of imaging acquisitions (no image
    group complete), then half an acquisition, and leaving."""
    data = [a for a in acquisitions if not a.is_flag_set(ismrmrd.ACQ_IS_NOISE_MEASUREMENT)]
    for acq in data:
        acq.clear_all_flags()  # no group completes: they are all held
    body = b"".join(_acquisition(a) for a in data)
    stream = _sized(3, xml) + body * max(1, nbytes // len(body)) + _acquisition(data[0])[:100]

    def client() -> None:
        conn = socket.create_connection(address)
        conn.sendall(stream)
        time.sleep(0.5)  # the server has read it all
        conn.close()

    _at_once(clients, client)


CONNECTION_STATE = 4 * 2**20
"""What a connection holds besides its data: its two threads (their stacks) and their share of the allocator's
arenas (a queue of 8 real clients measured 1-2 MiB each)."""


def connection_bound(max_scan_bytes: int, max_message_bytes: int, group_read: bool = False) -> int:
    """What one connection may hold (docs/server.md): its counted acquisitions and config, the message being
    read (held once as it arrives; a text or header also decoded or cut at its NUL: twice), its threads' state,
    and with ``group_read`` a group of its acquisitions read as a scan for its reconstruction (about as large,
    a third more while it is built: twice more in all)."""
    scan = (3 if group_read else 1) * max_scan_bytes
    return scan + 2 * max_message_bytes + CONNECTION_STATE


def queued_scans(address: tuple[str, int], scan_file: Path, clients: int) -> None:
    """``clients`` connections each sending the whole scan of ``scan_file`` at once: their reconstructions take
    turns, the others' groups wait read (their acquisitions and their scans held)."""
    from mri_recon.server.client import send_scan  # noqa: PLC0415 - the package's client

    _at_once(clients, lambda: send_scan(scan_file, *address))


def held_bytes(acquisitions: list) -> int:
    """What a connection's acquisitions count against ``--max-scan-bytes``."""
    return sum(a.data.nbytes + a.traj.nbytes + ACQUISITION_OVERHEAD for a in acquisitions)


def served(scan_file: Path, address: tuple[str, int], timeout: float = 15.0):
    """A real client's reply, sent again while the server is still busy closing a case's connections (each
    drains its peer for up to a second)."""
    from mri_recon.server.client import send_scan  # noqa: PLC0415 - the package's client

    deadline = time.time() + timeout
    while True:
        _, reply = send_scan(scan_file, *address)
        if reply.images or not any("server busy" in t for t in reply.texts) or time.time() > deadline:
            return reply
        time.sleep(0.5)


def cases(clients: int, scan: int, message: int) -> dict:
    """name: (the clients, what their connections may hold where the case can reach it)."""
    return {
        "idle sockets": (lambda a, x, q: idle_sockets(a, 3 * clients, 2.0),
                         clients * connection_bound(0, 0)),
        "large texts": (lambda a, x, q: large_texts(a, x, clients, message, 8),
                        clients * connection_bound(0, message)),
        "tiny acquisitions": (lambda a, x, q: tiny_acquisitions(a, x, clients, scan),
                              clients * connection_bound(scan, 0)),
        "disconnects": (lambda a, x, q: disconnects(a, x, q, clients, scan // 2),
                        clients * connection_bound(scan, message)),
    }
