"""Validation of arrays, matrices and trajectories: the one place for the schema's rules.

Every boundary of the library (a :class:`~mri_recon.scan.Scan`, the public operator functions, the filters)
checks its inputs here, once; internal calls on arrays already validated and on the device do not check again.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..arrays.backend import get_xp, is_gpu_array
from ..errors import InvalidDataError, SchemaError, TrajectoryUnitsError
from .units import suspect_units, wrong_units_error

MAX_AXIS = 16384  # larger matrices are taken as a mistake, not a request
MAX_VOXELS = 2**31 - 1


def _fail(source: str, message: str, kind: type = SchemaError):
    raise kind(f"{source}: {message}")


def all_finite(array: np.ndarray) -> bool:
    """Whether every element of a NumPy array is finite; a contiguous complex array is tested as its real
    and imaginary parts in one pass (half the time of ``np.isfinite`` on the complex values)."""
    if array.dtype.kind == "c" and array.flags.c_contiguous:
        array = array.reshape(-1).view(array.real.dtype)
    return bool(np.isfinite(array).all())


def check_array(source: str, name: str, value: Any, *, complex_: bool, ranks: tuple[int, ...]) -> np.ndarray:
    """Check dtype kind, rank, emptiness and finiteness; cast to complex64 / float32."""
    try:
        array = np.asarray(value)
    except ValueError:  # nested sequences of different lengths
        _fail(source, f"dataset '{name}' is not an array: its rows have different lengths")
    kind = array.dtype.kind
    if complex_:
        if kind != "c":
            _fail(source, f"dataset '{name}' must be complex64 (or complex128), found {array.dtype}")
        target = np.complex64
    else:
        if kind != "f":
            _fail(source, f"dataset '{name}' must be float32 (or float64), found {array.dtype}")
        target = np.float32
    if array.ndim not in ranks:
        want = " or ".join(str(r) for r in ranks)
        _fail(source, f"dataset '{name}' must have rank {want}, found shape {array.shape}")
    if array.size == 0:
        _fail(source, f"dataset '{name}' is empty (shape {array.shape})", InvalidDataError)
    if not all_finite(array):
        bad = int(np.size(array) - np.count_nonzero(np.isfinite(array)))
        _fail(source, f"dataset '{name}' contains {bad} NaN or Inf value(s)", InvalidDataError)
    if array.dtype != target:
        with np.errstate(over="ignore"):
            array = array.astype(target)
        if not all_finite(array):
            bad = int(np.size(array) - np.count_nonzero(np.isfinite(array)))
            _fail(source, f"dataset '{name}' has {bad} value(s) beyond the float32 range (|x| > 3.4e38); "
                          f"scale the data down", InvalidDataError)
    return np.ascontiguousarray(array)


def positive_int(name: str, value) -> int:
    """``value`` as an int, or :class:`InvalidDataError` naming ``name`` when it is not a positive integer."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise InvalidDataError(f"{name} must be a positive integer, found {value!r}")
    return int(value)


def validate_matrix(matrix: Any, source: str = "<memory>") -> tuple[int, ...]:
    """Check the image size: 2 or 3 positive integers, none absurd.

    Values are compared as exact Python integers, so an unsigned 2**64 - 1 is reported as written, never
    wrapped to -1.
    """
    values = np.asarray(matrix)
    written = values.tolist()
    if values.dtype.kind not in "iu" and not (
        values.dtype.kind == "f" and values.size and np.all(np.isfinite(values)) and np.all(np.mod(values, 1) == 0)
    ):
        _fail(source, f"attribute 'matrix' must hold integers, found {values.dtype} {written}")
    if values.ndim > 1 or values.size not in (2, 3):
        _fail(source, f"attribute 'matrix' must be [Nx, Ny] or [Nx, Ny, Nz], found {written}")
    numbers = [int(v) for v in values.reshape(-1).tolist()]
    if any(n < 1 for n in numbers):
        _fail(source, f"attribute 'matrix' must be positive, found {numbers}", InvalidDataError)
    if any(n > MAX_AXIS for n in numbers) or np.prod(numbers, dtype=object) > MAX_VOXELS:
        _fail(source, f"attribute 'matrix' {numbers} is absurd (at most {MAX_AXIS} per axis)",
              InvalidDataError)
    return tuple(numbers)


def check_weights(weights: np.ndarray, source: str = "<memory>", what: str = "weights") -> None:
    """Density weights must be non-negative and not all zero (an all-zero W gives a zero image).

    Raises
    ------
    InvalidDataError
        A negative weight, or no positive one.
    """
    if np.any(weights < 0):
        _fail(source, f"{what} must be non-negative, found {int(np.count_nonzero(weights < 0))} negative "
                      f"value(s) (minimum {float(np.min(weights)):.4g})", InvalidDataError)
    if not np.any(weights > 0):
        _fail(source, f"{what} are all zero: every sample would be ignored and the image would be zero; "
                      f"drop the weights (no density compensation) or compute them (--dcf ramp|pipe)",
              InvalidDataError)


def trajectory_extent(trajectory: Any) -> np.ndarray:
    """``max |k|`` of each axis of a ``(M, D)`` trajectory (NumPy or CuPy; D numbers come back to the host).

    Column by column: NumPy's reduction along axis 0 of a narrow C-order array walks it one row at a time,
    far slower than one reduction per column (docs/benchmarks.md)."""
    xp = get_xp(trajectory)
    return np.array([float(xp.max(xp.abs(trajectory[:, d]))) if trajectory.shape[0] else 0.0
                     for d in range(trajectory.shape[1])])


