"""The server's memory: a message being read is held once as it arrives; what a connection's threads freed is
given back as it ends; and the resident memory under hostile clients stays within what the limits let the
connections hold (docs/server.md): idle sockets, large TEXT messages, tiny acquisitions up to the scan limit,
clients that leave mid-message, each against a server process on loopback with small limits."""

from __future__ import annotations

import io
import platform
import struct
import subprocess
import sys
import tracemalloc
from pathlib import Path

import hostile_clients as hostile
import ismrmrd
import numpy as np
import pytest
from server_helpers import make_scan

from mri_recon.server.client import read_scan, send_scan
from mri_recon.server.protocol import READ_CHUNK, Limits, MessageID, read_message

MIB = 2**20
ROOT = Path(__file__).resolve().parents[1]
CLIENTS, SCAN, MESSAGE = 4, 8 * MIB, 2 * MIB


def _read_peak(stream: bytes) -> tuple[object, int]:
    """The message read from ``stream`` and the traced peak of reading it (the stream's bytes not counted)."""
    source = io.BytesIO(stream)
    tracemalloc.start()
    try:
        start = tracemalloc.get_traced_memory()[0]
        message = read_message(source, Limits(max_message_bytes=64 * MIB, max_text_bytes=64 * MIB))
        return message, tracemalloc.get_traced_memory()[1] - start
    finally:
        tracemalloc.stop()


def test_a_message_is_held_once_as_it_is_read():
    """An acquisition is read into its own arrays and a TEXT into one buffer, then decoded: 1 and 2 times its
    size, and the piece being read (its pieces and their join held the acquisition 2 and the text 3 times)."""
    samples, channels = 2**15, 16
    acq = ismrmrd.Acquisition.from_array(np.ones((channels, samples), np.complex64),
                                         np.ones((samples, 2), np.float32))
    size = samples * channels * 8 + samples * 2 * 4
    message, peak = _read_peak(struct.pack("<H", 1008) + acq.to_bytes())
    assert message.id == MessageID.ACQUISITION and np.array_equal(message.payload.data, acq.data)
    assert peak <= size + READ_CHUNK + 2**16, peak / size
    text = b"x" * (4 * MIB)
    message, peak = _read_peak(struct.pack("<HI", 5, len(text) + 1) + text + b"\x00")
    assert message.payload == text.decode() and peak <= 2 * len(text) + READ_CHUNK + 2**16, peak / len(text)


GIVE_BACK = """
import re, threading
from pathlib import Path
from mri_recon.server.service import release_free_memory
def rss():
    return int(re.search(r"VmRSS:\\s+(\\d+)", Path("/proc/self/status").read_text()).group(1)) * 1024
kept = []
def connection():
    big = []
    for _ in range(640):  # 100 KiB blocks (under glibc's mmap threshold) between small ones that stay
        big.append(bytearray(100 << 10))
        kept.append(bytearray(64))
thread = threading.Thread(target=connection)
thread.start()
thread.join()
before = rss()
release_free_memory()
print(before - rss())
"""


def test_what_a_connection_s_thread_freed_is_given_back():
    """Memory a thread freed in holes of its allocator arena (glibc keeps it there) is given back to the system
    by release_free_memory, which a connection's end calls: a fresh process, 64 MiB freed so."""
    if platform.libc_ver()[0] != "glibc":
        pytest.skip("glibc's malloc_trim only")
    done = subprocess.run([sys.executable, "-c", GIVE_BACK], capture_output=True, text=True, check=True, cwd=ROOT,
                          timeout=120)
    assert int(done.stdout.split()[-1]) >= 32 * MIB, done.stdout


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """A server with 4 clients of at most 8 MiB of acquisitions and 2 MiB messages, warmed by one scan."""
    folder = tmp_path_factory.mktemp("memory")
    scan = make_scan(folder / "scan.mrd.h5", 5)
    server, address = hostile.start_server(folder / "server.log", "--max-clients", str(CLIENTS),
                                           "--max-scan-bytes", str(SCAN), "--max-message-bytes", str(MESSAGE),
                                           "--idle-timeout", "5", "--header-timeout", "1")
    try:
        _, reply = send_scan(scan, *address)  # every module a reconstruction uses is loaded
        assert reply.images and not reply.errors
        yield server, address, scan
    finally:
        server.terminate()
        server.wait(60)


CASES = hostile.cases(CLIENTS, SCAN, MESSAGE)


@pytest.mark.slow
@pytest.mark.parametrize("name", list(CASES))
def test_peak_memory_under_hostile_clients_is_within_the_limits(served, name):
    """The growth of the server's peak RSS over a case, against what its connections may hold (4 at once, 8 MiB
    of acquisitions and 2 MiB messages each), and the next client served."""
    server, address, scan = served
    xml, acquisitions = read_scan(scan)
    clients, bound = CASES[name]
    grown, _ = hostile.peak_growth(server.pid, lambda: clients(address, xml, acquisitions))
    assert grown <= bound, (name, grown / MIB, bound / MIB)
    assert server.poll() is None
    reply = hostile.served(scan, address)  # and the next client is served
    assert reply.images and not reply.errors
