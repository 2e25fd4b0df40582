"""The staging's ring of buffers on the host (mri_recon.arrays.staging), with CuPy's runtime replaced by a twin whose
transfers run only when an event behind them is waited on, as a device may run them late: a buffer filled again
before its transfer has read it, a wrong offset or pitch, or a piece never sent shows in the destination."""

from __future__ import annotations

import ctypes
import threading
from types import SimpleNamespace

import numpy as np
import pytest

from mri_recon.arrays import staging
from mri_recon.arrays.staging import Staging

PIECE = 4096


class _Pinned(bytearray):
    """A host buffer with the address CuPy's pinned memory gives as ``ptr``."""

    @property
    def ptr(self) -> int:
        return ctypes.addressof((ctypes.c_char * len(self)).from_buffer(self))


class _Stream:
    """Transfers queued in order, run only when an event recorded behind them is waited on."""

    ptr = 0

    def __init__(self) -> None:
        self.queued: list = []
        self.done = 0
        self.lock = threading.Lock()

    def run_to(self, count: int) -> None:
        with self.lock:
            while self.done < count:
                self.queued[self.done]()
                self.done += 1


class _Event:
    def __init__(self, stream: _Stream, **_) -> None:
        self.stream, self.mark = stream, 0

    def record(self, stream: _Stream) -> None:
        self.mark = len(stream.queued)

    def synchronize(self) -> None:
        self.stream.run_to(self.mark)


class _Runtime:
    memcpyHostToDevice = 1

    def __init__(self, stream: _Stream) -> None:
        self.stream = stream

    def memcpyAsync(self, dst, src, size, kind, stream_ptr):  # noqa: N802 - CuPy's name
        assert kind == self.memcpyHostToDevice and size > 0
        self.stream.queued.append(lambda: ctypes.memmove(dst, src, size))

    def memcpy2DAsync(self, dst, dpitch, src, spitch, width, height, kind, stream_ptr):  # noqa: N802
        assert kind == self.memcpyHostToDevice and width <= min(dpitch, spitch) and dpitch <= staging.MAX_PITCH

        def copy():
            for row in range(height):
                ctypes.memmove(dst + row * dpitch, src + row * spitch, width)

        self.stream.queued.append(copy)


class _Device:
    def __init__(self, index: int) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *_):
        return False


def _twin() -> SimpleNamespace:
    """CuPy's names that Staging uses, over host memory and one lazily run stream."""
    stream = _Stream()
    cuda = SimpleNamespace(Device=_Device, alloc_pinned_memory=_Pinned, runtime=_Runtime(stream),
                           Event=lambda **k: _Event(stream, **k), get_current_stream=lambda: stream)
    return SimpleNamespace(cuda=cuda)


class _Destination:
    """A 'device' array: host memory with the attributes Staging reads from a CuPy array."""

    def __init__(self, shape, dtype) -> None:
        self.host = np.full(shape, np.nan, dtype) if np.dtype(dtype).kind in "fc" else np.full(shape, 0xA5, dtype)
        self.shape, self.dtype, self.nbytes, self.flags = self.host.shape, self.host.dtype, self.host.nbytes, \
            self.host.flags
        self.data = SimpleNamespace(ptr=self.host.ctypes.data)


@pytest.mark.parametrize("nbytes", [1, PIECE - 1, PIECE, PIECE + 1, 4 * PIECE + 1, 37 * PIECE + 123])
def test_every_byte_arrives_though_transfers_run_late(rng, nbytes):
    stage = Staging(_twin(), 0, threads=2, piece=PIECE)
    source = rng.integers(0, 256, nbytes, dtype=np.uint8)
    destination = _Destination(nbytes, np.uint8)
    stage.copy(source, destination)
    np.testing.assert_array_equal(destination.host, source)


@pytest.mark.parametrize("per_row", [False, True])
@pytest.mark.parametrize("rows", [1, 3, 8])
@pytest.mark.parametrize("columns", [1, 63, 64, 65, 4 * 64 + 1, 37 * 64 + 5])
def test_a_product_arrives_whole_though_transfers_run_late(monkeypatch, rng, per_row, rows, columns):
    """``matrix @ source`` range of columns by range (64 columns a buffer at 8 rows), beyond the ring of four
    buffers, by 2-D copies or, where a row is longer than a 2-D copy's pitch, one copy per row."""
    if per_row:
        monkeypatch.setattr(staging, "MAX_PITCH", 8 * columns - 1)
    stage = Staging(_twin(), 0, threads=2, piece=PIECE)
    source = (rng.standard_normal((11, columns)) + 1j * rng.standard_normal((11, columns))).astype(np.complex64)
    matrix = (rng.standard_normal((rows, 11)) + 1j * rng.standard_normal((rows, 11))).astype(np.complex64)
    destination = _Destination((rows, columns), np.complex64)
    stage.copy_product(matrix, source, destination)
    expected = matrix.astype(np.complex128) @ source.astype(np.complex128)
    assert np.linalg.norm(destination.host - expected) <= 1e-6 * np.linalg.norm(expected)


