"""Simulated Cartesian scans: the analytic multi-coil Shepp-Logan k-space on the integer grid, and masks.

The k-space is the continuous Fourier transform of the phantom times the coil model
(:func:`mri_recon.sim.phantom.coil_kspace`), evaluated at the grid's frequencies: no inverse crime. Index
``p`` of an axis of ``N`` samples is ``k = p - N // 2``; with readout oversampling ``s`` the readout holds
``s N`` samples ``s`` times more finely spaced (cycles per recon FOV ``(p - s N // 2) / s``), the encoded FOV
being ``s`` times the recon FOV along x.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .phantom import coil_kspace


def cartesian_trajectory(matrix: Sequence[int], oversampling: int = 1) -> np.ndarray:
    """float64 ``(prod(encoded), D)`` frequencies (cycles per recon FOV) of the grid in C order, the readout
    (axis 0) ``oversampling`` times longer and finer."""
    axes = [(np.arange(n * (oversampling if a == 0 else 1)) - (n * (oversampling if a == 0 else 1)) // 2)
            / (oversampling if a == 0 else 1) for a, n in enumerate(matrix)]
    grids = np.meshgrid(*axes, indexing="ij")
    return np.stack([g.reshape(-1) for g in grids], axis=1)


def cartesian_kspace(matrix: Sequence[int], coils: int, oversampling: int = 1) -> np.ndarray:
    """complex64 ``(C, s Nx, Ny[, Nz])``: the analytic k-space of the coil-weighted phantom on the grid."""
    matrix = tuple(int(n) for n in matrix)
    trajectory = cartesian_trajectory(matrix, oversampling)
    shape = (matrix[0] * oversampling, *matrix[1:])
    return coil_kspace(trajectory, matrix, coils).reshape(coils, *shape)


def undersampling_mask(lines: int, acceleration: int, acs: int) -> tuple[np.ndarray, np.ndarray]:
    """bool ``(lines,)`` phase-encode masks ``(sampled, acs)``: every ``acceleration``-th line from the centre
    line outwards, plus the ``acs`` central lines (BART ``poisson``-free, regular undersampling)."""
    k = np.arange(lines) - lines // 2
    acs_lines = np.abs(k + 0.5) < acs / 2
    return (k % acceleration == 0) | acs_lines, acs_lines
