"""cuFFT plans for the GPU operators: in-place complex64 transforms over every axis but the first (a batch).

Making a plan costs milliseconds (7 ms for a 256^3 grid of 8 coils on an H200, four of them in a 3D
reconstruction), so plans are kept between uses, least recently used first out. A plan also holds its work
area, about as large as the grid, for as long as it lives. Plans of grids up to :data:`CACHE_LIMIT` bytes are
kept (at most :data:`CACHE_SIZE`); larger ones are kept while all of them together hold at most
:data:`LARGE_SHARE` of the GPU's memory (2.8 GB on an H200), so that the 1024^3 PSF grid of a 256^3
reconstruction (8 GiB) is made for each use and freed after it rather than kept. :func:`release` drops them
all.
"""

from __future__ import annotations

import functools
import math
import threading
from collections import OrderedDict
from typing import Any

from ...backend import cupy_module

CACHE_LIMIT = 2**28
"""Largest grid (bytes of complex64) of the small-plan cache."""
CACHE_SIZE = 16
"""Most small plans kept."""
LARGE_SHARE = 0.02
"""Share of a GPU's memory the kept plans of larger grids may hold together (their grids' bytes)."""


def _make(shape: tuple[int, ...], device_index: int) -> Any:
    from cupyx.scipy.fftpack import get_fft_plan  # noqa: PLC0415 - CuPy is optional

    cupy = cupy_module()
    with cupy.cuda.Device(device_index):
        probe = cupy.empty(shape, dtype=cupy.complex64)
        return get_fft_plan(probe, axes=tuple(range(1, len(shape))), value_type="C2C")


_cached = functools.lru_cache(maxsize=CACHE_SIZE)(_make)
_LARGE: OrderedDict[tuple[tuple[int, ...], int], Any] = OrderedDict()
_LARGE_LOCK = threading.Lock()


def _large_budget(device_index: int) -> int:
    cupy = cupy_module()
    with cupy.cuda.Device(device_index):
        return int(LARGE_SHARE * cupy.cuda.runtime.memGetInfo()[1])


def _large(shape: tuple[int, ...], device_index: int, nbytes: int) -> Any:
    """A plan of a grid above :data:`CACHE_LIMIT`: kept within this GPU's :data:`LARGE_SHARE`."""
    key = (shape, device_index)
    with _LARGE_LOCK:
        if key in _LARGE:
            _LARGE.move_to_end(key)
            return _LARGE[key]
    plan = _make(shape, device_index)
    budget = _large_budget(device_index)
    with _LARGE_LOCK:
        if nbytes <= budget:
            _LARGE[key] = plan
            held = [k for k in _LARGE if k[1] == device_index]
            while 8 * sum(math.prod(k[0]) for k in held) > budget:
                del _LARGE[held.pop(0)]  # least recently used first
    return plan


def fft_plan(shape: tuple[int, ...], device_index: int) -> Any:
    """The plan for complex64 arrays of ``shape`` on GPU ``device_index`` (axis 0: the batch)."""
    shape = tuple(int(n) for n in shape)
    nbytes = 8 * math.prod(shape)
    if nbytes > CACHE_LIMIT:
        return _large(shape, device_index, nbytes)
    return _cached(shape, device_index)


def release() -> None:
    """Drop every kept plan (their work areas go back to CuPy's memory pool once no operator holds them)."""
    _cached.cache_clear()
    with _LARGE_LOCK:
        _LARGE.clear()
