"""The last trajectory's encoding (with its NUFFT plan) and Toeplitz kernel spectrum, kept on the GPU between
reconstructions.

A study reconstructs many scans with one trajectory and one set of density weights. Their encoding plan (the
samples sorted into bins) and the spectrum of their point-spread function are the same each time, and making
them costs as much as the 30 CG iterations of a 2D scan. :class:`SpectrumMemo` keeps one entry per GPU: the
trajectory and weights it was made for (device arrays), the encoding and the spectrum. A new scan is a hit
only when its engine and matrix are the same and its trajectory and (scaled) weights are *bit-identical* to the
entry's, compared on the device (one boolean read back), so a hit can never serve another trajectory's
spectrum. An entry larger than :func:`memo_limit` bytes is not kept. The pipeline consults the memo when the
caller passes a PSF cache (:class:`mri_recon.io.cache.PsfCache`), the disk tier of the same idea.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from typing import Any

from ..backend import Device, cupy_module, device_memory
from .encoding import Encoding

LIMIT_SHARE = 0.05
"""Default limit of one entry: this share of the GPU's total memory (7 GB on an H200)."""
LIMIT_VARIABLE = "MRI_RECON_MEMO_MAX"
"""Environment variable that sets the limit in bytes (0 turns the memo off)."""


def memo_limit(device: Device) -> int:
    """Most bytes one entry may hold on ``device``: ``$MRI_RECON_MEMO_MAX`` or :data:`LIMIT_SHARE` of its
    memory."""
    value = os.environ.get(LIMIT_VARIABLE, "").strip()
    if value:
        try:
            return max(0, int(value))
        except ValueError:
            pass
    _, total = device_memory(device)
    return int(LIMIT_SHARE * total)


@dataclass
class _Entry:
    engine: str
    matrix: tuple[int, ...]
    trajectory: Any
    weights: Any
    encoding: Encoding
    spectrum: Any


def _device_bytes(value: Any, seen: set[int]) -> int:
    """Bytes of the CuPy arrays reachable from ``value`` (arrays, containers, an object's attributes)."""
    cupy = cupy_module()
    if id(value) in seen:
        return 0
    seen.add(id(value))
    if isinstance(value, cupy.ndarray):
        return int(value.nbytes)
    if isinstance(value, dict):
        return sum(_device_bytes(v, seen) for v in value.values())
    if isinstance(value, (list, tuple)):
        return sum(_device_bytes(v, seen) for v in value)
    if hasattr(value, "__dict__") and not isinstance(value, type):
        return sum(_device_bytes(v, seen) for v in vars(value).values())
    return 0


class SpectrumMemo:
    """One entry: the last (engine, matrix, trajectory, weights) and its encoding and kernel spectrum."""

    def __init__(self, device: Device) -> None:
        self.device = device
        self._entry: _Entry | None = None
        self._lock = threading.Lock()

    def lookup(self, engine: str, matrix: tuple[int, ...], trajectory: Any, weights: Any
               ) -> tuple[Encoding, Any] | None:
        """``(encoding, spectrum)`` of the entry when it was made for exactly these inputs, else None."""
        with self._lock:
            entry = self._entry
        if (entry is None or entry.engine != engine or entry.matrix != tuple(matrix)
                or entry.trajectory.shape != trajectory.shape or entry.weights.shape != weights.shape):
            return None
        cupy = cupy_module()
        same = cupy.array_equal(entry.trajectory, trajectory) & cupy.array_equal(entry.weights, weights)
        return (entry.encoding, entry.spectrum) if bool(same.get()) else None

    def store(self, engine: str, matrix: tuple[int, ...], trajectory: Any, weights: Any, encoding: Encoding,
              spectrum: Any) -> bool:
        """Keep these as the entry (replacing the last) when they fit :func:`memo_limit`; whether kept."""
        entry = _Entry(engine, tuple(matrix), trajectory, weights, encoding, spectrum)
        fits = _device_bytes(entry, set()) <= memo_limit(self.device)
        with self._lock:
            self._entry = entry if fits else None
        return fits

    def clear(self) -> None:
        with self._lock:
            self._entry = None


_MEMOS: dict[int, SpectrumMemo] = {}
_MEMOS_LOCK = threading.Lock()


def spectrum_memo(device: Device) -> SpectrumMemo:
    """The memo of GPU ``device`` (one per device and process)."""
    with _MEMOS_LOCK:
        if device.index not in _MEMOS:
            _MEMOS[device.index] = SpectrumMemo(device)
        return _MEMOS[device.index]
