"""The XML header's encoding space of an ISMRMRD file, and the units of its trajectory.

Split from :mod:`mri_recon.io.ismrmrd` (see its docstring for the conventions): :func:`encoding_space`
reads the matrix and fields of view of one ``<encoding>``, :func:`detect_units` tells cycles per FOV from
normalized units, and :func:`scale_trajectory` brings the stored trajectory to cycles per image FOV.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..checks.units import TRAJ_UNITS, check_units, suspect_units, unit_factor, wrong_units_error
from ..checks.validation import trajectory_extent
from ..errors import InvalidDataError, SchemaError, TrajectoryUnitsError

__all__ = ["SPACES", "TRAJ_UNITS", "detect_units", "encoding_space", "one_line", "scale_trajectory"]

SPACES = ("recon", "encoded")
"""Which header space the image is reconstructed on."""
_PLAUSIBLE = (0.25, 2.0)
"""Fractions of the Nyquist extent a trajectory may reach to be taken as being in a given unit."""


def one_line(exc: Exception) -> str:
    """The parser's error on one line, saying what a missing matrixSize means."""
    text = " ".join(str(exc).split())
    if "matrixSize" in text:
        return f"the encoding has no matrixSize (encodedSpace and reconSpace need one) ({text})"
    return text


def encoding_space(src: str, header: Any, ref: int, space: str) -> dict[str, Any]:
    """Image matrix, encoded matrix and the per-axis factor from encoded-FOV cycles to image-FOV cycles."""
    if space not in SPACES:
        raise InvalidDataError(f"unknown space {space!r}: expected 'recon' or 'encoded'")
    count = len(header.encoding)
    if count == 0:
        raise SchemaError(f"{src}: the XML header has no <encoding> element; expected one describing the "
                          f"encoded and recon spaces (matrix and field of view)")
    if ref >= count:
        raise SchemaError(f"{src}: acquisitions use encoding space {ref} but the XML header describes only "
                          f"{count} encoding space(s) (numbered from 0)")
    enc = header.encoding[ref]
    spaces = {}
    for name in ("encodedSpace", "reconSpace"):
        described = getattr(enc, name)
        size, fov = described.matrixSize, described.fieldOfView_mm
        spaces[name] = (np.array([size.x, size.y, size.z], dtype=np.int64),
                        np.array([fov.x, fov.y, fov.z], dtype=np.float64))
    recon, recon_fov = spaces["reconSpace"]
    encoded, encoded_fov = spaces["encodedSpace"]
    ndim = 3 if recon[2] > 1 else 2
    for name, (size, fov) in spaces.items():
        if np.any(size[:ndim] < 2):
            raise SchemaError(f"{src}: XML header {name} matrixSize is {size.tolist()}; expected at least 2 "
                              f"along x and y (and z for 3-D): is the matrix missing?")
        if np.any(fov[:ndim] <= 0):
            raise SchemaError(f"{src}: XML header {name} fieldOfView_mm is {fov.tolist()}; expected "
                              f"positive sizes")
    image, image_fov = (recon, recon_fov) if space == "recon" else (encoded, encoded_fov)
    return {
        "ndim": ndim,
        "matrix": tuple(int(n) for n in image[:ndim]),
        "encoded": encoded[:ndim].astype(np.float64),
        "scale": image_fov[:ndim] / encoded_fov[:ndim],
        "fov_mm": image_fov[:ndim].tolist(),
        "voxel_size_mm": (image_fov / np.maximum(image, 1)).tolist(),  # a 2-D slice: its thickness along z
        "encoded_matrix": encoded[:ndim].tolist(),
        "encoded_fov_mm": encoded_fov[:ndim].tolist(),
        "trajectory_type": getattr(enc.trajectory, "value", str(enc.trajectory)),
    }


def detect_units(extent: np.ndarray, encoded: Sequence[float], source: str = "<memory>",
                 fov_mm: Sequence[float] | None = None) -> str:
    """``"cycles-per-fov"`` or ``"normalized"`` from the per-axis trajectory extent ``max |k_d|``.

    Cycles per FOV reach about ``encoded_d / 2``, normalized units about 0.5; each is accepted between
    :data:`_PLAUSIBLE` times that. Raises :class:`TrajectoryUnitsError` when both fit (tiny matrices) or
    neither does; when neither does but radians or 1/m (with the encoded ``fov_mm``) fit
    (:func:`mri_recon.checks.units.suspect_units`), the error names that unit and its ``traj_units``.
    """
    extent = np.asarray(extent, dtype=np.float64)
    nyquist = np.asarray(encoded, dtype=np.float64) / 2
    ratio = {"cycles-per-fov": float(np.max(extent / nyquist)), "normalized": float(np.max(extent / 0.5))}
    fits = [unit for unit, r in ratio.items() if _PLAUSIBLE[0] <= r <= _PLAUSIBLE[1]]
    found = f"found max |k| = {[round(float(e), 4) for e in extent]} for an encoded matrix " \
            f"{[int(n) for n in encoded]}"
    if len(fits) == 1:
        return fits[0]
    suspect = None if fits else suspect_units(extent, encoded, fov_mm)
    if suspect is not None:
        raise wrong_units_error(source, suspect, extent, encoded)
    if fits:
        raise TrajectoryUnitsError(f"{source}: trajectory units are ambiguous ({found}: fits both cycles per "
                                   f"FOV and normalized); pass traj_units='cycles-per-fov' or 'normalized'")
    raise TrajectoryUnitsError(
        f"{source}: trajectory extent fits no known unit ({found}); expected about matrix/2 (cycles per FOV) "
        f"or 0.5 (normalized), within {_PLAUSIBLE[0]}x to {_PLAUSIBLE[1]}x")


def scale_trajectory(src: str, traj: np.ndarray, geometry: dict[str, Any], traj_units: str) -> tuple:
    """Recon-FOV trajectory (M, D), the weights column (or None) and the units used."""
    check_units(traj_units)
    ndim, dims = geometry["ndim"], traj.shape[-1]
    if dims not in (ndim, ndim + 1):
        raise SchemaError(f"{src}: trajectory_dimensions is {dims} but a {ndim}-D recon matrix "
                          f"{list(geometry['matrix'])} needs {ndim} (or {ndim + 1} with a density weight)")
    k = traj[..., :ndim]
    weights = traj[..., ndim] if dims == ndim + 1 else None
    if weights is not None and not np.any(weights):
        # An all-zero trailing column holds no weights: kz = 0 of a 2-D encoding written as 3-D coordinates,
        # or a weight column left unset. Taking it as weights would give a zero image.
        weights = None
    elif weights is not None and np.any(weights < 0):
        raise SchemaError(
            f"{src}: trajectory column {ndim + 1} of {dims} has negative values (min {float(np.min(weights)):.4g}); "
            f"for a {ndim}-D encoding ISMRMRD stores density weights (>= 0) there, and a {ndim}-D encoding has no "
            f"k{'z' if ndim == 2 else 'w'}: expected {ndim} columns, or {ndim + 1} with non-negative weights")
    if traj_units == "auto":
        extent = trajectory_extent(k.reshape(-1, ndim))
        traj_units = detect_units(extent, geometry["encoded"], src, geometry["encoded_fov_mm"])
    factor = geometry["scale"] * unit_factor(traj_units, geometry["encoded"], geometry["encoded_fov_mm"], src)
    if np.any(factor != 1.0):  # scaled in double precision, rounded once
        k = (k.astype(np.float64) * factor).astype(np.float32)
    return k, weights, traj_units
