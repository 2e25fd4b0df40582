"""ESPIRiT coil maps (Uecker et al. 2014): the eigenvalue-1 eigenvectors of the operator built from the row
space of the calibration (Hankel) matrix; maps are zero where the eigenvalue is below ``crop``."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..arrays.backend import get_xp, to_host
from ..checks.scaling import unit_scale
from ..checks.validation import validate_matrix
from ..errors import InvalidDataError, SchemaError
from .lowres import _centre_phases, _phase_reference, dominant_eigenvectors


def _kernels(calib: Any, kernel: int, threshold: float) -> Any:
    """Row-space basis of the calibration matrix: ``(n_keep, C, *[kernel] * D)``."""
    xp = get_xp(calib)
    c, ndim = calib.shape[0], calib.ndim - 1
    shape = (kernel,) * ndim
    patches = xp.lib.stride_tricks.sliding_window_view(calib, shape, axis=tuple(range(1, ndim + 1)))
    # (C, *positions, *kernel) -> rows: positions; columns: (C, *kernel)
    order = (*range(1, ndim + 1), 0, *range(ndim + 1, 2 * ndim + 1))
    a = patches.transpose(order).reshape(-1, c * kernel**ndim).astype(xp.complex128)
    gram = a.conj().T @ a
    power, v = xp.linalg.eigh(gram)  # ascending; power = singular values squared
    sigma = xp.sqrt(xp.clip(power, 0, None))
    keep = sigma >= threshold * sigma[-1]
    return v[:, keep].T.reshape(-1, c, *shape)


def espirit_operator(kernels: Any, matrix: Sequence[int]) -> Any:
    """The per-voxel ESPIRiT matrices ``G(r) = k^-D sum_j b_j(r) b_j(r)^H``: ``(prod(matrix), C, C)``.

    ``b_j,c(r) = sum_q conj(v_j(c, q)) exp(+i 2 pi q . r)``: with this sign a consistent map S(r) is an
    eigenvector with eigenvalue 1 (the null-space vectors n satisfy ``sum_{c,q} n_c(q) S_c(r)
    exp(-i 2 pi q.r) = 0``). G is a trigonometric polynomial of degree < kernel, so it is computed exactly on
    a grid of ``2 kernel`` points per axis, turned into its coefficients by FFT and evaluated on the image
    grid by a zero-padded inverse FFT.
    """
    xp = get_xp(kernels)
    n_keep, c = kernels.shape[:2]
    shape = tuple(kernels.shape[2:])
    ndim, kernel = len(shape), shape[0]
    small = 2 * kernel
    if any(n < 2 * kernel - 1 for n in matrix):
        raise InvalidDataError(f"ESPIRiT kernel {kernel} needs a matrix of at least {2 * kernel - 1} per axis, "
                               f"found {list(matrix)}")
    axes = tuple(range(2, 2 + ndim))
    b = xp.fft.ifftn(xp.conj(kernels), s=(small,) * ndim, axes=axes) * small**ndim  # (J, C, *small)
    b = b.reshape(n_keep, c, -1)
    g = xp.einsum("jcp,jdp->cdp", b, xp.conj(b)) / kernel**ndim  # values on the small grid
    g = g.reshape(c, c, *(small,) * ndim)
    coef = xp.fft.fftn(g, axes=axes) / small**ndim  # coefficient of frequency delta at delta % small
    delta = np.arange(-(kernel - 1), kernel)
    index = np.ix_(*[delta % n for n in matrix])
    source = np.ix_(*[delta % small for _ in matrix])
    sign = xp.asarray(_centre_phases([delta] * ndim, matrix))
    grid = xp.zeros((c, c, *matrix), dtype=xp.complex64)  # transformed axes last: batched FFTs
    grid[(slice(None), slice(None), *(xp.asarray(i) for i in index))] = (
        coef[(slice(None), slice(None), *(xp.asarray(i) for i in source))] * sign)
    out = xp.fft.ifftn(grid, axes=axes) * math.prod(matrix)
    return xp.ascontiguousarray(out.reshape(c, c, -1).transpose(2, 0, 1))


def espirit(calib: Any, matrix: Sequence[int], *, kernel: int = 6, threshold: float = 0.02,
            crop: float = 0.95, solver: str = "power") -> Any:
    """ESPIRiT maps from a Cartesian calibration region ``(C, *cal)`` (NumPy or CuPy, same module out).

    The calibration (Hankel) matrix holds every ``kernel^D`` patch of the region as a row; its row space
    (singular values above ``threshold`` times the largest) defines per-voxel matrices
    (:func:`espirit_operator`) whose dominant eigenvector is the map and whose eigenvalue is about 1 inside
    the object. Simplifications: one set of maps (the dominant eigenvector; no soft-SENSE second set), a
    fixed relative singular-value threshold, and maps set to 0 where the eigenvalue is below ``crop``.
    Both thresholds are relative (the eigenvalue is 1 where the maps explain the data), and the region is
    divided by a power of two near its largest value first, so the maps do not depend on the data's scale.
    """
    xp = get_xp(calib)
    matrix = validate_matrix(matrix, "espirit")
    if calib.ndim != len(matrix) + 1:
        raise SchemaError(f"espirit: calibration region must have shape (C, *cal) with {len(matrix)} spatial "
                          f"axes, found {tuple(calib.shape)}")
    if any(s < kernel + 1 for s in calib.shape[1:]):
        raise InvalidDataError(f"espirit: calibration region {list(calib.shape[1:])} must exceed the kernel "
                               f"size {kernel} along every axis")
    if not 0 < threshold < 1 or not 0 <= crop < 1:
        raise InvalidDataError(f"espirit: threshold must be in (0, 1) and crop in [0, 1), found {threshold}, "
                               f"{crop}")
    calib = unit_scale(calib)[0]  # a power of two: the same maps for calibration data of any scale
    kernels = _kernels(calib, kernel, threshold)
    vec, val = dominant_eigenvectors(espirit_operator(kernels, matrix), solver=solver)
    maps = (vec * (val > crop)[:, None]).T.reshape(calib.shape[0], *matrix)
    energy = xp.sum(xp.abs(calib.reshape(calib.shape[0], -1)) ** 2, axis=1)
    return _phase_reference(maps, int(to_host(xp.argmax(energy))))
