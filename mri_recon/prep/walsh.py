"""Walsh adaptive-combine coil maps (Walsh, Gmitro and Marcellin 2000): the dominant eigenvector of the
coil covariance of low-resolution images, averaged over a box; unit norm per voxel."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..arrays.backend import get_xp
from ..checks.scaling import unit_scale
from ..errors import InvalidDataError, SchemaError
from . import walsh_gpu
from .lowres import _box_sum, _phase_reference, _strongest, dominant_eigenvectors


def walsh(images: Any, *, kernel: int | None = None, solver: str = "power") -> Any:
    """Walsh adaptive-combine maps from coil images ``(C, *matrix)`` (NumPy or CuPy, same module out).

    Per voxel, the coil covariance ``R = sum_box x x^H`` over a box of ``kernel`` voxels per axis; the map
    is its dominant eigenvector (unit norm), phase referenced to the coil with the most energy. The data
    should be prewhitened (:func:`mri_recon.prep.noise.prewhiten`), which makes the noise covariance the identity.
    The images are divided by a power of two near their largest value first: the maps do not depend on
    their scale. The array code's box sums are cumulative sums in float32 (:func:`~.lowres._box_sum`), whose
    rounding is absolute along each row of the image: a voxel far weaker than its row (below about 1% of the
    row's energy) gets its map only to a correspondingly lower relative accuracy (the GPU kernels add each
    box directly).

    Parameters
    ----------
    images
        complex ``(C, Nx, Ny[, Nz])``, typically from :func:`lowres_images`.
    kernel
        Odd box size in voxels; by default about a sixteenth of the smallest axis (at least 3).
    solver
        ``"power"`` or ``"eigh"`` (:func:`dominant_eigenvectors`). On a GPU, ``"power"`` with up to 16 coils
        runs the kernels of :mod:`.walsh_gpu` where they hold the coils (this array code is their twin).
    """
    xp = get_xp(images)
    if images.ndim not in (3, 4):
        raise SchemaError(f"walsh: images must have shape (C, Nx, Ny[, Nz]), found {tuple(images.shape)}")
    spatial = tuple(images.shape[1:])
    if kernel is None:
        kernel = max(3, 2 * (min(spatial) // 32) + 1)
    if kernel < 1 or kernel % 2 == 0:
        raise InvalidDataError(f"walsh: kernel must be a positive odd number of voxels, found {kernel}")
    c = images.shape[0]
    images = unit_scale(images)[0].astype(xp.complex64)  # a power of two: the same maps for any scale
    ref = _strongest(images)
    if xp is not np and solver == "power" and walsh_gpu.fits(c):
        return walsh_gpu.walsh_maps(images, kernel, ref)
    x = images.reshape(c, -1)
    upper = [(i, j) for i in range(c) for j in range(i, c)]
    ii = xp.asarray([i for i, _ in upper])
    jj = xp.asarray([j for _, j in upper])
    cov = (x[ii] * xp.conj(x[jj])).reshape(len(upper), *spatial)
    cov = _box_sum(cov, kernel, axes=range(1, len(spatial) + 1)).reshape(len(upper), -1)
    mats = xp.zeros((cov.shape[1], c, c), dtype=xp.complex64)
    mats[:, ii, jj] = cov.T
    mats[:, jj, ii] = xp.conj(cov.T)
    vec, _ = dominant_eigenvectors(mats, solver=solver)
    maps = vec.T.reshape(c, *spatial)
    return _phase_reference(maps, ref)


# --------------------------------------------------------------------------------------------------------
# ESPIRiT
