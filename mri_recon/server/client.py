"""A small MRD client: stream an ISMRMRD file to a server (or into a pipe) and collect the images it returns.

:func:`stream_scan` writes a file as MRD messages (config, XML header verbatim, every acquisition in the
file's order, CLOSE); :func:`send_scan` does so over TCP while a thread receives the replies, and
:func:`write_images` stores the images as an MRD file with the scan's XML header (what ``mri-recon
reconstruct scan -o out.mrd.h5`` writes).
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, BinaryIO

import h5py

from ..errors import InvalidDataError, MriReconError, printable
from ..io.files import memory_output
from ..io.schema import is_hdf5_scan
from .protocol import DEFAULT_LIMITS, Limits, MessageID, MessageWriter, ProtocolError, read_message
from .session import TRIGGERS, flag_mask, group_key

HDF5_LOCK = threading.Lock()
"""Held around the client's HDF5 reads and writes: the ``ismrmrd`` package's files (h5py's ``stdio`` driver,
records of variable length) crash the process when threads read them at once (the soak's clients run as
threads)."""


def _ismrmrd():
    import ismrmrd  # noqa: PLC0415 - a dependency, imported on use

    return ismrmrd


@dataclass
class Reply:
    """What a server sent back: images (``ismrmrd.Image``), TEXT messages, whether it ended with CLOSE, and
    each image's latency in ms (from sending its group's last acquisition to receiving the image)."""

    images: list[Any] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    closed: bool = False
    latencies_ms: list[float] = field(default_factory=list)

    @property
    def errors(self) -> list[str]:
        """The TEXT messages that report errors."""
        return [t for t in self.texts if t.startswith("ERROR")]


def read_scan(path: str | os.PathLike) -> tuple[bytes, list[Any]]:
    """The XML header (as stored) and acquisitions of an ISMRMRD file."""
    if is_hdf5_scan(path) != "ismrmrd":
        raise InvalidDataError(printable(f"{path}: not an ISMRMRD raw-data file (expected a dataset with 'xml' "
                                         f"and acquisitions 'data')"))
    mr = _ismrmrd()
    with HDF5_LOCK, mr.File(str(path), "r") as f:
        name = "dataset" if "dataset" in f.keys() else next(iter(f.keys()))
        acquisitions = list(f[name].acquisitions)
    with HDF5_LOCK, h5py.File(path, "r") as f:
        xml = f[name]["xml"][0]
    return (xml.encode() if isinstance(xml, str) else bytes(xml)), acquisitions


def config_messages(config: str | None = None, settings: str | None = None) -> list[Any]:
    """CONFIG_FILE for a preset name and CONFIG_TEXT for JSON settings (``ismrmrd``'s wrappers)."""
    mr = _ismrmrd()
    out = []
    if config is not None:
        out.append(mr.serialization.ConfigFile(config))
    if settings is not None:
        out.append(mr.serialization.ConfigText(settings))
    return out


def stream_scan(stream: BinaryIO, xml: bytes, acquisitions: Sequence[Any], configs: Sequence[Any] = (),
                sent: dict | None = None) -> None:
    """Write config messages, the header, the acquisitions and CLOSE to ``stream``; ``sent`` (if given) gets
    the time each image group's triggering acquisition (``ACQ_LAST_IN_SLICE`` ...) was sent, by group key."""
    writer = MessageWriter(stream)
    for message in configs:
        writer.send(message)
    stream.write(MessageID.HEADER.to_bytes(2, "little") + len(xml).to_bytes(4, "little") + xml)
    trigger = flag_mask(TRIGGERS)
    for acq in acquisitions:
        writer.send(acq)
        if sent is not None and acq.flags & trigger:
            sent.setdefault(group_key(acq), time.perf_counter())
    if sent is not None:
        sent["close"] = time.perf_counter()
    writer.close()


def receive(stream: BinaryIO, reply: Reply, sent: dict, limits: Limits = DEFAULT_LIMITS) -> None:
    """Read a server's messages into ``reply`` until CLOSE or the end of the stream."""
    while True:
        message = read_message(stream, limits, images=True)
        if message is None:
            return
        if message.id == MessageID.CLOSE:
            reply.closed = True
            return
        if message.id == MessageID.IMAGE:
            image = message.payload
            key = tuple(int(getattr(image, n)) for n in ("slice", "contrast", "phase", "set", "repetition"))
            start = sent.get(key, sent.get("close", time.perf_counter()))
            reply.latencies_ms.append(1e3 * (time.perf_counter() - start))
            reply.images.append(image)
        elif message.id == MessageID.TEXT:
            reply.texts.append(message.payload)


def send_scan(path: str | os.PathLike, host: str = "127.0.0.1", port: int = 9002, *, config: str | None = None,
              settings: str | None = None, timeout: float = 300.0) -> tuple[bytes, Reply]:
    """Stream the ISMRMRD file ``path`` to a server; ``(its XML header, the Reply)``.

    Raises
    ------
    MriReconError
        The file is not ISMRMRD raw data, the server cannot be reached, or its reply is malformed.
    """
    xml, acquisitions = read_scan(path)
    reply, sent = Reply(), {}
    try:
        conn = socket.create_connection((host, port), timeout=timeout)
    except OSError as exc:
        raise MriReconError(printable(f"cannot connect to {host}:{port} ({exc.strerror or exc})")) from None
    failure: list[BaseException] = []

    def run_receive() -> None:
        try:
            with conn.makefile("rb") as reader:
                receive(reader, reply, sent)
        except (ProtocolError, OSError) as exc:
            failure.append(exc)

    receiver = threading.Thread(target=run_receive, name="mrd receive")
    receiver.start()
    try:
        with conn.makefile("wb") as out:
            stream_scan(out, xml, acquisitions, config_messages(config, settings), sent)
    except OSError:
        pass  # the server closed early (an error TEXT says why): the receiver has its reply
    finally:
        receiver.join()
        conn.close()
    if failure and not reply.closed:
        raise MriReconError(printable(f"{host}:{port}: the reply ended early ({failure[0]})"))
    return xml, reply


def write_images(path: str | os.PathLike, xml: bytes, images: Sequence[Any],
                 protect: tuple[str | os.PathLike, ...] = ()) -> None:
    """Write ``images`` as an MRD file (series ``image_<image_series_index>``) with the XML header ``xml``."""
    if not images:
        raise MriReconError(f"{path}: the server returned no images; nothing was written")
    mr = _ismrmrd()
    with memory_output(path, protect=protect) as buffer, HDF5_LOCK:
        with mr.Dataset(buffer, "dataset", create_if_needed=True, mode="w") as dataset:
            dataset.write_xml_header(xml)
            for image in images:
                dataset.append_image(f"image_{image.image_series_index}", image)
