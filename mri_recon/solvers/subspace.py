"""The subspace model of a time series: frames confined to the span of K temporal basis functions.

With ``Phi`` a ``T x K`` matrix of orthonormal columns (the basis), the frames are ``x_t = sum_k Phi[t, k] c_k``
and the unknowns are the K coefficient images ``c`` (shape ``(K, *matrix)``): the problem

    min_c  sum_t ||W_t^(1/2) (A_t (Phi c)_t - d_t)||^2 + lam R(c)

has the normal operator ``N_c(c) = Phi^H N(Phi c)``, ``N_c(c)_k = sum_t conj(Phi[t, k]) N_t(sum_k' Phi[t, k']
c_k')`` with ``N_t`` each frame's normal operator (:class:`SubspaceNormal`), and the right-hand side
``Phi^H b`` (``b_t = A_t^H W_t d_t``). It is Hermitian positive semi-definite whenever the ``N_t`` are, and a
frame's Tikhonov term ``mu x_t`` becomes ``mu c`` (``Phi^H Phi = I``). The conventions are BART's
(``pics -B``, ``src/noncart/nufft.c``): the forward model multiplies by the basis, its adjoint by the basis'
conjugate, the basis' frames along its rows.

Every product is the array module's (``basis @ c`` over the flattened images), so the operator runs on NumPy
and CuPy alike, with the frames' normal operators of :mod:`.temporal` (the engines' Toeplitz operators on the
CPU, :class:`~.temporal.BatchedSeriesNormal` on a GPU).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..arrays.backend import get_xp
from .temporal import SeriesNormal


def expand(basis: Any, c: Any) -> Any:
    """The frames ``Phi c``: ``(T, *matrix)`` from coefficient images ``c`` of shape ``(K, *matrix)``."""
    return (basis @ c.reshape(c.shape[0], -1)).reshape(basis.shape[0], *c.shape[1:])


def project(basis: Any, x: Any) -> Any:
    """``Phi^H x``: coefficient images ``(K, *matrix)`` from frames ``x`` of shape ``(T, *matrix)``."""
    xp = get_xp(x)
    return (xp.conj(basis).T @ x.reshape(x.shape[0], -1)).reshape(basis.shape[1], *x.shape[1:])


class SubspaceNormal(SeriesNormal):
    """``c -> Phi^H N(Phi c) + rho gram(c)``: the normal operator of the coefficient images.

    ``frames`` is the frames' block-diagonal normal operator (a :class:`~.temporal.SeriesNormal`, Tikhonov
    included), ``basis`` the ``T x K`` matrix on the vectors' device and in their dtype. It is a
    :class:`~.temporal.SeriesNormal` of the coefficients, so the one CG (:func:`~.cg.cg`), the joint solvers
    and the power iteration take it as they take the frames' operator. It allocates its frames (``T`` images
    in, ``T`` out) at every product, so it does not offer ``apply_into`` to the device CG's graph replay.
    """

    def __init__(self, frames: SeriesNormal, basis: Any, rho: float = 0.0,
                 gram: Callable[[Any, Any, float], None] | None = None) -> None:
        super().__init__([], rho, gram)
        self.frames, self.basis = frames, basis
        self.writes_into = False

    def with_penalty(self, rho: float, gram: Callable[[Any, Any, float], None]) -> SubspaceNormal:
        return SubspaceNormal(self.frames, self.basis, rho, gram)

    def _data_into(self, c: Any, out: Any) -> None:
        out[...] = project(self.basis, self.frames.data(expand(self.basis, c)))
