"""Uploading a scan's arrays to the device once, noise-whitened there in place or compressed on the way when asked.

A 2-D host array ``(R, L)`` (k-space ``(C, M)``, coil maps ``(C, N)``, a flattened trajectory ``(1, M D)``)
goes up in one copy; a whitening matrix ``W`` ``(R, R)`` is then applied to every
column in place (``kernels/arith.cu``: each thread holds one column), so the device never holds a second copy
of the array. A matrix of fewer rows (coil compression after whitening, ``A W``: ``(N, C)``) is applied on the
host, so that only the ``(N, L)`` product goes up: by the threads that fill the pinned buffers (one BLAS thread
each) where the array is more than one 4 MiB piece, else in one product before one pageable copy. On the CPU the same
products run in NumPy over chunks of whole columns (the twin the tests compare with): a matrix applied over the
row (channel) axis gives the same values chunk by chunk as on the whole array.

The copy up is :func:`mri_recon.arrays.backend.upload_into`: arrays above 64 MiB through pinned buffers filled by
several host threads (faster than a pageable copy, whose staging the driver fills from one thread:
docs/benchmarks.md), smaller ones by one pageable copy (:mod:`mri_recon.arrays.staging`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..arrays.backend import Device, cupy_module, upload_into, upload_product
from ..operators.arith import whiten

CHUNK_BYTES = 4 << 20
"""Bytes of one chunk of columns whitened at a time on the host."""


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


def upload_columns(host: np.ndarray, device: Device, matrix: np.ndarray | None = None,
                   chunk_bytes: int = CHUNK_BYTES) -> Any:
    """``matrix @ host`` on ``device`` (``host`` itself without a matrix), in the dtype of ``host``: a square
    matrix (whitening) after one copy up, in place on the device; a matrix of fewer rows than ``host`` (coil
    compression, ``(N, C)``) on the host on the way up (:func:`~mri_recon.arrays.backend.upload_product`), so
    that only the product crosses. On the CPU chunk by chunk of columns (:func:`column_chunks`)."""
    if host.ndim != 2:
        raise ValueError(f"upload_columns takes a 2-D array, found shape {host.shape}")
    if matrix is not None and (matrix.ndim != 2 or matrix.shape[1] != host.shape[0]
                               or not 1 <= matrix.shape[0] <= host.shape[0]):
        raise ValueError(f"upload_columns multiplies {host.shape[0]} rows by a matrix of 1 to {host.shape[0]} "
                         f"rows and {host.shape[0]} columns, found {matrix.shape}")
    rows = host.shape[0] if matrix is None else matrix.shape[0]
    matrix = None if matrix is None else np.ascontiguousarray(matrix.astype(host.dtype))
    if not device.is_gpu:
        out = _host_empty((rows, host.shape[1]), host.dtype)
        for part in column_chunks(host.shape[0], host.shape[1], host.dtype.itemsize, chunk_bytes):
            out[:, part] = host[:, part] if matrix is None else matrix @ host[:, part]
        return out
    cupy = cupy_module()
    with cupy.cuda.Device(device.index):
        out = empty((rows, host.shape[1]), host.dtype)
        if matrix is not None and rows < host.shape[0]:
            upload_product(matrix, host, out, device)  # complete on return
            return out
        upload_into(np.ascontiguousarray(host), out, device)  # complete on return
        if matrix is not None:
            whiten(out, cupy.asarray(matrix))
        return out


def upload(host: np.ndarray, device: Device, chunk_bytes: int = CHUNK_BYTES) -> Any:
    """A host array of any shape on ``device``, through :func:`upload_columns` as one row."""
    host = np.ascontiguousarray(host)
    return upload_columns(host.reshape(1, -1), device, None, chunk_bytes).reshape(host.shape)
