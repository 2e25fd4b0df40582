"""Nuclear norms of Casorati matrices and their proximal maps, on NumPy and CuPy arrays.

The Casorati matrix of frames ``x`` of shape ``(T, *matrix)`` has one row per frame and one column per voxel
(``T x N``). Its nuclear norm ``||C(x)||_*`` (the sum of its singular values) is the global low-rank penalty;
the locally low-rank penalty is the sum of the nuclear norms of the Casorati matrices of blocks of ``b^d``
voxels (``T x b^d``), the blocks tiling the matrix.

The proximal map of ``t ||.||_*`` is singular value soft-thresholding: ``M = U S V^H -> U max(S - t, 0) V^H``.
It is computed from the ``T x T`` Gram matrix ``G = M M^H = U S^2 U^H`` (T is small): its eigenvectors ``U``
and the singular values ``s = sqrt(eig(G))`` give ``U diag(max(1 - t / s, 0)) U^H M``. ``G`` and its
eigendecomposition are formed in float64 whatever the data's precision (squaring the singular values would
otherwise lose those below ``sqrt(eps)`` of the largest), and the ``T x T`` weighting is applied to ``M`` in
its own precision. Many matrices (the blocks) go through one batched product and one batched ``eigh``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..arrays.backend import get_xp

CHUNK_ELEMENTS = 1 << 22
"""Columns are summed into the Gram matrix this many elements at a time (bounds the float64 copy)."""
SVT_TEMPORARIES = 32 << 20
"""Bytes the ``T x T`` temporaries of :func:`svt` may take on a GPU whatever the blocks' size (within the
memory plan's headroom for library workspaces, :data:`mri_recon.planning.planner.HEADROOM`)."""


def casorati(x: Any) -> Any:
    """The ``T x N`` Casorati matrix of frames ``(T, *matrix)`` (a view where the array allows)."""
    return x.reshape(x.shape[0], -1)


