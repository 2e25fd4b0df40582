"""Off-resonance in simulated scans: a smooth synthetic field map, readout times, and the data it perturbs.

Field map (Hz), a smooth function of the position r in the field of view ([-1/2, 1/2) per axis):

    f(r) = peak cos(pi (1.2 r_x - 0.3)) cos(pi (0.9 r_y + 0.2)) [cos(0.8 pi r_z) in 3-D],

whose largest value is ``peak`` (at r = (0.25, -0.22)) and smallest about ``-0.95 peak`` (corners), so
``peak = 150`` spans about +-150 Hz.

Times: every readout (spoke or interleaf: the trajectory is readout-major) lasts ``readout`` seconds, its
samples at ``s * readout / S`` for s = 0 .. S - 1, counted from the readout's start.

Data, without inverse crime: the k-space of :func:`mri_recon.sim.phantom.coil_kspace` is the exact
continuous Fourier transform of ``S_c x``; the off-resonance adds

    sum_n' x(r_n') S_c(r_n') (exp(-i 2 pi f(r_n') t_m) - 1) exp(-i 2 pi k_m . r_n') * N / N'

summed on a grid :data:`FINE` times finer than the reconstruction's (N' voxels, the phantom rasterized with
its sub-voxel sampling, the coil maps and the field map evaluated there), by time segmentation with the
tolerance :data:`SIMULATION_TOL` through FINUFFT. With ``peak = 0`` the data are those of the scan without
off-resonance, bit for bit.
"""

from __future__ import annotations

import math

import numpy as np

from ..checks.grid import voxel_positions
from ..errors import InvalidDataError
from ..operators.engines import finufft
from ..operators.offres.time_segments import SegmentFit
from . import phantom

FINE = 2
"""The simulation grid is this many times finer per axis than the reconstruction's."""
SIMULATION_TOL = 1e-6
"""Interpolation error of the time segments that compute the perturbation (far below the noise)."""


def field_map_at(points: np.ndarray, peak: float) -> np.ndarray:
    """The synthetic field map (Hz) at ``points`` ``(n, D)`` in units of the field of view."""
    r = np.asarray(points, dtype=np.float64)
    f = np.cos(np.pi * (1.2 * r[:, 0] - 0.3)) * np.cos(np.pi * (0.9 * r[:, 1] + 0.2))
    if r.shape[1] == 3:
        f = f * np.cos(0.8 * np.pi * r[:, 2])
    return float(peak) * f


def field_map(matrix: tuple[int, ...], peak: float) -> np.ndarray:
    """The synthetic field map on the voxel grid of ``matrix``: float32 ``matrix`` (Hz)."""
    return field_map_at(voxel_positions(matrix), peak).reshape(matrix).astype(np.float32)


def readout_times(n_samples: int, per_readout: int, readout: float) -> np.ndarray:
    """float32 ``(M,)``: ``s * readout / per_readout`` for the sample s of each readout (s)."""
    if not (math.isfinite(readout) and readout > 0):
        raise InvalidDataError(f"the readout duration must be a positive number of seconds, found {readout!r}")
    if per_readout < 1 or n_samples % per_readout:
        raise InvalidDataError(f"{n_samples} samples do not split into readouts of {per_readout}")
    one = np.arange(per_readout, dtype=np.float64) * (readout / per_readout)
    return np.tile(one, n_samples // per_readout).astype(np.float32)


def perturbation(trajectory: np.ndarray, matrix: tuple[int, ...], coils: int, peak: float,
                 times: np.ndarray) -> np.ndarray:
    """The off-resonance's change of the coil k-space, complex128 ``(C, M)`` (see the module docstring)."""
    fine = tuple(FINE * n for n in matrix)
    image = phantom.shepp_logan_image(fine) * phantom.coil_maps(fine, coils)      # (C, *fine)
    f = field_map(fine, peak).astype(np.float64)
    fit = SegmentFit(f, times)  # one fit for the segment count and the interpolators
    segments = fit.choose(SIMULATION_TOL, ridge=0.0)  # float64 throughout: no ridge needed
    b, tau, _ = fit.interpolators(segments, ridge=0.0)
    plain = finufft.forward(image, trajectory, eps=1e-9)
    out = -plain
    for seg in range(segments):
        out += finufft.forward(image * np.exp(-2j * np.pi * f * tau[seg]), trajectory, eps=1e-9) * b[:, seg]
    return out * (math.prod(matrix) / math.prod(fine))
