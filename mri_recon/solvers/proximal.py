"""Proximal maps of the l1 norms used by compressed sensing, on NumPy and CuPy arrays.

``soft_threshold(v, t)`` is the proximal map of ``t ||.||_1`` on complex arrays (the modulus shrinks, the
phase stays): ``max(1 - t / |v|, 0) v``. ``group_threshold(v, t)`` is that of ``t sum_i ||v[:, i]||_2``
(the components along axis 0 are one group: the isotropic total variation of finite differences).
:func:`shrink_update` is ADMM's fused z- and u-update ``v = Kx + u; z = prox(v); u = v - z``, one kernel of
``kernels/prox.cu`` on a GPU.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..arrays.backend import Device, get_xp, is_gpu_array

BLOCK = 256


def soft_threshold(v: Any, t: float) -> Any:
    """``argmin_z t ||z||_1 + ||z - v||^2 / 2`` for complex (or real) ``v``: ``max(1 - t/|v|, 0) v``."""
    xp = get_xp(v)
    magnitude = xp.abs(v)
    with np.errstate(over="ignore"):  # t / |v| overflows only where |v| <= t, whose scale is 0
        scale = xp.where(magnitude > t, 1 - t / xp.maximum(magnitude, np.finfo(np.float32).tiny), 0)
    return (scale * v).astype(v.dtype, copy=False)


def group_threshold(v: Any, t: float) -> Any:
    """``argmin_z t sum_i ||z[:, i]|| + ||z - v||^2 / 2``: the groups are the entries along axis 0."""
    xp = get_xp(v)
    norm = xp.sqrt((v.real ** 2 + v.imag ** 2).sum(axis=0))
    with np.errstate(over="ignore"):  # t / ||v_i|| overflows only where ||v_i|| <= t, whose scale is 0
        scale = xp.where(norm > t, 1 - t / xp.maximum(norm, np.finfo(np.float32).tiny), 0)
    return (scale[None] * v).astype(v.dtype, copy=False)


def l1_norm(v: Any) -> float:
    """``sum |v|`` (complex modulus), in float64."""
    return float(get_xp(v).abs(v).astype(np.float64).sum())


def group_norm(v: Any) -> float:
    """``sum_i ||v[:, i]||`` with the groups along axis 0, in float64."""
    xp = get_xp(v)
    return float(xp.sqrt((xp.abs(v).astype(np.float64) ** 2).sum(axis=0)).sum())


def clip_moduli(y: Any, lam: float, groups: int = 0) -> None:
    """In place: ``y`` onto ``{|y_i| <= lam}`` (moduli, or the l2 norms of groups along axis 0 when
    ``groups > 0``), the dual ball of the l1 norm."""
    xp = get_xp(y)
    if groups:
        size = xp.sqrt((y.real ** 2 + y.imag ** 2).sum(axis=0))[None]
    else:
        size = xp.abs(y)
    y *= (1.0 / xp.maximum(size / lam, 1.0)).astype(y.real.dtype)


def shrink_update(kx: Any, u: Any, z: Any, t: float, *, groups: int = 0) -> None:
    """In place: ``v = kx + u``, ``z = prox(v)`` (soft threshold, or the group threshold over ``groups``
    components along axis 0 when ``groups > 0``), ``u = v - z``. All three arrays have one shape."""
    if is_gpu_array(kx):
        from ..kernels import get_kernel  # noqa: PLC0415 - GPU only

        device = Device(int(kx.device.id))
        n = kx.size // groups if groups else kx.size
        blocks = (max(1, min(-(-n // BLOCK), 65535 * 8)),)
        if groups:
            kernel = get_kernel("prox.cu", "mri_recon_prox_group", None, device)
            kernel(blocks, (BLOCK,), (kx, u, z, np.int64(n), np.int32(groups), np.float32(t)))
        else:
            kernel = get_kernel("prox.cu", "mri_recon_prox_soft", None, device)
            kernel(blocks, (BLOCK,), (kx, u, z, np.int64(n), np.float32(t)))
        return
    v = kx + u
    z[...] = group_threshold(v, t) if groups else soft_threshold(v, t)
    u[...] = v - z
