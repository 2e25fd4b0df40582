"""The MRD (ISMRMRD) streaming protocol, read with limits and written by the ``ismrmrd`` package.

Framing (little-endian), as :class:`ismrmrd.ProtocolSerializer` writes it and python-ismrmrd-server's
``connection.py`` and Gadgetron's clients read and write it: every message starts with a ``uint16`` ID.

====  ===========  ==============================================================================
ID    name         payload
====  ===========  ==============================================================================
1     CONFIG_FILE  1024 bytes, a name padded with NUL bytes
2     CONFIG_TEXT  ``uint32`` length, text (a trailing NUL, as python-ismrmrd-server sends it, is dropped)
3     HEADER       ``uint32`` length, the ISMRMRD XML header (NUL-terminated or not)
4     CLOSE        none: the sender has sent everything
5     TEXT         ``uint32`` length, text
1008  ACQUISITION  340-byte header, trajectory (samples x dims float32), data (channels x samples complex64)
1022  IMAGE        198-byte header, ``uint64`` attribute length, attributes, data
1026  WAVEFORM     40-byte header, data (channels x samples uint32)
1030  NDARRAY      ``uint16`` type, version, ndim, ``uint64`` dims, data
====  ===========  ==============================================================================

:func:`read_message` reads one message from a binary stream and checks every size against
:class:`Limits` *before* reading the payload, so an absurd length is refused without allocating it. Payloads
become the ``ismrmrd`` package's objects (:class:`ismrmrd.Acquisition` from its header bytes and arrays);
nothing is evaluated or unpickled. :class:`MessageWriter` sends images, text and CLOSE through
:class:`ismrmrd.ProtocolSerializer`.
"""

from __future__ import annotations

import ctypes
import struct
import threading
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, BinaryIO

import numpy as np

from ..errors import MriReconError


class ProtocolError(MriReconError):
    """A stream that does not follow the MRD protocol (unknown ID, a size over the limit, bad text, ...)."""


class TruncatedError(ProtocolError):
    """The stream ended inside a message (the peer closed the connection or the pipe)."""


class MessageID(IntEnum):
    """The message IDs of the MRD streaming protocol (``ismrmrd.serialization.ISMRMRDMessageID``)."""

    CONFIG_FILE = 1
    CONFIG_TEXT = 2
    HEADER = 3
    CLOSE = 4
    TEXT = 5
    ACQUISITION = 1008
    IMAGE = 1022
    WAVEFORM = 1026
    NDARRAY = 1030


CONFIG_FILE_BYTES = 1024
"""The fixed payload of a CONFIG_FILE message."""
DEFAULT_MAX_MESSAGE = 256 * 2 ** 20
"""Default limit on one message's payload (bytes)."""
DEFAULT_MAX_SCAN = 8 * 2 ** 30
"""Default limit on the acquisition bytes one connection may hold."""


@dataclass(frozen=True)
class Limits:
    """Sizes a peer may send.

    Attributes
    ----------
    max_message_bytes
        The largest payload of one message (text, header, acquisition, waveform), in bytes.
    max_text_bytes
        The largest config or text message, in bytes (at most ``max_message_bytes``).
    max_scan_bytes
        The most acquisition bytes (data and trajectories) one connection may send.
    """

    max_message_bytes: int = DEFAULT_MAX_MESSAGE
    max_text_bytes: int = 16 * 2 ** 20
    max_scan_bytes: int = DEFAULT_MAX_SCAN

    def check(self, what: str, size: int, limit: int | None = None) -> None:
        """Refuse a payload of ``size`` bytes over the limit, naming the message."""
        cap = min(self.max_message_bytes, limit if limit is not None else self.max_message_bytes)
        if size > cap:
            raise ProtocolError(f"{what} of {size} bytes is over the limit of {cap} bytes (--max-message-bytes)")


DEFAULT_LIMITS = Limits()
"""The default :class:`Limits`."""


@dataclass(frozen=True)
class Message:
    """One received message: its ID and payload (text for config and text messages, the raw XML bytes for a
    header, an :class:`ismrmrd.Acquisition` or :class:`ismrmrd.Waveform`, ``None`` for CLOSE)."""

    id: MessageID
    payload: Any = None


