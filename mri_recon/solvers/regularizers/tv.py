"""Total variation: isotropic ``sum_i ||(D x)_i||_2`` over the image axes, or anisotropic ``sum |D_a x|``
(finite differences of :mod:`mri_recon.operators.finite_difference`, ``kernels/tv.cu``); ADMM."""

from __future__ import annotations

from typing import Any

from ...arrays.backend import get_xp
from ...operators import finite_difference as fd
from ..admm import Sparsity
from .base import Normal, Regularizer


def _gram(x: Any, ndim: int) -> Any:
    """``D^H D x``."""
    out = get_xp(x).zeros_like(x)
    fd.laplacian_add(x, out, 1.0, ndim)
    return out


class TotalVariation(Regularizer):
    name = "tv"
    help = "total variation, ADMM"
    label = "TV"
    lam_default = {True: 3e-2, False: 3e-3}
    anisotropic = True

    def sparsity(self, shape: tuple[int, ...], ndim: int, *, anisotropic: bool = False) -> tuple[Sparsity, Any]:
        return Sparsity(forward=lambda x: fd.gradient(x, ndim),
                        adjoint_rhs=lambda b, q, rho: fd.adjoint_rhs(b, q, rho, ndim),
                        gram=lambda x: _gram(x, ndim),
                        groups=0 if anisotropic else ndim, shape=(ndim, *shape), replayable=True), None

    def norm_squared(self, ndim: int) -> float:
        """``||D||^2 <= 4 ndim`` for forward differences along ``ndim`` axes."""
        return 4.0 * ndim

    def x_update(self, normal: Normal, rho: float, ndim: int) -> Any:
        return fd.TvNormal(normal(0.0), rho, ndim)


REGULARIZER = TotalVariation()
