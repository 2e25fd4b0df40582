"""The voxel grid: the one definition of where voxel j of an image axis sits.

Voxel j of an axis of size N sits at ``r = (j - c) / N`` of the field of view, with the centre voxel
``c = N // 2`` (floor): the convention of BART, SigPy, FINUFFT and ``numpy.fft.fftshift``. For even N the
image spans ``[-1/2, 1/2)``; for odd N it spans ``[-1/2 + 1/(2N), 1/2 - 1/(2N)]`` and is symmetric.

The GPU kernels work in integers: ``r = Q / (2N)`` with ``Q = 2j - 2c`` (:func:`doubled_offset`), and the
voxel at ``-r`` (its mirror) is ``2c - j`` (:func:`mirror_index`): ``N - j`` for even N, where voxel 0 has
no mirror, and ``N - 1 - j`` for odd N, where every voxel has one and the centre is its own.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def centre(n: int) -> int:
    """Index of the voxel at ``r = 0`` on an axis of ``n`` voxels: ``n // 2``."""
    return int(n) // 2


def doubled_offset(j, n: int):
    """``Q = 2 (j - centre(n))``, the integer with ``r = Q / (2n)`` (``j`` an int or an integer array)."""
    return 2 * j - 2 * centre(n)


def mirror_index(j, n: int):
    """The voxel at ``-r`` of voxel ``j``: ``2 centre(n) - j``; it exists when it lies in ``[0, n)``."""
    return 2 * centre(n) - j


def axis_positions(n: int) -> np.ndarray:
    """float64 positions ``(j - n // 2) / n`` of the voxels of one axis, in units of the field of view."""
    return (np.arange(int(n), dtype=np.float64) - centre(n)) / int(n)


def voxel_axes(matrix: Sequence[int], dtype: type = np.float64) -> list[np.ndarray]:
    """Per-axis coordinate of every voxel of ``matrix``, each flattened to ``prod(matrix)`` in C order.

    Parameters
    ----------
    matrix
        Image size ``(Nx, Ny)`` or ``(Nx, Ny, Nz)``.
    dtype
        Output dtype (computed in float64, then cast).

    Returns
    -------
    list of numpy.ndarray
        D contiguous arrays of length ``prod(matrix)``.
    """
    grids = np.meshgrid(*[axis_positions(n) for n in matrix], indexing="ij")
    return [np.ascontiguousarray(g.reshape(-1), dtype=dtype) for g in grids]


def voxel_positions(matrix: Sequence[int]) -> np.ndarray:
    """Positions of every voxel of ``matrix`` in units of the field of view.

    Parameters
    ----------
    matrix
        Image size ``(Nx, Ny)`` or ``(Nx, Ny, Nz)``.

    Returns
    -------
    numpy.ndarray
        float64 ``(prod(matrix), D)``: row n holds ``r = (j - N // 2) / N`` per axis for the voxel whose
        C-order flat index is n.
    """
    return np.stack(voxel_axes(matrix), axis=1)


def centre_phase(frequencies: np.ndarray, n: int) -> np.ndarray:
    """``exp(+i 2 pi q centre(n) / n)`` for integer frequencies ``q``: the factor between the DFT with
    voxels at ``j`` and the project's transform with voxels at ``(j - centre) / n``
    (``sum_j x_j exp(-i 2 pi q r_j) = centre_phase(q) * fft(x)[q]``). It is ``(-1)^q`` for even n."""
    q = np.asarray(frequencies, dtype=np.int64)
    c, size = centre(n), int(n)
    if 2 * c == size:  # exactly +-1
        return np.where(q % 2 == 0, 1.0, -1.0).astype(np.complex128)
    return np.exp(2j * np.pi * ((q * c) % size) / size)