def _ismrmrd():
    import ismrmrd  # noqa: PLC0415 - a dependency of mri-recon, imported on use like the readers do

    return ismrmrd


READ_CHUNK = 2 ** 20
"""Bytes asked of the stream at a time while a payload is read."""


def read_into(stream: BinaryIO, out: memoryview, what: str) -> None:
    """Fill ``out`` (a writable byte view: a buffer or an array's memory) from ``stream``, at most
    :data:`READ_CHUNK` bytes at a time: a payload is held once as it arrives, not as its pieces and then
    their join (:class:`TruncatedError` when the stream ends first)."""
    n, done = len(out), 0
    while done < n:
        chunk = stream.read(min(n - done, READ_CHUNK))
        if not chunk:
            raise TruncatedError(f"the stream ended inside {what} ({done} of {n} bytes received)")
        out[done:done + len(chunk)] = chunk
        done += len(chunk)
        del chunk  # before the next piece is read


def read_exactly(stream: BinaryIO, n: int, what: str) -> bytearray:
    """``n`` bytes of ``stream`` (fewer only at its end: :class:`TruncatedError`)."""
    out = bytearray(n)
    read_into(stream, memoryview(out), what)
    return out


def _before_nul(payload: bytearray) -> memoryview:
    """The payload up to its first NUL (python-ismrmrd-server terminates its texts with one), not copied."""
    end = payload.find(0)
    return memoryview(payload)[:end if end >= 0 else len(payload)]


def _text(payload: bytearray, what: str) -> str:
    """UTF-8 text up to its first NUL."""
    try:
        return str(_before_nul(payload), "utf-8")
    except UnicodeDecodeError as exc:
        raise ProtocolError(f"{what} is not UTF-8 text ({exc.reason} at byte {exc.start})") from None


def _length(stream: BinaryIO, what: str) -> int:
    return struct.unpack("<I", read_exactly(stream, 4, f"the length of {what}"))[0]


COMPRESSION_FLAGS = ("ACQ_COMPRESSION1", "ACQ_COMPRESSION2", "ACQ_COMPRESSION3", "ACQ_COMPRESSION4")
"""ISMRMRD acquisition flags of compressed data (Gadgetron's client sets them for ``-P`` and ``-Z``)."""


def _acquisition(stream: BinaryIO, limits: Limits):
    mr = _ismrmrd()
    head = read_exactly(stream, ctypes.sizeof(mr.AcquisitionHeader), "an acquisition header")
    fields = mr.AcquisitionHeader.from_buffer_copy(head)  # sizes checked before the arrays are made
    compressed = [n for n in COMPRESSION_FLAGS if fields.flags & (1 << (getattr(mr, n) - 1))]
    if compressed:  # the payload is not samples x channels: the stream cannot be followed past it
        raise ProtocolError(f"a compressed acquisition ({compressed[0]}: NHLBI or ZFP compression, e.g. "
                            f"gadgetron_ismrmrd_client -P / -Z) is not supported; send the data uncompressed")
    samples, channels, dims = fields.number_of_samples, fields.active_channels, fields.trajectory_dimensions
    traj_bytes, data_bytes = samples * dims * 4, samples * channels * 8
    limits.check(f"an acquisition ({samples} samples, {channels} channels, {dims} trajectory dimensions)",
                 traj_bytes + data_bytes)
    acq = mr.Acquisition(head)  # its arrays are read into: the payload is not held twice
    read_into(stream, _bytes_of(acq.traj), "an acquisition's trajectory")
    read_into(stream, _bytes_of(acq.data), "an acquisition's data")
    return acq


def _bytes_of(array: np.ndarray) -> memoryview:
    """The memory of a C-contiguous array (an acquisition's, made from the header whose sizes were read), as a
    writable byte view."""
    return memoryview(array.reshape(-1).view(np.uint8))


def _waveform(stream: BinaryIO, limits: Limits):
    mr = _ismrmrd()
    head = read_exactly(stream, ctypes.sizeof(mr.WaveformHeader), "a waveform header")
    fields = mr.WaveformHeader.from_buffer_copy(head)
    size = fields.channels * fields.number_of_samples * 4
    limits.check(f"a waveform ({fields.channels} channels, {fields.number_of_samples} samples)", size)
    wave = mr.Waveform(head)
    wave.data.ravel()[:] = np.frombuffer(read_exactly(stream, size, "a waveform's data"), dtype=np.uint32)
    return wave


