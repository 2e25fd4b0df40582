"""Orthogonal Daubechies wavelet transform of images (2D and 3D, complex), periodic extension.

The filters are computed, not tabulated: the Daubechies low-pass filter with ``order`` vanishing moments
(length ``2 * order``) is the minimum-phase spectral factor of ``(1 + z)^order * P(z)``, with ``P`` the
Daubechies polynomial; the result equals PyWavelets' ``dbN`` reconstruction low-pass filter.

One level along one axis of even length ``n`` (periodization, as PyWavelets' ``mode="periodization"``):

    a[i] = sum_k lo[k] x[(2 i + L/2 - k) mod n],   d[i] = sum_k hi[k] x[(2 i + L/2 - k) mod n],

``lo`` the decomposition low-pass (reversed reconstruction filter), ``hi[k] = (-1)^(k+1) lo[L-1-k]``,
``i < n / 2``. With periodic extension this is an orthogonal map of ``n`` values onto ``n`` coefficients,
so the adjoint is the inverse (perfect reconstruction) and ``||Psi x|| = ||x||``.

Levels and layout. Each level transforms the current approximation box along every image axis in turn,
writing ``[a | d]`` halves in place (Mallat layout, as ``pywt.coeffs_to_array(pywt.wavedecn(...))``); the
next level transforms the top corner box. ``levels=None`` takes as many levels as every axis allows: the
box stays even and at least the filter length along every axis. A matrix with an odd size has no level and
is refused.

On a GPU each (level, axis) pass is one kernel launch of ``kernels/wavelet.cu`` (one thread per output
pair) after a copy of the box; the NumPy code below is its oracle.
"""

from __future__ import annotations

import functools
from math import comb
from typing import Any

import numpy as np

from ..arrays.backend import Device, get_xp, is_gpu_array
from ..errors import InvalidDataError
from .base import LinearOperator

BLOCK = 256


@functools.lru_cache(maxsize=16)
def daubechies(order: int) -> np.ndarray:
    """The Daubechies reconstruction low-pass filter with ``order`` vanishing moments (float64, length
    ``2 * order``, sum sqrt(2)); PyWavelets' ``Wavelet(f"db{order}").rec_lo``."""
    if not 1 <= order <= 10:
        raise InvalidDataError(f"Daubechies order must be 1..10, found {order}")
    h = np.array([1.0])
    for _ in range(order):
        h = np.convolve(h, [1.0, 1.0])
    coefficients = [comb(order - 1 + k, k) for k in range(order)]
    for y in (np.roots(coefficients[::-1]) if order > 1 else ()):
        # y = sin^2(w/2) = -(z - 2 + 1/z) / 4: the root of z^2 - (2 - 4y) z + 1 inside the unit circle
        roots = np.roots([1.0, -(2.0 - 4.0 * y), 1.0])
        h = np.convolve(h, [1.0, -roots[np.argmin(np.abs(roots))]])
    h = np.real(h)
    return h * (np.sqrt(2.0) / h.sum())


def analysis_filters(order: int) -> tuple[np.ndarray, np.ndarray]:
    """``(lo, hi)`` decomposition filters (float64) of ``db{order}``."""
    lo = daubechies(order)[::-1].copy()
    length = lo.size
    hi = np.array([(-1.0) ** (k + 1) * lo[length - 1 - k] for k in range(length)])
    return lo, hi


