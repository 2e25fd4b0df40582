"""ADMM for ``min_x ||W^(1/2) (A x - d)||^2 + lam R(K x)`` with an l1-type ``R`` (NumPy and CuPy arrays).

Splitting ``z = K x`` (K: finite differences for total variation, the orthogonal wavelet transform for
l1-wavelets), scaled dual ``u``, penalty ``2 rho``; with ``N = A^H W A`` and ``b = A^H W d``:

    x <- argmin ||W^(1/2)(A x - d)||^2 + rho ||K x - z + u||^2,  i.e.  (N + rho K^H K) x = b + rho K^H (z - u)
    z <- prox of (lam / (2 rho)) R at K x + u                     (soft or group threshold)
    u <- u + K x - z

The x-update is ``inner_iterations`` CG steps on the Toeplitz normal operator plus ``rho K^H K`` (``rho I``
for an orthogonal wavelet), warm-started at the previous x; the z- and u-updates are one fused kernel. On a
GPU the whole loop is kernel launches and device copies: CG keeps its step sizes on the device
(``kernels/cg.cu``, a fixed number of steps, no convergence test), and the host reads back only the
objective, every ``check_every`` iterations.

The objective ``f(x) = Re<x, N x> - 2 Re<x, b> + d^H W d + lam R(K x)`` is reported relative to
``f(0) = d^H W d``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..backend import Device, get_xp, is_gpu_array
from ..errors import InvalidDataError
from .cg import inner
from .proximal import group_norm, l1_norm, shrink_update

Callback = Callable[[int, Any, float], None]


@dataclass
class Sparsity:
    """What ADMM needs of ``K`` and ``R``: ``forward(x) = K x``, ``adjoint_rhs(b, q, rho) = b + rho K^H q``,
    ``gram(x) = K^H K x``, ``groups`` (0: element-wise soft threshold; g > 0: groups of g components along
    axis 0 of ``K x``, isotropic TV) and the shape of ``K x``."""

    forward: Callable[[Any], Any]
    adjoint_rhs: Callable[[Any, Any, float], Any]
    gram: Callable[[Any], Any]
    groups: int
    shape: tuple[int, ...]

    def norm(self, kx: Any) -> float:
        """``R`` at ``K x``: the sum of moduli, or of the groups' l2 norms."""
        return group_norm(kx) if self.groups else l1_norm(kx)


def objective(x: Any, normal_x: Any, rhs: Any, data_energy: float, lam: float, penalty: float) -> float:
    """``Re<x, N x> - 2 Re<x, b> + d^H W d + lam R`` (float64 inner products), ``penalty`` = R(K x)."""
    return inner(x, normal_x).real - 2.0 * inner(x, rhs).real + data_energy + lam * penalty


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
    solve = _DeviceCg(operator, rhs, inner_iterations) if is_gpu_array(rhs) else None
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
        if solve is not None:
            solve(x, r)
        else:
            _host_cg(operator, x, r, inner_iterations)
        kx = sparsity.forward(x)
        shrink_update(kx, u, z, threshold, groups=sparsity.groups)
        if k % check_every and k != iterations:
            continue
        normal_x = operator(x) - rho * sparsity.gram(x)
        value = objective(x, normal_x, rhs, data_energy, lam, sparsity.norm(sparsity.forward(x))) / energy
        history.append(value)
        if callback is not None:
            callback(k, x, value)
    return x, tuple(history)


def _host_cg(operator: Any, x: Any, r: Any, steps: int) -> None:
    """``steps`` CG steps on ``A x = b`` from ``x`` with residual ``r = b - A x``; both updated in place."""
    p = r.copy()
    rr = inner(r, r).real
    for _ in range(steps):
        if rr == 0.0:
            return
        ap = operator(p)
        alpha = rr / inner(p, ap).real
        x += alpha * p
        r -= alpha * ap
        rr_new = inner(r, r).real
        p *= rr_new / rr
        p += r
        rr = rr_new


class _DeviceCg:
    """A fixed number of complex64 CG steps with ``kernels/cg.cu``, warm-started, queued without any host
    synchronization (the step sizes live on the device). Buffers are allocated once."""

    def __init__(self, operator: Any, like: Any, steps: int) -> None:
        from ..kernels import get_kernel  # noqa: PLC0415 - GPU only
        from .gpu_cg import CG_BLOCKS, CG_THREADS  # noqa: PLC0415 - GPU only

        xp = get_xp(like)
        device = Device(int(like.device.id))
        self.xp, self.steps = xp, steps
        self.dot = get_kernel("cg.cu", "mri_recon_cg_dot", None, device)
        self.step = get_kernel("cg.cu", "mri_recon_cg_step", None, device)
        self.direction = get_kernel("cg.cu", "mri_recon_cg_direction", None, device)
        self.n = np.int64(like.size)
        self.grid = (max(1, min(-(-like.size // CG_THREADS), CG_BLOCKS)),)
        self.block = (CG_THREADS,)
        self.partial = xp.empty(self.grid[0], dtype=xp.float64)
        self.counter = xp.zeros(1, dtype=xp.uint32)
        self.done = xp.zeros(1, dtype=xp.int32)
        self.before = xp.full(1, -1, dtype=xp.int32)  # makes the dot kernel write rr[0]
        self.rr = xp.empty(steps + 1, dtype=xp.float64)
        self.pap = xp.empty(steps + 1, dtype=xp.float64)
        self.p = xp.empty_like(like)
        self.ap = xp.empty_like(like)
        self.operator = operator
        self.into = operator.apply_into if getattr(operator, "writes_into", False) else None

    def _apply(self, x: Any, out: Any) -> None:
        if self.into is not None:
            self.into(x, out)
        else:
            out[...] = self.operator(x)

    def __call__(self, x: Any, r: Any) -> None:
        """``steps`` CG steps on ``A x = b`` from ``x`` with residual ``r = b - A x``: both updated in place."""
        self.p[...] = r
        self.done.fill(0)
        args = (self.n, self.partial, self.counter)
        self.dot(self.grid, self.block, (r, r, *args, self.rr, self.before))
        for _ in range(self.steps):
            self._apply(self.p, self.ap)
            self.dot(self.grid, self.block, (self.p, self.ap, *args, self.pap, self.done))
            self.step(self.grid, self.block, (x, r, self.p, self.ap, self.pap, self.rr, self.done, *args))
            self.direction(self.grid, self.block, (self.p, r, self.rr, self.done, self.n, self.counter))


DeviceCg = _DeviceCg
"""Public name of the device CG of the x-update (used by :mod:`mri_recon.solvers.temporal`)."""
host_cg = _host_cg
"""Public name of the host CG of the x-update (used by :mod:`mri_recon.solvers.temporal`)."""