def _image(stream: BinaryIO, limits: Limits):
    mr = _ismrmrd()
    head = read_exactly(stream, ctypes.sizeof(mr.ImageHeader), "an image header")
    n = struct.unpack("<Q", read_exactly(stream, 8, "an image's attribute length"))[0]
    limits.check("an image's attributes", n, limits.max_text_bytes)
    attributes = _text(read_exactly(stream, n, "an image's attributes"), "an image's attributes")
    fields = mr.ImageHeader.from_buffer_copy(head)  # sizes checked before the array is made
    try:
        dtype = np.dtype(mr.image.get_dtype_from_data_type(fields.data_type))
    except (KeyError, TypeError):
        raise ProtocolError(f"an image of unknown data type {fields.data_type}") from None
    matrix = [int(v) for v in fields.matrix_size]
    size = int(np.prod(matrix, dtype=np.int64)) * int(fields.channels) * dtype.itemsize
    limits.check(f"an image ({matrix} x {fields.channels} channels)", size)
    image = mr.Image(head, attributes)
    image.data.ravel()[:] = np.frombuffer(read_exactly(stream, size, "an image's data"), dtype=dtype)
    return image


def _peer_sends_no(name: str) -> ProtocolError:
    return ProtocolError(f"{name} messages are not accepted: this server reconstructs raw acquisitions "
                         f"(config, XML header, acquisitions, CLOSE)")


def read_message(stream: BinaryIO, limits: Limits = DEFAULT_LIMITS, *, images: bool = False) -> Message | None:
    """The next message of ``stream``; ``None`` at the stream's end between messages. IMAGE messages are
    read only with ``images=True`` (a client's side); a server refuses them.

    Raises
    ------
    TruncatedError
        The stream ended inside a message.
    ProtocolError
        An unknown ID, a size over ``limits``, text that is not UTF-8, an NDARRAY message (or IMAGE, unless
        ``images``).
    """
    first = stream.read(2)
    if not first:
        return None
    raw = struct.unpack("<H", first + read_exactly(stream, 2 - len(first), "a message ID"))[0]
    try:
        kind = MessageID(raw)
    except ValueError:
        raise ProtocolError(f"unknown message ID {raw}; expected one of "
                            f"{', '.join(f'{m.value} ({m.name})' for m in MessageID)}") from None
    if kind == MessageID.CLOSE:
        return Message(kind)
    if kind == MessageID.CONFIG_FILE:
        return Message(kind, _text(read_exactly(stream, CONFIG_FILE_BYTES, "a CONFIG_FILE message"), "CONFIG_FILE"))
    if kind in (MessageID.CONFIG_TEXT, MessageID.TEXT, MessageID.HEADER):
        n = _length(stream, kind.name)
        limits.check(f"a {kind.name} message", n, None if kind == MessageID.HEADER else limits.max_text_bytes)
        payload = read_exactly(stream, n, f"a {kind.name} message")
        if kind == MessageID.HEADER:
            return Message(kind, bytes(_before_nul(payload)))
        return Message(kind, _text(payload, kind.name))
    if kind == MessageID.ACQUISITION:
        return Message(kind, _acquisition(stream, limits))
    if kind == MessageID.WAVEFORM:
        return Message(kind, _waveform(stream, limits))
    if kind == MessageID.IMAGE and images:
        return Message(kind, _image(stream, limits))
    raise _peer_sends_no(kind.name)


class MessageWriter:
    """Writes messages to a binary stream with :class:`ismrmrd.ProtocolSerializer` (one writer at a time)."""

    def __init__(self, stream: BinaryIO) -> None:
        self._stream = stream
        self._serializer = _ismrmrd().ProtocolSerializer(stream)
        self._lock = threading.Lock()

    def send(self, obj: Any) -> None:
        """Send an :class:`ismrmrd.Image`, :class:`ismrmrd.Acquisition`, header, config or text (a ``str``)."""
        with self._lock:
            self._serializer.serialize(obj)
            self._stream.flush()

    def close(self) -> None:
        """Send CLOSE (the stream itself stays open)."""
        with self._lock:
            self._serializer.close()
