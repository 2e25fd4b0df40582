"""The CPU engines: :class:`NudftEncoding` (``exact``: the float64 NumPy sum of :mod:`.nudft`, the oracle) and
:class:`FinufftEncoding` (``nufft``: FINUFFT at tolerance :data:`~.encoding.NUFFT_EPS`), with their memory
model (the planner's F^H d, PSF and spectrum stages; measured in docs/planner.md)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from . import finufft, nudft
from .encoding import NUFFT_EPS, Encoding

COMPLEX64, COMPLEX128, FLOAT32, FLOAT64 = 8, 16, 4, 8
EXACT_CHUNK = 128 * 2**20
"""Working memory of the NumPy exact DFT: its block (64 MiB counted at 24 bytes per phase) holds 48 bytes
per phase at its peak (float64 cycles and angle, the complex128 phase, and the previous block's phase)."""


def cpu_stages(matrix: tuple[int, ...], n_coils: int, n_samples: int, *, sense: bool, nufft: bool,
               workers: int) -> dict[str, int]:
    """Bytes held at the peak of each CPU stage before the CG iterations (inputs included): FINUFFT's
    oversampled complex128 grids (``nufft``) or the exact DFT's blocks."""
    d, m, c = len(matrix), n_samples, n_coils
    n_vox = math.prod(matrix)
    big = tuple(2 * n for n in matrix)
    grid2 = math.prod(big)
    inputs = c * m * COMPLEX64 + m * (d + 1) * FLOAT32 + (c * n_vox * COMPLEX64 if sense else 0)
    coords = m * d * FLOAT64 * 2  # the float64 trajectory and FINUFFT's scaled coordinates
    if nufft:
        in_flight = min(workers, c)
        fhd_work = (c * m * COMPLEX128  # the samples in complex128
                    + in_flight * math.prod(finufft.fine_grid_shape(matrix, NUFFT_EPS)) * COMPLEX128)
        psf_work = (m * COMPLEX128 + m * d * FLOAT64  # the weights in complex128, the doubled trajectory
                    + math.prod(finufft.fine_grid_shape(big, NUFFT_EPS)) * COMPLEX128)
    else:
        fhd_work = c * m * COMPLEX128 + n_vox * d * FLOAT64 + EXACT_CHUNK
        psf_work = m * COMPLEX128 + grid2 * d * FLOAT64 + EXACT_CHUNK
    weighted = c * m * COMPLEX64
    fhd = inputs + weighted + coords + fhd_work + c * n_vox * (COMPLEX128 + COMPLEX64)
    rhs = (1 if sense else c) * n_vox * COMPLEX64
    psf = inputs + rhs + coords + max(psf_work + grid2 * COMPLEX128, grid2 * (COMPLEX128 + COMPLEX64))
    spectrum = inputs + rhs + 3 * grid2 * COMPLEX64
    return {"fhd": int(fhd), "psf": int(psf), "spectrum": int(spectrum)}


class NudftEncoding(Encoding):
    """F by the float64 NumPy sum (the oracle), CPU only; results rounded to complex64."""

    name = "exact"
    device_kind = "cpu"
    auto = False

    @classmethod
    def stage_bytes(cls, matrix: tuple[int, ...], n_coils: int, n_samples: int, *, sense: bool, fixed: int,
                    workers: int) -> dict[str, int]:
        return cpu_stages(matrix, n_coils, n_samples, sense=sense, nufft=False, workers=workers)

    def _apply(self, x: Any) -> Any:
        return nudft.nudft_forward(x, self.trajectory).astype(np.complex64)

    def _adjoint(self, y: Any) -> Any:
        return nudft.nudft_adjoint(y, self.trajectory, self.matrix).astype(np.complex64)

    def psf(self, weights: Any) -> Any:
        big = tuple(2 * n for n in self.matrix)
        data = np.asarray(weights, dtype=np.complex128)[None, :]
        out = nudft.nudft_adjoint(data, 2 * np.asarray(self.trajectory, dtype=np.float64), big)
        return out[0].astype(np.complex64)


class FinufftEncoding(Encoding):
    """F by FINUFFT (tolerance :data:`~.encoding.NUFFT_EPS`, double precision inside), CPU only."""

    name = "nufft"
    device_kind = "cpu"

    @classmethod
    def stage_bytes(cls, matrix: tuple[int, ...], n_coils: int, n_samples: int, *, sense: bool, fixed: int,
                    workers: int) -> dict[str, int]:
        return cpu_stages(matrix, n_coils, n_samples, sense=sense, nufft=True, workers=workers)

    def _apply(self, x: Any) -> Any:
        return finufft.forward(x, self.trajectory, eps=NUFFT_EPS).astype(np.complex64)

    def _adjoint(self, y: Any) -> Any:
        return finufft.adjoint(y, self.trajectory, self.matrix, eps=NUFFT_EPS).astype(np.complex64)

    def psf(self, weights: Any) -> Any:
        big = tuple(2 * n for n in self.matrix)
        data = np.asarray(weights, dtype=np.complex128)[None, :]
        out = finufft.adjoint(data, 2 * np.asarray(self.trajectory, dtype=np.float64), big, eps=NUFFT_EPS)
        return out[0].astype(np.complex64)


ENGINES = (NudftEncoding, FinufftEncoding)
