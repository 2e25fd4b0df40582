"""Streamed time series (``serve --spokes-per-frame K``): each frame of K readouts comes back as soon as its
K-th readout arrived, equal bit for bit to ``mri_recon.reconstruct`` of those K readouts alone; a remainder
at CLOSE is reported, a bad K refused."""

from __future__ import annotations

import io
import logging
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import ismrmrd
import numpy as np
import pytest
from click.testing import CliRunner
from server_helpers import image_of, running_server

import mri_recon
from mri_recon.cli import main
from mri_recon.io import load_scans
from mri_recon.io.frames import frames_by_readouts
from mri_recon.io.ismrmrd_write import write_ismrmrd
from mri_recon.server.client import Reply, config_messages, read_scan, receive, send_scan, stream_scan
from mri_recon.server.protocol import MessageID, MessageWriter
from mri_recon.sim.simulate import simulate_scan

K, FRAMES, LEFT = 8, 3, 3


@pytest.fixture(scope="module")
def series(tmp_path_factory):
    """One continuous golden-angle acquisition (32^2, 2 coils, noise) of FRAMES * K + LEFT spokes."""
    path = tmp_path_factory.mktemp("frames") / "series.mrd.h5"
    seed = int(np.random.SeedSequence().entropy % 2 ** 20)
    scan = simulate_scan((32, 32), "golden", coils=2, snr=30.0, spokes=FRAMES * K + LEFT, samples=64, seed=seed)
    write_ismrmrd(path, [({"slice": 0, "repetition": 0}, scan)])
    return path


def _child_env(root):
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])}


def _frame_references(path, k):
    """``mri_recon.reconstruct`` of each frame of k readouts as a scan of its own (complex64 images)."""
    (_, scan), = load_scans(path)
    cut = frames_by_readouts(scan, k)
    return [np.asarray(mri_recon.reconstruct(frame, device="cpu").image, dtype=np.complex64) for frame in cut.frames]


def _stream_holding(port, xml, acquisitions, configs, hold_after):
    """Send the scan, stopping after ``hold_after`` imaging readouts until one image came back; returns the
    reply and how many images had arrived when the sending went on."""
    reply = Reply()
    conn = socket.create_connection(("127.0.0.1", port), timeout=60)
    receiver = threading.Thread(target=lambda: receive(conn.makefile("rb"), reply, {}))
    receiver.start()
    out = conn.makefile("wb")
    writer = MessageWriter(out)
    for message in configs:
        writer.send(message)
    out.write(MessageID.HEADER.to_bytes(2, "little") + len(xml).to_bytes(4, "little") + xml)
    noise = [a for a in acquisitions if a.is_flag_set(ismrmrd.ACQ_IS_NOISE_MEASUREMENT)]
    imaging = [a for a in acquisitions if not a.is_flag_set(ismrmrd.ACQ_IS_NOISE_MEASUREMENT)]
    assert noise and len(imaging) == FRAMES * K + LEFT
    for acq in noise + imaging[:hold_after]:
        writer.send(acq)
    out.flush()
    deadline = time.monotonic() + 60
    while not reply.images and time.monotonic() < deadline and receiver.is_alive():
        time.sleep(0.01)
    seen = len(reply.images)
    for acq in imaging[hold_after:]:
        writer.send(acq)
    writer.close()
    receiver.join(60)
    conn.close()
    return reply, seen


@pytest.mark.parametrize("how", ["server", "client"])
def test_frames_stream_back_before_close_equal_to_each_frame_alone(series, how, caplog):
    xml, acquisitions = read_scan(series)
    configs = config_messages(settings=f'{{"spokes_per_frame": {K}}}') if how == "client" else []
    with caplog.at_level(logging.INFO, "mri_recon.server"), \
            running_server(spokes_per_frame=K if how == "server" else None) as server:
        reply, seen = _stream_holding(server.address[1], xml, acquisitions, configs, K)
    assert seen == 1  # frame 0 came back while frames 1.. were not sent yet
    assert reply.closed and not reply.errors
    assert [im.repetition for im in reply.images] == list(range(FRAMES))
    assert {im.image_series_index for im in reply.images} == {0}
    assert [im.image_index for im in reply.images] == list(range(1, FRAMES + 1))
    for record, want in zip(reply.images, _frame_references(series, K), strict=True):
        assert image_of(record).tobytes() == want.tobytes()
    assert reply.texts == [f"WARNING  {LEFT} readout(s) after frame {FRAMES - 1} of slice 0 contrast 0 phase 0 "
                           f"set 0 dropped ({FRAMES} frame(s) of {K} readouts)"]
    assert len([r for r in caplog.records if "ms after its last acquisition" in r.getMessage()]) == FRAMES
    assert any("latency p50" in r.getMessage() and "p99" in r.getMessage() for r in caplog.records)


def test_frames_of_another_k_without_remainder(series):
    k = (FRAMES * K + LEFT) // 3  # three frames exactly
    with running_server(spokes_per_frame=K) as server:  # the client's choice wins over the server's
        _, reply = send_scan(series, *server.address, settings=f'{{"spokes-per-frame": {k}}}')
    assert reply.closed and not reply.texts
    for record, want in zip(reply.images, _frame_references(series, k), strict=True):
        assert image_of(record).tobytes() == want.tobytes()