def test_a_strided_source_is_multiplied_where_it_lies(rng):
    """Every other column of a wider array: the product reads the view, no contiguous copy is needed."""
    stage = Staging(_twin(), 0, threads=3, piece=PIECE)
    wide = (rng.standard_normal((6, 1000)) + 1j * rng.standard_normal((6, 1000))).astype(np.complex64)
    matrix = (rng.standard_normal((2, 6)) + 1j * rng.standard_normal((2, 6))).astype(np.complex64)
    destination = _Destination((2, 500), np.complex64)
    stage.copy_product(matrix, wide[:, ::2], destination)
    expected = matrix.astype(np.complex128) @ wide[:, ::2].astype(np.complex128)
    assert np.linalg.norm(destination.host - expected) <= 1e-6 * np.linalg.norm(expected)


def test_products_above_one_piece_go_through_the_staging_of_their_thread_count(monkeypatch, rng):
    """``copy_product_up`` stages a product whose source is more than one piece with PRODUCT_THREADS threads, in a
    staging made once per device and thread count (the copies' own where the counts agree), and multiplies a
    smaller one on the host before one copy."""
    monkeypatch.setattr(staging, "_STAGING", {})
    monkeypatch.setattr(staging, "PIECE_BYTES", 992)  # 31 columns of 4 complex64 rows
    monkeypatch.setattr(staging, "THREADS", 8)  # a host of 16 cores, whatever this one has
    for threads in (2, 8):
        monkeypatch.setattr(staging, "PRODUCT_THREADS", threads)
        twin = _twin()
        source = (rng.standard_normal((4, 300)) + 1j * rng.standard_normal((4, 300))).astype(np.complex64)
        matrix = (rng.standard_normal((2, 4)) + 1j * rng.standard_normal((2, 4))).astype(np.complex64)
        expected = matrix.astype(np.complex128) @ source.astype(np.complex128)
        for _ in range(2):
            destination = _Destination((2, 300), np.complex64)
            staging.copy_product_up(twin, matrix, source, destination, 0)
            assert np.linalg.norm(destination.host - expected) <= 1e-6 * np.linalg.norm(expected)
        assert (0, threads) in staging._STAGING
        assert staging._STAGING[0, threads].pool._max_workers == threads
        copies: list = []
        small = SimpleNamespace(set=copies.append)
        staging.copy_product_up(twin, matrix, source[:, :10], small, 0)  # 320 bytes: one product, one copy
        assert len(copies) == 1 and np.allclose(copies[0], expected[:, :10], rtol=1e-5)
    exactly = SimpleNamespace(set=copies.append)
    staging.copy_product_up(_twin(), matrix, source[:, :31], exactly, 0)  # exactly one piece: not staged
    assert len(copies) == 2 and np.allclose(copies[1], expected[:, :31], rtol=1e-5)
    monkeypatch.setattr(staging, "PRODUCT_THREADS", 1)  # one product thread: never staged, whatever THREADS says
    staging.copy_product_up(_twin(), matrix, source, exactly, 0)
    assert len(copies) == 3 and np.allclose(copies[2], expected, rtol=1e-5)
    assert sorted(staging._STAGING) == [(0, 2), (0, 8)]


@pytest.mark.parametrize("threads", [1, 2, 8])
@pytest.mark.parametrize("rows, columns", [(1, 1), (3, 5), (3, 10_000), (8, 64), (8, 10_000), (32, 100)])
def test_product_ranges_fit_a_buffer_and_give_every_thread_two(threads, rows, columns):
    """Column ranges of a product: none wider than a buffer holds, and at least two per thread wherever the
    columns allow it (few rows fill a buffer with many columns: three virtual coils)."""
    width = staging.product_width(8 * rows, columns, PIECE, threads)
    ranges = -(-columns // width)
    assert 1 <= width and 8 * rows * width <= PIECE
    assert ranges >= min(columns, 2 * threads)
    assert ranges < max(4 * threads, -(-columns // (PIECE // (8 * rows))) + 1)


def test_a_product_of_few_rows_is_cut_for_every_thread(rng):
    """A buffer holds 170 columns of 3 complex64 rows, so 500 columns would fill 3 buffers; with 4 threads the
    product runs as 8 ranges of 62 columns and one of 4."""
    stage = Staging(_twin(), 0, threads=4, piece=PIECE)
    calls: list = []
    source = (rng.standard_normal((5, 500)) + 1j * rng.standard_normal((5, 500))).astype(np.complex64)
    matrix = (rng.standard_normal((3, 5)) + 1j * rng.standard_normal((3, 5))).astype(np.complex64)
    run = stage._run
    stage._run = lambda count, fill, send: (calls.append(count), run(count, fill, send))
    destination = _Destination((3, 500), np.complex64)
    stage.copy_product(matrix, source, destination)
    assert calls == [9]
    expected = matrix.astype(np.complex128) @ source.astype(np.complex128)
    assert np.linalg.norm(destination.host - expected) <= 1e-6 * np.linalg.norm(expected)
