"""The analytic ramp density weights of :func:`mri_recon.prep.dcf.ramp` for NumPy or CuPy trajectories.

The same mathematics as :func:`~mri_recon.prep.dcf.ramp` (all axes) and its normalization
(:func:`~mri_recon.prep.dcf.normalize`), in float64 on the trajectory's device. The checks that the host
version raises at once come back as device booleans instead, so that the caller reads them together with its
other checks in one transfer: whether any sample lies away from k = 0 and whether the blob's gain is positive.
One synchronization remains inside: the count of samples near the centre, which sizes the blob's chunks.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..backend import get_xp
from ..grid import axis_positions
from .dcf import BLOB_WIDTH

BLOB_BYTES = 64 << 20
"""Bytes of one chunk of the blob's complex128 ``(samples, N)`` phase matrix."""


def blob_spectrum(k: Any, matrix: tuple[int, ...]) -> Any:
    """``(F b)(k)`` of the Gaussian blob of :mod:`mri_recon.prep.dcf` at float64 positions ``k`` (M, D), on
    their device: zero beyond 8 of the spectrum's standard deviations or the Nyquist extent."""
    xp = get_xp(k)
    out = xp.zeros(len(k))
    width = np.maximum(BLOB_WIDTH, 1.5 / np.asarray(matrix, dtype=np.float64))
    reach = np.minimum(8 / (2 * np.pi * width), np.asarray(matrix) / 2)
    near = xp.nonzero(xp.all(xp.abs(k) <= xp.asarray(reach), axis=1))[0]
    rows = max(8192, BLOB_BYTES // (16 * max(matrix)))
    axes = [xp.asarray(axis_positions(n)) for n in matrix]
    gaussians = [xp.exp(-(r**2) / (2 * s**2)).astype(np.complex128) for r, s in zip(axes, width)]
    for start in range(0, len(near), rows):
        part = near[start:start + rows]
        spectrum = xp.ones(len(part), dtype=np.complex128)
        for d, (r, g) in enumerate(zip(axes, gaussians)):
            spectrum *= xp.exp(-2j * np.pi * xp.outer(k[part, d], r)) @ g
        out[part] = spectrum.real
    return out


def ramp_weights(trajectory: Any, matrix: tuple[int, ...]) -> tuple[Any, Any, Any]:
    """``(weights, moving, gain_positive)``: float32 ramp weights ``|k|^(D - 1)`` of a validated ``(M, D)``
    trajectory, normalized like :func:`mri_recon.prep.dcf.ramp`, and two device booleans: some sample lies
    away from k = 0 (else the host version raises), and the normalizing gain is positive (else
    :func:`~mri_recon.prep.dcf.normalize` raises). The weights are meaningless when either is false."""
    xp = get_xp(trajectory)
    k = trajectory.astype(np.float64)
    dims = k.shape[1]
    scale = xp.asarray(max(matrix) / np.asarray(matrix, dtype=np.float64))
    radius = xp.sqrt(xp.sum((k * scale) ** 2, axis=1))
    moving = radius > 1e-9 * max(matrix)
    delta = xp.min(xp.where(moving, radius, np.inf))
    delta = xp.where(delta < np.inf, delta, 1.0)  # no sample moves: flagged below, the value unused
    centre = (2 / dims) * (delta / 2) ** dims / delta
    weights = xp.where(moving, radius ** (dims - 1), centre)
    gain = xp.sum(weights * blob_spectrum(k, matrix))
    positive = gain > 0
    return (weights / xp.where(positive, gain, 1.0)).astype(np.float32), xp.any(moving), positive & xp.any(moving)
