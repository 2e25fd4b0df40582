"""The analytic ramp density weights of :func:`mri_recon.prep.dcf.ramp` for NumPy or CuPy trajectories.

The same mathematics as :func:`~mri_recon.prep.dcf.ramp` (all axes) and its normalization
(:func:`~mri_recon.prep.dcf.normalize`), in float64 on the trajectory's device. The checks that the host
version raises at once come back as device booleans instead, so that the caller reads them together with its
other checks in one transfer: whether any sample lies away from k = 0 and whether the blob's gain is positive.
On a GPU the work is three kernels of ``kernels/arith.cu`` (:func:`~mri_recon.operators.arith.ramp_density`)
with no host read; NumPy arrays take the array code below, which is their twin.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from ..arrays.backend import cupy_module, get_xp
from ..operators.arith import ramp_density
from .dcf import blob_extent, blob_samples, blob_spectrum


@functools.lru_cache(maxsize=16)
def _device_blob(matrix: tuple[int, ...], device: int) -> Any:
    """The blob's samples of every axis, one after the other, as a float64 CuPy array on ``device`` (kept)."""
    cupy = cupy_module()
    with cupy.cuda.Device(device):
        return cupy.asarray(np.concatenate(blob_samples(matrix)))


def ramp_weights(trajectory: Any, matrix: tuple[int, ...]) -> tuple[Any, Any, Any]:
    """``(weights, moving, gain_positive)``: float32 ramp weights ``|k|^(D - 1)`` of a validated ``(M, D)``
    trajectory, normalized like :func:`mri_recon.prep.dcf.ramp`, and two device booleans: some sample lies
    away from k = 0 (else the host version raises), and the normalizing gain is positive (else
    :func:`~mri_recon.prep.dcf.normalize` raises). The weights are meaningless when either is false."""
    scales, still = max(matrix) / np.asarray(matrix, dtype=np.float64), 1e-9 * max(matrix)
    if get_xp(trajectory) is not np:
        return ramp_density(trajectory, matrix, tuple(scales), still, _device_blob(matrix, trajectory.device.id),
                            tuple(blob_extent(matrix)[1]))
    k = trajectory.astype(np.float64)
    dims = k.shape[1]
    radius = np.sqrt(np.sum((k * scales) ** 2, axis=1))
    moving = radius > still
    delta = np.min(np.where(moving, radius, np.inf))
    delta = np.where(delta < np.inf, delta, 1.0)  # no sample moves: flagged below, the value unused
    centre = (2 / dims) * (delta / 2) ** dims / delta
    weights = np.where(moving, radius ** (dims - 1), centre)
    gain = np.sum(weights * blob_spectrum(k, matrix))
    positive = gain > 0
    return (weights / np.where(positive, gain, 1.0)).astype(np.float32), np.any(moving), positive & np.any(moving)
