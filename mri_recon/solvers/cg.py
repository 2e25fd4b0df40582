"""Conjugate gradients for Hermitian positive definite systems (works on NumPy and CuPy arrays).

The operator is any callable ``x -> A x``; the solver never depends on an operator class. On the CPU each
iteration works with Python floats. On a GPU the step sizes stay on the device, so the iterations are
queued without waiting for the device; the residual history is read back only every ``check_every``
iterations (to test convergence) or every iteration when a ``callback`` wants it. complex64 systems use the
fused kernels of ``kernels/cg.cu`` and, for operators that can write into a given array, replay one
captured iteration as a CUDA graph (:func:`_cg_fused`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from ..backend import get_xp
from ..errors import InvalidDataError, SchemaError


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

    complex64 vectors use the fused kernels of ``kernels/cg.cu`` (deterministic float64 inner products,
    scalar histories on the device); other dtypes use array expressions. Either way nothing waits for the
    device between checks.
    """
    xp = get_xp(x)
    if x.dtype == xp.complex64 and x.flags.c_contiguous:
        return _cg_fused(operator, x, r, p, b_norm, max_iterations=max_iterations, tolerance=tolerance,
                         callback=callback, check_every=check_every)
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
        _check_positive(xp.stack(paps[-check_every:]).real, iteration)
        residual = float(squares[-1].real) ** 0.5 / b_norm
        if callback is not None:
            callback(iteration, x, residual)
        if residual <= tolerance:
            break
    history = xp.sqrt(xp.stack(squares[: done + 1]).real.astype(xp.float64)) / b_norm
    return x, tuple(float(v) for v in history.get())


def _check_positive(paps: Any, iteration: int) -> None:
    if not bool((paps > 0).all()):
        raise InvalidDataError(f"CG needs a positive definite operator, found <p, A p> <= 0 by iteration "
                               f"{iteration}")


CG_THREADS = 256
"""Threads per block of the fused CG kernels (``CG_THREADS`` in ``kernels/cg.cu``)."""
CG_BLOCKS = 512
"""Most blocks of the fused CG kernels (grid-stride loops beyond)."""


def _cg_fused(operator: Callable[[Any], Any], x: Any, r: Any, p: Any, b_norm: float, *, max_iterations: int,
              tolerance: float, callback: Callable[[int, Any, float], None] | None,
              check_every: int) -> tuple[Any, tuple[float, ...]]:
    """complex64 CG with ``kernels/cg.cu``: per iteration the operator, then three launches.

    The iteration index lives on the device, so every iteration queues the same work. When the operator
    can write into a given array (an ``into(x, out)`` attribute, like the SENSE operator of
    :mod:`mri_recon.gpu_toeplitz`), the second iteration is captured as a CUDA graph and replayed for the
    others: one launch per iteration instead of about ten, so the host no longer paces the device. Where
    capture is refused the iterations are queued one launch at a time, with the same results.
    """
    from ..backend import Device  # noqa: PLC0415
    from ..kernels import get_kernel  # noqa: PLC0415 - GPU only

    xp = get_xp(x)
    device = Device(int(x.device.id))
    dot = get_kernel("cg.cu", "mri_recon_cg_dot", None, device)
    step = get_kernel("cg.cu", "mri_recon_cg_step", None, device)
    direction = get_kernel("cg.cu", "mri_recon_cg_direction", None, device)
    n = np.int64(x.size)
    grid = (max(1, min(-(-x.size // CG_THREADS), CG_BLOCKS)),)
    block = (CG_THREADS,)
    partial = xp.empty(grid[0], dtype=xp.float64)
    counter = xp.zeros(1, dtype=xp.uint32)
    done = xp.zeros(1, dtype=xp.int32)  # iterations completed, advanced by the direction kernel
    rr = xp.empty(max_iterations + 1, dtype=xp.float64)  # ||r_i||^2
    pap = xp.empty(max_iterations + 1, dtype=xp.float64)  # <p, A p> of iteration i (index 0 unused)
    dot(grid, block, (r, r, n, partial, counter, rr, xp.full(1, -1, dtype=xp.int32)))  # rr[0]
    first = float(rr[0]) ** 0.5 / b_norm
    if first <= tolerance:
        return x, (first,)
    into = getattr(operator, "into", None)
    ap = xp.empty_like(x) if into is not None else None

    def iterate() -> None:
        if into is not None:
            into(p, ap)
            product = ap
        else:
            product = xp.ascontiguousarray(operator(p), dtype=xp.complex64)
        dot(grid, block, (p, product, n, partial, counter, pap, done))
        step(grid, block, (x, r, p, product, pap, rr, done, n, partial, counter))
        direction(grid, block, (p, r, rr, done, n, counter))

    graph = None
    iteration = 0
    for iteration in range(1, max_iterations + 1):
        if graph is not None:
            graph.launch(xp.cuda.get_current_stream())
        else:
            iterate()
            if iteration == 1 and into is not None and max_iterations > 2:
                graph = _capture(xp, iterate)
        if callback is None and iteration % check_every and iteration != max_iterations:
            continue
        _check_positive(pap[max(1, iteration - check_every + 1):iteration + 1], iteration)
        residual = float(rr[iteration]) ** 0.5 / b_norm
        if callback is not None:
            callback(iteration, x, residual)
        if residual <= tolerance:
            break
    history = xp.sqrt(rr[: iteration + 1]) / b_norm
    return x, tuple(float(v) for v in history.get())


def _capture(xp: Any, work: Callable[[], None]) -> Any:
    """``work`` (launches only: no allocation, no host synchronization) as a CUDA graph, or None when the
    driver or library refuses to capture it. Nothing runs during capture; the caller replays the graph."""
    stream = xp.cuda.Stream(non_blocking=True)
    stream.wait_event(xp.cuda.get_current_stream().record())
    try:
        with stream:
            stream.begin_capture()
            try:
                work()
            finally:
                graph = stream.end_capture()
    except Exception:  # noqa: BLE001 - capture is an optimization; eager launches give the same results
        return None
    return graph
