"""A connection's messages read on a thread of their own, each with the time it arrived.

The session reconstructs while the next messages are still being received (a frame's spokes keep arriving
while the previous frame is reconstructed), and a message's arrival time is when its last byte was read, not
when the session got to it: the latency logged from a group's last acquisition is the one a client sees.
"""

from __future__ import annotations

import queue
import threading
import time
from typing import Any, BinaryIO

from .protocol import Limits, Message, MessageID, ProtocolError, TruncatedError, read_message


class IdleTimeout(TimeoutError):
    """Nothing arrived within the idle timeout."""


ACQUISITION_OVERHEAD = 1024
"""Bytes an acquisition holds besides its data and trajectory (its header and the ``ismrmrd.Acquisition``
object, rounded up: docs/server.md), counted with them against ``max_scan_bytes``."""
KEPT_TEXT = 200
"""Characters of a TEXT message kept for the log; the rest is not held."""


class Inbox:
    """Reads ``reader`` into a queue until CLOSE, the stream's end or an error (handed on by :meth:`get`).

    What the connection holds is counted here, as it arrives: each acquisition's data, trajectory and
    :data:`ACQUISITION_OVERHEAD`, and the config messages' text; more than ``limits.max_scan_bytes`` stops the
    reading with a :class:`ProtocolError`. TEXT messages keep their first :data:`KEPT_TEXT` characters (they
    are only logged); WAVEFORM messages are not queued at all. :attr:`left` is set when the stream ends
    without CLOSE or breaks off (the client left: a reconstruction of its data can stop), not when it breaks
    a rule (that is answered after the group in hand).
    """

    def __init__(self, reader: BinaryIO, limits: Limits, name: str = "client") -> None:
        self._queue: queue.Queue = queue.Queue()
        self._limits = limits
        self.left = threading.Event()
        self._thread = threading.Thread(target=self._receive, args=(reader,), name=f"mrd read {name}", daemon=True)
        self._thread.start()

    def _receive(self, reader: BinaryIO) -> None:
        total = 0
        try:
            while True:
                message = read_message(reader, self._limits)
                arrived = time.perf_counter()
                if message is not None and message.id == MessageID.WAVEFORM:
                    continue  # ignored: not queued (a stream of them would fill memory while a group is solved)
                if message is not None:
                    message, size = _kept(message)
                    total += size
                    if total > self._limits.max_scan_bytes:
                        raise ProtocolError(f"the connection's acquisitions and config exceed "
                                            f"{self._limits.max_scan_bytes} bytes (--max-scan-bytes)")
                self._queue.put((message, arrived))
                if message is None or message.id == MessageID.CLOSE:
                    if message is None:
                        self.left.set()
                    return
        except Exception as exc:  # handed to the session, which answers it
            if isinstance(exc, (TruncatedError, OSError)):  # the client left (a broken rule is answered instead)
                self.left.set()
            self._queue.put((exc, time.perf_counter()))

    def get(self, timeout: float | None) -> tuple[Message | None, float]:
        """The next message (``None``: the stream ended) and its arrival time (``time.perf_counter``).

        Raises
        ------
        IdleTimeout
            Nothing arrived within ``timeout`` seconds of waiting.
        Exception
            What the reading raised (:class:`ProtocolError`, :class:`TruncatedError`, ``OSError``, ...).
        """
        try:
            item: Any
            item, arrived = self._queue.get(timeout=timeout)
        except queue.Empty:
            raise IdleTimeout(f"no message within {timeout:g} s") from None
        if isinstance(item, Exception):
            raise item
        return item, arrived


def _kept(message: Message) -> tuple[Message, int]:
    """``(what is kept of the message, the bytes it holds)``."""
    if message.id == MessageID.ACQUISITION:
        acq = message.payload
        return message, acq.data.nbytes + acq.traj.nbytes + ACQUISITION_OVERHEAD
    if message.id == MessageID.TEXT:
        return Message(message.id, message.payload[:KEPT_TEXT]), KEPT_TEXT
    if message.id in (MessageID.CONFIG_FILE, MessageID.CONFIG_TEXT, MessageID.HEADER):
        return message, len(message.payload)
    return message, 0
