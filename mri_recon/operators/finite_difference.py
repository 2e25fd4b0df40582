"""Forward finite differences of an image (the gradient of total variation) and what ADMM needs of them.

``D`` maps an image ``x`` of shape ``ishape`` (``matrix``, or ``(batch, *matrix)`` for per-coil images) to
``(ndim, *ishape)``: component ``a`` holds ``x[i + e_a] - x[i]``, and 0 on the last plane of axis ``a``
(Neumann boundary: no jump across the image edge). Its adjoint is minus the divergence,

    (D^H q)[i] = sum_a (q_a[i - e_a] if i_a > 0 else 0) - (q_a[i] if i_a < n_a - 1 else 0),

and ``D^H D`` is the (Neumann) Laplacian with the sign that makes it positive semi-definite, norm < 4 ndim.

On a GPU the three products the ADMM loop uses are single kernels of ``kernels/tv.cu``: ``D x``,
``b = rhs + rho D^H q`` and ``out += rho D^H D x``; the NumPy code is their oracle. The same kernels difference
a stack of images along its first axis (a time series' frames, :mod:`mri_recon.solvers.temporal_terms`:
:func:`first_axis_difference` and the products above along axis 0), the stack seen on a GPU as one axis of
``T`` points by one of all voxels.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..arrays.backend import Device, get_xp, is_gpu_array
from .base import LinearOperator

BLOCK = 256


def _sizes(x: Any, ndim: int) -> tuple[np.int32, ...]:
    matrix = list(x.shape[x.ndim - ndim:]) + [1] * (3 - ndim)
    batch = int(np.prod(x.shape[: x.ndim - ndim], dtype=np.int64))
    return (np.int32(batch), *(np.int32(n) for n in matrix), np.int32(ndim))


def _first_axis_sizes(x: Any) -> tuple[np.int32, ...]:
    """The kernels' sizes for differences along axis 0 of ``x``: one image of ``(x.shape[0], voxels, 1)``,
    differenced along its first axis only."""
    voxels = int(np.prod(x.shape[1:], dtype=np.int64))
    return np.int32(1), np.int32(x.shape[0]), np.int32(voxels), np.int32(1), np.int32(1)


def _launch(name: str, x: Any, ndim: int, args: tuple, sizes: tuple | None = None) -> None:
    from ..kernels import get_kernel  # noqa: PLC0415 - GPU only

    kernel = get_kernel("tv.cu", name, None, Device(int(x.device.id)))
    blocks = (max(1, min(-(-x.size // BLOCK), 65535 * 8)),)
    kernel(blocks, (BLOCK,), (*args, *(_sizes(x, ndim) if sizes is None else sizes)))


def gradient(x: Any, ndim: int) -> Any:
    """``D x``: forward differences over the last ``ndim`` axes, shape ``(ndim, *x.shape)``."""
    xp = get_xp(x)
    if is_gpu_array(x):
        x = xp.ascontiguousarray(x, dtype=xp.complex64)
        out = xp.empty((ndim, *x.shape), dtype=xp.complex64)
        _launch("mri_recon_tv_gradient", x, ndim, (x, out))
        return out
    out = np.zeros((ndim, *x.shape), dtype=np.result_type(x.dtype, np.complex64))
    for a in range(ndim):
        axis = x.ndim - ndim + a
        out[a] = np.diff(x, axis=axis, append=np.take(x, [-1], axis=axis))
    return out


def divergence_adjoint(q: Any, ndim: int) -> Any:
    """``D^H q`` for ``q`` of shape ``(ndim, *image_shape)`` (minus the divergence; see the module doc)."""
    out = 0
    for a in range(ndim):
        axis = q.ndim - 1 - ndim + a
        part = q[a]
        n = part.shape[axis]
        head = np.take(part, np.arange(n - 1), axis=axis)
        zero = np.zeros_like(np.take(part, [0], axis=axis))
        out = out + np.concatenate([zero, head], axis=axis) - np.concatenate([head, zero], axis=axis)
    return out


def adjoint_rhs(rhs: Any, q: Any, rho: float, ndim: int) -> Any:
    """``rhs + rho D^H q`` (the right-hand side of ADMM's x-update)."""
    xp = get_xp(rhs)
    if is_gpu_array(rhs):
        out = xp.empty_like(rhs)
        _launch("mri_recon_tv_adjoint_rhs", rhs, ndim,
                (xp.ascontiguousarray(rhs), xp.ascontiguousarray(q), out, np.float32(rho)))
        return out
    return rhs + rho * divergence_adjoint(q, ndim)


def laplacian_add(x: Any, out: Any, rho: float, ndim: int) -> None:
    """``out += rho D^H D x`` in place (``out`` and ``x`` of one shape; C-contiguous complex64 on a GPU)."""
    if is_gpu_array(x):
        _launch("mri_recon_tv_laplacian_add", x, ndim, (x, out, np.float32(rho)))
        return
    out += rho * divergence_adjoint(gradient(x, ndim), ndim)


def first_axis_difference(x: Any) -> Any:
    """``D_0 x``: ``x[1:] - x[:-1]`` along axis 0, shape ``(T - 1, ...)`` (no wrap-around)."""
    return x[1:] - x[:-1]


def first_axis_difference_adjoint(q: Any) -> Any:
    """``D_0^H q`` for ``q`` of shape ``(T - 1, ...)``: ``out[t] = q[t - 1] - q[t]`` (0 beyond the ends)."""
    xp = get_xp(q)
    out = xp.zeros((q.shape[0] + 1, *q.shape[1:]), dtype=q.dtype)
    out[1:] += q
    out[:-1] -= q
    return out


def first_axis_adjoint_rhs(rhs: Any, q: Any, rho: float) -> Any:
    """``rhs + rho D_0^H q`` for ``rhs`` ``(T, ...)`` and ``q`` ``(T - 1, ...)``: a new array; one kernel on a
    GPU (which never reads ``q``'s missing last plane)."""
    xp = get_xp(rhs)
    if is_gpu_array(rhs):
        out = xp.empty_like(rhs)
        _launch("mri_recon_tv_adjoint_rhs", rhs, 1,
                (xp.ascontiguousarray(rhs), xp.ascontiguousarray(q), out, np.float32(rho)), _first_axis_sizes(rhs))
        return out
    return rhs + rho * first_axis_difference_adjoint(q)


def first_axis_laplacian_add(x: Any, out: Any, rho: float) -> None:
    """``out += rho D_0^H D_0 x`` in place; C-contiguous complex64 on a GPU, one kernel."""
    if is_gpu_array(x):
        _launch("mri_recon_tv_laplacian_add", x, 1, (x, out, np.float32(rho)), _first_axis_sizes(x))
        return
    out += rho * first_axis_difference_adjoint(first_axis_difference(x))


class FiniteDifference(LinearOperator):
    """``D``: image ``ishape`` -> ``(ndim, *ishape)`` forward differences over the last ``ndim`` axes."""

    def __init__(self, ishape: tuple[int, ...], ndim: int) -> None:
        super().__init__(ishape, (ndim, *ishape))
        self.ndim = int(ndim)

    def _apply(self, x: Any) -> Any:
        return gradient(x, self.ndim)

    def _adjoint(self, y: Any) -> Any:
        if is_gpu_array(y):
            xp = get_xp(y)
            return adjoint_rhs(xp.zeros(self.ishape, dtype=xp.complex64), y, 1.0, self.ndim)
        return divergence_adjoint(y, self.ndim)


class TvNormal(LinearOperator):
    """``x -> N x + rho D^H D x``: ADMM's x-update operator for total variation (Hermitian).

    ``normal`` is the data term's normal operator; when it writes into a given array, so does this one
    (one more kernel), and the solver may capture it in a CUDA graph.
    """

    hermitian = True

    def __init__(self, normal: LinearOperator, rho: float, ndim: int) -> None:
        super().__init__(normal.ishape, normal.oshape)
        self.normal, self.rho, self.ndim = normal, float(rho), int(ndim)
        self.writes_into = bool(getattr(normal, "writes_into", False))

    def _check(self, array: Any, shape: tuple[int, ...], what: str) -> None:
        self.normal._check(array, shape, what)

    def apply_into(self, x: Any, out: Any) -> None:
        self.normal.apply_into(x, out)
        laplacian_add(x, out, self.rho, self.ndim)

    def _apply(self, x: Any) -> Any:
        out = self.normal(x)
        laplacian_add(x, out, self.rho, self.ndim)
        return out
