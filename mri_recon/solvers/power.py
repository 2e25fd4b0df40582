"""The largest eigenvalue of a Hermitian positive semi-definite operator by power iteration (NumPy and CuPy):
the step sizes of FISTA and of the primal-dual method."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..arrays.backend import get_xp
from ..errors import InvalidDataError

POWER_ITERATIONS = 30
"""Power-iteration steps for ``||N||``."""
RAISE = 1.02
"""The estimate is raised by this factor against power iteration's slow approach from below."""


def operator_norm(normal: Callable[[Any], Any], like: Any, steps: int = POWER_ITERATIONS, seed: int = 0) -> float:
    """``||N||`` of a Hermitian positive semi-definite operator, raised by :data:`RAISE`: an upper estimate.

    Power iteration from a fixed pseudo-random complex start (drawn on the host, so the same on every device)
    of ``like``'s shape and dtype: ``v <- N v / ||N v||``, ``steps`` times; the estimate is the last
    ``||N v||`` (``xp.linalg.norm``), read back once.
    """
    if steps < 1:
        raise InvalidDataError(f"power iteration needs at least 1 step, found {steps}")
    xp = get_xp(like)
    rng = np.random.default_rng(seed)
    v = xp.asarray((rng.standard_normal(like.shape) + 1j * rng.standard_normal(like.shape)).astype(like.dtype))
    v /= xp.linalg.norm(v)
    norm = None
    for _ in range(steps):
        w = normal(v)
        norm = xp.linalg.norm(w)
        v = (w / xp.maximum(norm, np.float32(1e-30))).astype(like.dtype, copy=False)
    return RAISE * float(norm)
