"""Walsh's coil maps on a GPU by the kernels of ``kernels/maps.cu``: the coil covariance products, their box sums
one axis at a time, and the per-voxel dominant eigenvector phase referenced to one coil.

The same mathematics as the array code of :func:`mri_recon.prep.walsh.walsh` (its twin), in a few launches (one
per axis and group of coil pairs for the box sums) instead of the dozens of CuPy's element-wise kernels it takes.
Two numerical differences: the box sums add the box's values directly (not differences of cumulative sums), a
float32 rounding apart; and the eigenvector is found by ``2 ** SQUARINGS + 1`` normalized products with the
trace-scaled covariance from two starts, the one of larger Rayleigh quotient kept (the array code squares the
matrix ``SQUARINGS`` times and multiplies its largest column once more). Both damp the other eigenvalues'
components by the same power, so the two agree to float32 rounding where the dominant eigenvalue stands clear
of the next; where they nearly tie (a voxel of noise alone), neither has converged and they differ.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np

from ..arrays.backend import Device, cupy_module
from ..kernels import get_kernel
from ..kernels.configs import MAPS_SCRATCH_BYTES, MAPS_TIERS, maps_defines
from .lowres import SQUARINGS

KERNEL_FILE = "maps.cu"
THREADS = 256
BLOCKS = 4096
"""Most blocks of one launch (grid-stride loops beyond)."""
STEPS = 2 ** SQUARINGS + 1
"""Products of the eigen solver: as many as the array code's ``A^(2^SQUARINGS)`` times one."""


def empty(shape: tuple[int, ...]) -> Any:
    """An uninitialized complex64 device buffer: every array these kernels write comes from here (tests poison
    it)."""
    return cupy_module().empty(shape, dtype=np.complex64)


def scratch_pairs(pairs: int, voxels: int) -> int:
    """Coil pairs whose box sums run at once: as many rows of ``voxels`` complex64 as a scratch buffer holds, one
    at least, at most ``pairs``."""
    return max(1, min(pairs, MAPS_SCRATCH_BYTES // (8 * voxels)))


def on_device(index: int) -> Any:
    """The context that makes GPU ``index`` current (the buffers are allocated there)."""
    return cupy_module().cuda.Device(index)


def fits(coils: int) -> bool:
    """Whether ``maps.cu`` holds ``coils`` coils (:data:`~mri_recon.kernels.configs.MAPS_TIERS`)."""
    return 1 <= int(coils) <= MAPS_TIERS[-1]


@functools.lru_cache(maxsize=32)
def _kernel(name: str, coils: int, index: int):
    return get_kernel(KERNEL_FILE, name, maps_defines(coils), Device(index))


def _launch(name: str, coils: int, index: int, n: int, args: tuple) -> None:
    blocks = max(1, min(-(-int(n) // THREADS), BLOCKS))
    _kernel(name, coils, index)((blocks,), (THREADS,), args)


def walsh_maps(images: Any, kernel: int, ref: int) -> Any:
    """Walsh's maps ``(C, *spatial)`` complex64 of CuPy coil images ``(C, *spatial)`` (complex64, scaled near
    1: :func:`mri_recon.prep.walsh.walsh` does both), box ``kernel`` voxels per axis, phase referenced to coil
    ``ref``."""
    index = int(images.device.id)
    with on_device(index):
        images = cupy_module().ascontiguousarray(images, dtype=np.complex64)
        coils, spatial = int(images.shape[0]), tuple(int(s) for s in images.shape[1:])
        n = math.prod(spatial)
        cov = empty((coils * (coils + 1) // 2, n))
        _launch("mri_recon_maps_products", coils, index, n, (images, cov, np.int32(coils), np.int64(n)))
        _box_sums(cov, spatial, kernel, coils, index)
        maps = empty((coils, *spatial))
        _launch("mri_recon_maps_eigen", coils, index, n,
                (cov, maps, np.int32(coils), np.int64(n), np.int32(ref), np.int32(STEPS)))
        return maps


def _box_sums(cov: Any, spatial: tuple[int, ...], size: int, coils: int, index: int) -> None:
    """Replace each pair's row of ``cov`` (pairs, prod(spatial)) by its centred box sums of ``size`` voxels
    along every axis of ``spatial``, through scratch buffers of
    :data:`~mri_recon.kernels.configs.MAPS_SCRATCH_BYTES` each (:func:`scratch_pairs` pairs)."""
    pairs, n = int(cov.shape[0]), int(cov.shape[1])
    group = scratch_pairs(pairs, n)
    scratch = [empty((group, n)) for _ in range(min(2, len(spatial) - 1))]
    for first in range(0, pairs, group):
        rows = cov[first:first + group]
        source = rows
        for axis, length in enumerate(spatial):
            target = rows if axis == len(spatial) - 1 else scratch[axis % 2][:rows.shape[0]]
            inner = math.prod(spatial[axis + 1:])
            _launch("mri_recon_maps_box", coils, index, rows.size,
                    (source, target, np.int64(rows.size), np.int32(length), np.int64(inner), np.int32(size)))
            source = target
