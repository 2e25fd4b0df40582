"""The CPU engines: :class:`NudftEncoding` (``exact``: the float64 NumPy sum of :mod:`.nudft`, the oracle) and
:class:`FinufftEncoding` (``nufft``: FINUFFT at tolerance :data:`~.encoding.NUFFT_EPS`), with their memory
model (the planner's F^H d, PSF and spectrum stages; measured in docs/planner.md)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from . import finufft, nudft
from .encoding import NUFFT_EPS, Encoding
from .finufft_spread import Spans, spread_bytes, subproblem_spans

COMPLEX64, COMPLEX128, FLOAT32, FLOAT64, INT64 = 8, 16, 4, 8, 8
EXACT_CHUNK = 128 * 2**20
"""Working memory of the NumPy exact DFT: its block (64 MiB counted at 24 bytes per phase) holds 48 bytes
per phase at its peak (float64 cycles and angle, the complex128 phase, and the previous block's phase)."""
FRESH_PAGES = 32 * 2**20
"""glibc maps every allocation of this size or more afresh (its largest mmap threshold), and a fresh page is
resident only once written: FINUFFT writes its output after spreading, so an output this large takes no memory
while the samples are spread; a smaller one may reuse heap pages already written and is counted."""


def cpu_stages(matrix: tuple[int, ...], n_coils: int, n_samples: int, *, sense: bool, nufft: bool,
               workers: int, spans: Spans | None = None) -> dict[str, int]:
    """Bytes held at the peak of each CPU stage before the CG iterations (inputs included): FINUFFT's
    oversampled complex128 grids and what its spreading holds besides (``nufft``, :mod:`.finufft_spread`,
    sized from the samples' ``spans``) or the exact DFT's blocks."""
    d, m, c = len(matrix), n_samples, n_coils
    n_vox = math.prod(matrix)
    big = tuple(2 * n for n in matrix)
    grid2 = math.prod(big)
    inputs = c * m * COMPLEX64 + m * (d + 1) * FLOAT32 + (c * n_vox * COMPLEX64 if sense else 0)
    rhs = (1 if sense else c) * n_vox * COMPLEX64
    spectrum = inputs + rhs + 3 * grid2 * COMPLEX64
    if nufft:
        fhd, psf = _finufft_stages(matrix, c, m, workers, spans)
        return {"fhd": int(inputs + fhd), "psf": int(inputs + rhs + psf), "spectrum": int(spectrum)}
    coords = m * d * FLOAT64 * 2  # the float64 trajectory and the scaled one
    fhd_work = c * m * COMPLEX128 + n_vox * d * FLOAT64 + EXACT_CHUNK
    psf_work = m * COMPLEX128 + grid2 * d * FLOAT64 + EXACT_CHUNK
    fhd = inputs + c * m * COMPLEX64 + coords + fhd_work + c * n_vox * (COMPLEX128 + COMPLEX64)
    psf = inputs + rhs + coords + max(psf_work + grid2 * COMPLEX128, grid2 * (COMPLEX128 + COMPLEX64))
    return {"fhd": int(fhd), "psf": int(psf), "spectrum": int(spectrum)}


def _finufft_stages(matrix: tuple[int, ...], c: int, m: int, workers: int, spans: Spans | None) -> tuple[int, int]:
    """Bytes beyond the inputs (and the right-hand side) of FINUFFT's F^H d and PSF: the weighted samples and
    their complex128 copy, the coordinates (and one temporary), the complex128 output, and per transform in
    flight its fine grid and what its spreading holds; then the output and its complex64 copy. The PSF's
    output is written after the spreading (see :data:`FRESH_PAGES`)."""
    d, n_vox, big = len(matrix), math.prod(matrix), tuple(2 * n for n in matrix)
    coords = m * (d + 1) * FLOAT64
    images, grid2 = c * n_vox * COMPLEX128, math.prod(big) * COMPLEX128
    fine = finufft.fine_grid_shape(matrix, NUFFT_EPS)
    transform = math.prod(fine) * COMPLEX128 + spread_bytes(fine, NUFFT_EPS, m, spans)
    fhd = c * m * COMPLEX64 + max(c * m * COMPLEX128 + coords + images + min(workers, c) * transform,
                                  images + c * n_vox * COMPLEX64)
    fine2 = finufft.fine_grid_shape(big, NUFFT_EPS)
    spreading = spread_bytes(fine2, NUFFT_EPS, m, spans) + (grid2 if grid2 < FRESH_PAGES else 0)
    transform = math.prod(fine2) * COMPLEX128 + max(spreading, m * INT64 + grid2)
    psf = max(m * COMPLEX128 + coords + transform, grid2 + grid2 // 2)
    return fhd, psf


class NudftEncoding(Encoding):
    """F by the float64 NumPy sum (the oracle), CPU only; results rounded to complex64."""

    name = "exact"
    device_kind = "cpu"
    auto = False

    @classmethod
    def stage_bytes(cls, matrix: tuple[int, ...], n_coils: int, n_samples: int, *, sense: bool, fixed: int,
                    workers: int, trajectory: Any = None) -> dict[str, int]:
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
                    workers: int, trajectory: Any = None) -> dict[str, int]:
        """:func:`cpu_stages`, FINUFFT's subgrids sized from the ``trajectory`` when it is given
        (:func:`~.finufft_spread.subproblem_spans`; else the whole grid)."""
        spans = None if trajectory is None else subproblem_spans(trajectory, matrix[0])
        return cpu_stages(matrix, n_coils, n_samples, sense=sense, nufft=True, workers=workers, spans=spans)

    def _apply(self, x: Any) -> Any:
        return finufft.forward(x, self.trajectory, eps=NUFFT_EPS).astype(np.complex64)

    def _adjoint(self, y: Any) -> Any:
        return finufft.adjoint(y, self.trajectory, self.matrix, eps=NUFFT_EPS).astype(np.complex64)

    def psf(self, weights: Any) -> Any:
        return finufft.psf(weights, self.trajectory, self.matrix, eps=NUFFT_EPS).astype(np.complex64)


ENGINES = (NudftEncoding, FinufftEncoding)
