"""Trajectory units: their names, the conversion to cycles per field of view, and telling wrong units apart.

mri-recon (and BART, SigPy, FINUFFT's ``modeord=0`` callers) place samples in **cycles per field of view**:
an axis of N voxels is Nyquist-sampled on ``[-N/2, N/2)``. Other tools use

- ``normalized``: cycles per voxel, ``[-1/2, 1/2)`` (ISMRMRD writers, Gadgetron): times N;
- ``radians``: ``[-pi, pi)`` (torchkbnufft, PyNUFFT, MIRT's ``om``): times ``N / (2 pi)``;
- ``per-meter``: spatial frequency in 1/m, ``[-N / (2 FOV), N / (2 FOV))``: times the FOV in m.

:func:`to_cycles_per_fov` converts; :func:`suspect_units` names the unit a trajectory's extent fits when it
does not fit cycles per FOV, so that a reader refuses it with the fix instead of reconstructing a blurred
(radians) or aliased (1/m) image.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..errors import InvalidDataError, TrajectoryUnitsError

TRAJ_UNITS = ("auto", "cycles-per-fov", "normalized", "radians", "per-meter")
"""Values of ``traj_units`` / ``--traj-units``."""
TIGHT = (0.85, 1.001)
"""Fraction of a unit's Nyquist extent a trajectory must reach to be taken as being in that (wrong) unit."""
FIX = {"normalized": "multiply axis d by matrix[d]",
       "radians": "multiply axis d by matrix[d] / (2 pi)",
       "per-meter": "multiply by the field of view in m"}
"""How to bring each unit to cycles per FOV by hand."""


def check_units(traj_units: str) -> str:
    """``traj_units`` itself, or :class:`InvalidDataError` naming :data:`TRAJ_UNITS`."""
    if traj_units not in TRAJ_UNITS:
        raise InvalidDataError(f"unknown traj_units {traj_units!r}: expected one of {', '.join(TRAJ_UNITS)}")
    return traj_units


def unit_factor(traj_units: str, matrix: Sequence[float], fov_mm: Sequence[float] | None = None,
                source: str = "<memory>") -> np.ndarray:
    """Per-axis factor from ``traj_units`` to cycles per FOV (``"auto"`` and ``"cycles-per-fov"``: ones).

    Raises
    ------
    InvalidDataError
        An unknown unit, or ``"per-meter"`` without a field of view.
    """
    matrix = np.asarray(matrix, dtype=np.float64)
    units = check_units(traj_units)
    if units == "normalized":
        return matrix
    if units == "radians":
        return matrix / (2 * np.pi)
    if units == "per-meter":
        if fov_mm is None:
            raise InvalidDataError(f"{source}: traj_units 'per-meter' needs the field of view, which this file "
                                   f"does not give; {FIX['per-meter']} (BART: bart scale)")
        return np.asarray(fov_mm, dtype=np.float64)[: matrix.size] / 1000.0
    return np.ones_like(matrix)


def to_cycles_per_fov(k: np.ndarray, traj_units: str, matrix: Sequence[float],
                      fov_mm: Sequence[float] | None = None, source: str = "<memory>") -> np.ndarray:
    """float32 ``(M, D)`` trajectory ``k`` in cycles per FOV (scaled in float64, rounded once)."""
    factor = unit_factor(traj_units, matrix, fov_mm, source)
    if np.all(factor == 1.0):
        return np.asarray(k, dtype=np.float32)
    return (np.asarray(k, dtype=np.float64) * factor).astype(np.float32)


def suspect_units(extent: Sequence[float], matrix: Sequence[float],
                  fov_mm: Sequence[float] | None = None) -> str | None:
    """The unit other than cycles per FOV whose full extent the trajectory reaches (within :data:`TIGHT`),
    while it reaches under a quarter of (or beyond twice) the Nyquist extent in cycles per FOV; else None.

    ``"radians"`` (max |k| close to pi) and ``"per-meter"`` (close to N / (2 FOV), needs ``fov_mm``) are
    told apart this way for matrices from 26 voxels on; ``"normalized"`` (close to 1/2) from 8 on.
    """
    extent = np.asarray(extent, dtype=np.float64)
    half = np.asarray(matrix, dtype=np.float64)[: extent.size] / 2
    cycles = float(np.max(extent / half))
    if 0.25 <= cycles <= 2.0:
        return None
    reach = {"normalized": float(np.max(extent)) / 0.5, "radians": float(np.max(extent)) / np.pi}
    if fov_mm is not None:
        fov_m = np.asarray(fov_mm, dtype=np.float64)[: extent.size] / 1000.0
        reach["per-meter"] = float(np.max(extent * fov_m / half))
    fits = [unit for unit, r in reach.items() if TIGHT[0] <= r <= TIGHT[1]]
    return fits[0] if len(fits) == 1 else None


def wrong_units_error(source: str, unit: str, extent: Sequence[float], matrix: Sequence[float], *,
                      option: bool = True) -> TrajectoryUnitsError:
    """The error for a trajectory that looks like it is in ``unit``: what was found and both fixes (``option``
    False: input whose units are fixed, a schema-v1 file or a ``Scan``, where only the conversion applies)."""
    found = [round(float(e), 4) for e in extent]
    fix = (f"pass --traj-units {unit} (Python traj_units={unit!r}), or {FIX[unit]}" if option else
           f"a schema-v1 file or Scan holds cycles per FOV by definition (--traj-units {unit} is for ISMRMRD and "
           f"BART input): {FIX[unit]}")
    return TrajectoryUnitsError(
        f"{source}: trajectory looks like it is in {unit} (max |k| per axis {found} for a matrix "
        f"{[int(n) for n in matrix]}), not cycles per field of view (Nyquist extent matrix/2); {fix}")
