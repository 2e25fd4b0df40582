"""Malformed streams: each is answered with an ERROR TEXT and CLOSE (the client half-closes, so it can still
read), none takes the server down, and the next good client is served."""

from __future__ import annotations

import socket
import struct

import ismrmrd
import numpy as np
import pytest
from server_helpers import make_scan, running_server

from mri_recon.server.client import Reply, read_scan, receive, send_scan
from mri_recon.server.protocol import Limits


def _id(n: int) -> bytes:
    return struct.pack("<H", n)


def _sized(n: int, payload: bytes) -> bytes:
    return _id(n) + struct.pack("<I", len(payload)) + payload


def _config_file(name: bytes) -> bytes:
    return _id(1) + name.ljust(1024, b"\x00")


def _acq(acq) -> bytes:
    return _id(1008) + acq.to_bytes()


CLOSE = _id(4)


@pytest.fixture(scope="module")
def scan(tmp_path_factory):
    path = make_scan(tmp_path_factory.mktemp("malformed") / "scan.mrd.h5", 11)
    return path, *read_scan(path)


@pytest.fixture(scope="module")
def server():
    with running_server(limits=Limits(max_message_bytes=2 ** 20, max_text_bytes=2 ** 16,
                                      max_scan_bytes=2 ** 18)) as srv:
        yield srv


def _noise(acquisitions):
    return next(a for a in acquisitions if a.is_flag_set(ismrmrd.ACQ_IS_NOISE_MEASUREMENT))


def _data(acquisitions):
    return [a for a in acquisitions if not a.is_flag_set(ismrmrd.ACQ_IS_NOISE_MEASUREMENT)]


def _odd_acq(samples: int, channels: int, dims: int) -> bytes:
    """An acquisition header claiming these sizes, and no payload."""
    head = ismrmrd.AcquisitionHeader()
    head.version, head.number_of_samples, head.active_channels = 1, samples, channels
    head.available_channels, head.trajectory_dimensions = channels, dims
    return _id(1008) + bytes(head)


def _odd_waveform(samples: int, channels: int) -> bytes:
    head = ismrmrd.WaveformHeader()
    head.version, head.number_of_samples, head.channels = 1, samples, channels
    return _id(1026) + bytes(head)


def _empty_acq(samples: int, channels: int, dims: int):
    acq = ismrmrd.Acquisition.from_array(np.zeros((channels, samples), np.complex64),
                                         np.zeros((samples, dims), np.float32))
    acq.set_flag(ismrmrd.ACQ_LAST_IN_SLICE)
    return acq


def _compressed(acquisitions: list):
    """An imaging acquisition flagged as NHLBI-compressed (ACQ_COMPRESSION2, as gadgetron_ismrmrd_client -P)."""
    acq = next(a for a in acquisitions if not a.is_flag_set(ismrmrd.ACQ_IS_NOISE_MEASUREMENT))
    flagged = ismrmrd.Acquisition.from_array(acq.data.copy(), acq.traj.copy())
    flagged.set_flag(ismrmrd.ACQ_COMPRESSION2)
    return flagged


