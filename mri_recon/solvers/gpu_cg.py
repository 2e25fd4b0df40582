"""The fused complex64 CG loop on a GPU (``kernels/cg.cu``): step sizes and residual history on the device.

Per iteration: the operator, then three launches (inner product, update of x and r with ||r||^2, new
direction); inner products are deterministic float64 sums. The iteration index lives on the device, so every
iteration queues the same work: when the operator writes into a given array
(:attr:`~mri_recon.operators.base.LinearOperator.writes_into`), the second iteration is captured as a CUDA
graph and replayed for the others, one launch per iteration. The host reads the residual history back only
every ``check_every`` iterations, to test convergence and to report progress.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..backend import Device, get_xp
from ..errors import InvalidDataError
from ..kernels import get_kernel
from ..operators.replay import capture


def _check_positive(paps: Any, iteration: int) -> None:
    if not bool((np.asarray(paps) > 0).all()):
        raise InvalidDataError(f"CG needs a positive definite operator, found <p, A p> <= 0 by iteration "
                               f"{iteration}")


CG_THREADS = 256
"""Threads per block of the fused CG kernels (``CG_THREADS`` in ``kernels/cg.cu``)."""
CG_BLOCKS = 512
"""Most blocks of the fused CG kernels (grid-stride loops beyond)."""


def cg_fused(operator: Callable[[Any], Any], x: Any, r: Any, p: Any, b_norm: float, *, max_iterations: int,
             tolerance: float, callback: Callable[[int, Any, float], None] | None,
             check_every: int) -> tuple[Any, tuple[float, ...]]:
    """complex64 CG with ``kernels/cg.cu`` (see the module docstring); called by :func:`~.cg.cg`.

    Where graph capture is refused the iterations are queued one launch at a time, with the same results.
    ``callback`` is called at each check, once for every iteration since the previous check, in order.
    """
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
    histories = xp.empty((2, max_iterations + 1), dtype=xp.float64)  # read back together
    pap, rr = histories[0], histories[1]  # <p, A p> of iteration i (index 0 unused), ||r_i||^2
    dot(grid, block, (r, r, n, partial, counter, rr, xp.asarray(np.full(1, -1, dtype=np.int32))))  # rr[0]
    first = float(rr[0]) ** 0.5 / b_norm
    if first <= tolerance:
        return x, (first,)
    into = operator.apply_into if getattr(operator, "writes_into", False) else None
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
    iteration = checked = 0
    for iteration in range(1, max_iterations + 1):
        if graph is not None:
            graph.launch(xp.cuda.get_current_stream())
        else:
            iterate()
            if iteration == 1 and into is not None and max_iterations > 2:
                graph = capture(xp, iterate)
        if iteration % check_every and iteration != max_iterations:
            continue
        # one read-back per check: <p, A p> and ||r||^2 of every iteration since the last check
        history = histories.get()[:, checked + 1:iteration + 1]
        _check_positive(history[0], iteration)
        residuals = np.sqrt(history[1]) / b_norm
        if callback is not None:
            for i, residual in enumerate(residuals, start=checked + 1):
                callback(i, x, float(residual))
        checked = iteration
        if residuals[-1] <= tolerance:
            break
    history = np.sqrt(rr[: iteration + 1].get()) / b_norm
    return x, tuple(float(v) for v in history)