def samples_within(trajectory: np.ndarray, radius: float) -> np.ndarray:
    """Indices (ascending) of the samples of a host ``(M, D)`` trajectory with ``|k| < radius``: those inside the
    box ``|k_d| < radius`` first, found column by column without a float64 copy of the trajectory (a superset:
    ``k_d^2`` alone reaches ``radius^2`` outside it, and adding squares never rounds down), then their radii in
    float64."""
    mask = np.abs(trajectory[:, 0]) < radius
    for d in range(1, trajectory.shape[1]):
        mask &= np.abs(trajectory[:, d]) < radius
    near = np.flatnonzero(mask)
    return near[squared_radii(trajectory[near]) < radius ** 2]


def squared_radii(trajectory: np.ndarray) -> np.ndarray:
    """``|k|^2`` of each sample of a host ``(M, D)`` trajectory, in float64."""
    return np.einsum("md,md->m", trajectory, trajectory, dtype=np.float64)


def check_trajectory_units(trajectory: Any, matrix: tuple[int, ...], source: str = "<memory>") -> None:
    """Reject trajectories beyond 2x Nyquist or that look normalized, naming the expected units (NumPy or CuPy:
    only the per-axis extent leaves the device)."""
    extent = trajectory_extent(trajectory)
    for axis, (reach, n) in enumerate(zip(extent, matrix)):
        if reach > n:
            raise TrajectoryUnitsError(
                f"{source}: trajectory reaches |k| = {reach:.4g} on axis {axis} but a matrix of {n} allows at "
                f"most {n} (2x Nyquist). Expected units: cycles per field of view (Nyquist extent "
                f"[-{n / 2:g}, {n / 2:g})); did you scale your trajectory correctly? (in 1/m it reaches "
                f"matrix / (2 FOV): --traj-units per-meter, or multiply by the FOV in m)"
            )
    suspect = suspect_units(extent, matrix)
    if suspect == "radians":
        raise wrong_units_error(source, suspect, extent, matrix, option=False)
    if max(matrix) >= 8 and float(np.max(extent)) <= 0.5:
        raise TrajectoryUnitsError(
            f"{source}: trajectory extent {float(np.max(extent)):.4g} looks normalized to [-0.5, 0.5]; "
            f"mri-recon works in cycles per field of view: ISMRMRD and BART input take --traj-units normalized "
            f"(traj_units='normalized'); otherwise multiply axis d by matrix[d] "
            f"(mri_recon.checks.units.to_cycles_per_fov(k, 'normalized', matrix))"
        )


def nonfinite_error(source: str, name: str, value: Any) -> InvalidDataError | None:
    """The error for NaN or Inf values in ``value`` (NumPy or CuPy; their count comes back to the host), or
    None when every value is finite."""
    xp = get_xp(value)
    bad = int(value.size - int(xp.count_nonzero(xp.isfinite(value))))
    return InvalidDataError(f"{source}: dataset '{name}' contains {bad} NaN or Inf value(s)") if bad else None


def check_any_array(source: str, name: str, value: Any, *, complex_: bool, ranks: tuple[int, ...],
                    finite: bool = True) -> Any:
    """:func:`check_array` for NumPy or CuPy input.

    CuPy inputs get the same rules on their device, where only the finiteness count comes back to the host.
    Used at the boundary of the public operator functions; internal calls on validated device arrays skip it.
    ``finite=False`` leaves a CuPy input's finiteness to the caller, which checks it on the device alongside
    its own work (:func:`nonfinite_error` for the message).
    """
    if not is_gpu_array(value):
        return check_array(source, name, value, complex_=complex_, ranks=ranks)
    xp = get_xp(value)
    kind, target = ("c", np.complex64) if complex_ else ("f", np.float32)
    if value.dtype.kind != kind:
        want = "complex64 (or complex128)" if complex_ else "float32 (or float64)"
        raise SchemaError(f"{source}: dataset '{name}' must be {want}, found {value.dtype}")
    if value.ndim not in ranks:
        want = " or ".join(str(r) for r in ranks)
        raise SchemaError(f"{source}: dataset '{name}' must have rank {want}, found shape {value.shape}")
    if value.size == 0:
        raise InvalidDataError(f"{source}: dataset '{name}' is empty (shape {value.shape})")
    error = nonfinite_error(source, name, value) if finite else None
    if error is not None:
        raise error
    return xp.ascontiguousarray(value.astype(target, copy=False))


def check_trajectory(source: str, trajectory: Any, matrix: tuple[int, ...], n_samples: int | None = None) -> Any:
    """Checked float32 ``(M, D)`` trajectory matching ``matrix`` (and ``n_samples``), in the right units."""
    traj = check_any_array(source, "trajectory", trajectory, complex_=False, ranks=(2,))
    if n_samples is not None and traj.shape[0] != n_samples:
        raise SchemaError(f"{source}: trajectory has {traj.shape[0]} samples but kspace has {n_samples}")
    if traj.shape[1] != len(matrix):
        raise SchemaError(f"{source}: trajectory has D = {traj.shape[1]} columns but matrix {list(matrix)} "
                          f"needs D = {len(matrix)}")
    check_trajectory_units(traj, matrix, source)
    return traj


def check_field_map_pair(field_map: Any, times: Any, source: str = "<memory>") -> None:
    """A field map needs the sample times and the times need a field map: either alone cannot be used, and
    is refused rather than silently dropped (``--no-field-map`` drops both on purpose)."""
    if (field_map is None) == (times is None):
        return
    have, missing = ("field_map", "times") if times is None else ("times", "field_map")
    raise InvalidDataError(f"{source}: the scan has '{have}' but no '{missing}'; off-resonance correction needs "
                           f"both (field_map in Hz per voxel, times in s per sample); drop them on purpose with "
                           f"--no-field-map (Python: prepare_scan(..., field_map='ignore'))")
