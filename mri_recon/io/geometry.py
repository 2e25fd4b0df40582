"""Where an image lies in the scanner: voxel size, position and orientation, and the NIfTI affine.

Conventions
-----------
- Image axis d of a ``matrix`` is trajectory column d. For ISMRMRD input the trajectory's columns are the
  logical read, phase and slice axes, so image axis 0 runs along ``read_dir``, axis 1 along ``phase_dir``
  and axis 2 (3-D) along ``slice_dir``; a 2-D image is one voxel thick along ``slice_dir``.
- Voxel j of an axis of N voxels sits at ``(j - N // 2) / N`` of the field of view (``mri_recon.checks.grid``), so
  the field of view's centre, the ISMRMRD ``position``, is voxel ``N // 2`` (voxel 0 of a 2-D slice axis).
- Positions and directions are in the ISMRMRD patient frame, LPS (x to the patient's left, y posterior,
  z superior), in mm. NIfTI's world frame is RAS+: x and y are negated.

So the patient position of voxel ``(i, j, k)`` is::

    position + (i - N1 // 2) * v1 * read_dir + (j - N2 // 2) * v2 * phase_dir + (k - N3 // 2) * v3 * slice_dir

with ``v`` the voxel size, and :meth:`Geometry.affine_ras` is that map with x and y negated.

Scan attributes (``Scan.attrs``, also optional root attributes of a schema-v1 file)
---------------------------------------------------------------------------------------
``voxel_size_mm`` [3] (mm; else ``fov_mm`` / ``matrix`` when ``fov_mm`` is given), ``position_mm`` [3] (mm,
LPS), ``read_dir``, ``phase_dir``, ``slice_dir`` [3 each] (unit vectors, LPS). Position and directions come
together or not at all.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import SchemaError

DIRECTIONS = ("read_dir", "phase_dir", "slice_dir")
"""Attribute names of the direction cosines of image axes 0, 1 and 2."""
ORIENTATION = ("position_mm", *DIRECTIONS)
"""The attributes that place an image in the scanner (all or none)."""
LPS_TO_RAS = np.diag([-1.0, -1.0, 1.0])
"""ISMRMRD's patient frame (LPS) to NIfTI's world frame (RAS+)."""
UNPLACED = np.array([[0.0, 1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, -1.0]])
"""The LPS directions (column d: image axis d) of an image whose scan does not say where it lies: axis 0
posterior, axis 1 patient left, axis 2 inferior (right-handed). A viewer that shows an axial slice as
radiologists do (anterior up, the patient's right on the left: a DICOM viewer, a NIfTI viewer in RAS) then
shows it as the PNG preview and ``bart toimg`` do, axis 0 down the rows and axis 1 across the columns."""
ORTHONORMAL_TOL = 1e-3
"""How far direction cosines may be from unit length and mutual orthogonality."""


@dataclass(frozen=True)
class Geometry:
    """Voxel size, position and orientation of one image of ``matrix`` voxels.

    ``position_mm`` and the directions are ``None`` when the scan does not say where it lies (a simulated
    scan, a schema-v1 file without them). Unknown geometry has one convention for every output: the
    directions :data:`UNPLACED` (:meth:`directions`) and voxel ``N // 2`` at position 0. The MRD headers get
    those directions as they are; :meth:`affine_ras` converts them to RAS like any other, so axis 0 points
    the same way in world coordinates in the NIfTI and the MRD output.
    """

    matrix: tuple[int, int, int]
    """Image size, padded to 3 axes with 1 (a 2-D image is one voxel thick)."""
    voxel_size_mm: tuple[float, float, float]
    """Voxel size along image axes 0, 1, 2 in mm (1 mm where unknown)."""
    voxel_size_known: bool
    """Whether :attr:`voxel_size_mm` comes from the scan (``voxel_size_mm`` or ``fov_mm``)."""
    position_mm: tuple[float, float, float] | None = None
    """Patient position (LPS, mm) of the voxel ``N // 2`` of every axis: the field of view's centre."""
    read_dir: tuple[float, float, float] | None = None
    """Direction (LPS unit vector) of image axis 0."""
    phase_dir: tuple[float, float, float] | None = None
    """Direction (LPS unit vector) of image axis 1."""
    slice_dir: tuple[float, float, float] | None = None
    """Direction (LPS unit vector) of image axis 2 (the slice normal of a 2-D image)."""

    @property
    def oriented(self) -> bool:
        """True when position and directions are known."""
        return self.position_mm is not None

    def directions(self) -> np.ndarray:
        """3x3 LPS matrix whose column d is the direction of image axis d (:data:`UNPLACED` where unknown)."""
        if not self.oriented:
            return UNPLACED.copy()
        return np.column_stack([self.read_dir, self.phase_dir, self.slice_dir]).astype(np.float64)

    def affine_ras(self) -> np.ndarray:
        """4x4 map from voxel indices ``(i, j, k, 1)`` to RAS+ mm (NIfTI's sform/qform).

        Without orientation: the directions :data:`UNPLACED` (LPS), converted to RAS like scanner
        directions are, and voxel ``N // 2`` at the origin.
        """
        centre = np.array([n // 2 for n in self.matrix], dtype=np.float64)
        linear = LPS_TO_RAS @ (self.directions() * np.asarray(self.voxel_size_mm, dtype=np.float64))
        origin = LPS_TO_RAS @ np.asarray(self.position_mm if self.oriented else (0.0, 0.0, 0.0), dtype=np.float64)
        affine = np.eye(4)
        affine[:3, :3] = linear
        affine[:3, 3] = origin - linear @ centre
        return affine


def _vector(attrs: Mapping[str, Any], name: str, source: str, size: int = 3) -> np.ndarray:
    value = np.asarray(attrs[name], dtype=object)
    try:
        out = np.asarray(attrs[name], dtype=np.float64).reshape(-1)
    except (TypeError, ValueError):
        out = None
    if out is None or out.size != size or not np.all(np.isfinite(out)):
        raise SchemaError(f"{source}: attribute '{name}' is {value.tolist()!r}; expected {size} finite numbers")
    return out


def geometry_of(matrix: Sequence[int], attrs: Mapping[str, Any], source: str = "<memory>") -> Geometry:
    """The :class:`Geometry` described by a scan's attributes (see the module docstring).

    Parameters
    ----------
    matrix
        The image size (2 or 3 axes).
    attrs
        ``Scan.attrs``: ``voxel_size_mm`` or ``fov_mm``; ``position_mm``, ``read_dir``, ``phase_dir``,
        ``slice_dir`` (all four or none).
    source
        Named in error messages.

    Raises
    ------
    SchemaError
        A geometry attribute that is not 3 finite numbers (``fov_mm``: one per matrix axis, or 3), a
        non-positive voxel size, only some of the orientation attributes, or directions that are not
        orthonormal.
    """
    shape = tuple(int(n) for n in matrix) + (1,) * (3 - len(matrix))
    known = True
    if "voxel_size_mm" in attrs:
        voxel = _vector(attrs, "voxel_size_mm", source)
    elif "fov_mm" in attrs:
        fov_size = np.asarray(attrs["fov_mm"], dtype=object).size
        fov = _vector(attrs, "fov_mm", source, size=fov_size if fov_size in (len(matrix), 3) else 3)
        voxel = np.ones(3)
        voxel[: fov.size] = fov / np.asarray(shape[: fov.size], dtype=np.float64)
    else:
        known, voxel = False, np.ones(3)
    if np.any(voxel <= 0):
        raise SchemaError(f"{source}: voxel size {voxel.tolist()} mm; expected positive sizes")
    present = [name for name in ORIENTATION if name in attrs]
    if not present:
        return Geometry(shape, tuple(voxel.tolist()), known)
    if len(present) != len(ORIENTATION):
        missing = [name for name in ORIENTATION if name not in attrs]
        raise SchemaError(f"{source}: geometry attributes {present} without {missing}; expected all of "
                          f"{list(ORIENTATION)} or none")
    values = {name: _vector(attrs, name, source) for name in ORIENTATION}
    dirs = np.column_stack([values[name] for name in DIRECTIONS])
    error = float(np.max(np.abs(dirs.T @ dirs - np.eye(3))))
    if error > ORTHONORMAL_TOL:
        raise SchemaError(f"{source}: read_dir, phase_dir and slice_dir {dirs.T.round(4).tolist()} are not "
                          f"orthonormal (largest deviation of their dot products {error:.3g}); expected unit "
                          f"vectors at right angles")
    return Geometry(shape, tuple(voxel.tolist()), known,
                    **{name: tuple(float(v) for v in values[name]) for name in ORIENTATION})


def geometry_attrs(geometries: Sequence[Geometry]) -> dict[str, np.ndarray | str]:
    """HDF5 output attributes of one image or a stack (each value gains a leading stack axis for several).

    ``voxel_size_mm`` and ``affine_ras`` always; ``position_mm`` and the directions when every image is
    oriented; ``geometry``: ``"scanner"`` or ``"unknown"`` (:data:`UNPLACED` directions in ``affine_ras``).
    """
    stacked = len(geometries) > 1
    oriented = all(g.oriented for g in geometries)

    def value(get) -> np.ndarray:
        arrays = [np.asarray(get(g), dtype=np.float64) for g in geometries]
        return np.stack(arrays) if stacked else arrays[0]

    out: dict[str, np.ndarray | str] = {"geometry": "scanner" if oriented else "unknown"}
    if all(g.voxel_size_known for g in geometries):
        out["voxel_size_mm"] = value(lambda g: g.voxel_size_mm)
    if oriented:
        for name in ORIENTATION:
            out[name] = value(lambda g, name=name: getattr(g, name))
    out["affine_ras"] = value(lambda g: g.affine_ras())
    return out
