"""NIfTI output of a stack of 2-D slices: one volume where the slices are parallel and evenly spaced, else one
file per slice.

An MRD file of several 2-D slices (a multi-slice acquisition) reconstructs to one image per slice, each with
its own position. When every slice has the same directions and voxel size, and their positions lie on one
line along the slice normal at a constant step (to :data:`POSITION_TOL_MM`, in any stack order), they are one
volume: the slices become image axis 3 (in order of position along the normal, the step the voxel size there,
the direction the slice normal) and one affine places every voxel. Otherwise no single affine can place them,
and each slice is written to its own file, ``NAME_slice<j>.nii[.gz]`` with its own affine. The other stack
axes (contrast, phase, set, repetition) stay on axis 4 in both cases. Each slice's geometry is taken from its
first image (contrast 0, ...).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from .files import write_files
from .geometry import Geometry
from .nifti import SUFFIXES, nifti_bytes, write_nifti
from .outputs import ImageStack, OutputFormat

log = logging.getLogger(__name__)

POSITION_TOL_MM = 1e-3
"""Largest deviation (mm) of a slice position from the evenly spaced line, and of its in-plane offset."""
DIRECTION_TOL = 1e-5
"""Largest difference between the direction cosines of two slices that count as parallel."""


def volume_geometry(slices: Sequence[Geometry]) -> tuple[Geometry, np.ndarray] | None:
    """The geometry of the volume that these 2-D slices form and the order of the slices along its axis 3
    (by position along the normal, whatever the stack order: interleaved acquisitions list slices out of
    order), or None when they do not form one: fewer than two, an unknown orientation, other directions or
    voxel sizes, in-plane offsets, or uneven spacing along the normal."""
    if len(slices) < 2 or not all(g.oriented and g.matrix[2] == 1 for g in slices):
        return None
    first = slices[0]
    dirs = first.directions()
    for g in slices[1:]:
        if np.max(np.abs(g.directions() - dirs)) > DIRECTION_TOL or not np.allclose(
                g.voxel_size_mm[:2], first.voxel_size_mm[:2], rtol=1e-6, atol=0):
            return None
    offsets = np.array([np.subtract(g.position_mm, first.position_mm) for g in slices])
    normal = dirs[:, 2]
    along = offsets @ normal
    if np.max(np.abs(offsets - np.outer(along, normal))) > POSITION_TOL_MM:
        return None  # shifted in plane: not one volume
    order = np.argsort(along, kind="stable")
    placed = along[order] - along[order[0]]
    step = float(placed[1])
    if step <= POSITION_TOL_MM or np.max(np.abs(placed - step * np.arange(len(slices)))) > POSITION_TOL_MM:
        return None
    base = slices[int(order[0])]
    centre = np.asarray(base.position_mm) + (len(slices) // 2) * step * normal
    geometry = Geometry((first.matrix[0], first.matrix[1], len(slices)),
                        (first.voxel_size_mm[0], first.voxel_size_mm[1], step), first.voxel_size_known,
                        position_mm=tuple(float(v) for v in centre), read_dir=first.read_dir,
                        phase_dir=first.phase_dir, slice_dir=first.slice_dir)
    return geometry, order


def slice_path(path: str | os.PathLike, index: int, count: int) -> Path:
    """``NAME_slice<j>.nii[.gz]`` beside ``path`` (zero-padded to the digits of ``count - 1``)."""
    path = Path(path)
    name = path.name
    suffix = next((s for s in (".nii.gz", ".nii") if name.lower().endswith(s)), "")
    stem = name[: len(name) - len(suffix)] if suffix else name
    return path.with_name(f"{stem}_slice{index:0{len(str(count - 1))}d}{suffix}")


def write_nifti_stack(path: str | os.PathLike, image: np.ndarray, geometries: Sequence[Geometry],
                      axes: Sequence[str], *, complex_: bool = False,
                      protect: tuple[str | os.PathLike, ...] = ()) -> list[Path]:
    """Write ``image`` (``(*stack, *matrix)`` with leading ``axes``, ``geometries`` one per image in C order)
    as NIfTI: see the module docstring. Returns the files written."""
    image = np.asarray(image)
    shape = tuple(image.shape[: len(axes)])
    if "slice" not in axes or geometries[0].matrix[2] > 1 or shape[list(axes).index("slice")] < 2:
        write_nifti(path, image, geometries[0], complex_=complex_, protect=protect, axes=axes)
        return [Path(path)]
    where = list(axes).index("slice")
    count = shape[where]
    grid = np.arange(len(geometries)).reshape(shape)
    firsts = np.moveaxis(grid, where, 0).reshape(count, -1)[:, 0]
    slices = [geometries[i] for i in firsts]
    others = [name for name in axes if name != "slice"]
    volume = volume_geometry(slices)
    if volume is not None:
        geometry, order = volume
        stacked = np.moveaxis(np.take(image, order, axis=where), where, -1)
        write_nifti(path, stacked, geometry, complex_=complex_, protect=protect, axes=others)
        return [Path(path)]
    log.warning("%s: the %d slices are not parallel and evenly spaced; writing one NIfTI file per slice",
                path, count)
    files = []  # all written or none
    for j, geometry in enumerate(slices):
        target = slice_path(path, j, count)
        files.append((target, nifti_bytes(target, np.take(image, j, axis=where), geometry, complex_=complex_,
                                          axes=others)))
    return write_files(files, protect=protect)


def nifti_values(complex_: bool, magnitude: bool) -> str:
    """NIfTI holds the magnitude, or real and imaginary parts with ``complex_``."""
    del magnitude
    return "real and imaginary" if complex_ else "magnitude"


def write_nifti_output(output: str | os.PathLike, stack: ImageStack, *, complex_: bool = False,
                       magnitude: bool = False, protect: tuple = ()) -> list[Path]:
    """Write ``stack`` as NIfTI (:func:`write_nifti_stack`)."""
    del magnitude
    return write_nifti_stack(output, stack.image, stack.geometries, stack.layout.axes, complex_=complex_,
                             protect=protect)


FORMAT = OutputFormat("nifti", "NIfTI", SUFFIXES, ".nii.gz", write_nifti_output, values=nifti_values,
                      shown="{label}, {values}", placed="affine has")
"""NIfTI output (``.nii``, ``.nii.gz``)."""
