"""Uploading a scan's arrays to the device once, with an optional transform applied there a column chunk at a
time.

A 2-D host array ``(R, L)`` (k-space ``(C, M)``, coil maps ``(C, N)``, a flattened trajectory ``(1, M D)``)
goes up in one copy from its own (pageable) memory, then the transform runs on the device over chunks of
whole columns, in place: the device holds the array and one chunk's temporary, never a second copy of the
array. The transform sees whole columns, so a matrix applied over the row (channel) axis -- the noise
whitening ``W @ chunk`` -- gives the same values as applied to the whole array. On the CPU the same chunks
are transformed in NumPy (the twin the tests compare with).

One pageable copy is the fastest way up measured here: staging chunks through two pinned buffers, so that a
chunk's transform overlapped the next one's copy, took longer on the H200 (2D, 16 MiB: 1.87 ms against 1.35 ms;
in the whole call 6 ms of host time against 2 ms), because the host's copy into the pinned buffers costs
more than the driver's own staging of a pageable copy.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..backend import Device, cupy_module

CHUNK_BYTES = 4 << 20
"""Bytes of one chunk of the transform: the size of the device temporary it needs."""

Transform = Callable[[Any], Any]


def empty(shape: tuple[int, ...], dtype: Any) -> Any:
    """A device buffer (a name of its own, so that tests can fill it with NaN first)."""
    return cupy_module().empty(shape, dtype)


def _host_empty(shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """A host buffer (as :func:`empty`, for the CPU twin)."""
    return np.empty(shape, dtype)


def column_chunks(rows: int, columns: int, itemsize: int, chunk_bytes: int = CHUNK_BYTES) -> list[slice]:
    """Column ranges of ``(rows, columns)`` items of ``itemsize`` bytes, each at most ``chunk_bytes`` (at least
    one column), covering every column once in order."""
    width = max(1, chunk_bytes // max(1, rows * itemsize))
    return [slice(start, min(start + width, columns)) for start in range(0, columns, width)]


def upload_columns(host: np.ndarray, device: Device, transform: Transform | None = None,
                   chunk_bytes: int = CHUNK_BYTES) -> Any:
    """``transform(host)`` on ``device`` (``host`` itself without a transform): one copy up, then the
    transform in place chunk by chunk of columns (:func:`column_chunks`); ``transform`` maps a ``(R, n)``
    array to one of the same shape and dtype and must act on each column alone."""
    if host.ndim != 2:
        raise ValueError(f"upload_columns takes a 2-D array, found shape {host.shape}")
    chunks = column_chunks(host.shape[0], host.shape[1], host.dtype.itemsize, chunk_bytes)
    if not device.is_gpu:
        out = _host_empty(host.shape, host.dtype)
        for part in chunks:
            out[:, part] = host[:, part] if transform is None else transform(host[:, part])
        return out
    cupy = cupy_module()
    with cupy.cuda.Device(device.index):
        out = empty(host.shape, host.dtype)
        out.set(np.ascontiguousarray(host))  # one copy, on the current stream
        if transform is not None:
            for part in chunks:
                out[:, part] = transform(out[:, part])
        return out


def upload(host: np.ndarray, device: Device, chunk_bytes: int = CHUNK_BYTES) -> Any:
    """A host array of any shape on ``device``, through :func:`upload_columns` as one row."""
    host = np.ascontiguousarray(host)
    return upload_columns(host.reshape(1, -1), device, None, chunk_bytes).reshape(host.shape)
