"""Coil maps of Cartesian scans from their autocalibration (ACS) region, as BART's ``ecalib`` takes them.

The calibration region is the largest centred box of integer frequencies, at most ``calibration`` per axis
(24 in 2-D, 16 in 3-D, as :func:`mri_recon.prep.coilmaps.coil_maps_from_kspace`), in which every frequency
was sampled; its values are the samples themselves (repeated samples averaged), in the layout of
:func:`mri_recon.prep.lowres.calibration_region` (index ``i`` at ``kappa = i - size // 2``), so ESPIRiT
(:func:`mri_recon.prep.espirit.espirit`) runs on it unchanged. Walsh maps are computed from the coil images
of the same region (zero-filled to the matrix), NLINV's (:mod:`.nlinv`) from the region's samples alone, on the
matrix.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..arrays.backend import Device, get_xp, resolve_device, to_device
from ..checks.validation import validate_matrix
from ..errors import InvalidDataError, listed
from ..operators.engines.cartesian import scatter_sum
from .espirit import espirit
from .maps_methods import estimated, is_estimated
from .nlinv import nlinv
from .walsh import walsh


def _centred_grid(kspace: Any, trajectory: Any, sizes: tuple[int, ...]) -> tuple[Any, Any]:
    """The samples within the box ``sizes`` summed onto it ``(C, *sizes)`` and the count per frequency."""
    xp = get_xp(kspace)
    k = xp.rint(xp.asarray(trajectory, dtype=xp.float64)).astype(xp.int64)
    flat = xp.zeros(k.shape[0], dtype=xp.int64)
    inside = xp.ones(k.shape[0], dtype=bool)
    for axis, s in enumerate(sizes):
        index = k[:, axis] + s // 2
        inside &= (index >= 0) & (index < s)
        flat = flat * s + xp.clip(index, 0, s - 1)
    flat, values = flat[inside], kspace[:, inside].astype(np.complex64)
    size = math.prod(sizes)
    count = xp.bincount(flat, minlength=size)
    grid = scatter_sum(flat, values, size)
    return grid.reshape(kspace.shape[0], *sizes), count.reshape(sizes)


def acs_region(kspace: Any, trajectory: Any, matrix: Sequence[int], calibration: int | None = None,
               least: int = 7) -> Any:
    """The fully sampled centred calibration region ``(C, *size)`` of Cartesian samples (see the module doc).

    Parameters
    ----------
    kspace, trajectory
        complex ``(C, M)`` and integer-valued ``(M, D)`` frequencies (cycles per FOV), NumPy or CuPy.
    matrix
        Image size.
    calibration
        Largest width per axis (default 24 in 2-D, 16 in 3-D, at most the matrix).
    least
        Smallest width accepted per axis (ESPIRiT's kernel plus one).

    Raises
    ------
    InvalidDataError
        No fully sampled centred box of ``least`` frequencies per axis.
    """
    xp = get_xp(kspace)
    caps = tuple(min(calibration or (24 if len(matrix) == 2 else 16), int(n)) for n in matrix)
    grid, count = _centred_grid(kspace, trajectory, caps)
    sampled = np.asarray(count.get() if xp is not np else count) > 0
    sizes = _largest_box(sampled, least)
    if sizes is None:
        raise InvalidDataError(f"no fully sampled calibration (ACS) region of at least {least} frequencies per "
                               f"axis at the k-space centre; acquire autocalibration lines, or pass coil maps")
    box = tuple(slice(c // 2 - s // 2, c // 2 - s // 2 + s) for c, s in zip(caps, sizes))
    region = grid[(slice(None), *box)] / xp.maximum(count[box], 1).astype(np.float32)
    return xp.ascontiguousarray(region.astype(np.complex64))


def _largest_box(sampled: np.ndarray, least: int) -> tuple[int, ...] | None:
    """The centred box (widths per axis, at least ``least``) of the most frequencies with every one sampled,
    in ``sampled`` (bool, index ``i`` at ``kappa = i - n // 2``); None when there is none."""
    caps = sampled.shape
    best, best_key = None, (0, 0)
    for sizes in itertools.product(*[range(n, least - 1, -1) for n in caps]):
        key = (math.prod(sizes), min(sizes))
        if key <= best_key:
            continue
        box = tuple(slice(c // 2 - s // 2, c // 2 - s // 2 + s) for c, s in zip(caps, sizes))
        if sampled[box].all():
            best, best_key = sizes, key
    return best


def _coil_images(calib: Any, matrix: Sequence[int]) -> Any:
    """Coil images ``(C, *matrix)`` of the calibration region zero-filled to the matrix (the project's F^H)."""
    xp = get_xp(calib)
    sizes = calib.shape[1:]
    grid = xp.zeros((calib.shape[0], *matrix), dtype=np.complex64)
    index = tuple(xp.asarray((np.arange(s) - s // 2) % n) for s, n in zip(sizes, matrix))
    grid[(slice(None), *xp.ix_(*index))] = calib
    axes = tuple(range(1, len(matrix) + 1))
    image = xp.fft.ifftn(grid, axes=axes, norm="forward")
    return xp.fft.fftshift(image, axes=axes).astype(np.complex64)


def cartesian_coil_maps(kspace: Any, trajectory: Any, matrix: Sequence[int], method: str = "espirit", *,
                        device: str | int | Device | None = "auto", calibration: int | None = None,
                        kernel: int | None = None, threshold: float = 0.02, crop: float = 0.95,
                        solver: str = "power", weights: Any = None) -> Any:
    """Coil maps ``(C, *matrix)`` of a Cartesian scan from its ACS region (ESPIRiT or Walsh), on ``device``.

    ``weights`` is accepted for the signature of :func:`mri_recon.prep.coilmaps.coil_maps_from_kspace` and not
    used: the region holds the samples themselves. Other parameters as there.
    """
    matrix = validate_matrix(matrix, "coil maps")
    if not is_estimated(method):
        raise InvalidDataError(f"unknown coil map method {method!r}: expected {listed(estimated(), quote=True)}")
    kernel = kernel or (6 if len(matrix) == 2 else 5)
    if not (isinstance(device, str) and device == "auto"):  # "auto": where the k-space is
        dev = resolve_device(device)
        kspace, trajectory = to_device(kspace, dev), to_device(trajectory, dev)
    calib = acs_region(kspace, trajectory, matrix, calibration, least=kernel + 1)
    return FROM_ACS[method](calib, matrix, kernel=kernel, threshold=threshold, crop=crop, solver=solver)


def _walsh_maps(calib: Any, matrix: tuple[int, ...], *, solver: str, **unused: Any) -> Any:
    """Walsh's maps from the coil images of the region, zero-filled to the matrix."""
    return walsh(_coil_images(calib, matrix), solver=solver)


def _nlinv_maps(calib: Any, matrix: tuple[int, ...], **unused: Any) -> Any:
    """NLINV's maps (:func:`mri_recon.prep.nlinv.nlinv`) on the matrix from the region's samples alone."""
    xp = get_xp(calib)
    sizes = calib.shape[1:]
    frequencies = np.stack(np.meshgrid(*[np.arange(s) - s // 2 for s in sizes], indexing="ij"), axis=-1)
    trajectory = xp.asarray(frequencies.reshape(-1, len(sizes)).astype(np.float32))
    kspace = xp.ascontiguousarray(calib.reshape(calib.shape[0], -1))
    return nlinv(kspace, trajectory, matrix, device="cpu" if xp is np else "auto").maps


FROM_ACS = {"walsh": _walsh_maps, "espirit": espirit, "nlinv": _nlinv_maps}
"""The estimator of each estimated method of :data:`.maps_methods.COIL_MAPS`, from the calibration region."""

