"""Uploading a scan's arrays through pinned host memory, a column chunk at a time, with an optional transform
applied on the device as each chunk arrives.

A 2-D host array ``(R, L)`` (k-space ``(C, M)``, coil maps ``(C, N)``, a flattened trajectory ``(1, M D)``)
goes up in chunks of whole columns: the host copies chunk i into one of two pinned buffers while the DMA of
chunk i - 1 (from the other buffer) and the device's transform of it run. A buffer is refilled only after
the copy that read it has finished (an event per buffer); at the end the last copies are waited for before
the buffers go back to CuPy's pinned pool. The transform sees whole columns, so a matrix applied over the
row (channel) axis -- the noise whitening ``W @ chunk`` -- gives the same values as applied to the whole
array. On the CPU the same chunks are transformed in NumPy (the twin the tests compare with).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..backend import Device, cupy_module

CHUNK_BYTES = 4 << 20
"""Bytes of one chunk (one pinned buffer): large enough that a copy runs at the link's rate, small enough that
the first chunk's transform starts early."""

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
    """``transform(host)`` on ``device`` (``host`` itself without a transform), computed chunk by chunk of
    columns (:func:`column_chunks`) as the chunks arrive; ``transform`` maps a ``(R, n)`` array to one of the
    same shape and dtype and must act on each column alone."""
    if host.ndim != 2:
        raise ValueError(f"upload_columns takes a 2-D array, found shape {host.shape}")
    chunks = column_chunks(host.shape[0], host.shape[1], host.dtype.itemsize, chunk_bytes)
    if not device.is_gpu:
        out = _host_empty(host.shape, host.dtype)
        for part in chunks:
            out[:, part] = host[:, part] if transform is None else transform(host[:, part])
        return out
    return _upload_pinned(host, device, transform, chunks)


def upload(host: np.ndarray, device: Device, chunk_bytes: int = CHUNK_BYTES) -> Any:
    """A host array of any shape on ``device``, through :func:`upload_columns` as one row."""
    host = np.ascontiguousarray(host)
    return upload_columns(host.reshape(1, -1), device, None, chunk_bytes).reshape(host.shape)


def _upload_pinned(host: np.ndarray, device: Device, transform: Transform | None, chunks: list[slice]) -> Any:
    """The GPU side of :func:`upload_columns`: two pinned buffers, one device staging buffer, one stream (the
    current one, so that later work on it is ordered after the transforms)."""
    cupy = cupy_module()
    rows, dtype = host.shape[0], host.dtype
    width = chunks[0].stop - chunks[0].start
    with cupy.cuda.Device(device.index):
        stream = cupy.cuda.get_current_stream()
        out = empty(host.shape, dtype)
        stage = empty((rows * width,), dtype)
        memory = [cupy.cuda.alloc_pinned_memory(rows * width * dtype.itemsize) for _ in range(min(2, len(chunks)))]
        buffers = [np.frombuffer(m, dtype=dtype, count=rows * width) for m in memory]
        events: list[Any] = [None] * len(buffers)
        for index, part in enumerate(chunks):
            slot = index % len(buffers)
            if events[slot] is not None:
                events[slot].synchronize()  # the copy that last read this buffer is done
            n = part.stop - part.start
            pinned = buffers[slot][: rows * n].reshape(rows, n)
            np.copyto(pinned, host[:, part])
            arrived = stage[: rows * n].reshape(rows, n)
            arrived.set(pinned, stream=stream)
            events[slot] = cupy.cuda.Event(block=False, disable_timing=True)
            events[slot].record(stream)
            out[:, part] = arrived if transform is None else transform(arrived)
        for event in events:
            event.synchronize()  # the pinned buffers are handed back to the pool next
        del buffers, memory
        return out
