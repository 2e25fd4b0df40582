"""Conjugate gradients for Hermitian positive definite systems (works on NumPy and CuPy arrays).

The operator is any callable ``x -> A x``; the solver never depends on an operator class. On the CPU each
iteration works with Python floats. On a GPU the step sizes stay on the device as 0-d arrays, so the
iterations are queued without waiting for the device; the residual history is read back only every
``check_every`` iterations (to test convergence) or every iteration when a ``callback`` wants it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from .backend import get_xp
from .errors import InvalidDataError, SchemaError


def compile_configurations() -> list[tuple[str, dict]]:
    """The CUDA sources of the fused GPU updates (for the CI compile test)."""
    return [("cg.cu", {})]


def cg(operator: Callable[[Any], Any], rhs: Any, *, x0: Any = None, max_iterations: int, tolerance: float,
       callback: Callable[[int, Any, float], None] | None = None,
       check_every: int = 5) -> tuple[Any, tuple[float, ...]]:
    """Solve ``A x = b`` by conjugate gradients.

    Parameters
    ----------
    operator
        ``x -> A x`` with A Hermitian positive definite; any shape, same array type as ``rhs``.
    rhs
        The right-hand side b (NumPy or CuPy, any shape, real or complex).
    x0
        Initial guess (default zeros), shape of ``rhs``.
    max_iterations
        Most iterations (each applies ``operator`` once).
    tolerance
        Stop when the relative residual ``||b - A x|| / ||b||`` is at most this.
    callback
        Called after each iteration as ``callback(iteration, x, relative_residual)``.
    check_every
        GPU arrays only, without a callback: read the residual back (and test convergence) every this many
        iterations; up to ``check_every - 1`` iterations may run past the tolerance, which only lowers the
        residual further.

    Returns
    -------
    x
        The solution estimate, same shape and array type as ``rhs`` (zeros when ``b = 0``).
    residuals
        Relative residual norms; the first entry is that of the initial guess, then one per iteration.
    """
    if max_iterations < 0:
        raise InvalidDataError(f"max_iterations must be >= 0, found {max_iterations}")
    xp = get_xp(rhs)
    if x0 is not None and tuple(x0.shape) != tuple(rhs.shape):
        raise SchemaError(f"x0 must have the shape of rhs {tuple(rhs.shape)}, found {tuple(x0.shape)}")
    b_norm = math.sqrt(float(xp.vdot(rhs, rhs).real))
    if b_norm == 0.0:
        return xp.zeros_like(rhs), (0.0,)
    if x0 is None:
        x = xp.zeros_like(rhs)
        r = rhs.copy()
    else:
        x = xp.array(x0, dtype=rhs.dtype, copy=True)
        r = rhs - operator(x)
    p = r.copy()
    if xp.__name__ != "numpy":
        return _cg_device(operator, x, r, p, b_norm, max_iterations=max_iterations, tolerance=tolerance,
                          callback=callback, check_every=max(1, int(check_every)))
    rr = float(xp.vdot(r, r).real)
    residuals = [math.sqrt(rr) / b_norm]
    for iteration in range(1, max_iterations + 1):
        if residuals[-1] <= tolerance:
            break
        ap = operator(p)
        pap = float(xp.vdot(p, ap).real)
        if not pap > 0.0:
            raise InvalidDataError(
                f"CG needs a positive definite operator, found <p, A p> = {pap:.3g} at iteration {iteration}"
            )
        alpha = rr / pap
        x += alpha * p
        r -= alpha * ap
        rr_new = float(xp.vdot(r, r).real)
        residuals.append(math.sqrt(rr_new) / b_norm)
        if callback is not None:
            callback(iteration, x, residuals[-1])
        p *= rr_new / rr
        p += r
        rr = rr_new
    return x, tuple(residuals)


def _cg_device(operator: Callable[[Any], Any], x: Any, r: Any, p: Any, b_norm: float, *, max_iterations: int,
               tolerance: float, callback: Callable[[int, Any, float], None] | None,
               check_every: int) -> tuple[Any, tuple[float, ...]]:
    """The CG loop with device-resident scalars (see the module docstring).

    complex64 vectors use two fused kernels (``kernels/cg.cu``) for the updates; other dtypes use array
    expressions. Either way nothing waits for the device between checks.
    """
    xp = get_xp(x)
    fused = x.dtype == xp.complex64 and x.flags.c_contiguous
    if fused:
        from .backend import Device  # noqa: PLC0415
        from .kernels import get_kernel  # noqa: PLC0415 - GPU only

        device = Device(int(x.device.id))
        step = get_kernel("cg.cu", "mri_recon_cg_step", None, device)
        direction = get_kernel("cg.cu", "mri_recon_cg_direction", None, device)
        n = x.size
        grid = (min(-(-n // 256), 4096),)
    real = xp.float32 if x.dtype in (xp.complex64, xp.float32) else xp.float64
    rr = xp.vdot(r, r)
    squares, paps = [rr], []
    done = 0
    first = float(rr.real) ** 0.5 / b_norm
    if first <= tolerance:
        return x, (first,)
    for iteration in range(1, max_iterations + 1):
        ap = operator(p)
        pap = xp.vdot(p, ap)
        if fused:
            step(grid, (256,), (x, r, p, ap, pap, rr, np.int64(n)))
            rr_new = xp.vdot(r, r)
            direction(grid, (256,), (p, r, rr_new, rr, np.int64(n)))
        else:
            alpha = (rr.real / pap.real).astype(real)
            x += alpha * p
            r -= alpha * ap
            rr_new = xp.vdot(r, r)
            p *= (rr_new.real / rr.real).astype(real)
            p += r
        squares.append(rr_new)
        paps.append(pap)
        rr = rr_new
        done = iteration
        if callback is None and iteration % check_every and iteration != max_iterations:
            continue
        if not bool(xp.all(xp.stack(paps[-check_every:]).real > 0)):
            raise InvalidDataError(f"CG needs a positive definite operator, found <p, A p> <= 0 by iteration "
                                   f"{iteration}")
        residual = float(squares[-1].real) ** 0.5 / b_norm
        if callback is not None:
            callback(iteration, x, residual)
        if residual <= tolerance:
            break
    history = xp.sqrt(xp.stack(squares[: done + 1]).real.astype(xp.float64)) / b_norm
    return x, tuple(float(v) for v in history.get())
