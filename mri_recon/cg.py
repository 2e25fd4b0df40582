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

from .backend import get_xp
from .errors import InvalidDataError, SchemaError


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
    """The CG loop with device-resident scalars (see the module docstring)."""
    xp = get_xp(x)
    real = xp.float32 if x.dtype in (xp.complex64, xp.float32) else xp.float64
    history = xp.empty(max_iterations + 1, dtype=xp.float64)
    rr = xp.vdot(r, r).real.astype(xp.float64)
    history[0] = xp.sqrt(rr) / b_norm
    bad = xp.zeros((), dtype=xp.bool_)
    done = 0
    if float(history[0]) <= tolerance:
        return x, (float(history[0]),)
    for iteration in range(1, max_iterations + 1):
        ap = operator(p)
        pap = xp.vdot(p, ap).real.astype(xp.float64)
        bad |= ~(pap > 0)
        alpha = (rr / pap).astype(real)
        x += alpha * p
        r -= alpha * ap
        rr_new = xp.vdot(r, r).real.astype(xp.float64)
        history[iteration] = xp.sqrt(rr_new) / b_norm
        p *= (rr_new / rr).astype(real)
        p += r
        rr = rr_new
        done = iteration
        if callback is None and iteration % check_every and iteration != max_iterations:
            continue
        if bool(bad):
            raise InvalidDataError(f"CG needs a positive definite operator, found <p, A p> <= 0 by iteration "
                                   f"{iteration}")
        residual = float(history[iteration])
        if callback is not None:
            callback(iteration, x, residual)
        if residual <= tolerance:
            break
    return x, tuple(float(v) for v in history[: done + 1].get())
