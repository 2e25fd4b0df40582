"""FISTA for ``min_x ||W^(1/2) (A x - d)||^2 + lam ||Psi x||_1`` with an orthogonal wavelet ``Psi``.

With ``N = A^H W A``, ``b = A^H W d`` and ``L = 2 ||N||`` (the Lipschitz constant of the data term's
gradient ``2 (N x - b)``; ``||N||`` by power iteration, :func:`~.power.operator_norm`, read back once):

    x_k = Psi^H soft(Psi (y - (2 / L) (N y - b)), lam / L),   t_k = (1 + sqrt(1 + 4 t_{k-1}^2)) / 2,
    y   = x_k + ((t_{k-1} - 1) / t_k) (x_k - x_{k-1})

(Beck and Teboulle 2009). The proximal map is exact because ``Psi`` is orthogonal. One normal-operator
product per iteration; on a GPU everything is kernels and device arithmetic, and the host reads back only the
objective at the checks.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..arrays.backend import get_xp
from .admm import Callback, objective
from .power import operator_norm
from .proximal import l1_norm, soft_threshold


def fista(normal: Any, rhs: Any, psi: Any, *, lam: float, iterations: int, data_energy: float,
          callback: Callback | None = None, check_every: int = 10) -> tuple[Any, tuple[float, ...]]:
    """Run FISTA (see the module docstring); returns x and the relative objective at the checks (1 first)."""
    xp = get_xp(rhs)
    x = xp.zeros_like(rhs)
    if not float(xp.abs(rhs).max()) > 0:
        return x, (1.0,)
    lipschitz = 2.0 * operator_norm(normal, rhs)
    step = np.float32(2.0 / lipschitz)
    threshold = lam / lipschitz
    energy = data_energy if data_energy > 0 else 1.0
    y = x.copy()
    t = 1.0
    history = [1.0]
    for k in range(1, iterations + 1):
        gradient = normal(y)
        gradient -= rhs
        v = y - step * gradient
        new = psi.H(soft_threshold(psi(v), threshold))
        t_new = (1.0 + math.sqrt(1.0 + 4.0 * t * t)) / 2.0
        y = new + np.float32((t - 1.0) / t_new) * (new - x)
        x, t = new, t_new
        if k % check_every and k != iterations:
            continue
        value = objective(x, normal(x), rhs, data_energy, lam, l1_norm(psi(x))) / energy
        history.append(value)
        if callback is not None:
            callback(k, x, value)
    return x, tuple(history)
