"""One MRD connection (a TCP client, or stdin/stdout in pipe mode): config, header, acquisitions, images, CLOSE.

Order the client must keep: config messages (optional: CONFIG_FILE naming a preset, CONFIG_TEXT with JSON
settings), the XML HEADER, noise acquisitions (``ACQ_IS_NOISE_MEASUREMENT``) before any imaging data, the
imaging acquisitions, CLOSE. TEXT and WAVEFORM messages are logged and otherwise ignored.

Image groups: the acquisitions of one ``slice``, ``contrast``, ``phase``, ``set`` and ``repetition`` form one
image, as :func:`mri_recon.load_scans` groups a file (:func:`group_key`). A group is reconstructed as soon as
an acquisition of it carries ``ACQ_LAST_IN_SLICE``, ``ACQ_LAST_IN_REPETITION`` or
``ACQ_LAST_IN_MEASUREMENT``, and its image is sent at once; groups without such a flag, and groups that
received more data after their image was sent (a warning), are reconstructed at CLOSE, in index order. Each
image's latency (from the arrival of its group's last acquisition to the image sent) is logged, and its
median and 99th percentile at CLOSE.

Frames: with ``spokes_per_frame`` K (:class:`~mri_recon.server.config.Choices`), the flags are not looked
at: each K consecutive imaging acquisitions of a stream form a frame (:mod:`mri_recon.server.frames`),
reconstructed as that frame alone, as soon as its K-th arrives, and sent with ``repetition`` = the frame
number; readouts left over at CLOSE are dropped and reported in a TEXT message ``"WARNING  ..."``.

A broken rule or a malformed message ends the connection with a TEXT message ``"ERROR    ..."`` (the
logging prefix of python-ismrmrd-server) and CLOSE; a client that disconnects mid-scan is logged and its
data dropped.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any, BinaryIO

import numpy as np

from ..errors import MriReconError, printable
from ..io.stack import DIMENSIONS
from ..settings import ReconSettings
from .config import Choices
from .frames import FrameCutter, describe_stream, frame_scan
from .inbox import IdleTimeout, Inbox
from .protocol import DEFAULT_LIMITS, Limits, Message, MessageID, MessageWriter, ProtocolError, TruncatedError
from .recon import Cancelled, Reconstructor, describe_key, image_records

log = logging.getLogger(__name__)

Configure = Callable[[Sequence[tuple[str, str]]], Choices]
"""Turns a connection's config messages (``("file", name)``, ``("text", json)``) into its settings and
readouts per frame."""

TRIGGERS = ("ACQ_LAST_IN_SLICE", "ACQ_LAST_IN_REPETITION", "ACQ_LAST_IN_MEASUREMENT")
"""Flags that complete an acquisition's image group."""


def group_key(acq: Any) -> tuple[int, ...]:
    """The image group of an acquisition: its ``(slice, contrast, phase, set, repetition)``."""
    return tuple(int(getattr(acq.idx, name)) for name in DIMENSIONS)


def flag_mask(names: Sequence[str]) -> int:
    """The bit mask of these ``ismrmrd`` flag names (``ACQ_...``)."""
    import ismrmrd  # noqa: PLC0415 - a dependency, imported on use

    return sum(1 << (getattr(ismrmrd, name) - 1) for name in names)


def _check_header(xml: bytes) -> None:
    """Refuse an XML header that is not an ISMRMRD header (no DTD or entities are ever expanded)."""
    from ismrmrd.xsd import CreateFromDocument  # noqa: PLC0415

    if b"<!DOCTYPE" in xml.upper() or b"<!ENTITY" in xml.upper():
        raise ProtocolError("the XML header holds a DOCTYPE or ENTITY declaration; an ISMRMRD header has none")
    try:
        CreateFromDocument(xml)
    except Exception as exc:  # the xsd parser raises ParserError, TypeError, ...
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ProtocolError(printable(f"the XML header does not parse as an ISMRMRD header: {first[:200]}")) from None


