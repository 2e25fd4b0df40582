"""FINUFFT wrappers in the project's conventions: the fast CPU path for F and F^H.

Convention (schema v1, :mod:`mri_recon.grid`): voxel j of an axis of size N sits at r = (j - N // 2) / N,
the trajectory k is in cycles per field of view, F x = sum_n x_n exp(-i 2 pi k . r_n) and
F^H d = sum_m d_m exp(+i 2 pi k_m . r). FINUFFT's modes are the integers q = j - N // 2 (its default
``modeord=0``), the same grid, so its type-1 and type-2 transforms at x_d = 2 pi k_d / N_d are F^H and F
with no phase correction. Computed in double precision to tolerance ``eps``.
"""

from __future__ import annotations

import numpy as np

DEFAULT_EPS = 1e-9


def _finufft():
    import finufft  # noqa: PLC0415 - import cost paid only when used

    return finufft


def _scaled(trajectory: np.ndarray, matrix: tuple[int, ...]) -> list[np.ndarray]:
    """FINUFFT coordinates x_d = 2 pi k_d / N_d (its modes j - N_d // 2 are the voxels of :mod:`mri_recon.grid`)."""
    k = np.asarray(trajectory, dtype=np.float64)
    return [np.ascontiguousarray(2 * np.pi * k[:, d] / n) for d, n in enumerate(matrix)]


def adjoint(kspace: np.ndarray, trajectory: np.ndarray, matrix: tuple[int, ...],
            eps: float = DEFAULT_EPS) -> np.ndarray:
    """F^H d for ``kspace`` of shape ``(C, M)``; returns complex128 ``(C, *matrix)``."""
    matrix = tuple(int(n) for n in matrix)
    coords = _scaled(trajectory, matrix)
    data = np.ascontiguousarray(np.asarray(kspace, dtype=np.complex128))
    fn = {2: _finufft().nufft2d1, 3: _finufft().nufft3d1}[len(matrix)]
    out = fn(*coords, data, n_modes=matrix, eps=eps, isign=+1)
    return out.reshape(data.shape[0], *matrix)


def forward(image: np.ndarray, trajectory: np.ndarray, eps: float = DEFAULT_EPS) -> np.ndarray:
    """F x for ``image`` of shape ``(C, *matrix)``; returns complex128 ``(C, M)``."""
    image = np.ascontiguousarray(np.asarray(image, dtype=np.complex128))
    matrix = tuple(image.shape[1:])
    coords = _scaled(trajectory, matrix)
    fn = {2: _finufft().nufft2d2, 3: _finufft().nufft3d2}[len(matrix)]
    out = fn(*coords, image, eps=eps, isign=-1)
    return out.reshape(image.shape[0], -1)
