"""The :class:`Scan` data object of schema v1 and its validation (files are read and written by :mod:`mri_recon.io`).

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

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .checks.validation import _fail, check_array, check_trajectory_units, check_weights, validate_matrix

SCHEMA_VERSION = 1
OPTIONAL = ("weights", "coil_maps", "field_map", "times", "noise", "ground_truth")


class ScanSizes:
    """The sizes every scan (:class:`Scan`, and the prepared scan on a device) reads from its matrix and
    k-space ``(coils, samples)``."""

    matrix: tuple[int, ...]
    kspace: Any

    @property
    def ndim(self) -> int:
        return len(self.matrix)

    @property
    def n_coils(self) -> int:
        return int(self.kspace.shape[0])

    @property
    def n_samples(self) -> int:
        return int(self.kspace.shape[1])


@dataclass(frozen=True, eq=False)
class Scan(ScanSizes):
    """A non-Cartesian scan in memory (schema v1), validated and cast on construction.

    Two scans are equal when they hold the same data: the same matrix, every array field absent in both or of
    the same dtype, shape and values, and equal ``attrs``; ``source`` (where a scan was read) does not count.
    Scans are not hashable: frozen only stops fields being rebound, the arrays stay mutable, and a hash of
    their values could change under a dict or set that holds the scan.
    """

    kspace: np.ndarray
    """complex64 ``(C, M)``: C coils, M samples (a 1-D input becomes ``(1, M)``)."""
    trajectory: np.ndarray
    """float32 ``(M, D)``: sample positions in cycles per field of view; axis d is Nyquist-sampled on
    ``[-matrix[d]/2, matrix[d]/2)``."""
    matrix: tuple[int, ...]
    """Image size ``(Nx, Ny)`` or ``(Nx, Ny, Nz)``; voxel j of an axis of size N is at ``(j - N // 2) / N``."""
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

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Scan):
            return NotImplemented
        return self.matrix == other.matrix and all(same_value(getattr(self, name), getattr(other, name))
                                                   for name in ARRAYS) and same_value(self.attrs, other.attrs)

    __hash__ = None  # type: ignore[assignment] - equal by content, whose arrays are mutable (see the class)

    def __repr__(self) -> str:
        """Shapes, dtypes and the source; never the arrays."""
        parts = [f"matrix={list(self.matrix)}", f"coils={self.n_coils}", f"samples={self.n_samples}",
                 f"kspace={self.kspace.dtype}{list(self.kspace.shape)}"]
        for name in OPTIONAL:
            value = getattr(self, name)
            if value is not None:
                parts.append(f"{name}={value.dtype}{list(value.shape)}")
        return f"Scan({', '.join(parts)}, source={self.source!r})"

    def replace(self, **changes: Any) -> Scan:
        """A copy with some fields changed, validated again: the changed fields' values, and how every field
        fits the others. The unchanged arrays' own values were checked when this scan was made and are shared,
        not copied (a scan's arrays are not meant to be changed in place); a new matrix checks every array."""
        unknown = sorted(set(changes) - set(self.__dataclass_fields__))
        if unknown:
            raise TypeError(f"Scan.replace got unknown field(s) {', '.join(unknown)}")
        values = {name: getattr(self, name) for name in self.__dataclass_fields__}
        values.update(changes)
        same_matrix = "matrix" not in changes or validate_matrix(changes["matrix"], self.source) == self.matrix
        checked = frozenset(name for name in ARRAYS if name not in changes and same_matrix)
        new = object.__new__(Scan)
        for name, value in values.items():
            object.__setattr__(new, name, value)
        for name, value in validate(new, checked).items():
            object.__setattr__(new, name, value)
        return new


ARRAYS = ("kspace", "trajectory", "weights", "times", "coil_maps", "field_map", "noise", "ground_truth")
"""The array fields of a :class:`Scan`."""


def same_value(a: Any, b: Any) -> bool:
    """Equality that holds arrays to dtype, shape and values (NaN equal to NaN), recursing into mappings,
    lists and tuples; everything else by ``==``."""
    if a is b:
        return True
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        if not (isinstance(a, np.ndarray) and isinstance(b, np.ndarray)):
            return False
        nan = a.dtype.kind in "fc" and b.dtype.kind in "fc"
        return a.dtype == b.dtype and a.shape == b.shape and bool(np.array_equal(a, b, equal_nan=nan))
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(same_value(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(same_value(x, y) for x, y in zip(a, b))
    return bool(a == b)


def validate(scan: Scan, checked: frozenset[str] = frozenset()) -> dict[str, Any]:
    """Validated, cast values of every field of ``scan`` (used by ``Scan.__post_init__``); the arrays named in
    ``checked`` already passed :func:`check_array` (and the trajectory its units check) for this matrix, so
    only their shapes are checked against the others (``Scan.replace``)."""
    src = scan.source

    def array(name: str, value: Any, complex_: bool, ranks: tuple[int, ...]) -> np.ndarray:
        return value if name in checked else check_array(src, name, value, complex_=complex_, ranks=ranks)

    matrix = validate_matrix(scan.matrix, src)
    kspace = array("kspace", scan.kspace, True, (1, 2))
    if kspace.ndim == 1:
        kspace = kspace[None, :]
    n_coils, m = kspace.shape
    trajectory = array("trajectory", scan.trajectory, False, (2,))
    if trajectory.shape[0] != m:
        _fail(src, f"trajectory has {trajectory.shape[0]} samples but kspace has {m}")
    if trajectory.shape[1] != len(matrix):
        _fail(src, f"trajectory has D = {trajectory.shape[1]} columns but matrix {list(matrix)} "
                   f"needs D = {len(matrix)}")
    if "trajectory" not in checked:
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
        checked_value = array(name, value, complex_, ranks)
        if shape is not None and checked_value.shape != tuple(shape):
            what = "samples" if name in ("weights", "times") else "shape"
            if what == "samples":
                _fail(src, f"{name} has {checked_value.shape[0]} samples but kspace has {m}")
            _fail(src, f"{name} must have shape {tuple(shape)}, found {checked_value.shape}")
        out[name] = checked_value
    if out["weights"] is not None and "weights" not in checked:
        check_weights(out["weights"], src)
    if out["noise"] is not None and out["noise"].shape[0] != n_coils:
        _fail(src, f"noise has {out['noise'].shape[0]} coils but kspace has {n_coils}")
    out["attrs"] = dict(scan.attrs)
    return out