def wavelet_levels(matrix: tuple[int, ...], order: int = 4) -> int:
    """The most levels ``matrix`` allows: the box stays even and at least the filter length on every axis."""
    length, levels = 2 * order, 0
    box = list(matrix)
    while all(n % 2 == 0 and n >= max(length, 2) for n in box):
        levels += 1
        box = [n // 2 for n in box]
    return levels


def _boxes(matrix: tuple[int, ...], levels: int) -> list[tuple[int, ...]]:
    return [tuple(n >> level for n in matrix) for level in range(levels)]


def _indices(n: int, length: int) -> np.ndarray:
    """``(L, n/2)`` input index of tap k for output i: ``(2 i + L/2 - k) mod n``."""
    i = np.arange(n // 2)
    return (2 * i[None, :] + length // 2 - np.arange(length)[:, None]) % n


def _analysis_axis(box: Any, axis: int, lo: np.ndarray, hi: np.ndarray) -> Any:
    """One level along ``axis`` of the array ``box``: ``[a | d]`` along that axis (NumPy)."""
    x = np.moveaxis(box, axis, -1)
    index = _indices(x.shape[-1], lo.size)
    a = sum(lo[k] * x[..., index[k]] for k in range(lo.size))
    d = sum(hi[k] * x[..., index[k]] for k in range(lo.size))
    return np.moveaxis(np.concatenate([a, d], axis=-1), -1, axis)


def _synthesis_axis(box: Any, axis: int, lo: np.ndarray, hi: np.ndarray) -> Any:
    """The adjoint (= inverse) of :func:`_analysis_axis` (NumPy)."""
    c = np.moveaxis(box, axis, -1)
    n = c.shape[-1]
    a, d = c[..., : n // 2], c[..., n // 2:]
    index = _indices(n, lo.size)
    out = np.zeros_like(c)
    for k in range(lo.size):  # for fixed k the indices are distinct (2 i mod n, n even)
        out[..., index[k]] += lo[k] * a + hi[k] * d
    return np.moveaxis(out, -1, axis)


class Wavelet(LinearOperator):
    """``Psi``: the orthogonal ``db{order}`` wavelet transform over the last ``len(matrix)`` axes.

    Parameters
    ----------
    ishape
        ``matrix`` or ``(batch, *matrix)``; the leading axis (per-coil images) is a batch.
    ndim
        Image dimensions (2 or 3): the trailing axes transformed.
    order
        Vanishing moments (db4: 4, filters of length 8).
    levels
        Decomposition levels; None: :func:`wavelet_levels` of the matrix.

    Raises
    ------
    InvalidDataError
        An axis is odd or shorter than the filter (no level fits), or ``levels`` is more than fit.
    """

    def __init__(self, ishape: tuple[int, ...], ndim: int, order: int = 4, levels: int | None = None) -> None:
        super().__init__(ishape, ishape)
        self.matrix = tuple(int(n) for n in ishape[len(ishape) - ndim:])
        self.order = int(order)
        self.lo, self.hi = analysis_filters(self.order)
        most = wavelet_levels(self.matrix, self.order)
        if most == 0:
            raise InvalidDataError(f"a db{self.order} wavelet needs even image sizes of at least {2 * self.order} "
                                   f"voxels, found matrix {list(self.matrix)}")
        if levels is not None and not 1 <= int(levels) <= most:
            raise InvalidDataError(f"wavelet levels must be 1..{most} for matrix {list(self.matrix)} and "
                                   f"db{self.order}, found {levels}")
        self.levels = most if levels is None else int(levels)
        self._device_filters: dict[int, Any] = {}

    def _box(self, shape: tuple[int, ...]) -> tuple[slice, ...]:
        lead = len(self.ishape) - len(self.matrix)
        return (slice(None),) * lead + tuple(slice(0, n) for n in shape)

    def _apply(self, x: Any) -> Any:
        if is_gpu_array(x):
            return self._gpu(x, inverse=False)
        out = np.array(x, copy=True)
        lead = len(self.ishape) - len(self.matrix)
        for shape in _boxes(self.matrix, self.levels):
            box = self._box(shape)
            for axis in range(len(self.matrix)):
                out[box] = _analysis_axis(out[box], lead + axis, self.lo, self.hi)
        return out

    def _adjoint(self, y: Any) -> Any:
        if is_gpu_array(y):
            return self._gpu(y, inverse=True)
        out = np.array(y, copy=True)
        lead = len(self.ishape) - len(self.matrix)
        for shape in reversed(_boxes(self.matrix, self.levels)):
            box = self._box(shape)
            for axis in reversed(range(len(self.matrix))):
                out[box] = _synthesis_axis(out[box], lead + axis, self.lo, self.hi)
        return out

    def _gpu(self, x: Any, *, inverse: bool) -> Any:
        """The transform with ``kernels/wavelet.cu``: per (level, axis), the box is copied and transformed
        back into place (launches and device copies only: no host synchronization)."""
        from ..kernels import get_kernel  # noqa: PLC0415 - GPU only

        xp = get_xp(x)
        device = Device(int(x.device.id))
        name = "mri_recon_wavelet_synthesis" if inverse else "mri_recon_wavelet_analysis"
        kernel = get_kernel("wavelet.cu", name, None, device)
        if device.index not in self._device_filters:
            self._device_filters[device.index] = xp.asarray(np.stack([self.lo, self.hi]), dtype=xp.float32)
        taps = self._device_filters[device.index]
        out = xp.array(x, dtype=xp.complex64, copy=True, order="C")
        batch = int(np.prod(self.ishape[: len(self.ishape) - len(self.matrix)], dtype=np.int64))
        full = list(self.matrix) + [1] * (3 - len(self.matrix))
        boxes = _boxes(self.matrix, self.levels)
        passes = [(shape, axis) for shape in boxes for axis in range(len(self.matrix))]
        for shape, axis in (reversed(passes) if inverse else passes):
            # a copy even when the box is the whole array (where ascontiguousarray would return ``out``
            # itself): the kernel reads the box while it writes ``out``
            box = out[self._box(shape)].copy()
            dims = list(shape) + [1] * (3 - len(shape))
            pairs = batch * int(np.prod(dims)) // 2
            blocks = (max(1, min(-(-pairs // BLOCK), 65535 * 8)),)
            kernel(blocks, (BLOCK,), (box, out, taps, np.int32(self.lo.size), np.int32(batch),
                                       np.int32(dims[0]), np.int32(dims[1]), np.int32(dims[2]),
                                       np.int32(full[0]), np.int32(full[1]), np.int32(full[2]), np.int32(axis)))
        return out
