"""The server under hostile and accidental load: what a connection holds is counted (acquisitions with their
overhead, config text; TEXT and WAVEFORM not kept), a client's settings are bounded, work stops when its
client leaves, and a real client is served after each."""

from __future__ import annotations

import io
import logging
import socket
import struct
import time

import ismrmrd
import numpy as np
import pytest
from server_helpers import make_scan, running_server

from mri_recon.server.client import read_scan, send_scan
from mri_recon.server.inbox import ACQUISITION_OVERHEAD, KEPT_TEXT, Inbox
from mri_recon.server.protocol import Limits, MessageID, ProtocolError


def _id(n: int) -> bytes:
    return struct.pack("<H", n)


def _sized(n: int, payload: bytes) -> bytes:
    return _id(n) + struct.pack("<I", len(payload)) + payload


def _acq(samples: int = 1) -> bytes:
    acq = ismrmrd.Acquisition.from_array(np.zeros((1, samples), np.complex64), np.zeros((samples, 2), np.float32))
    return _id(1008) + acq.to_bytes()


def _drain(inbox: Inbox) -> list:
    out = []
    while True:
        try:
            message, _ = inbox.get(5.0)
        except ProtocolError as exc:
            return [*out, exc]
        out.append(message)
        if message is None or message.id == MessageID.CLOSE:
            return out


def test_many_tiny_acquisitions_are_counted_with_their_overhead():
    limits = Limits(max_scan_bytes=4 * 2 ** 20)
    one = _acq()
    count = limits.max_scan_bytes // ACQUISITION_OVERHEAD + 10  # 1.5 MiB of data, 4 MiB with the overhead
    got = _drain(Inbox(io.BytesIO(one * count + _id(4)), limits))
    assert isinstance(got[-1], ProtocolError) and "exceed 4194304 bytes (--max-scan-bytes)" in str(got[-1])
    assert len(got) - 1 < count


def test_text_messages_are_not_held_and_config_text_is_counted():
    limits = Limits(max_text_bytes=2 ** 20, max_scan_bytes=8 * 2 ** 20)
    text = _sized(5, b"x" * (2 ** 20 - 1) + b"\x00")
    got = _drain(Inbox(io.BytesIO(text * 64 + _id(4)), limits))  # 64 MiB of TEXT: not held, not over
    assert [m.id for m in got] == [MessageID.TEXT] * 64 + [MessageID.CLOSE]
    assert all(len(m.payload) <= KEPT_TEXT for m in got[:-1])
    config = _sized(2, b'{"iterations": 5}' + b" " * (2 ** 20 - 20) + b"\x00")
    got = _drain(Inbox(io.BytesIO(config * 9 + _id(4)), limits))
    assert isinstance(got[-1], ProtocolError) and "--max-scan-bytes" in str(got[-1])


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("hostile")
    return make_scan(folder / "small.mrd.h5", 3), make_scan(folder / "big.mrd.h5", 4, matrix=48)


@pytest.mark.parametrize(("settings", "expected"), [
    ('{"inner_iterations": 200, "regularizer": "tv"}', "inner_iterations 200 is over this server's limit of 50 "
                                                       "(serve --max-inner-iterations)"),
    ('{"iterations": 5000}', "iterations 5000 is over this server's limit of 500 (serve --max-iterations)"),
    ('{"filter_sigma": 300000}', "filter_sigma 300000 is over this server's limit of 32 (serve --max-filter-sigma)"),
], ids=["inner", "iterations", "filter"])
def test_a_clients_settings_are_bounded(files, settings, expected):
    with running_server() as server:
        _, reply = send_scan(files[0], *server.address, settings=settings)
        assert not reply.images and len(reply.errors) == 1 and expected in reply.errors[0], reply.errors
        _, good = send_scan(files[0], *server.address)
        assert good.images and not good.errors


def _leave_mid_reconstruction(files, caplog, device: str) -> None:
    """A client asks for 500 x 50 TV steps at 48^2 and leaves once its data are in; the next is served."""
    xml, acquisitions = read_scan(files[1])
    stream = (_sized(2, b'{"regularizer": "tv", "iterations": 500, "inner_iterations": 50, "tol": 0}\x00')
              + _sized(3, xml) + b"".join(_id(1008) + a.to_bytes() for a in acquisitions))
    with caplog.at_level(logging.INFO, logger="mri_recon.server"), running_server(device=device) as server:
        conn = socket.create_connection(server.address)
        conn.sendall(stream)  # every acquisition, the last one flagged: the reconstruction starts ...
        time.sleep(1.0)
        conn.close()  # ... and its client leaves without reading or CLOSE
        started = time.perf_counter()
        _, good = send_scan(files[0], *server.address)
        assert good.images and not good.errors
        server.stop()
    assert any("its reconstruction was stopped" in r.getMessage() for r in caplog.records), caplog.text
    assert time.perf_counter() - started < 60  # 500 x 50 TV steps at 48^2 would hold the device for minutes


def test_work_stops_when_its_client_leaves_and_the_next_client_is_served(files, caplog):
    _leave_mid_reconstruction(files, caplog, "cpu")


@pytest.mark.gpu
def test_gpu_work_stops_when_its_client_leaves(files, caplog):
    _leave_mid_reconstruction(files, caplog, "gpu")


_PEEK = """
import socket, sys
conn = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=20)
data = b""
while True:
    chunk = conn.recv(65536)
    if not chunk:
        break
    data += chunk
print(data.decode("latin1"))
"""


def _as_nobody(port: int) -> str:
    """What the server sends a connection of user ``nobody`` (a system Python run as that user)."""
    import os
    import shutil
    import subprocess

    python = shutil.which("python3", path="/usr/bin:/bin")
    if os.geteuid() != 0 or python is None:
        pytest.skip("needs root (to run a client as another user) and a system python3")
    done = subprocess.run([python, "-c", _PEEK, str(port)], user=65534, capture_output=True, text=True,
                          timeout=60)
    if done.returncode != 0:
        pytest.skip(f"a client as nobody could not run: {done.stderr[-200:]}")
    return done.stdout


def test_another_local_user_is_refused_by_default_and_served_when_allowed(files):
    with running_server() as server:
        shown = _as_nobody(server.address[1])
        assert "ERROR" in shown and "serves user" in shown and "this connection's user is nobody (65534)" in shown
        _, mine = send_scan(files[0], *server.address)  # the server's own user: served
        assert mine.images and not mine.errors
    with running_server(allowed_users=frozenset({0, 65534}), idle_timeout=1.0) as server:
        shown = _as_nobody(server.address[1])
        assert "serves user" not in shown  # served: the session waits for its header, then times out


def test_peer_uid_finds_this_processs_user():
    import os

    from mri_recon.server.peers import parse_users, peer_uid

    listener = socket.create_server(("127.0.0.1", 0))
    client = socket.create_connection(listener.getsockname())
    conn, _ = listener.accept()
    try:
        assert peer_uid(conn) == os.getuid()
    finally:
        conn.close(), client.close(), listener.close()
    assert parse_users("any") is None and parse_users("0,65534") == {os.getuid(), 0, 65534}
    with pytest.raises(ValueError, match="no user named 'no-such-user-here'"):
        parse_users("no-such-user-here")