def _streams(xml: bytes, acquisitions: list) -> dict[str, tuple[bytes, str]]:
    """Name -> (bytes sent, a piece of the expected error)."""
    head = _sized(3, xml)
    data = _data(acquisitions)
    first, rest = _acq(data[0]), b"".join(_acq(a) for a in data[1:-1])  # the last (ACQ_LAST_IN_SLICE) left out
    doc = b'<?xml version="1.0"?><!DOCTYPE a [<!ENTITY x "xxxxxxxx"><!ENTITY y "&x;&x;&x;&x;">]><a>&y;</a>'
    return {
        "unknown id 7": (_id(7) + b"\x00" * 8, "unknown message ID 7"),
        "unknown id 65535": (_id(65535), "unknown message ID 65535"),
        "deprecated id 1001": (_id(1001) + b"\x00" * 64, "unknown message ID 1001"),
        "image from a client": (head + _id(1022) + b"\x00" * 300, "IMAGE messages are not accepted"),
        "ndarray": (_id(1030) + b"\x00" * 16, "NDARRAY messages are not accepted"),
        "data before header": (first + CLOSE, "before the XML header"),
        "close before header": (CLOSE, "CLOSE before the XML header"),
        "close without data": (head + CLOSE, "without imaging acquisitions"),
        "header not xml": (_sized(3, b"hello") + CLOSE, "does not parse"),
        "header other xml": (_sized(3, b"<a><b/></a>") + CLOSE, "does not parse"),
        "header entities": (_sized(3, doc) + CLOSE, "DOCTYPE or ENTITY"),
        "header length absurd": (_id(3) + struct.pack("<I", 0xFFFFFFFF), "over the limit"),
        "header second": (head + head, "a second XML header"),
        "config text absurd": (_id(2) + struct.pack("<I", 2 ** 31), "over the limit"),
        "config text not json": (_sized(2, b"{iterations: 5}") + head, "not JSON"),
        "config text json list": (_sized(2, b"[1, 2]") + head, "not an object"),
        "config unknown setting": (_sized(2, b'{"png": "/tmp/x.png"}') + head, "unexpected keyword argument 'png'"),
        "config bad value": (_sized(2, b'{"iterations": -1}') + head, "iterations must be a whole number >= 1"),
        "config text value too long": (_sized(2, b'{"method": "' + b"x" * 300 + b'"}') + head,
                                       "text of 300 characters"),
        "config bad preset in json": (_sized(2, b'{"preset": "nope"}') + head, "unknown config 'nope'"),
        "config file unknown": (_config_file(b"Generic_Cartesian_Grappa.xml") + head,
                                "unknown config 'Generic_Cartesian_Grappa.xml'"),
        "compressed acquisition": (head + _acq(_compressed(acquisitions)), "compressed acquisition"),
        "config file not utf8": (_config_file(b"\xff\xfe") + head, "not UTF-8"),
        "config after header": (head + _config_file(b"fast"), "after the XML header"),
        "text not utf8": (_sized(5, b"\xc3\x28"), "not UTF-8"),
        "acquisition absurd": (head + _odd_acq(65535, 65535, 3), "over the limit"),
        "waveform absurd": (head + _odd_waveform(65535, 65535), "a waveform (65535 channels"),
        "scan over its limit": (head + first * 300, "--max-scan-bytes"),
        "noise after data": (head + first + _acq(_noise(acquisitions)), "noise acquisition after imaging data"),
        "no trajectory": (head + _acq(_empty_acq(32, 4, 0)) + CLOSE, "ERROR"),
        "zero channels": (head + _acq(_empty_acq(32, 0, 2)) + CLOSE, "ERROR"),
        "truncated id": (b"\x03", "ended inside a message ID"),
        "truncated length": (_id(3) + b"\x10\x00", "ended inside the length"),
        "truncated header": (_id(3) + struct.pack("<I", 1000) + xml[:100], "ended inside a HEADER"),
        "truncated acquisition header": (head + first[:100], "ended inside an acquisition header"),
        "truncated acquisition data": (head + first[:-10], "ended inside an acquisition's data"),
        "no close": (head + first + rest, "ended without CLOSE"),
        "nothing": (b"", "ended without CLOSE"),
        "random bytes": (np.random.default_rng(5).bytes(3000), "ERROR"),
    }


def _names() -> list[str]:
    noise = _empty_acq(4, 1, 2)
    noise.set_flag(ismrmrd.ACQ_IS_NOISE_MEASUREMENT)
    return list(_streams(b"<x/>", [noise, _empty_acq(4, 1, 2), _empty_acq(4, 1, 2)]))


CASES = _names()


@pytest.mark.parametrize("name", CASES)
def test_malformed_stream_is_answered_and_the_server_serves_on(server, scan, name):
    _, xml, acquisitions = scan
    sent, expected = _streams(xml, acquisitions)[name]
    with socket.create_connection(server.address, timeout=30) as conn:
        try:
            conn.sendall(sent)
            conn.shutdown(socket.SHUT_WR)
        except OSError:  # the server may have answered and closed before all was sent
            pass
        reply = Reply()
        with conn.makefile("rb") as reader:
            receive(reader, reply, {})
    assert reply.closed and not reply.images
    assert reply.errors and expected in reply.errors[-1], reply.texts


def test_battery_is_large_and_a_good_client_follows(server, scan):
    assert len(CASES) >= 30
    path, _, _ = scan
    _, reply = send_scan(path, *server.address)
    assert reply.closed and len(reply.images) == 1 and not reply.texts
