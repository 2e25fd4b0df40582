"""Work captured once as a CUDA graph and replayed: the fused CG loop's iterations, a planned operator's
transform and the time series' ADMM iterations (:func:`capture_keeping`: work that allocates).

A call of a planned GPU transform costs the host a few dozen launches and the Python around them. A 2D transform
keeps the device busy for less than a millisecond, so the device spends a good part of the call waiting for the
launches that start it (docs/benchmarks.md). :class:`Replay` captures the transform once (its launches only) and
replays it: per call the input is copied into the buffer the graph reads, the graph is launched, and the result is
copied out of the buffer it writes into a new array (two device-to-device copies of a few microseconds). Capture is
an optimization: where the driver refuses it, the transform runs as before, with the same results.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..arrays.backend import cupy_module

REPLAY_BYTES = 64 << 20
"""Inputs and outputs of at most this many bytes together are replayed (the replay keeps a buffer of each); a
larger transform's launches are a small part of its time."""


def empty(shape: tuple[int, ...], dtype: Any) -> Any:
    """A device buffer (a name of its own, so that tests can fill it with NaN first)."""
    return cupy_module().empty(shape, dtype=dtype)


def capture(xp: Any, work: Callable[[], None]) -> Any:
    """``work`` (launches only: no allocation, no host synchronization) as a CUDA graph, or None when the
    driver or library refuses to capture it. Nothing runs during capture; the caller replays the graph."""
    stream = xp.cuda.Stream(non_blocking=True)
    stream.wait_event(xp.cuda.get_current_stream().record())
    try:
        with stream:
            stream.begin_capture()
            try:
                work()
            finally:
                graph = stream.end_capture()
    except Exception:  # noqa: BLE001 - capture is an optimization; eager launches give the same results
        return None
    return graph


class Kept:
    """A CUDA graph and the device memory it was captured with (:func:`capture_keeping`)."""

    def __init__(self, graph: Any, memory: list[Any]) -> None:
        self.graph, self.memory = graph, memory

    def launch(self, xp: Any) -> None:
        self.graph.launch(xp.cuda.get_current_stream())


def capture_keeping(xp: Any, work: Callable[[], None]) -> Kept | None:
    """:func:`capture` of ``work`` that may allocate: every block the memory pool hands out during the capture
    is kept with the graph, so no later array reuses memory that a replay writes (the temporaries of array
    expressions live as long as the graph). No host synchronization in ``work``; None where capture is refused.
    The host side of ``work`` runs during the capture but its device work does not: buffers it sets up lazily
    would look ready and never be written, so whatever ``work`` uses must exist (and hold its values) before."""
    pool, memory = xp.get_default_memory_pool(), []

    def allocate(size: int) -> Any:
        block = pool.malloc(size)
        memory.append(block)
        return block

    with xp.cuda.using_allocator(allocate):
        graph = capture(xp, work)
    return None if graph is None else Kept(graph, memory)


class Replay:
    """``transform(x, out)`` (complex64 ``in_shape`` -> ``out_shape`` on the current GPU; launches only once it
    has run once: no allocation, no synchronization, buffers and plans kept by its owner) replayed as a CUDA
    graph. The first call runs it as it is; the second captures it; every call returns a new array. One use at a
    time (the caller's :class:`~mri_recon.operators.memo.UseGuard`): the buffers are shared between calls."""

    def __init__(self, transform: Callable[[Any, Any], Any], in_shape: tuple[int, ...],
                 out_shape: tuple[int, ...]) -> None:
        self._transform = transform
        self._shapes = (tuple(in_shape), tuple(out_shape))
        self._buffers: tuple[Any, Any] | None = None  # (source, target): what the graph reads and writes
        self._graph: Any = None
        self._eager = False  # capture was refused: every call runs the transform as it is

    def __call__(self, array: Any) -> Any:
        if self._eager or self._buffers is None:
            if not self._eager:
                self._buffers = (empty(self._shapes[0], np.complex64), empty(self._shapes[1], np.complex64))
            return self._eagerly(array)
        source, target = self._buffers
        if array.shape != source.shape or array.dtype != source.dtype or not array.flags.c_contiguous:
            return self._eagerly(array)  # not what the graph reads
        if self._graph is None:
            self._graph = capture(cupy_module(), lambda: self._transform(source, target))
            if self._graph is None:
                self._eager, self._buffers = True, None
                return self._eagerly(array)
        source.data.copy_from_device_async(array.data, source.nbytes)
        self._graph.launch(cupy_module().cuda.get_current_stream())
        out = empty(self._shapes[1], np.complex64)  # allocated once the device has work
        out.data.copy_from_device_async(target.data, out.nbytes)
        return out

    def _eagerly(self, array: Any) -> Any:
        """The transform run as it is, into a new array."""
        return self._transform(array, empty(self._shapes[1], np.complex64))


def replayable(in_shape: tuple[int, ...], out_shape: tuple[int, ...]) -> bool:
    """Whether a complex64 transform of these shapes is small enough to be replayed (:data:`REPLAY_BYTES`)."""
    return 8 * (int(np.prod(in_shape)) + int(np.prod(out_shape))) <= REPLAY_BYTES
