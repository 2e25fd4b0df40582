"""The exact non-uniform DFT in NumPy: the slow, obviously correct oracle every fast path is tested against.

Convention (schema v1, :mod:`mri_recon.checks.grid`): voxel j of an axis of size N sits at r = (j - N // 2) / N,
the trajectory k is in
cycles per field of view, the forward transform is d_m = sum_n x_n exp(-i 2 pi k_m . r_n) and the adjoint
is (F^H d)_n = sum_m d_m exp(+i 2 pi k_m . r_n). Both are evaluated term by term, one block of
(samples x voxels) phases at a time, so that memory stays bounded by ``chunk_bytes``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ...checks.grid import voxel_positions
from ...errors import SchemaError

DEFAULT_CHUNK_BYTES = 64 * 2**20
"""Upper bound on the working memory of one block of phases (bytes)."""


def _blocks(n_samples: int, n_voxels: int, itemsize: int, chunk_bytes: int) -> tuple[int, int]:
    """Block sizes (samples, voxels) whose phase arrays fit in ``chunk_bytes``."""
    per_element = itemsize + 8  # the complex phase plus its float64 argument
    elements = max(1, int(chunk_bytes) // per_element)
    voxels = min(n_voxels, max(1, elements // min(n_samples, 4096)))
    samples = min(n_samples, max(1, elements // voxels))
    return samples, voxels


def _phases(k: np.ndarray, r: np.ndarray, sign: float, dtype: np.dtype) -> np.ndarray:
    """exp(sign * i 2 pi k . r) for every pair (row of k, row of r), shape (len(k), len(r))."""
    cycles = k @ r.T
    cycles -= np.rint(cycles)  # exp is 1-periodic in cycles: keep the argument small and exact
    angle = (2 * np.pi * sign) * cycles.astype(np.finfo(dtype).dtype, copy=False)
    out = np.empty(angle.shape, dtype=dtype)
    np.cos(angle, out=out.real)
    np.sin(angle, out=out.imag)
    return out


def _trajectory(trajectory: np.ndarray, ndim: int) -> np.ndarray:
    k = np.asarray(trajectory, dtype=np.float64)
    if k.ndim != 2 or k.shape[1] != ndim:
        raise SchemaError(f"trajectory must have shape (M, {ndim}), found {k.shape}")
    return k


def nudft_adjoint(kspace: np.ndarray, trajectory: np.ndarray, matrix: Sequence[int], *,
                  dtype: type = np.complex128, chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> np.ndarray:
    """Exact adjoint F^H d by direct summation.

    Parameters
    ----------
    kspace
        ``(C, M)`` samples of C coils, or ``(M,)`` for one coil.
    trajectory
        ``(M, D)`` sample positions in cycles per field of view, D = ``len(matrix)``.
    matrix
        Image size ``(Nx, Ny)`` or ``(Nx, Ny, Nz)``.
    dtype
        ``numpy.complex128`` (default, the oracle) or ``numpy.complex64`` (half the memory, float32 phases).
    chunk_bytes
        Working memory of one block of phases.

    Returns
    -------
    numpy.ndarray
        ``(C, *matrix)`` of ``dtype``; ``matrix`` when ``kspace`` is 1-D.
    """
    matrix = tuple(int(n) for n in matrix)
    dtype = np.dtype(dtype)
    k = _trajectory(trajectory, len(matrix))
    data = np.asarray(kspace)
    single = data.ndim == 1
    data = np.atleast_2d(data).astype(dtype, copy=False)
    if data.ndim != 2 or data.shape[1] != k.shape[0]:
        raise SchemaError(f"kspace must have shape (C, {k.shape[0]}) or ({k.shape[0]},), found {data.shape}")
    r = voxel_positions(matrix)
    out = np.zeros((data.shape[0], r.shape[0]), dtype=dtype)
    n_samples, n_voxels = _blocks(k.shape[0], r.shape[0], dtype.itemsize, chunk_bytes)
    for v in range(0, r.shape[0], n_voxels):
        for m in range(0, k.shape[0], n_samples):
            phase = _phases(k[m:m + n_samples], r[v:v + n_voxels], +1.0, dtype)
            out[:, v:v + n_voxels] += data[:, m:m + n_samples] @ phase
    out = out.reshape(data.shape[0], *matrix)
    return out[0] if single else out


def nudft_forward(image: np.ndarray, trajectory: np.ndarray, *, dtype: type = np.complex128,
                  chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> np.ndarray:
    """Exact forward transform F x by direct summation.

    Parameters
    ----------
    image
        ``(C, *matrix)`` or ``matrix``-shaped; the rank is read against D = ``trajectory.shape[1]``.
    trajectory
        ``(M, D)`` sample positions in cycles per field of view.
    dtype
        ``numpy.complex128`` (default) or ``numpy.complex64``.
    chunk_bytes
        Working memory of one block of phases.

    Returns
    -------
    numpy.ndarray
        ``(C, M)`` of ``dtype``; ``(M,)`` when ``image`` has no coil axis.
    """
    dtype = np.dtype(dtype)
    k = np.asarray(trajectory, dtype=np.float64)
    x = np.asarray(image)
    ndim = k.shape[1] if k.ndim == 2 else -1
    if ndim not in (2, 3) or x.ndim not in (ndim, ndim + 1):
        raise SchemaError(
            f"image of shape {x.shape} and trajectory of shape {k.shape} do not match: expected a trajectory "
            f"(M, D) with D = 2 or 3 and an image of shape matrix or (C, *matrix) with len(matrix) = D"
        )
    single = x.ndim == ndim
    x = (x[None] if single else x).astype(dtype, copy=False)
    matrix = x.shape[1:]
    flat = x.reshape(x.shape[0], -1)
    r = voxel_positions(matrix)
    out = np.zeros((x.shape[0], k.shape[0]), dtype=dtype)
    n_samples, n_voxels = _blocks(k.shape[0], r.shape[0], dtype.itemsize, chunk_bytes)
    for m in range(0, k.shape[0], n_samples):
        for v in range(0, r.shape[0], n_voxels):
            phase = _phases(k[m:m + n_samples], r[v:v + n_voxels], -1.0, dtype)
            out[:, m:m + n_samples] += flat[:, v:v + n_voxels] @ phase.T
    return out[0] if single else out
