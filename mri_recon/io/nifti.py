"""NIfTI-1 output through nibabel: the image with its scanner geometry.

Layout
------
- Axes 0, 1, 2 are the image's axes (a 2-D image gains a third axis of size 1, its slice); the images of
  one MRD file (several slices, contrasts, phases, sets or repetitions) are the 4th axis: the named
  leading axes of the HDF5 ``image`` (:mod:`mri_recon.io.stack`) flattened in C order, the last named
  axis fastest (slice 0 contrast 0, slice 0 contrast 1, slice 1 contrast 0, ...). The header's
  description names them and their sizes (``"mri-recon magnitude; axis 4 = slice(3) x contrast(2)"``),
  and a NIfTI comment extension holds the same as JSON: ``{"axis_4": ["slice", "contrast"],
  "axis_4_shape": [3, 2], "order": "C"}``.
- Magnitude as float32 by default; ``complex_=True`` writes the real and imaginary parts (float32, exactly
  those of the complex64 image) on a last axis of size 2: ``(N1, N2, N3, 2)``, or ``(N1, N2, N3, S, 2)``
  for a stack.
- The affine (sform and qform, code 1 "scanner") is :meth:`Geometry.affine_ras` of the first image: voxel
  size times the direction cosines, LPS converted to RAS+, and voxel ``N // 2`` at the ISMRMRD ``position``.
  A stack of 2-D slices is first made one volume (slices on axis 3) or split into one file per slice
  by :mod:`mri_recon.io.nifti_stack`; each image's own position is also in the HDF5 output
  (``position_mm``, ``affine_ras`` per image). Units: mm.
- ``.nii.gz`` is gzip-compressed, ``.nii`` (or any other name) is not.
"""

from __future__ import annotations

import gzip
import json
import os
from collections.abc import Sequence

import numpy as np

from ..errors import OutputError
from .files import write_file
from .geometry import Geometry

SUFFIXES = (".nii", ".nii.gz")
"""File names that choose NIfTI output."""


def is_nifti_name(path: str | os.PathLike) -> bool:
    """True for a name ending in ``.nii`` or ``.nii.gz`` (any case)."""
    return str(path).lower().endswith(SUFFIXES)


def nifti_array(image: np.ndarray, matrix: Sequence[int], *, complex_: bool = False) -> np.ndarray:
    """The float32 array written to the file (see the module docstring for the axes).

    Parameters
    ----------
    image
        One image of shape ``matrix`` or a stack ``(*stack_shape, *matrix)`` (its leading axes are
        flattened in C order onto the 4th axis).
    matrix
        The image size (2 or 3 axes).
    complex_
        Real and imaginary parts on a last axis of size 2 instead of the magnitude.
    """
    image = np.asarray(image)
    ndim = len(matrix)
    if image.shape[-ndim:] != tuple(matrix) or image.ndim < ndim:
        raise OutputError(f"NIfTI output: image of shape {image.shape} is neither the matrix {list(matrix)} "
                          f"nor a stack of it")
    if image.ndim > ndim + 1:
        image = image.reshape(-1, *matrix)
    data = np.moveaxis(image, 0, -1) if image.ndim == ndim + 1 else image
    if ndim == 2:
        data = data[:, :, np.newaxis]  # the slice axis
    if complex_:
        data = data.astype(np.complex64, copy=False)
        return np.stack([data.real, data.imag], axis=-1).astype(np.float32)
    return np.abs(data).astype(np.float32)


def write_nifti(path: str | os.PathLike, image: np.ndarray, geometry: Geometry, *, complex_: bool = False,
                protect: tuple[str | os.PathLike, ...] = (), axes: Sequence[str] = ()) -> None:
    """Write ``image`` to ``path`` as NIfTI-1 (atomically; a name in ``protect`` is never replaced).

    Parameters
    ----------
    path
        The file; gzip-compressed when it ends with ``.gz``.
    image
        One image (``geometry.matrix`` without its padding) or a stack of them on leading axes.
    geometry
        Where the (first) image lies: :class:`~mri_recon.io.geometry.Geometry`.
    complex_
        Write real and imaginary parts on a last axis of size 2 instead of the magnitude.
    protect
        Input files that must not be overwritten.
    axes
        Names of the image's leading (stack) axes, recorded in the header; by default ``"stack"``.

    Raises
    ------
    OutputError
        The image does not have the geometry's matrix, or the file cannot be written
        (:func:`~mri_recon.io.files.write_file`).
    """
    write_file(path, nifti_bytes(path, image, geometry, complex_=complex_, axes=axes), protect=protect)


def nifti_bytes(path: str | os.PathLike, image: np.ndarray, geometry: Geometry, *, complex_: bool = False,
                axes: Sequence[str] = ()) -> bytes:
    """The bytes of the NIfTI-1 file that :func:`write_nifti` writes to ``path`` (gzip-compressed when its name
    ends with ``.gz``)."""
    import nibabel  # noqa: PLC0415 - imported on use: only NIfTI output needs it

    matrix = geometry.matrix if geometry.matrix[2] > 1 else geometry.matrix[:2]
    data = nifti_array(image, matrix, complex_=complex_)
    affine = geometry.affine_ras()
    nii = nibabel.Nifti1Image(data, affine)
    nii.header.set_xyzt_units(xyz="mm")
    nii.set_sform(affine, code=1)
    nii.set_qform(affine, code=1)
    parts = "real, imaginary (last axis)" if complex_ else "magnitude"
    shape = np.shape(image)[: np.ndim(image) - len(matrix)]
    names = list(axes) if len(axes) == len(shape) else ["stack"] * len(shape)
    stack = "; axis 4 = " + " x ".join(f"{n}({s})" for n, s in zip(names, shape)) if shape else ""
    nii.header["descrip"] = f"mri-recon {parts}{stack}".encode()[:79]
    if shape:
        record = {"axis_4": names, "axis_4_shape": [int(s) for s in shape], "order": "C"}
        nii.header.extensions.append(nibabel.nifti1.Nifti1Extension("comment", json.dumps(record).encode()))
    payload = nii.to_bytes()
    if str(path).lower().endswith(".gz"):
        payload = gzip.compress(payload, compresslevel=6, mtime=0)
    return payload
