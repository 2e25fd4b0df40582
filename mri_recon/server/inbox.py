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

from .protocol import Limits, Message, MessageID, ProtocolError, read_message


class IdleTimeout(TimeoutError):
    """Nothing arrived within the idle timeout."""


class Inbox:
    """Reads ``reader`` into a queue until CLOSE, the stream's end or an error (handed on by :meth:`get`).

    The acquisition bytes of the connection are counted here, as they arrive: more than
    ``limits.max_scan_bytes`` stops the reading with a :class:`ProtocolError`.
    """

    def __init__(self, reader: BinaryIO, limits: Limits, name: str = "client") -> None:
        self._queue: queue.Queue = queue.Queue()
        self._limits = limits
        self._thread = threading.Thread(target=self._receive, args=(reader,), name=f"mrd read {name}", daemon=True)
        self._thread.start()

    def _receive(self, reader: BinaryIO) -> None:
        total = 0
        try:
            while True:
                message = read_message(reader, self._limits)
                arrived = time.perf_counter()
                if message is not None and message.id == MessageID.ACQUISITION:
                    total += message.payload.data.nbytes + message.payload.traj.nbytes
                    if total > self._limits.max_scan_bytes:
                        raise ProtocolError(f"the scan's acquisitions exceed {self._limits.max_scan_bytes} bytes "
                                            f"(--max-scan-bytes)")
                self._queue.put((message, arrived))
                if message is None or message.id == MessageID.CLOSE:
                    return
        except Exception as exc:  # handed to the session, which answers it
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
