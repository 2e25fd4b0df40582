"""Host-to-device copies through pinned buffers filled by several threads (mri_recon.arrays.staging)."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from mri_recon.arrays.backend import cupy_module, resolve_device, to_device
from mri_recon.arrays.staging import STAGED_ABOVE, Staging

pytestmark = pytest.mark.gpu

PIECE = 4096


@pytest.fixture
def cupy():
    return cupy_module()


def _source(rng, nbytes: int) -> np.ndarray:
    return rng.integers(0, 256, nbytes, dtype=np.uint8)


@pytest.mark.parametrize("nbytes", [1, PIECE - 1, PIECE, PIECE + 1, 4 * PIECE, 4 * PIECE + 1, 37 * PIECE + 123])
def test_every_byte_arrives_at_every_size(cupy, rng, nbytes):
    """Sizes around a piece and beyond the ring of four buffers (two threads), into a poisoned destination."""
    stage = Staging(cupy, 0, threads=2, piece=PIECE)
    source = _source(rng, nbytes)
    destination = cupy.full(nbytes, 0xA5, np.uint8)
    stage.copy(source, destination)
    np.testing.assert_array_equal(cupy.asnumpy(destination), source)


def test_the_copy_is_complete_on_return_for_every_stream(cupy, rng):
    """The source may change at once, and another stream reads the finished array without waiting."""
    stage = Staging(cupy, 0, threads=3, piece=PIECE)
    source = rng.standard_normal(50 * PIECE // 8)
    kept = source.copy()
    destination = cupy.full(source.shape, np.nan)
    with cupy.cuda.Stream(non_blocking=True):
        stage.copy(source, destination)
    source[:] = 0
    with cupy.cuda.Stream(non_blocking=True) as other:
        total = float(destination.sum())
        other.synchronize()
    assert total == pytest.approx(kept.sum(), rel=1e-12)
    np.testing.assert_array_equal(cupy.asnumpy(destination), kept)


def test_copies_from_two_threads_share_one_staging(cupy, rng):
    stage = Staging(cupy, 0, threads=2, piece=PIECE)
    sources = [_source(rng, 21 * PIECE + 7) for _ in range(2)]
    destinations = [cupy.zeros(s.size, np.uint8) for s in sources]
    workers = [threading.Thread(target=stage.copy, args=pair) for pair in zip(sources, destinations, strict=True)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    for source, destination in zip(sources, destinations, strict=True):
        np.testing.assert_array_equal(cupy.asnumpy(destination), source)


def test_a_copy_of_other_bytes_is_refused(cupy):
    stage = Staging(cupy, 0, threads=2, piece=PIECE)
    with pytest.raises(ValueError, match="staged copy of 8 bytes into a device array of 16"):
        stage.copy(np.zeros(1), cupy.zeros(2))


@pytest.mark.parametrize("rows", [1, 3, 8])
@pytest.mark.parametrize("columns", [1, 63, 64, 65, 4 * 64 + 1, 37 * 64 + 5])
def test_a_product_arrives_whole_at_every_size(cupy, rng, rows, columns):
    """``matrix @ source`` column range by column range (``PIECE / (8 rows)`` columns a buffer at 8 rows:
    64), beyond the ring of four buffers, into a poisoned destination: the float64 product to float32."""
    stage = Staging(cupy, 0, threads=2, piece=PIECE)
    source = (rng.standard_normal((11, columns)) + 1j * rng.standard_normal((11, columns))).astype(np.complex64)
    matrix = (rng.standard_normal((rows, 11)) + 1j * rng.standard_normal((rows, 11))).astype(np.complex64)
    destination = cupy.full((rows, columns), np.nan, np.complex64)
    stage.copy_product(matrix, source, destination)
    expected = matrix.astype(np.complex128) @ source.astype(np.complex128)
    got = cupy.asnumpy(destination)
    assert np.linalg.norm(got - expected) <= 1e-6 * np.linalg.norm(expected)


def test_a_product_of_other_shapes_or_types_is_refused(cupy):
    stage = Staging(cupy, 0, threads=2, piece=PIECE)
    source, matrix = np.zeros((4, 10), np.complex64), np.zeros((2, 4), np.complex64)
    for args, text in [((matrix[:, :3], source, cupy.zeros((2, 10), np.complex64)), r"\(2, 3\) complex64 by"),
                       ((matrix, source, cupy.zeros((3, 10), np.complex64)), r"into \(3, 10\) complex64"),
                       ((matrix, source, cupy.zeros((2, 10), np.complex128)), r"into \(2, 10\) complex128"),
                       ((matrix, source, cupy.zeros((10, 2), np.complex64).T), r"into \(2, 10\) complex64"),
                       ((matrix, source[0], cupy.zeros((2, 10), np.complex64)), r"by \(10,\) complex64"),
                       ((matrix[:0], source, cupy.zeros((0, 10), np.complex64)), r"\(0, 4\) complex64 by")]:
        with pytest.raises(ValueError, match="staged product of .*" + text):
            stage.copy_product(*args)
    tall = np.zeros((PIECE // 8 + 1, 4), np.complex64)
    with pytest.raises(ValueError, match="one column of 513 rows is more than a 4096-byte buffer"):
        stage.copy_product(tall, source, cupy.zeros((PIECE // 8 + 1, 10), np.complex64))


def test_to_device_of_a_large_array_is_exact(cupy, rng):
    """Beyond STAGED_ABOVE the process's staging carries it (complex64 k-space, 2 x N, 80 bytes more, ending
    within a piece)."""
    host = (rng.standard_normal((2, STAGED_ABOVE // 16 + 5)) + 1j).astype(np.complex64)
    up = to_device(host, resolve_device("gpu"))
    assert up.dtype == np.complex64 and up.shape == host.shape
    np.testing.assert_array_equal(cupy.asnumpy(up), host)
