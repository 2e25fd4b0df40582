"""l1 of orthogonal Daubechies wavelets ``||Psi x||_1`` (every coefficient; :mod:`mri_recon.operators.wavelet`,
``kernels/wavelet.cu``): FISTA by default (its proximal map is exact), or ADMM."""

from __future__ import annotations

from typing import Any

from ...operators.wavelet import Wavelet
from ..admm import Sparsity
from .base import Regularizer

ORDER = 4
"""The Daubechies order (db4)."""


class WaveletL1(Regularizer):
    name = "wavelet"
    help = "l1 of db4 wavelets, FISTA"
    lam_default = {True: 5e-3, False: 5e-3}
    solvers = ("admm", "fista")
    default_solver = "fista"
    orthogonal = True

    def check(self, matrix: tuple[int, ...]) -> None:
        Wavelet(tuple(matrix), len(matrix))  # refuses a matrix without a wavelet level

    def sparsity(self, shape: tuple[int, ...], ndim: int, *, anisotropic: bool = False) -> tuple[Sparsity, Any]:
        psi = Wavelet(shape, ndim, order=ORDER)
        return Sparsity(forward=psi.apply, adjoint_rhs=lambda b, q, rho: b + rho * psi.H(q),
                        gram=lambda x: x, groups=0, shape=shape), psi


REGULARIZER = WaveletL1()
