"""The server's memory: a message being read is held once as it arrives."""

from __future__ import annotations

import io
import struct
import tracemalloc

import ismrmrd
import numpy as np

from mri_recon.server.protocol import READ_CHUNK, Limits, MessageID, read_message

MIB = 2**20


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
