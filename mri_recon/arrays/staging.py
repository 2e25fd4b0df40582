"""Host-to-device copies through pinned buffers filled by several host threads (the copy up of
:func:`mri_recon.arrays.backend.to_device`; CuPy is passed in, so that this module imports nothing of the package).

A copy from pageable memory goes through the driver's own pinned staging, filled by the calling thread alone, so it
runs no faster than one host thread copies. :class:`Staging` cuts the source into pieces, lets a pool of threads
copy them into a ring of pinned buffers (NumPy's copy releases the GIL) and queues each buffer's transfer on the
current stream as soon as it is full, so that the host copies run in parallel with each other and with the
transfers. A buffer is filled again only after the event recorded behind its last transfer has passed. The copy
returns when the last transfer has ended, as a pageable copy does: the source may then change and the device array
is complete for work on any stream. A copy may also carry a product ``matrix @ source`` (coil compression: ``(N, C)``
by ``(C, L)``, :meth:`Staging.copy_product`): the threads write the product into the buffers instead of the source's
bytes, so that only ``N / C`` of them cross to the device and the device never holds the uncompressed array.

The gain is the host threads' parallel copies: one thread filling the same buffers is no faster than the driver's
own staging (this is why an earlier pinned upload was dropped). ``scripts/bench_upload.py`` compares the two with
the source out of the host's caches, as in a call (docs/benchmarks.md, "Copies up alone"); the thread count and
piece size are its fastest on large arrays. Arrays of at most :data:`STAGED_ABOVE` bytes, and every array where
this process may run on fewer than four cores, go up by a pageable copy (:func:`copy_up`).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np

PIECE_BYTES = 4 << 20
"""Bytes of one piece (and of one pinned buffer)."""


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


THREADS = max(1, min(8, _cores() // 2))
"""Host threads filling the pinned buffers: half the cores this process may run on, at most 8."""

MAX_PITCH = 2**31 - 1
"""The longest row a 2-D copy takes (``cudaDevAttrMaxPitch``); longer rows go up one copy each."""

STAGED_ABOVE = 16 * PIECE_BYTES
"""Arrays of more bytes than this are staged (:func:`copy_up`): in the whole call staging gains above it and
nothing beyond the comparison's noise below it, although a copy alone gains there too
(``scripts/bench_prepare.py --compare-pageable``; docs/benchmarks.md, "The whole call on the GPU", and
docs/changelog.md)."""


class Staging:
    """``threads`` host threads and a ring of twice as many pinned buffers of ``piece`` bytes on one device,
    used by one copy at a time."""

    def __init__(self, cupy: Any, device_index: int, threads: int = THREADS, piece: int = PIECE_BYTES) -> None:
        self.cupy = cupy
        self.piece = piece
        self.threads = threads
        self.lock = threading.Lock()
        self.pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="mri-recon-staging")
        slots = 2 * threads
        with cupy.cuda.Device(device_index):
            self.memory = [cupy.cuda.alloc_pinned_memory(piece) for _ in range(slots)]
            self.events = [cupy.cuda.Event(block=False, disable_timing=True) for _ in range(slots)]
        self.views = [np.frombuffer(m, np.uint8, piece) for m in self.memory]
        self.used = [False] * slots

    def copy(self, source: np.ndarray, destination: Any) -> None:
        """``destination[...] = source`` (a C-contiguous host array into a CuPy array of the same bytes), the
        transfers on the current stream."""
        flat = np.ascontiguousarray(source).reshape(-1).view(np.uint8)
        if flat.size != destination.nbytes:
            raise ValueError(f"staged copy of {flat.size} bytes into a device array of {destination.nbytes}")
        runtime, starts = self.cupy.cuda.runtime, range(0, flat.size, self.piece)

        def fill(slot: int, i: int) -> None:
            part = flat[starts[i]:starts[i] + self.piece]
            np.copyto(self.views[slot][:part.size], part)

        def send(slot: int, i: int, stream: Any) -> None:
            runtime.memcpyAsync(destination.data.ptr + starts[i], self.memory[slot].ptr,
                                min(self.piece, flat.size - starts[i]), runtime.memcpyHostToDevice, stream.ptr)

        self._run(len(starts), fill, send)

    def copy_product(self, matrix: np.ndarray, source: np.ndarray, destination: Any) -> None:
        """``destination[...] = matrix @ source``: ``(N, C) @ (C, L)`` on the host into a C-contiguous CuPy array
        ``(N, L)`` of the same dtype, computed by the host threads range of columns by range of columns into the
        pinned buffers (a range's ``N x width`` block fills at most one), each range going up as one 2-D
        transfer (:func:`product_width`). Only ``N / C`` of the source's bytes cross to the device."""
        if (source.ndim != 2 or matrix.ndim != 2 or matrix.shape[0] < 1 or matrix.shape[1] != source.shape[0]
                or destination.shape != (matrix.shape[0], source.shape[1])
                or not matrix.dtype == source.dtype == destination.dtype or not destination.flags.c_contiguous):
            raise ValueError(f"staged product of {matrix.shape} {matrix.dtype} by {source.shape} {source.dtype} "
                             f"into {destination.shape} {destination.dtype}")
        rows, columns, itemsize = matrix.shape[0], source.shape[1], source.dtype.itemsize
        if rows * itemsize > self.piece:
            raise ValueError(f"staged product: one column of {rows} rows is more than a {self.piece}-byte buffer")
        width = product_width(rows * itemsize, columns, self.piece, self.threads)
        runtime, starts = self.cupy.cuda.runtime, range(0, columns, width)
        pitch = columns * itemsize

        def fill(slot: int, i: int) -> None:
            part = source[:, starts[i]:starts[i] + width]
            block = self.views[slot][:rows * part.shape[1] * itemsize].view(source.dtype)
            np.matmul(matrix, part, out=block.reshape(rows, part.shape[1]))

        def send(slot: int, i: int, stream: Any) -> None:
            span, target = min(width, columns - starts[i]) * itemsize, destination.data.ptr + starts[i] * itemsize
            if pitch <= MAX_PITCH:
                runtime.memcpy2DAsync(target, pitch, self.memory[slot].ptr, span, span, rows,
                                      runtime.memcpyHostToDevice, stream.ptr)
                return
            for row in range(rows):  # rows too long for a 2-D copy's pitch: one copy each
                runtime.memcpyAsync(target + row * pitch, self.memory[slot].ptr + row * span, span,
                                    runtime.memcpyHostToDevice, stream.ptr)

        self._run(len(starts), fill, send)

    def _run(self, count: int, fill: Callable[[int, int], None], send: Callable[[int, int, Any], None]) -> None:
        """Pieces ``0 .. count - 1``: ``fill(slot, i)`` writes piece ``i`` into buffer ``slot`` on the pool,
        ``send(slot, i, stream)`` queues its transfer on the current stream once it is full; returns when the
        last transfer has ended. One copy at a time; a copy that fails leaves no thread writing a buffer."""
        with self.lock:
            pending: dict[int, Future] = {}
            try:
                self._queue(count, fill, send, self.cupy.cuda.get_current_stream(), pending)
            finally:
                for future in pending.values():
                    future.exception()

    def _queue(self, count: int, fill: Callable[[int, int], None], send: Callable[[int, int, Any], None],
               stream: Any, pending: dict[int, Future]) -> None:
        """Fill the buffers on the pool and queue each one's transfer as it is full; wait for the last."""
        slots = len(self.memory)
        if count == 0:
            return
        for i in range(min(slots, count)):
            pending[i] = self.pool.submit(self._fill, fill, i, i)
        for i in range(count):
            slot = i % slots
            pending.pop(i).result()
            send(slot, i, stream)
            self.events[slot].record(stream)
            self.used[slot] = True
            if i + slots < count:
                pending[i + slots] = self.pool.submit(self._fill, fill, slot, i + slots)
        self.events[(count - 1) % slots].synchronize()  # the last transfer, and so every one, has ended

    def _fill(self, fill: Callable[[int, int], None], slot: int, i: int) -> None:
        """``fill(slot, i)`` once buffer ``slot``'s last transfer has read it."""
        if self.used[slot]:
            self.events[slot].synchronize()
        fill(slot, i)


def product_width(column_bytes: int, columns: int, piece: int, threads: int) -> int:
    """Columns of one range of a product on the way up: as many as a ``piece``-byte buffer holds, but few enough to
    make at least two ranges per thread where there are columns for them, so that every thread has products to
    compute even where a buffer holds many columns of few rows (three virtual coils); at least one."""
    return max(1, min(piece // column_bytes, columns // (2 * threads)))


PRODUCT_THREADS = THREADS
"""Host threads computing a product on the way up (:meth:`Staging.copy_product`). Each product runs on one BLAS
thread (:func:`mri_recon.arrays.backend.upload_product`), so the products spread over the threads as the copies do;
with BLAS's own threads in every product, more than two products at once contended (docs/benchmarks.md, "Coil
compression")."""

_STAGING: dict[tuple[int, int], Staging] = {}
_STAGING_LOCK = threading.Lock()


def staging(cupy: Any, device_index: int, threads: int = THREADS) -> Staging:
    """The process's :class:`Staging` of one device with ``threads`` threads, made on first use: the copies'
    (:data:`THREADS`) and the products' (:data:`PRODUCT_THREADS`) are one object where the counts agree (one copy
    or product at a time), two where they differ."""
    with _STAGING_LOCK:
        if (device_index, threads) not in _STAGING:
            _STAGING[device_index, threads] = Staging(cupy, device_index, threads)
        return _STAGING[device_index, threads]


def copy_up(cupy: Any, source: np.ndarray, destination: Any, device_index: int) -> None:
    """``destination[...] = source`` (C-contiguous host array, CuPy array of the same bytes on
    ``device_index``), complete on return: staged through :func:`staging` when it holds more than
    :data:`STAGED_ABOVE` bytes, else one pageable copy."""
    if source.nbytes > STAGED_ABOVE and THREADS >= 2:
        staging(cupy, device_index).copy(source, destination)
    else:
        destination.set(source)


def copy_product_up(cupy: Any, matrix: np.ndarray, source: np.ndarray, destination: Any, device_index: int) -> None:
    """``destination[...] = matrix @ source`` (host ``(N, C)`` and ``(C, L)``, a CuPy ``(N, L)`` of their dtype on
    ``device_index``), the product on the host, complete on return: staged (:meth:`Staging.copy_product`, with
    :data:`PRODUCT_THREADS` threads) when the source holds more than one piece (the threads are the product's
    parallelism), else one product and one pageable copy."""
    if source.nbytes > PIECE_BYTES and PRODUCT_THREADS >= 2:
        staging(cupy, device_index, PRODUCT_THREADS).copy_product(matrix, source, destination)
    else:
        destination.set(np.ascontiguousarray(matrix @ source))
