"""Scan file schema v1 (HDF5): the :class:`Scan` data object, its validation, loading and saving.

Schema v1 (documented in ``docs/schema.md``):

- root attribute ``matrix``: integers ``[Nx, Ny]`` or ``[Nx, Ny, Nz]``; the image has this shape.
- ``kspace``: complex64 ``(C, M)`` (``(M,)`` is one coil).
- ``trajectory``: float32 ``(M, D)``, D = len(matrix), in cycles per field of view.
- optional ``weights`` float32 ``(M,)``, ``coil_maps`` complex64 ``(C, *matrix)``, ``field_map`` float32
  ``matrix`` (Hz), ``times`` float32 ``(M,)`` (s), ``noise`` complex64 ``(C, K)``, ``ground_truth``
  complex64 ``matrix`` (simulated scans only).

float64 / complex128 inputs are accepted and cast; everything else is validated with an error that names
the file, the dataset, what was expected and what was found.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from .errors import InvalidDataError, ScanFileError, SchemaError, TrajectoryUnitsError
from .fileio import atomic_output

SCHEMA_VERSION = 1
MAX_AXIS = 16384  # larger matrices are taken as a mistake, not a request
MAX_VOXELS = 2**31 - 1
OPTIONAL = ("weights", "coil_maps", "field_map", "times", "noise", "ground_truth")


@dataclass(frozen=True)
class Scan:
    """A non-Cartesian scan in memory (schema v1), validated and cast on construction."""

    kspace: np.ndarray
    """complex64 ``(C, M)``: C coils, M samples (a 1-D input becomes ``(1, M)``)."""
    trajectory: np.ndarray
    """float32 ``(M, D)``: sample positions in cycles per field of view; axis d is Nyquist-sampled on
    ``[-matrix[d]/2, matrix[d]/2)``."""
    matrix: tuple[int, ...]
    """Image size ``(Nx, Ny)`` or ``(Nx, Ny, Nz)``; voxel j of an axis of size N is at ``(j - N/2) / N``."""
    weights: np.ndarray | None = None
    """float32 ``(M,)``: density-compensation weights, >= 0."""
    coil_maps: np.ndarray | None = None
    """complex64 ``(C, *matrix)``: coil sensitivities."""
    field_map: np.ndarray | None = None
    """float32 ``matrix``: off-resonance in Hz."""
    times: np.ndarray | None = None
    """float32 ``(M,)``: acquisition time of each sample in s."""
    noise: np.ndarray | None = None
    """complex64 ``(C, K)``: noise-only samples."""
    ground_truth: np.ndarray | None = None
    """complex64 ``matrix``: the true image of a simulated scan."""
    attrs: Mapping[str, Any] = field(default_factory=dict)
    """Free-form metadata (root attributes other than ``matrix``)."""
    source: str = "<memory>"
    """Where the scan came from, used in error messages."""

    def __post_init__(self) -> None:
        for name, value in validate(self).items():
            object.__setattr__(self, name, value)

    @property
    def ndim(self) -> int:
        return len(self.matrix)

    @property
    def n_coils(self) -> int:
        return int(self.kspace.shape[0])

    @property
    def n_samples(self) -> int:
        return int(self.kspace.shape[1])

    def replace(self, **changes: Any) -> Scan:
        """A copy with some fields changed (validated again)."""
        values = {name: getattr(self, name) for name in self.__dataclass_fields__}
        values.update(changes)
        return Scan(**values)


def _fail(source: str, message: str, kind: type = SchemaError):
    raise kind(f"{source}: {message}")


def _array(source: str, name: str, value: Any, *, complex_: bool, ranks: tuple[int, ...]) -> np.ndarray:
    """Check dtype kind, rank, emptiness and finiteness; cast to complex64 / float32."""
    array = np.asarray(value)
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
    if not np.all(np.isfinite(array)):
        bad = int(np.size(array) - np.count_nonzero(np.isfinite(array)))
        _fail(source, f"dataset '{name}' contains {bad} NaN or Inf value(s)", InvalidDataError)
    if array.dtype != target:
        array = array.astype(target)
    return np.ascontiguousarray(array)


def validate_matrix(matrix: Any, source: str = "<memory>") -> tuple[int, ...]:
    """Check the image size: 2 or 3 positive integers, none absurd."""
    values = np.asarray(matrix)
    if values.dtype.kind not in "iu" and not (
        values.dtype.kind == "f" and values.size and np.all(np.mod(values, 1) == 0)
    ):
        _fail(source, f"attribute 'matrix' must hold integers, found {values.dtype} {values.tolist()}")
    values = values.reshape(-1).astype(np.int64) if values.ndim <= 1 else values
    if values.ndim != 1 or values.size not in (2, 3):
        _fail(source, f"attribute 'matrix' must be [Nx, Ny] or [Nx, Ny, Nz], found {np.asarray(matrix).tolist()}")
    if np.any(values < 1):
        _fail(source, f"attribute 'matrix' must be positive, found {values.tolist()}", InvalidDataError)
    if np.any(values > MAX_AXIS) or int(np.prod(values)) > MAX_VOXELS:
        _fail(source, f"attribute 'matrix' {values.tolist()} is absurd (at most {MAX_AXIS} per axis)",
              InvalidDataError)
    return tuple(int(v) for v in values)


def check_trajectory_units(trajectory: np.ndarray, matrix: tuple[int, ...], source: str = "<memory>") -> None:
    """Reject trajectories beyond 2x Nyquist or that look normalized, naming the expected units."""
    extent = np.max(np.abs(trajectory), axis=0)
    for axis, (reach, n) in enumerate(zip(extent, matrix)):
        if reach > n:
            raise TrajectoryUnitsError(
                f"{source}: trajectory reaches |k| = {reach:.4g} on axis {axis} but a matrix of {n} allows at "
                f"most {n} (2x Nyquist). Expected units: cycles per field of view (Nyquist extent "
                f"[-{n / 2:g}, {n / 2:g})); did you scale your trajectory correctly?"
            )
    if max(matrix) >= 8 and float(np.max(extent)) <= 0.5:
        raise TrajectoryUnitsError(
            f"{source}: trajectory extent {float(np.max(extent)):.4g} looks normalized to [-0.5, 0.5]; "
            f"schema v1 expects cycles per field of view (multiply axis d by matrix[d])"
        )


def validate(scan: Scan) -> dict[str, Any]:
    """Validated, cast values of every field of ``scan`` (used by ``Scan.__post_init__``)."""
    src = scan.source
    matrix = validate_matrix(scan.matrix, src)
    kspace = _array(src, "kspace", scan.kspace, complex_=True, ranks=(1, 2))
    if kspace.ndim == 1:
        kspace = kspace[None, :]
    n_coils, m = kspace.shape
    trajectory = _array(src, "trajectory", scan.trajectory, complex_=False, ranks=(2,))
    if trajectory.shape[0] != m:
        _fail(src, f"trajectory has {trajectory.shape[0]} samples but kspace has {m}")
    if trajectory.shape[1] != len(matrix):
        _fail(src, f"trajectory has D = {trajectory.shape[1]} columns but matrix {list(matrix)} "
                   f"needs D = {len(matrix)}")
    check_trajectory_units(trajectory, matrix, src)
    out: dict[str, Any] = {"matrix": matrix, "kspace": kspace, "trajectory": trajectory}
    specs = {
        "weights": (False, (1,), (m,)),
        "times": (False, (1,), (m,)),
        "coil_maps": (True, (len(matrix) + 1,), (n_coils, *matrix)),
        "field_map": (False, (len(matrix),), matrix),
        "noise": (True, (2,), None),
        "ground_truth": (True, (len(matrix),), matrix),
    }
    for name, (complex_, ranks, shape) in specs.items():
        value = getattr(scan, name)
        if value is None:
            out[name] = None
            continue
        if name == "noise" and np.ndim(value) == 1 and n_coils == 1:
            value = np.asarray(value)[None, :]
        array = _array(src, name, value, complex_=complex_, ranks=ranks)
        if shape is not None and array.shape != tuple(shape):
            what = "samples" if name in ("weights", "times") else "shape"
            if what == "samples":
                _fail(src, f"{name} has {array.shape[0]} samples but kspace has {m}")
            _fail(src, f"{name} must have shape {tuple(shape)}, found {array.shape}")
        out[name] = array
    if out["weights"] is not None and np.any(out["weights"] < 0):
        _fail(src, "weights must be non-negative", InvalidDataError)
    if out["noise"] is not None and out["noise"].shape[0] != n_coils:
        _fail(src, f"noise has {out['noise'].shape[0]} coils but kspace has {n_coils}")
    out["attrs"] = dict(scan.attrs)
    return out


def _open(path: str | os.PathLike) -> h5py.File:
    p = Path(path)
    if not p.exists():
        raise ScanFileError(f"{p}: no such file")
    if p.is_dir():
        raise ScanFileError(f"{p}: is a directory, expected an HDF5 scan file")
    try:
        if not h5py.is_hdf5(p):
            raise ScanFileError(f"{p}: not an HDF5 file")
        return h5py.File(p, "r")
    except ScanFileError:
        raise
    except OSError as exc:
        raise ScanFileError(f"{p}: cannot be read as HDF5 ({exc})") from exc


def is_ismrmrd(f: h5py.File) -> bool:
    """True for an ISMRMRD (MRD) file: a group holding ``data`` and ``xml`` datasets."""
    return any(isinstance(g, h5py.Group) and "data" in g and "xml" in g for g in f.values())


def load_scan(path: str | os.PathLike, **ismrmrd_options: Any) -> Scan:
    """Read a schema-v1 scan (or an ISMRMRD file, detected automatically) and validate it."""
    src = str(path)
    with _open(path) as f:
        if is_ismrmrd(f):
            from .ismrmrd_io import load_ismrmrd  # noqa: PLC0415 - optional dependency

            f.close()
            return load_ismrmrd(path, **ismrmrd_options)
        if "matrix" not in f.attrs:
            missing = [n for n in ("kspace", "trajectory") if n not in f]
            raise SchemaError(
                f"{src}: missing root attribute 'matrix'"
                + (f" and dataset(s) {', '.join(repr(n) for n in missing)}" if missing else "")
                + " (schema v1 needs kspace, trajectory and the root attribute matrix)"
            )
        for name in ("kspace", "trajectory"):
            if name not in f:
                raise SchemaError(f"{src}: missing dataset '{name}' (schema v1 needs kspace, trajectory "
                                  f"and the root attribute matrix)")
            if not isinstance(f[name], h5py.Dataset):
                raise SchemaError(f"{src}: '{name}' must be a dataset, found a group")
        values = {name: f[name][()] for name in ("kspace", "trajectory")}
        for name in OPTIONAL:
            if name in f:
                if not isinstance(f[name], h5py.Dataset):
                    raise SchemaError(f"{src}: '{name}' must be a dataset, found a group")
                values[name] = f[name][()]
        attrs = {k: _plain(v) for k, v in f.attrs.items() if k != "matrix"}
        matrix = f.attrs["matrix"]
    return Scan(matrix=matrix, attrs=attrs, source=src, **values)


def _plain(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    return value


def save_scan(path: str | os.PathLike, scan: Scan) -> None:
    """Write ``scan`` as schema v1, atomically (temporary file, then rename)."""
    with atomic_output(path) as tmp, h5py.File(tmp, "w") as f:
        f.attrs["matrix"] = np.asarray(scan.matrix, dtype=np.int64)
        f.attrs["schema_version"] = SCHEMA_VERSION
        for key, value in scan.attrs.items():
            if key not in ("matrix", "schema_version") and value is not None:
                f.attrs[key] = value
        f.create_dataset("kspace", data=scan.kspace)
        f.create_dataset("trajectory", data=scan.trajectory)
        for name in OPTIONAL:
            value = getattr(scan, name)
            if value is not None:
                f.create_dataset(name, data=value)
