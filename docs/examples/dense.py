"""A CPU engine that holds its encoding matrix: ``E[m, n] = exp(-i 2 pi k_m . r_n)``, applied by BLAS.

The worked example of docs/architecture.md, "Where to add an engine": this file is
``mri_recon/operators/engines/dense.py`` with one entry, ``"dense"``, in ``ENGINE_MODULES`` of
``mri_recon/operators/engines/registry.py``. ``method="dense"`` then runs it; the registry's chooser, the
planner (its memory model), the PSF cache, the adjointness tests and ``mri-recon doctor`` read it from there.
``tests/test_examples.py`` registers it and checks it against the NumPy DFT.

The matrix is ``M x N`` complex128 (16 bytes per sample and voxel), so the engine serves small problems:
repeated transforms of one trajectory cost two matrix products each.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ...checks.grid import voxel_positions
from .encoding import Encoding

COMPLEX64, COMPLEX128 = 8, 16


def encoding_matrix(trajectory: Any, matrix: tuple[int, ...]) -> np.ndarray:
    """complex128 ``(M, N)``: ``exp(-i 2 pi k_m . r_n)`` for the voxels of ``matrix`` in C order."""
    phase = np.asarray(trajectory, dtype=np.float64) @ voxel_positions(matrix).T
    return np.exp(-2j * np.pi * phase)


class DenseEncoding(Encoding):
    """F as the product with the encoding matrix (formed once, complex128), CPU only."""

    name = "dense"
    device_kind = "cpu"
    auto = False  # chosen by name only: method="dense"
    caches_psf = False  # its PSF is one more matrix product

    @classmethod
    def stage_bytes(cls, matrix: tuple[int, ...], n_coils: int, n_samples: int, *, sense: bool, fixed: int,
                    workers: int, trajectory: Any = None) -> dict[str, int]:
        """F^H d: the matrix and the coils' samples and images in complex128; the PSF: the matrix of the
        doubled trajectory on the 2x grid (neither depends on where the samples lie: ``trajectory`` unused)."""
        del trajectory
        n_vox = math.prod(matrix)
        fhd = n_samples * n_vox * COMPLEX128 + n_coils * (n_samples + n_vox) * COMPLEX128
        psf = n_samples * (2 ** len(matrix) * n_vox) * COMPLEX128 + 2 ** len(matrix) * n_vox * COMPLEX128
        return {"fhd": int(fixed + fhd), "psf": int(fixed + psf)}

    def __init__(self, trajectory: Any, matrix: tuple[int, ...], batch: int = 1) -> None:
        super().__init__(trajectory, matrix, batch)
        self.e = encoding_matrix(trajectory, self.matrix)

    def _apply(self, x: Any) -> Any:
        flat = np.asarray(x, dtype=np.complex128).reshape(x.shape[0], -1)
        return (flat @ self.e.T).astype(np.complex64)

    def _adjoint(self, y: Any) -> Any:
        images = np.asarray(y, dtype=np.complex128) @ self.e.conj()
        return images.reshape(y.shape[0], *self.matrix).astype(np.complex64)


ENGINES = (DenseEncoding,)
