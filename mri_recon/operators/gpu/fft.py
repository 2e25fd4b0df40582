"""cuFFT plans for the GPU operators: in-place complex64 transforms over every axis but the first (a batch).

Making a plan costs milliseconds, so plans of small grids are kept (least recently used first out). A plan
also holds its work area, as large as the grid, for as long as it lives: plans of grids above
:data:`CACHE_LIMIT` bytes are made for each use and freed after it, so that a large transform (the 1024^3 PSF
grid of a 256^3 reconstruction, 8 GiB) does not keep gigabytes of GPU memory after the reconstruction.
"""

from __future__ import annotations

import functools
import math
from typing import Any

from ...backend import cupy_module

CACHE_LIMIT = 2**28
"""Largest grid (bytes of complex64) whose plan is kept between uses."""
CACHE_SIZE = 16
"""Most plans kept."""


def _make(shape: tuple[int, ...], device_index: int) -> Any:
    from cupyx.scipy.fftpack import get_fft_plan  # noqa: PLC0415 - CuPy is optional

    cupy = cupy_module()
    with cupy.cuda.Device(device_index):
        probe = cupy.empty(shape, dtype=cupy.complex64)
        return get_fft_plan(probe, axes=tuple(range(1, len(shape))), value_type="C2C")


_cached = functools.lru_cache(maxsize=CACHE_SIZE)(_make)


def fft_plan(shape: tuple[int, ...], device_index: int) -> Any:
    """The plan for complex64 arrays of ``shape`` on GPU ``device_index`` (axis 0: the batch)."""
    shape = tuple(int(n) for n in shape)
    if 8 * math.prod(shape) > CACHE_LIMIT:
        return _make(shape, device_index)
    return _cached(shape, device_index)
