"""Conjugate gradients for Hermitian positive definite systems (works on NumPy and CuPy arrays).

The operator is any callable ``x -> A x``; the solver never depends on an operator class. Each iteration
brings two real scalars back to the host (<p, A p> and ||r||^2) and nothing else.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from .backend import get_xp
from .errors import InvalidDataError, SchemaError


def cg(operator: Callable[[Any], Any], rhs: Any, *, x0: Any = None, max_iterations: int, tolerance: float,
       callback: Callable[[int, Any, float], None] | None = None) -> tuple[Any, tuple[float, ...]]:
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
