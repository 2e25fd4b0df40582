"""Conjugate gradients for Hermitian positive definite systems (NumPy and CuPy arrays).

The operator is a :class:`~mri_recon.operators.base.LinearOperator` or any callable ``x -> A x``; the solver
depends on no operator class. Inner products are accumulated in float64 whatever the vectors' precision, so
the solver works for data of any magnitude that float32 can hold (squares of 1e20 or 1e-30 do not overflow or
underflow). complex64 vectors on a GPU use the fused kernels of :mod:`.gpu_cg`, which keep the step sizes on
the device and read the residuals back every ``check_every`` iterations; every other case runs the loop
below with Python floats.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from ..backend import get_xp
from ..errors import InvalidDataError, SchemaError
from ..operators import arith, reads

CHUNK = 1 << 20
"""Elements per float64 conversion in :func:`inner` (bounds its temporary memory)."""


def inner(a: Any, b: Any) -> complex:
    """``<a, b> = sum conj(a) b`` accumulated in float64 (complex128), for arrays of any precision.

    On the CPU the sum is NumPy's pairwise summation of the products, chunk by chunk in a fixed order: the
    same bits whatever the number of threads (BLAS's dot splits the sum among its threads, so its last bits
    depend on how many there are, and a CG image would differ between a batch worker and a single run).
    """
    xp = get_xp(a)
    wide = np.complex128 if (a.dtype.kind == "c" or b.dtype.kind == "c") else np.float64
    fa, fb = a.reshape(-1), b.reshape(-1)
    if xp is not np and fa.dtype == fb.dtype == np.complex64 and fa.flags.c_contiguous and fb.flags.c_contiguous:
        return reads.inner(fa, fb)  # float64 sums of kernels/arith.cu
    if xp is not np and fa.dtype == wide and fb.dtype == wide:
        return complex(xp.vdot(fa, fb))
    total = 0j
    for start in range(0, fa.size, CHUNK):
        part = slice(start, start + CHUNK)
        if xp is np:
            total += complex(np.sum(np.conj(fa[part], dtype=wide) * fb[part]))
        else:
            total += complex(xp.vdot(fa[part].astype(wide), fb[part].astype(wide)))
    return total


def cg(operator: Callable[[Any], Any], rhs: Any, *, x0: Any = None, max_iterations: int, tolerance: float,
       callback: Callable[[int, Any, float], None] | None = None,
       check_every: int = 5) -> tuple[Any, tuple[float, ...]]:
    """Solve ``A x = b`` by conjugate gradients.

    Parameters
    ----------
    operator
        ``x -> A x`` with A Hermitian positive definite (a ``LinearOperator`` or any callable); any shape,
        same array type as ``rhs``.
    rhs
        The right-hand side b (NumPy or CuPy, any shape, real or complex).
    x0
        Initial guess (default zeros), shape of ``rhs``.
    max_iterations
        Most iterations (each applies ``operator`` once).
    tolerance
        Stop when the relative residual ``||b - A x|| / ||b||`` is at most this.
    callback
        Called as ``callback(iteration, x, relative_residual)`` for every iteration, in order. On the fused
        GPU path the calls come in batches at each check (every ``check_every`` iterations), all with the
        ``x`` of the check, so that progress costs no extra host read-back.
    check_every
        complex64 GPU arrays only: read the residuals back (and test convergence) every this many
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
    b_norm = math.sqrt(inner(rhs, rhs).real)
    if b_norm == 0.0:
        return xp.zeros_like(rhs), (0.0,)
    if x0 is None:
        x = xp.zeros_like(rhs)
        r = arith.copy(rhs)
    else:
        x = xp.array(x0, dtype=rhs.dtype, copy=True)
        r = rhs - operator(x)
    p = arith.copy(r)
    if xp is not np and x.dtype == xp.complex64 and x.flags.c_contiguous:
        from .gpu_cg import cg_fused  # noqa: PLC0415 - GPU only

        return cg_fused(operator, x, r, p, b_norm, max_iterations=max_iterations, tolerance=tolerance,
                        callback=callback, check_every=max(1, int(check_every)))
    rr = inner(r, r).real
    residuals = [math.sqrt(rr) / b_norm]
    for iteration in range(1, max_iterations + 1):
        if residuals[-1] <= tolerance:
            break
        ap = operator(p)
        pap = inner(p, ap).real
        if not pap > 0.0:
            raise InvalidDataError(
                f"CG needs a positive definite operator, found <p, A p> = {pap:.3g} at iteration {iteration}"
            )
        alpha = rr / pap
        x += alpha * p
        r -= alpha * ap
        rr_new = inner(r, r).real
        residuals.append(math.sqrt(rr_new) / b_norm)
        if callback is not None:
            callback(iteration, x, residuals[-1])
        p *= rr_new / rr
        p += r
        rr = rr_new
    return x, tuple(residuals)
