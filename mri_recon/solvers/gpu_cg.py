"""The device steps of the CG loop in :mod:`.cg`: complex64 CuPy vectors and the fused kernels of ``kernels/cg.cu``.

Per iteration: the operator, then three launches (``<p, A p>``; the update of x and r with ``||r||^2``; the new
direction); the inner products are deterministic float64 sums. The step sizes, the iteration index and the
histories of ``<p, A p>`` and ``||r||^2`` live on the device, so the host queues iterations without waiting and
reads the histories back only when the loop asks for them (:meth:`DeviceSteps.history`). Every iteration queues
the same work; with ``replay`` and an operator that writes into a given array
(:attr:`~mri_recon.operators.base.LinearOperator.writes_into`), the second iteration is captured as a CUDA graph
and replayed for the others, one launch per iteration.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..arrays.backend import Device, get_xp, to_host
from ..kernels import get_kernel
from ..operators.replay import capture

CG_THREADS = 256
"""Threads per block of the fused CG kernels (``CG_THREADS`` in ``kernels/cg.cu``)."""
CG_BLOCKS = 512
"""Most blocks of the fused CG kernels (grid-stride loops beyond)."""


class DeviceSteps:
    """CG iterations on complex64, C-contiguous CuPy vectors with ``kernels/cg.cu``; buffers allocated once.

    Parameters
    ----------
    operator
        ``x -> A x``; its ``apply_into`` is used when it ``writes_into``.
    like
        A vector of the system (shape and device).
    iterations
        The most iterations after one :meth:`start` (the length of the histories).
    replay
        Capture the second iteration as a CUDA graph and replay it (when the operator writes into a given array
        and more than two iterations may run). Only for operators whose ``apply_into`` allocates nothing: a
        graph keeps the addresses it was captured with.
    """

    reads_free = False
    """Reading :meth:`history` waits for the device: the loop reads it only every few iterations."""

    def __init__(self, operator: Callable[[Any], Any], like: Any, iterations: int, *, replay: bool = False) -> None:
        xp = get_xp(like)
        device = Device(int(like.device.id))
        self.xp, self.operator = xp, operator
        self.kernels = tuple(get_kernel("cg.cu", f"mri_recon_cg_{name}", None, device)
                             for name in ("dot", "step", "direction"))
        self.n = np.int64(like.size)
        self.launch = ((max(1, min(-(-like.size // CG_THREADS), CG_BLOCKS)),), (CG_THREADS,))
        self.partial = xp.empty(self.launch[0][0], dtype=xp.float64)
        self.counter = xp.zeros(1, dtype=xp.uint32)
        self.done = xp.zeros(1, dtype=xp.int32)  # iterations completed, advanced by the direction kernel
        self.before = xp.full(1, -1, dtype=xp.int32)  # makes the dot kernel write the history's entry 0
        self.histories = xp.empty((2, int(iterations) + 1), dtype=xp.float64)  # read back together
        self.pap, self.rr = self.histories[0], self.histories[1]  # <p, A p> (entry 0 unused), ||r||^2
        self.p = xp.empty(like.shape, dtype=xp.complex64)
        self.into = operator.apply_into if getattr(operator, "writes_into", False) else None
        self.ap = xp.empty_like(self.p) if self.into is not None else None
        self.replay = bool(replay) and self.into is not None and iterations > 2
        self.graph: Any = None
        self.taken = 0

    def start(self, r: Any) -> None:
        """Queue ``p = r`` and ``||r||^2`` as the history's entry 0; the iteration index back to 0."""
        self.p[...] = r
        self.done.fill(0)
        self.graph, self.taken = None, 0
        self.kernels[0](*self.launch, (r, r, self.n, self.partial, self.counter, self.rr, self.before))

    def step(self, x: Any, r: Any) -> None:
        """Queue one iteration on ``x`` and ``r`` (updated in place): ``A p``, ``<p, A p>``, x and r with
        ``||r||^2``, the new direction. No host synchronization."""
        if self.graph is not None:
            self.graph.launch(self.xp.cuda.get_current_stream())
            return
        self._queue(x, r)
        self.taken += 1
        if self.taken == 1 and self.replay:
            self.graph = capture(self.xp, lambda: self._queue(x, r))  # None where capture is refused

    def _queue(self, x: Any, r: Any) -> None:
        dot, step, direction = self.kernels
        if self.into is not None:
            self.into(self.p, self.ap)
            product = self.ap
        else:
            product = self.xp.ascontiguousarray(self.operator(self.p), dtype=self.xp.complex64)
        common = (self.n, self.partial, self.counter)
        dot(*self.launch, (self.p, product, *common, self.pap, self.done))
        step(*self.launch, (x, r, self.p, product, self.pap, self.rr, self.done, *common))
        direction(*self.launch, (self.p, r, self.rr, self.done, self.n, self.counter))

    def history(self, start: int, stop: int) -> tuple[list[float], list[float]]:
        """``<p, A p>`` and ``||r||^2`` of iterations ``start`` to ``stop - 1`` (0: the start), one read-back."""
        pap, rr = to_host(self.histories)[:, start:stop]
        return pap.tolist(), rr.tolist()
