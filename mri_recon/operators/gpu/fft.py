"""cuFFT plans for the GPU operators: in-place complex64 transforms over every axis but the first (a batch), or
column plans over every axis but the last, the batch's transforms interleaved (the fused operators' row passes).

Making a plan costs milliseconds (docs/benchmarks.md; a 3D reconstruction makes four), so plans are kept between
uses, least recently used first out. A plan also holds its work area, about as large as the grid, for as long as
it lives. Plans of grids up to :data:`CACHE_LIMIT` bytes are kept (at most :data:`CACHE_SIZE`); larger ones are
kept while all of them together hold at most :data:`LARGE_SHARE` of the GPU's memory, so that the 1024^3 PSF grid
of a 256^3 reconstruction (8 GiB) is made for each use and freed after it rather than kept. :func:`release` drops
them all.

:class:`CornerFft` is the transform of the Toeplitz embedding's 3-D grids, whose input lies in the first
half of the first axis: it skips the transforms of the planes that are zero on the way in, or not wanted on
the way out (about a third of the work).
"""

from __future__ import annotations

import functools
import math
import threading
from collections import OrderedDict
from typing import Any

from ...arrays.backend import cupy_module

FORWARD, INVERSE = -1, 1
"""cuFFT's ``CUFFT_FORWARD`` and ``CUFFT_INVERSE`` (fixed by its API), without loading libcufft."""
CACHE_LIMIT = 2**28
"""Largest grid (bytes of complex64) of the small-plan cache."""
CACHE_SIZE = 16
"""Most small plans kept."""
LARGE_SHARE = 0.02
"""Share of a GPU's memory the kept plans of larger grids may hold together (their grids' bytes)."""


def _make(shape: tuple[int, ...], device_index: int, columns: bool = False) -> Any:
    from cupy.cuda import cufft  # noqa: PLC0415 - CuPy is optional
    from cupyx.scipy.fftpack import get_fft_plan  # noqa: PLC0415 - CuPy is optional

    cupy = cupy_module()
    with cupy.cuda.Device(device_index):
        if columns:  # (*lengths, batch): over the leading axes, the columns side by side (stride batch, distance 1)
            *lengths, batch = shape
            lengths = tuple(lengths)
            return cufft.PlanNd(lengths, lengths, batch, 1, lengths, batch, 1, cufft.CUFFT_C2C, batch, "C", 0, None)
        probe = cupy.empty(shape, dtype=cupy.complex64)
        return get_fft_plan(probe, axes=tuple(range(1, len(shape))), value_type="C2C")


_cached = functools.lru_cache(maxsize=CACHE_SIZE)(_make)
_LARGE: OrderedDict[tuple[tuple[int, ...], int, bool], Any] = OrderedDict()
_LARGE_LOCK = threading.Lock()


def _large_budget(device_index: int) -> int:
    cupy = cupy_module()
    with cupy.cuda.Device(device_index):
        return int(LARGE_SHARE * cupy.cuda.runtime.memGetInfo()[1])


def _large(shape: tuple[int, ...], device_index: int, nbytes: int, columns: bool) -> Any:
    """A plan of a grid above :data:`CACHE_LIMIT`: kept within this GPU's :data:`LARGE_SHARE`."""
    key = (shape, device_index, columns)
    with _LARGE_LOCK:
        if key in _LARGE:
            _LARGE.move_to_end(key)
            return _LARGE[key]
    plan = _make(shape, device_index, columns)
    budget = _large_budget(device_index)
    with _LARGE_LOCK:
        if nbytes <= budget:
            _LARGE[key] = plan
            held = [k for k in _LARGE if k[1] == device_index]
            while 8 * sum(math.prod(k[0]) for k in held) > budget:
                del _LARGE[held.pop(0)]  # least recently used first
    return plan


def fft_plan(shape: tuple[int, ...], device_index: int, *, columns: bool = False) -> Any:
    """The plan for complex64 arrays of ``shape`` on GPU ``device_index``: over every axis but the first (the
    batch), or with ``columns`` over every axis but the last of a ``(*lengths, batch)`` array (the batch's
    transforms interleaved: stride ``batch``, distance 1)."""
    shape = tuple(int(n) for n in shape)
    nbytes = 8 * math.prod(shape)
    if nbytes > CACHE_LIMIT:
        return _large(shape, device_index, nbytes, columns)
    return _cached(shape, device_index, columns)


class CornerFft:
    """In-place unnormalized FFT over the grid axes of complex64 ``(batch, *grid)`` arrays whose forward input
    is zero beyond the first ``corner`` planes of the grid's first axis, and whose inverse output is wanted
    there only (the Toeplitz embedding: the image in the corner of the twice-padded grid).

    A 3-D grid with ``corner < grid[0]`` is transformed per grid in two steps: the 2-D transforms of its first
    ``corner`` planes (the other planes are zero on the way in, or not wanted on the way out) and the 1-D
    transforms along the first axis of every column, in that order forward and the reverse order inverse.
    The planes beyond ``corner`` then hold partial results after an inverse, which callers do not read. With
    ``corner = grid[0] / 2`` this is 2/3 of the full transform's work. 2-D grids, and grids with nothing to
    skip, take the full batched transform in one call: a 2-D application costs the device tens of
    microseconds, less than the host's extra launches would.
    """

    def __init__(self, batch: int, grid: tuple[int, ...], corner: int, device_index: int) -> None:
        self.grid = tuple(int(n) for n in grid)
        self.corner = int(corner)
        self.pruned = len(self.grid) == 3 and self.corner < self.grid[0]
        if self.pruned:
            self._planes = fft_plan((self.corner, *self.grid[1:]), device_index)
            self._columns = fft_plan((self.grid[0], math.prod(self.grid[1:])), device_index, columns=True)
        else:
            self._full = fft_plan((int(batch), *self.grid), device_index)

    def __call__(self, work: Any, direction: int) -> None:
        """Transform ``work`` (C-contiguous ``(batch, *grid)``) in place; ``direction``: :data:`FORWARD` or
        :data:`INVERSE`."""
        if not self.pruned:
            self._full.fft(work, work, direction)
            return
        forward = direction == FORWARD
        for grid in work:
            planes = grid[:self.corner]
            if forward:
                self._planes.fft(planes, planes, direction)
            self._columns.fft(grid, grid, direction)
            if not forward:
                self._planes.fft(planes, planes, direction)


def kept() -> int:
    """Plans kept, small and large."""
    with _LARGE_LOCK:
        return _cached.cache_info().currsize + len(_LARGE)


def release() -> None:
    """Drop every kept plan (their work areas go back to CuPy's memory pool once no operator holds them)."""
    _cached.cache_clear()
    with _LARGE_LOCK:
        _LARGE.clear()