@pytest.mark.parametrize("value", ["0", "-3", "2.5", "true", '"8"', "2000000"])
def test_bad_spokes_per_frame_refused(series, value):
    with running_server() as server:
        _, reply = send_scan(series, *server.address, settings=f'{{"spokes_per_frame": {value}}}')
    assert not reply.images and reply.closed
    assert len(reply.errors) == 1 and "spokes_per_frame must be a whole number >= 1" in reply.errors[0]


def test_a_misspelled_spokes_per_frame_is_named(series):
    with running_server() as server:
        _, reply = send_scan(series, *server.address, settings='{"spokes_per_frames": 8}')
    assert not reply.images and "(did you mean 'spokes_per_frame'?)" in reply.errors[0]


def test_temporal_tv_is_not_streamed(series):
    with running_server() as server:
        _, reply = send_scan(series, *server.address, settings='{"temporal": "tv", "spokes_per_frame": 8}')
    assert not reply.images and "needs every frame before its first image" in reply.errors[0]


def test_fewer_readouts_than_one_frame(series):
    with running_server(spokes_per_frame=FRAMES * K + LEFT + 1) as server:
        _, reply = send_scan(series, *server.address)
    assert not reply.images and reply.closed
    assert reply.texts[0].startswith(f"WARNING  {FRAMES * K + LEFT} readout(s) of slice 0")
    assert "before any frame" in reply.errors[0]


def test_serve_refuses_a_bad_spokes_per_frame():
    result = CliRunner().invoke(main, ["serve", "--port", "0", "--spokes-per-frame", "0"])
    assert result.exit_code == 2 and "--spokes-per-frame" in result.output


def _piped_frames(series, configs, *options):
    """``reconstruct - -o - OPTIONS`` of the series streamed with ``configs``: the reply, its frames checked
    against each frame's reconstruction alone."""
    xml, acquisitions = read_scan(series)
    buffer = io.BytesIO()
    stream_scan(buffer, xml, acquisitions, configs)
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, "-m", "mri_recon", "reconstruct", "-", "-o", "-", "--device", "cpu",
                           "--no-cache", "-q", *options], input=buffer.getvalue(),
                          capture_output=True, env=_child_env(root), timeout=300)
    assert done.returncode == 0, done.stderr.decode()
    reply = Reply()
    receive(io.BytesIO(done.stdout), reply, {})
    assert reply.closed and [im.repetition for im in reply.images] == list(range(FRAMES))
    for record, want in zip(reply.images, _frame_references(series, K), strict=True):
        assert image_of(record).tobytes() == want.tobytes()
    return reply


def test_pipe_mode_streams_frames_a_client_asks_for(series):
    reply = _piped_frames(series, config_messages(settings=f'{{"spokes_per_frame": {K}}}'))
    assert len(reply.texts) == 1 and reply.texts[0].startswith(f"WARNING  {LEFT} readout(s)")


def test_pipe_mode_takes_spokes_per_frame_on_its_command_line(series):
    """``reconstruct - -o - --spokes-per-frame K``: the stream (no config asking for frames) comes back as
    frames of K readouts, each equal to the reconstruction of its readouts alone."""
    _piped_frames(series, [], "--spokes-per-frame", str(K))


@pytest.mark.parametrize("extra", [["--temporal", "tv"], ["--frames", "2"], ["--temporal-lambda", "0.1"],
                                   ["--temporal-axis", "phase"], ["--temporal-solver", "pdhg"]])
@pytest.mark.parametrize("spokes", [["--spokes-per-frame", "4"], []])
def test_pipe_mode_refuses_a_joint_time_series(extra, spokes):
    result = CliRunner().invoke(main, ["reconstruct", "-", "-o", "-", *spokes, *extra])
    assert result.exit_code == 2 and "pipe mode streams frames" in result.output


def test_pipe_mode_takes_the_options_that_change_nothing(series):
    _piped_frames(series, [], "--spokes-per-frame", str(K), "--temporal", "none", "--temporal-solver", "admm")


def test_interleaved_slices_are_cut_into_frames_of_their_own():
    from mri_recon.server.frames import FrameCutter

    rng = np.random.default_rng()
    k = int(rng.integers(2, 6))
    slices = rng.integers(0, 3, size=7 * k)  # the slice of each arriving readout, in random order
    cutter, done = FrameCutter(k), []
    for n, s in enumerate(slices):
        acq = ismrmrd.Acquisition.from_array(np.zeros((1, 4), np.complex64))
        acq.idx.slice, acq.idx.repetition, acq.scan_counter = int(s), 9, n
        frame = cutter.add(acq)
        if frame is not None:
            done.append(frame)
    for s in range(3):
        arrived = np.flatnonzero(slices == s)
        mine = [(t, [a.scan_counter for a in acqs]) for key, t, acqs in done if key[0] == s]
        assert [t for t, _ in mine] == list(range(len(arrived) // k))
        assert [n for _, ns in mine for n in ns] == list(arrived[: len(mine) * k])
        assert all(a.idx.repetition == t for key, t, acqs in done if key[0] == s for a in acqs)
    left = {key[0]: (n, frames) for key, n, frames in cutter.remainders()}
    assert left == {s: (int(np.sum(slices == s)) % k, int(np.sum(slices == s)) // k) for s in range(3)
                    if np.sum(slices == s) % k}