def gram64(m: Any) -> Any:
    """``M M^H`` in complex128 for ``M`` of shape ``(..., T, n)``, the columns summed in chunks."""
    xp = get_xp(m)
    step = max(1, CHUNK_ELEMENTS // max(1, math.prod(m.shape[:-1])))
    out = xp.zeros((*m.shape[:-1], m.shape[-2]), dtype=np.complex128)
    for start in range(0, m.shape[-1], step):
        part = m[..., start : start + step].astype(np.complex128)
        out += part @ xp.conj(part).swapaxes(-1, -2)
    return out


def squared_singular_values(gram: Any) -> Any:
    """The eigenvalues of Gram matrices ``(..., T, T)`` (squared singular values, ascending), those at rounding
    level (below ``T eps`` of the largest, as a rank-deficient matrix gives) set to 0."""
    xp = get_xp(gram)
    values = xp.linalg.eigvalsh(gram)
    floor = gram.shape[-1] * np.finfo(np.float64).eps * values[..., -1:]
    return xp.where(values > floor, values, 0.0)


def singular_values(m: Any) -> Any:
    """The singular values of ``M`` (``(..., T, n)``), ``T`` of them per matrix (zeros included), float64."""
    return get_xp(m).sqrt(squared_singular_values(gram64(m)))


def nuclear_norm(m: Any) -> float:
    """``sum ||M_i||_*`` over the matrices of ``m`` (``(..., T, n)``), in float64."""
    return float(singular_values(m).sum())


def svt(m: Any, t: float) -> Any:
    """Singular value soft-thresholding of each matrix of ``m`` (``(..., T, n)``): the proximal map of
    ``t ||.||_*``, ``U max(S - t, 0) V^H``, a new array of ``m``'s dtype.

    The matrices go through in groups whose ``T x T`` float64 temporaries (the Gram matrix, its eigenvectors,
    the mix and its copy in ``m``'s precision) take no more memory than ``m`` itself (for small blocks and many
    frames they would otherwise outgrow the frames ``T / 32`` times over, 8^2 blocks) or, on a GPU,
    :data:`SVT_TEMPORARIES` where that is more: there a group is one batched ``eigh`` whose cost is mostly
    fixed per call, where on the CPU smaller groups stay in the caches."""
    xp = get_xp(m)
    stack = m.reshape(-1, *m.shape[-2:])
    per_matrix = 4 * m.shape[-2] ** 2 * np.dtype(np.complex128).itemsize
    floor = 0 if xp is np else SVT_TEMPORARIES
    group = max(1, max(m.nbytes, floor) // per_matrix)
    if group >= stack.shape[0]:
        return _svt(stack, t).reshape(m.shape)
    out = xp.empty_like(stack)
    for start in range(0, stack.shape[0], group):
        out[start : start + group] = _svt(stack[start : start + group], t)
    return out.reshape(m.shape)


def _svt(m: Any, t: float) -> Any:
    """:func:`svt` of a stack of matrices ``(B, T, n)`` at once."""
    xp = get_xp(m)
    values, vectors = xp.linalg.eigh(gram64(m))
    s = xp.sqrt(xp.maximum(values, 0.0))
    weight = xp.where(s > t, 1.0 - t / xp.maximum(s, np.finfo(np.float64).tiny), 0.0)
    mix = (vectors * weight[..., None, :]) @ xp.conj(vectors).swapaxes(-1, -2)
    return mix.astype(m.dtype) @ m


def global_svt(x: Any, t: float) -> Any:
    """The proximal map of ``t ||C(x)||_*`` for frames ``(T, *matrix)``, shaped as ``x``."""
    return svt(casorati(x), t).reshape(x.shape)


def global_nuclear_norm(x: Any) -> float:
    """``||C(x)||_*`` of frames ``(T, *matrix)``."""
    return nuclear_norm(casorati(x))


def to_blocks(x: Any, block: int) -> Any:
    """Frames ``(T, *matrix)`` cut into blocks of ``block^d`` voxels: ``(blocks, T, block^d)``, each a block's
    Casorati matrix. A side that is not a multiple of ``block`` is padded with zeros, so its last blocks are
    partial (zero columns change neither the singular values nor the thresholded entries)."""
    xp = get_xp(x)
    matrix = x.shape[1:]
    padded = tuple(-(-n // block) * block for n in matrix)
    if padded != matrix:
        x = xp.pad(x, [(0, 0), *((0, p - n) for n, p in zip(matrix, padded))])
    d = len(matrix)
    split = x.reshape(x.shape[0], *(v for p in padded for v in (p // block, block)))
    # (T, n0, b, n1, b, ...) -> (n0, n1, ..., T, b, b, ...)
    order = (*range(1, 2 * d, 2), 0, *range(2, 2 * d + 1, 2))
    return split.transpose(order).reshape(-1, x.shape[0], block**d)


def from_blocks(blocks: Any, shape: tuple[int, ...], block: int) -> Any:
    """The inverse of :func:`to_blocks`: frames of ``shape = (T, *matrix)`` (the padding dropped)."""
    t, matrix = shape[0], shape[1:]
    d = len(matrix)
    padded = tuple(-(-n // block) * block for n in matrix)
    grid = tuple(p // block for p in padded)
    split = blocks.reshape(*grid, t, *(block,) * d)
    # (n0, n1, ..., T, b, b, ...) -> (T, n0, b, n1, b, ...)
    order = (d, *(v for i in range(d) for v in (i, d + 1 + i)))
    x = split.transpose(order).reshape(t, *padded)
    return x[(slice(None), *(slice(0, n) for n in matrix))]


class LocalLowRank:
    """The locally low-rank penalty ``sum_blocks ||C(x_block)||_*`` of frames ``(T, *matrix)``, blocks of
    ``block^d`` voxels, and its proximal map.

    The block grid may be shifted (circularly: the frames are rolled, cut into blocks and rolled back, so every
    voxel is in exactly one block and the map is the exact proximal map of the shifted grid's penalty).
    ``prox`` draws a new shift, uniform in ``[0, block)`` along each axis, at every call from a generator seeded
    with ``seed`` (as BART's ``pics -R L`` does at every iteration: with it no block edge stays in one place);
    ``fixed_prox`` and ``penalty`` use the unshifted grid. The same seed gives the same shifts, so a solve is
    reproducible run to run.
    """

    def __init__(self, block: int = 8, seed: int = 0, shifts: bool = True) -> None:
        self.block, self.shifts = int(block), bool(shifts)
        self.random = np.random.default_rng(seed)

    def blockwise_svt(self, x: Any, t: float, shift: tuple[int, ...]) -> Any:
        """The proximal map of ``t`` times the penalty of the grid shifted by ``shift`` (one per axis)."""
        xp = get_xp(x)
        axes = tuple(range(1, x.ndim))
        rolled = xp.roll(x, shift, axis=axes) if any(shift) else x
        out = from_blocks(svt(to_blocks(rolled, self.block), t), x.shape, self.block)
        return xp.roll(out, tuple(-s for s in shift), axis=axes) if any(shift) else out

    def prox(self, x: Any, t: float) -> Any:
        """The proximal map on a grid shifted at random (unshifted when ``shifts`` is False)."""
        d = x.ndim - 1
        shift = tuple(int(v) for v in self.random.integers(0, self.block, d)) if self.shifts else (0,) * d
        return self.blockwise_svt(x, t, shift)

    def fixed_prox(self, x: Any, t: float) -> Any:
        """The proximal map of the unshifted grid's penalty."""
        return self.blockwise_svt(x, t, (0,) * (x.ndim - 1))

    def penalty(self, x: Any) -> float:
        """The sum of the blocks' nuclear norms, on the unshifted grid."""
        return nuclear_norm(to_blocks(x, self.block))