class Session:
    """The state of one connection; :meth:`run` serves it to the end.

    Parameters
    ----------
    reader, writer
        The connection's input (binary stream) and a :class:`MessageWriter` on its output.
    recon
        The server's :class:`Reconstructor`.
    configure
        Settings from config messages (:data:`Configure`).
    limits
        Message and scan size limits.
    idle_timeout
        Seconds the session may wait for a message (``None``: no limit); time spent reconstructing is not
        counted.
    header_timeout
        Seconds the session may wait for each message before the XML header (``None``: the idle timeout).
    name
        The peer, for the log.
    """

    def __init__(self, reader: BinaryIO, writer: MessageWriter, recon: Reconstructor, configure: Configure, *,
                 limits: Limits = DEFAULT_LIMITS, idle_timeout: float | None = None, name: str = "client",
                 header_timeout: float | None = None) -> None:
        self.reader, self.writer, self.recon, self.configure = reader, writer, recon, configure
        self.limits, self.idle_timeout, self.name = limits, idle_timeout, name
        self.header_timeout = idle_timeout if header_timeout is None else header_timeout
        self.connected_at = time.perf_counter()
        self.configs: list[tuple[str, str]] = []
        self.header: bytes | None = None
        self.settings: ReconSettings | None = None
        self.cutter: FrameCutter | None = None
        self.noise: list[Any] = []
        self.groups: dict[tuple[int, ...], list[Any]] = {}
        self.pending: set[tuple[int, ...]] = set()
        self.sent_groups: set[tuple[int, ...]] = set()
        self.images_sent = 0
        self.latencies_ms: list[float] = []
        self.inbox: Inbox | None = None
        self._trigger = flag_mask(TRIGGERS)
        self._noise_flag = flag_mask(("ACQ_IS_NOISE_MEASUREMENT",))

    def run(self) -> str:
        """Serve the connection; returns how it ended: ``"closed"``, ``"disconnected"`` or ``"error"``."""
        inbox = self.inbox = Inbox(self.reader, self.limits, self.name)  # reads on while groups are reconstructed
        try:
            while True:
                message, arrived = inbox.get(self.idle_timeout if self.header is not None else self.header_timeout)
                if message is None:
                    return self._disconnected("the connection ended without CLOSE")
                if message.id == MessageID.CLOSE:
                    self._finish(arrived)
                    return "closed"
                self._handle(message, arrived)
        except TruncatedError as exc:
            return self._disconnected(str(exc))
        except Cancelled as exc:  # the client left while its data were reconstructed
            return self._disconnected(str(exc))
        except (ProtocolError, MriReconError) as exc:
            return self._refuse(printable(exc))
        except IdleTimeout as exc:
            return self._refuse(f"{exc} (the idle timeout); closing the connection")
        except (ConnectionError, OSError) as exc:
            return self._disconnected(f"connection lost ({exc})")
        except MemoryError:
            return self._refuse("out of host memory while serving this scan")
        except Exception as exc:  # a bug must not take the server down: logged with its traceback
            log.exception("%s: internal error", self.name)
            return self._refuse(printable(f"internal error ({type(exc).__name__}); see the server's log"))
        finally:
            self.groups.clear()
            self.noise.clear()
            if self.cutter is not None:
                self.cutter.clear()

    # -- messages --------------------------------------------------------------------------------------

    def _handle(self, message: Message, arrived: float) -> None:
        kind = message.id
        if kind in (MessageID.CONFIG_FILE, MessageID.CONFIG_TEXT):
            if self.header is not None:
                raise ProtocolError(f"{kind.name} after the XML header; config messages come first")
            self.configs.append(("file" if kind == MessageID.CONFIG_FILE else "text", message.payload))
        elif kind == MessageID.HEADER:
            if self.header is not None:
                raise ProtocolError("a second XML header; one connection carries one scan")
            _check_header(message.payload)
            choices = self.configure(self.configs)
            self.settings = choices.settings
            if choices.spokes_per_frame is not None:
                self.cutter = FrameCutter(choices.spokes_per_frame)
            self.header = message.payload
            log.info("%s: header received, %d config message(s)%s", self.name, len(self.configs),
                     "" if self.cutter is None else f", frames of {self.cutter.spokes_per_frame} readouts")
        elif kind == MessageID.ACQUISITION:
            self._acquisition(message.payload, arrived)
        elif kind == MessageID.TEXT:
            log.info("%s: text from the client: %s", self.name, printable(message.payload[:200]))
        elif kind == MessageID.WAVEFORM:
            log.debug("%s: waveform ignored", self.name)

    def _acquisition(self, acq: Any, arrived: float) -> None:
        if self.header is None:
            raise ProtocolError("an acquisition before the XML header; send config (optional), HEADER, then data")
        if acq.flags & self._noise_flag:
            if self.groups or (self.cutter is not None and (self.cutter.frames or self.cutter.held)):
                raise ProtocolError("a noise acquisition after imaging data; noise scans come first")
            self.noise.append(acq)
            return
        if self.cutter is not None:
            frame = self.cutter.add(acq)
            if frame is not None:
                key, t, acquisitions = frame
                self._send_images(acquisitions, f"frame {t} of {describe_stream(key)}", arrived, t)
            return
        key = group_key(acq)
        if key in self.sent_groups and key not in self.pending:
            log.warning("%s: more data for group %s after its image was sent; it is reconstructed again at "
                        "CLOSE", self.name, describe_key(dict(zip(DIMENSIONS, key))))
        self.groups.setdefault(key, []).append(acq)
        self.pending.add(key)
        if acq.flags & self._trigger and key not in self.sent_groups:
            self._reconstruct(key, arrived)

    # -- reconstruction -----------------------------------------------------------------------------

    def _reconstruct(self, key: tuple[int, ...], last_arrival: float) -> None:
        self.pending.discard(key)
        self.sent_groups.add(key)
        self._send_images(self.groups[key], describe_key(dict(zip(DIMENSIONS, key))), last_arrival)

    def _send_images(self, acquisitions: list[Any], shown: str, last_arrival: float,
                     frame: int | None = None) -> None:
        """Reconstruct these acquisitions (with the noise) as a file of them alone and send the images;
        ``frame``: their repetition index."""
        try:  # no socket in here: an OSError is the reconstruction's (a PSF cache on a full disk, ...)
            scans = self.recon.load(self.header, self.noise + acquisitions, self.settings)
            if frame is not None:
                scans = [({**key, "repetition": frame}, frame_scan(scan, frame, len(acquisitions)))
                         for key, scan in scans]
            done = self.recon.reconstruct(scans, self.settings, self.inbox.left)
        except (MriReconError, OSError) as exc:
            self.writer.send(f"ERROR    {shown}: {printable(exc)}")
            log.error("%s: %s not reconstructed: %s", self.name, shown, printable(exc))
            return
        for record in image_records(done, self.images_sent, self.settings.magnitude):
            self.writer.send(record)
            self.images_sent += 1
            latency = 1e3 * (time.perf_counter() - last_arrival)
            self.latencies_ms.append(latency)
            log.info("%s: image %d (%s) sent %.1f ms after its last acquisition (device wait %.1f ms, "
                     "reconstruction %.1f ms)", self.name, self.images_sent, shown, latency,
                     1e3 * done.waited_s, 1e3 * done.seconds)

    def _drop_remainders(self) -> None:
        """Report (TEXT and log) the readouts at CLOSE that fill no frame; none complete at all is an error."""
        for key, left, frames in self.cutter.remainders():
            what = (f"{left} readout(s) after frame {frames - 1} of {describe_stream(key)} dropped ({frames} "
                    f"frame(s) of {self.cutter.spokes_per_frame} readouts)" if frames else
                    f"{left} readout(s) of {describe_stream(key)} do not fill one frame of "
                    f"{self.cutter.spokes_per_frame}; dropped")
            log.warning("%s: %s", self.name, what)
            self.writer.send(f"WARNING  {what}")
        if not self.cutter.frames:
            raise ProtocolError(f"CLOSE before any frame of {self.cutter.spokes_per_frame} readouts was complete: "
                                f"nothing to reconstruct")

    def _finish(self, arrived: float) -> None:
        if self.header is None:
            raise ProtocolError("CLOSE before the XML header: no scan was sent")
        if not self.groups and not (self.cutter is not None and (self.cutter.frames or self.cutter.held)):
            raise ProtocolError("CLOSE without imaging acquisitions: nothing to reconstruct")
        if self.cutter is not None:
            self._drop_remainders()
        for key in sorted(self.pending):  # groups without a trigger flag, or with data after their image
            self._reconstruct(key, arrived)
        self.writer.close()
        shown = (f"; latency p50 {np.percentile(self.latencies_ms, 50):.1f} ms, p99 "
                 f"{np.percentile(self.latencies_ms, 99):.1f} ms" if self.latencies_ms else "")
        log.info("%s: done, %d image(s) sent%s", self.name, self.images_sent, shown)

    # -- endings --------------------------------------------------------------------------------------

    def _disconnected(self, why: str) -> str:
        held = sum(len(v) for v in self.groups.values()) + len(self.noise) + (self.cutter.held if self.cutter else 0)
        log.warning("%s: %s; %d acquisition(s) dropped", self.name, why, held)
        try:  # a peer that only closed its sending side still reads the answer
            self.writer.send(f"ERROR    {why}; nothing more is reconstructed")
            self.writer.close()
        except OSError:
            pass
        return "disconnected"

    def _refuse(self, why: str) -> str:
        log.error("%s: %s", self.name, why)
        try:
            self.writer.send(f"ERROR    {why}")
            self.writer.close()
        except OSError:
            pass
        return "error"
