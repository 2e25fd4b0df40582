"""Conjugate gradients for Hermitian positive definite systems (NumPy and CuPy arrays): one loop, two kinds of
steps.

The operator is a :class:`~mri_recon.operators.base.LinearOperator` or any callable ``x -> A x``; the solver
depends on no operator class. :func:`run_steps` is the loop; the arithmetic of an iteration comes from a steps
object chosen by the vectors' array type (:func:`cg_steps`):

- :class:`HostSteps`: Python-float step sizes, inner products accumulated in float64 by :func:`inner` whatever
  the vectors' precision (squares of 1e20 or 1e-30 do not overflow or underflow); any array type and dtype.
- :class:`~.gpu_cg.DeviceSteps`: complex64 CuPy vectors, the fused kernels of ``kernels/cg.cu`` with the step
  sizes kept on the device, read back only when the loop checks.

Two uses of the loop: :func:`cg` solves to a tolerance (residual history, callback, a check of positive
definiteness); :class:`WarmCg` runs a fixed number of steps from a given ``x`` and residual, without a test
and, on a GPU, without any host read-back (ADMM's x-update).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..arrays.backend import get_xp, is_gpu_array
from ..errors import InvalidDataError, SchemaError
from ..operators import arith, reads
from .gpu_cg import DeviceSteps

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


def check_positive(paps: Sequence[float], first: int) -> None:
    """Raise :class:`InvalidDataError` at the first ``<p, A p>`` that is not positive (``paps`` are those of
    iterations ``first``, ``first + 1``, ...)."""
    for iteration, pap in enumerate(paps, start=first):
        if not pap > 0.0:
            raise InvalidDataError(
                f"CG needs a positive definite operator, found <p, A p> = {pap:.3g} at iteration {iteration}"
            )


class HostSteps:
    """CG iterations with Python-float step sizes and float64 inner products (:func:`inner`), for vectors of
    any array type, dtype and layout.

    One iteration: ``A p``, ``alpha = ||r||^2 / <p, A p>`` (a non-positive ``<p, A p>`` raises at once),
    ``x += alpha p``, ``r -= alpha A p``, ``p *= ||r_new||^2 / ||r||^2``, ``p += r``. Once ``r`` is exactly 0
    (x solves the system) an iteration changes nothing. The direction buffer is reused from one :meth:`start`
    to the next when the residual keeps its shape and dtype.
    """

    reads_free = True
    """:meth:`history` costs nothing: the loop may check after every iteration."""

    def __init__(self, operator: Callable[[Any], Any]) -> None:
        self.operator = operator
        self.p: Any = None
        self.paps: list[float] = []
        self.rrs: list[float] = []

    def start(self, r: Any) -> None:
        """``p = r`` and ``||r||^2`` as the history's entry 0."""
        if self.p is None or self.p.shape != r.shape or self.p.dtype != r.dtype:
            self.p = get_xp(r).empty(r.shape, dtype=r.dtype)
        self.p[...] = r
        self.paps, self.rrs = [math.nan], [inner(r, r).real]

    def step(self, x: Any, r: Any) -> None:
        """One iteration on ``x`` and ``r`` (updated in place)."""
        p, rr = self.p, self.rrs[-1]
        if rr == 0.0:  # r = 0, and so p = 0
            self.paps.append(0.0)
            self.rrs.append(0.0)
            return
        ap = self.operator(p)
        pap = inner(p, ap).real
        check_positive((pap,), len(self.rrs))
        alpha = rr / pap
        x += alpha * p
        r -= alpha * ap
        rr_new = inner(r, r).real
        p *= rr_new / rr
        p += r
        self.paps.append(pap)
        self.rrs.append(rr_new)

    def history(self, start: int, stop: int) -> tuple[list[float], list[float]]:
        """``<p, A p>`` and ``||r||^2`` of iterations ``start`` to ``stop - 1`` (0: the start)."""
        return self.paps[start:stop], self.rrs[start:stop]


def cg_steps(operator: Callable[[Any], Any], like: Any, iterations: int, *,
             replay: bool = False) -> HostSteps | DeviceSteps:
    """The steps for vectors like ``like``: :class:`~.gpu_cg.DeviceSteps` for a complex64, C-contiguous CuPy
    array (``iterations`` and ``replay`` as it takes them), :class:`HostSteps` for any other array."""
    if is_gpu_array(like) and like.dtype == np.complex64 and like.flags.c_contiguous:
        return DeviceSteps(operator, like, iterations, replay=replay)
    return HostSteps(operator)


def run_steps(steps: HostSteps | DeviceSteps, x: Any, r: Any, iterations: int, *, every: int = 1,
              check: Callable[[int], bool] | None = None) -> None:
    """The CG loop: up to ``iterations`` iterations of ``steps`` (already started) on ``x`` and ``r``, both updated
    in place. ``check(i)``, if given, is called after every ``every``-th iteration and after the last; the loop
    stops when it returns True."""
    for iteration in range(1, iterations + 1):
        steps.step(x, r)
        if check is not None and (iteration % every == 0 or iteration == iterations) and check(iteration):
            return


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
        Called as ``callback(iteration, x, relative_residual)`` for every iteration, in order. With the device
        steps the calls come in batches at each check (every ``check_every`` iterations), all with the ``x`` of
        the check, so that progress costs no extra host read-back.
    check_every
        Device steps (complex64 GPU arrays) only: read the residuals back (and test convergence) every this
        many iterations; up to ``check_every - 1`` iterations may run past the tolerance, which only lowers the
        residual further. The host steps check after every iteration.

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
    steps = cg_steps(operator, x, max_iterations, replay=True)
    steps.start(r)
    residuals = [math.sqrt(steps.history(0, 1)[1][0]) / b_norm]

    def check(iteration: int) -> bool:
        first = len(residuals)
        paps, rrs = steps.history(first, iteration + 1)
        check_positive(paps, first)
        for i, rr in enumerate(rrs, start=first):
            residuals.append(math.sqrt(rr) / b_norm)
            if callback is not None:
                callback(i, x, residuals[-1])
        return residuals[-1] <= tolerance

    if residuals[0] > tolerance:
        every = 1 if steps.reads_free else max(1, int(check_every))
        run_steps(steps, x, r, max_iterations, every=every, check=check)
    return x, tuple(residuals)


class WarmCg:
    """A fixed number of CG iterations on ``A x = b`` from a given ``x`` and residual: ADMM's x-update.

    ``solve(x, r)`` runs ``iterations`` iterations from ``x`` with ``r = b - A x`` (the caller carries the
    residual from one right-hand side to the next) and updates both in place; there is no convergence test.
    The steps (:func:`cg_steps`) and their buffers are made once, for every call. On the host a non-positive
    ``<p, A p>`` raises :class:`InvalidDataError`; the device steps queue every iteration without reading
    anything back, so nothing is checked there.

    Parameters
    ----------
    operator
        ``x -> A x``, Hermitian positive definite; on a GPU, one that ``writes_into`` is applied without
        allocation.
    like
        A vector of the system (shape, dtype, array type).
    iterations
        CG iterations per call.
    """

    def __init__(self, operator: Callable[[Any], Any], like: Any, iterations: int) -> None:
        self.iterations = int(iterations)
        self.steps = cg_steps(operator, like, self.iterations)

    def __call__(self, x: Any, r: Any) -> None:
        self.steps.start(r)
        run_steps(self.steps, x, r, self.iterations)
