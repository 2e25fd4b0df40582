"""Coil sensitivities estimated from the scan itself: Walsh adaptive combine and an ESPIRiT eigen method.

Both start from the centre of k-space. :func:`lowres_images` forms ``F^H`` of the samples within a small
radius, density compensated (the scan's weights, or one over the number of samples in each 1/FOV cell) and
tapered by a smooth window, with the project's adjoint (FINUFFT on the CPU, the exact GPU kernel on a GPU,
both through :mod:`mri_recon.operators.engines`). Then, per voxel, both methods take the dominant eigenvector of
a small C x C Hermitian matrix, all voxels at once (:func:`dominant_eigenvectors`: batched repeated
squaring by default, batched ``eigh`` on request):

- :func:`walsh`: the coil covariance of the low-resolution images averaged over a box (Walsh, Gmitro and
  Marcellin 2000). Unit norm per voxel; the image then carries the intensity.
- :func:`espirit`: the ESPIRiT operator built from the row space of the calibration (Hankel) matrix
  (Uecker et al. 2014), whose eigenvalue is 1 where the maps explain the data; maps are zero where it is
  below ``crop``.

NLINV (:mod:`.nlinv`) is served here too: it takes every sample, not the centre alone, and estimates the
maps together with the image by regularized Gauss-Newton.

The phase of each voxel's eigenvector is referenced to the coil with the most energy. Everything after
the adjoint is written against the array module of its input, so NumPy and CuPy run the same code.
The pieces live in :mod:`.lowres` (low-resolution images, eigen solver), :mod:`.walsh` and :mod:`.espirit`.
:func:`estimate_coil_maps` takes a :class:`~mri_recon.scan.Scan` and returns NumPy maps;
:func:`coil_maps_from_kspace` takes arrays already on a GPU and leaves the maps there.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..arrays.backend import Device, resolve_device_like, to_host
from ..checks.validation import validate_matrix
from ..errors import InvalidDataError, listed
from ..scan import Scan
from .espirit import espirit, espirit_operator
from .lowres import (
    _centre_adjoint,
    _lowres_scaled,
    calibration_region,
    cell_density_weights,
    coarse_grid,
    default_radius,
    dominant_eigenvectors,
    fourier_resize,
    lowres_images,
)
from .maps_methods import estimated, is_estimated
from .nlinv import nlinv
from .walsh import walsh

__all__ = [ "calibration_region", "cell_density_weights", "coarse_grid", "coil_maps_from_kspace",
           "default_radius", "dominant_eigenvectors", "espirit", "espirit_operator", "estimate_coil_maps",
           "fourier_resize", "lowres_images", "walsh"]

# --------------------------------------------------------------------------------------------------------
# From a scan


def estimate_coil_maps(scan: Scan, method: str = "walsh", *, device: str | int | Device | None = "auto",
                       **options: Any) -> np.ndarray:
    """Coil maps of ``scan``: complex64 NumPy ``(C, *matrix)``, ready for ``scan.replace(coil_maps=...)``.

    Prewhiten first (:func:`mri_recon.prep.noise.prewhiten`) so that the maps live in the whitened coil basis.
    The scan's ``weights`` are used as density compensation when present; its own ``coil_maps`` are
    ignored. ``options`` are those of :func:`coil_maps_from_kspace`, which keeps the maps on the device.
    """
    maps = coil_maps_from_kspace(scan.kspace, scan.trajectory, scan.matrix, method, weights=scan.weights,
                                 device=device, **options)
    return to_host(maps).astype(np.complex64)


def coil_maps_from_kspace(kspace: Any, trajectory: Any, matrix: Sequence[int], method: str = "walsh", *,
                          weights: Any = None, device: str | int | Device | None = "auto",
                          radius: float | None = None, kernel: int | None = None,
                          calibration: int | None = None, threshold: float = 0.02, crop: float = 0.95,
                          solver: str = "power") -> Any:
    """Coil maps from k-space on ``device``: complex64 ``(C, *matrix)``, CuPy on a GPU.

    Parameters
    ----------
    kspace, trajectory
        complex ``(C, M)`` and float ``(M, D)`` in cycles per FOV, NumPy or already on the device.
    matrix
        Image size.
    method
        ``"walsh"``, ``"espirit"`` or ``"nlinv"`` (every sample; the options below do not apply).
    weights
        Density compensation (M,), or None for :func:`cell_density_weights`.
    device
        Where to compute: ``"auto" | "cpu" | "gpu" | "gpu:N"`` (``"auto"`` keeps a CuPy input's GPU).
    radius
        Walsh: k-space radius of the low-resolution images (cycles per FOV).
    kernel
        Walsh: box size in voxels; ESPIRiT: kernel width (default 6 in 2-D, 5 in 3-D).
    calibration
        ESPIRiT: calibration region width (default 24 in 2-D, 16 in 3-D, at most the matrix).
    threshold, crop
        ESPIRiT: relative singular-value threshold and eigenvalue crop.
    solver
        Per-voxel eigen solver, ``"power"`` or ``"eigh"`` (:func:`dominant_eigenvectors`).
    """
    if not is_estimated(method):
        raise InvalidDataError(f"unknown coil map method {method!r}: expected {listed(estimated(), quote=True)}")
    matrix = validate_matrix(matrix, "coil maps")
    dev = resolve_device_like(device, kspace)
    with dev.use():
        return FROM_CENTRE[method](kspace, trajectory, matrix, weights, dev, radius=radius, kernel=kernel,
                                   calibration=calibration, threshold=threshold, crop=crop, solver=solver)


def _walsh_maps(kspace: Any, trajectory: Any, matrix: tuple[int, ...], weights: Any, dev: Device, *,
                radius: float | None, kernel: int | None, solver: str, **unused: Any) -> Any:
    """Walsh's maps from the low-resolution images of the samples within ``radius``."""
    images, _ = _lowres_scaled(kspace, trajectory, matrix, radius, 0.0, weights, dev)
    return walsh(images, kernel=kernel, solver=solver)


def _espirit_maps(kspace: Any, trajectory: Any, matrix: tuple[int, ...], weights: Any, dev: Device, *,
                  kernel: int | None, calibration: int | None, threshold: float, crop: float, solver: str,
                  **unused: Any) -> Any:
    """ESPIRiT's maps from the calibration region gridded from the k-space centre."""
    ndim = len(matrix)
    width = min(calibration or (24 if ndim == 2 else 16), min(matrix))
    kernel = kernel or (6 if ndim == 2 else 5)
    # Grid the region with the window flat up to its corners, plus a margin for the gridding kernel.
    radius = min(width / 2 * math.sqrt(ndim) + 6, min(matrix) / 2)
    images, _ = _centre_adjoint(kspace, trajectory, coarse_grid(matrix, radius), radius,
                                max(radius - 4, 0.0), weights, dev)
    calib = calibration_region(images, width)
    return espirit(calib, matrix, kernel=kernel, threshold=threshold, crop=crop, solver=solver)


def _nlinv_maps(kspace: Any, trajectory: Any, matrix: tuple[int, ...], weights: Any, dev: Device,
                **unused: Any) -> Any:
    """NLINV's maps from all samples, unweighted as BART's ``nlinv`` (:func:`mri_recon.prep.nlinv.nlinv`)."""
    return nlinv(kspace, trajectory, matrix, device=dev).maps


FROM_CENTRE = {"walsh": _walsh_maps, "espirit": _espirit_maps, "nlinv": _nlinv_maps}
"""The estimator of each estimated method of :data:`.maps_methods.COIL_MAPS`, from the k-space centre."""
