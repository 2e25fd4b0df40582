"""The commands as processes: pipe mode (``reconstruct - -o -``) on stdin/stdout, and ``serve`` stopped by
SIGTERM while a scan is running."""

from __future__ import annotations

import io
import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from server_helpers import assert_same_images, make_scan, reference

from mri_recon.cli import main
from mri_recon.server.client import Reply, config_messages, read_scan, receive, stream_scan
from mri_recon.server.protocol import MessageID

ROOT = Path(__file__).resolve().parents[1]


def _command(*args: str) -> list[str]:
    return [sys.executable, "-m", "mri_recon", *args]


def _env() -> dict:
    return {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}


@pytest.fixture(scope="module")
def scan(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("cli")
    return tmp, make_scan(tmp / "two.mrd.h5", 3, slices=1, repetitions=2)


def _stream(path: Path, configs=()) -> bytes:
    xml, acquisitions = read_scan(path)
    buffer = io.BytesIO()
    stream_scan(buffer, xml, acquisitions, configs)
    return buffer.getvalue()


def _parse(raw: bytes) -> tuple[Reply, bytes]:
    """The reply in ``raw`` and whatever follows its CLOSE."""
    reply, stream = Reply(), io.BytesIO(raw)
    receive(stream, reply, {})
    return reply, stream.read()


def test_pipe_mode_round_trip(scan):
    tmp, path = scan
    done = subprocess.run(_command("reconstruct", "-", "-o", "-", "--device", "cpu", "--no-cache", "-v"),
                          input=_stream(path), capture_output=True, env=_env(), timeout=300)
    assert done.returncode == 0, done.stderr.decode()
    reply, after = _parse(done.stdout)
    assert reply.closed and after == b"" and not reply.texts  # nothing but the protocol on stdout
    assert [im.repetition for im in reply.images] == [0, 1]
    assert_same_images(reply.images, reference(path, tmp))
    assert b"sent" in done.stderr and b"after its last acquisition" in done.stderr  # the log went to stderr


def test_pipe_mode_takes_options_and_config(scan):
    tmp, path = scan
    done = subprocess.run(_command("reconstruct", "-", "-o", "-", "--device", "cpu", "--no-cache", "-q",
                                   "--iterations", "4"),
                          input=_stream(path, config_messages(settings='{"coil_maps": "rss"}')),
                          capture_output=True, env=_env(), timeout=300)
    assert done.returncode == 0, done.stderr.decode()
    reply, _ = _parse(done.stdout)
    assert_same_images(reply.images, reference(path, tmp, "--iterations", "4", "--coil-maps", "rss"))


def test_pipe_mode_refuses_other_outputs_and_bad_streams(scan):
    runner = CliRunner()
    for args, message in ((["-o", "x.h5"], "pipe mode is 'reconstruct - -o -'"),
                          (["-o", "-", "--png", "x.png"], "(not --png)")):
        result = runner.invoke(main, ["reconstruct", "-", *args])
        assert result.exit_code == 2 and message in result.output
    done = subprocess.run(_command("reconstruct", "-", "-o", "-", "--device", "cpu"), input=b"\x07\x00junk",
                          capture_output=True, env=_env(), timeout=120)
    assert done.returncode == 1 and b"was refused" in done.stderr
    reply, _ = _parse(done.stdout)
    assert reply.closed and "unknown message ID 7" in reply.errors[0]


def test_serve_finishes_the_running_scan_on_sigterm(scan):
    tmp, path = scan
    server = subprocess.Popen(_command("serve", "--port", "0", "--device", "cpu", "--no-cache"),
                              stderr=subprocess.PIPE, env=_env())
    try:
        line = b""
        while b"listening on" not in line:
            line = server.stderr.readline()
            assert line, "the server ended before listening"
        port = int(re.search(rb":(\d+)\s*$", line).group(1))
        raw = _stream(path)
        with socket.create_connection(("127.0.0.1", port), timeout=60) as conn:
            conn.sendall(raw[:-2])  # all but CLOSE
            server.send_signal(signal.SIGTERM)
            conn.sendall(MessageID.CLOSE.to_bytes(2, "little"))
            reply = Reply()
            with conn.makefile("rb") as reader:
                receive(reader, reply, {})
        assert server.wait(60) == 0
    finally:
        if server.poll() is None:
            server.kill()
        server.stderr.close()
    assert reply.closed
    assert_same_images(reply.images, reference(path, tmp))
