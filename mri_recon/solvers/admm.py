"""ADMM for ``min_x ||W^(1/2) (A x - d)||^2 + lam R(K x)`` with an l1-type ``R`` (NumPy and CuPy arrays).

Splitting ``z = K x`` (K: finite differences for total variation, the orthogonal wavelet transform for
l1-wavelets), scaled dual ``u``, penalty ``2 rho``; with ``N = A^H W A`` and ``b = A^H W d``:

    x <- argmin ||W^(1/2)(A x - d)||^2 + rho ||K x - z + u||^2,  i.e.  (N + rho K^H K) x = b + rho K^H (z - u)
    z <- prox of (lam / (2 rho)) R at K x + u                     (soft or group threshold)
    u <- u + K x - z

The x-update is ``inner_iterations`` CG steps on the Toeplitz normal operator plus ``rho K^H K`` (``rho I``
for an orthogonal wavelet), warm-started at the previous x (:class:`~.cg.WarmCg`); the z- and u-updates are
one fused kernel. On a GPU the whole loop is kernel launches and device copies: CG keeps its step sizes on the
device (``kernels/cg.cu``, a fixed number of steps, no convergence test), and the host reads back only the
objective, every ``check_every`` iterations.

The objective ``f(x) = Re<x, N x> - 2 Re<x, b> + d^H W d + lam R(K x)`` is reported relative to
``f(0) = d^H W d``; ``N x`` comes from CG's carried residual (:func:`carried_objective`), not from another
operator product.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..arrays.backend import get_xp
from ..errors import InvalidDataError
from .cg import WarmCg, inner
from .proximal import clip_moduli, group_norm, l1_norm, shrink_update

Callback = Callable[[int, Any, float], None]


@dataclass
class Sparsity:
    """What ADMM needs of ``K`` and ``R``: ``forward(x) = K x``, ``adjoint_rhs(b, q, rho) = b + rho K^H q``,
    ``gram(x) = K^H K x``, ``groups`` (0: element-wise soft threshold; g > 0: groups of g components along
    axis 0 of ``K x``, isotropic TV) and the shape of ``K x``.

    ``R`` is an l1 norm (of moduli, or of the groups' l2 norms) unless ``prox`` and ``penalty`` give another
    norm: ``prox(v, t)`` its proximal map ``argmin_z t R(z) + ||z - v||^2 / 2`` (a new array), ``penalty(v)``
    its value ``R(v)``, and ``dual_prox`` (None: ``prox``) the map the primal-dual projection uses.
    ``gram_add(x, out, rho)`` (None: through ``gram``) adds ``rho K^H K x`` to ``out`` in place."""

    forward: Callable[[Any], Any]
    adjoint_rhs: Callable[[Any, Any, float], Any]
    gram: Callable[[Any], Any]
    groups: int
    shape: tuple[int, ...]
    prox: Callable[[Any, float], Any] | None = None
    penalty: Callable[[Any], float] | None = None
    dual_prox: Callable[[Any, float], Any] | None = None
    gram_add: Callable[[Any, Any, float], None] | None = None
    replayable: bool = False
    """Its ``forward``, ``adjoint_rhs`` and ``shrink`` launch the same work on every call (no host state such as
    random shifts, no read-back), so that an iteration may be captured as a CUDA graph and replayed."""

    def add_gram(self, x: Any, out: Any, rho: float) -> None:
        """``out += rho K^H K x`` in place (``gram_add``, one kernel where it has one; else ``gram``)."""
        if self.gram_add is not None:
            self.gram_add(x, out, rho)
        else:
            out += rho * self.gram(x)

    def norm(self, kx: Any) -> float:
        """``R`` at ``K x``: ``penalty``, else the sum of moduli, or of the groups' l2 norms."""
        if self.penalty is not None:
            return float(self.penalty(kx))
        return group_norm(kx) if self.groups else l1_norm(kx)

    def shrink(self, kx: Any, u: Any, z: Any, t: float) -> None:
        """ADMM's z- and u-update in place: ``v = kx + u``, ``z = prox of t R at v``, ``u = v - z``
        (:func:`~.proximal.shrink_update`, one kernel on a GPU, for the l1 norms)."""
        if self.prox is None:
            shrink_update(kx, u, z, t, groups=self.groups)
            return
        v = kx + u
        z[...] = self.prox(v, t)
        u[...] = v - z

    def project(self, y: Any, lam: float) -> None:
        """In place: ``y`` onto the ball ``{R*(y) <= lam}`` of the dual norm, the primal-dual method's dual
        step. For the l1 norms: each modulus (or group norm) clipped at ``lam``; otherwise the Moreau identity
        ``y - prox of lam R at y``."""
        if self.prox is None:
            clip_moduli(y, lam, self.groups)
            return
        y -= (self.dual_prox or self.prox)(y, lam)


def objective(x: Any, normal_x: Any, rhs: Any, data_energy: float, lam: float, penalty: float) -> float:
    """``Re<x, N x> - 2 Re<x, b> + d^H W d + lam R`` (float64 inner products), ``penalty`` = R(K x)."""
    return inner(x, normal_x).real - 2.0 * inner(x, rhs).real + data_energy + lam * penalty


def carried_objective(x: Any, b: Any, r: Any, rhs: Any, data_energy: float, rho: float, kxs: list[Any],
                      penalty: float) -> float:
    """The objective of :func:`objective` without an operator product, from the x-update's carried CG
    residual ``r = b - (N + rho sum_j K_j^H K_j) x`` (``b`` its right-hand side, ``kxs`` the ``K_j x``):
    ``Re<x, N x> = Re<x, b> - Re<x, r> - rho sum_j ||K_j x||^2``. ``penalty`` is the weighted sum of the
    ``R_j(K_j x)``. ``r`` is CG's recursively updated residual, so the value carries its rounding (float32
    steps: about 1e-6 of ``Re<x, b>`` per CG step, tests/test_admm_objective.py)."""
    gram = sum(inner(kx, kx).real for kx in kxs)
    normal = inner(x, b).real - inner(x, r).real - rho * gram
    return normal - 2.0 * inner(x, rhs).real + data_energy + penalty


def admm(operator: Any, rhs: Any, sparsity: Sparsity, *, lam: float, rho: float, iterations: int,
         inner_iterations: int, data_energy: float, callback: Callback | None = None,
         check_every: int = 10) -> tuple[Any, tuple[float, ...]]:
    """Run ADMM (see the module docstring).

    Parameters
    ----------
    operator
        ``x -> (N + rho K^H K) x`` (Hermitian positive definite), a ``LinearOperator`` or callable; on a GPU
        one with ``writes_into`` is applied without allocation.
    rhs
        ``b = A^H W d`` (complex64 on a GPU).
    sparsity
        ``K`` and ``R``: :class:`Sparsity`.
    lam, rho
        Absolute weights (the caller scales them); ``rho > 0``.
    iterations, inner_iterations
        Outer ADMM iterations and CG steps per x-update.
    data_energy
        ``d^H W d``, the objective at x = 0 (for the relative objective).
    callback
        ``callback(k, x, f_k / f_0)`` at every check (every ``check_every`` iterations and the last).

    Returns
    -------
    x
        The image estimate, shape and array type of ``rhs``.
    history
        Relative objective ``f / f(0)``: 1 for x = 0, then one value per check.
    """
    if not rho > 0 or not math.isfinite(rho):
        raise InvalidDataError(f"rho must be a positive finite number, found {rho}")
    if iterations < 1 or inner_iterations < 1:
        raise InvalidDataError(f"iterations and inner_iterations must be >= 1, found {iterations} and "
                               f"{inner_iterations}")
    xp = get_xp(rhs)
    x = xp.zeros_like(rhs)
    if not inner(rhs, rhs).real > 0:  # A^H W d = 0: x = 0 is the minimizer
        return x, (1.0,)
    z = xp.zeros(sparsity.shape, dtype=rhs.dtype)
    u = xp.zeros_like(z)
    energy = data_energy if data_energy > 0 else 1.0
    history = [1.0]
    solve = WarmCg(operator, rhs, inner_iterations)
    threshold = lam / (2.0 * rho)
    # CG's residual r = b - A x is carried from one x-update to the next: with the new right-hand side it is
    # r + (b_new - b_old), which saves one operator product per iteration (a third with 2 CG steps)
    r = rhs.copy()  # x = 0, z = u = 0: b = rhs
    previous = rhs
    for k in range(1, iterations + 1):
        b = sparsity.adjoint_rhs(rhs, z - u, rho) if k > 1 else rhs
        if k > 1:
            r += b
            r -= previous
        previous = b
        solve(x, r)
        kx = sparsity.forward(x)
        checked = k % check_every == 0 or k == iterations
        if checked:  # before the shrinkage, which may overwrite kx
            value = carried_objective(x, b, r, rhs, data_energy, rho, [kx], lam * sparsity.norm(kx)) / energy
        sparsity.shrink(kx, u, z, threshold)
        if checked:
            history.append(value)
            if callback is not None:
                callback(k, x, value)
    return x, tuple(history)
