"""A streamed time series cut into frames of K consecutive readouts, each complete as its K-th readout arrives.

With ``spokes_per_frame`` K (``mri-recon serve --spokes-per-frame K``, or a client's CONFIG_TEXT), the imaging
acquisitions of each stream (one ``slice``, ``contrast``, ``phase`` and ``set``; the incoming ``repetition``
is not looked at) are taken in arrival order, K at a time, as :func:`mri_recon.io.frames.frames_by_readouts`
cuts a file, and each frame is the scan that function makes of its readouts (:func:`frame_scan`: no density
weights, which a stream's trajectories carry for all its readouts together). Frame ``t`` of a stream carries
``repetition = t`` (its acquisitions' index and its image's), and only the readouts of the frame being
filled are held: a series may stream for hours. Readouts left at CLOSE that do not fill a frame are dropped
and reported (:meth:`FrameCutter.remainders`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ..io.frames import frames_by_readouts
from ..io.stack import DIMENSIONS
from ..scan import Scan

STREAM_DIMENSIONS = tuple(name for name in DIMENSIONS if name != "repetition")
"""The indices that separate the streams of a series (the repetition is the frame number)."""


def stream_key(acq: Any) -> tuple[int, ...]:
    """The stream of an acquisition: its ``(slice, contrast, phase, set)``."""
    return tuple(int(getattr(acq.idx, name)) for name in STREAM_DIMENSIONS)


def frame_scan(scan: Scan, frame: int, spokes_per_frame: int) -> Scan:
    """The ``spokes_per_frame`` readouts of ``scan`` as frame ``frame`` of a series cut by
    :func:`~mri_recon.io.frames.frames_by_readouts` (its weights and time stamps left out)."""
    (one,) = frames_by_readouts(scan, spokes_per_frame, frames=1).frames
    return one.replace(attrs={**one.attrs, "frame": frame})


def describe_stream(key: tuple[int, ...]) -> str:
    """``slice 0 contrast 0 phase 0 set 0``, for the log."""
    return " ".join(f"{name} {value}" for name, value in zip(STREAM_DIMENSIONS, key))


class FrameCutter:
    """Collects each stream's readouts into frames of ``spokes_per_frame``.

    :meth:`add` returns ``(stream key, frame number, acquisitions)`` when an acquisition completes a frame,
    else None.
    """

    def __init__(self, spokes_per_frame: int) -> None:
        self.spokes_per_frame = int(spokes_per_frame)
        self._filling: dict[tuple[int, ...], list[Any]] = {}
        self._count: dict[tuple[int, ...], int] = {}

    def add(self, acq: Any) -> tuple[tuple[int, ...], int, list[Any]] | None:
        """Take one imaging acquisition (its ``repetition`` set to its frame's number)."""
        key = stream_key(acq)
        frame = self._count.get(key, 0)
        acq.idx.repetition = frame
        held = self._filling.setdefault(key, [])
        held.append(acq)
        if len(held) < self.spokes_per_frame:
            return None
        del self._filling[key]
        self._count[key] = frame + 1
        return key, frame, held

    @property
    def frames(self) -> int:
        """Frames completed so far, over every stream."""
        return sum(self._count.values())

    @property
    def held(self) -> int:
        """Readouts held in frames not yet complete."""
        return sum(len(v) for v in self._filling.values())

    def remainders(self) -> Iterator[tuple[tuple[int, ...], int, int]]:
        """``(stream key, readouts left over, frames completed)`` of each stream with readouts that do not fill
        a frame, in index order; they are forgotten."""
        for key in sorted(self._filling):
            yield key, len(self._filling[key]), self._count.get(key, 0)
        self._filling.clear()

    def clear(self) -> None:
        self._filling.clear()
