"""NIfTI-1 output through nibabel: the image with its scanner geometry.

Layout
------
- Axes 0, 1, 2 are the image's axes (a 2-D image gains a third axis of size 1, its slice); a stack of
  images (several slices or repetitions of one MRD file) is the 4th axis, in the order of the stack.
- Magnitude as float32 by default; ``complex_=True`` writes the real and imaginary parts (float32, exactly
  those of the complex64 image) on a last axis of size 2: ``(N1, N2, N3, 2)``, or ``(N1, N2, N3, S, 2)``
  for a stack.
- The affine (sform and qform, code 1 "scanner") is :meth:`Geometry.affine_ras` of the first image: voxel
  size times the direction cosines, LPS converted to RAS+, and voxel ``N // 2`` at the ISMRMRD ``position``.
  The slices of a 2-D multi-slice stack are placed on the 4th axis with that one affine; each image's own
  position is in the HDF5 output (``position_mm``, ``affine_ras`` per image). Units: mm.
- ``.nii.gz`` is gzip-compressed, ``.nii`` (or any other name) is not.
"""

from __future__ import annotations

import gzip
import os
from collections.abc import Sequence

import numpy as np

from ..errors import OutputError
from .files import atomic_output
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
        One image of shape ``matrix`` or a stack ``(S, *matrix)``.
    matrix
        The image size (2 or 3 axes).
    complex_
        Real and imaginary parts on a last axis of size 2 instead of the magnitude.
    """
    image = np.asarray(image)
    ndim = len(matrix)
    if image.shape[-ndim:] != tuple(matrix) or image.ndim not in (ndim, ndim + 1):
        raise OutputError(f"NIfTI output: image of shape {image.shape} is neither the matrix {list(matrix)} "
                          f"nor a stack of it")
    data = np.moveaxis(image, 0, -1) if image.ndim == ndim + 1 else image
    if ndim == 2:
        data = data[:, :, np.newaxis]  # the slice axis
    if complex_:
        data = data.astype(np.complex64, copy=False)
        return np.stack([data.real, data.imag], axis=-1).astype(np.float32)
    return np.abs(data).astype(np.float32)


def write_nifti(path: str | os.PathLike, image: np.ndarray, geometry: Geometry, *, complex_: bool = False,
                protect: tuple[str | os.PathLike, ...] = ()) -> None:
    """Write ``image`` to ``path`` as NIfTI-1 (atomically; a name in ``protect`` is never replaced).

    Parameters
    ----------
    path
        The file; gzip-compressed when it ends with ``.gz``.
    image
        One image (``geometry.matrix`` without its padding) or a stack of them on a leading axis.
    geometry
        Where the (first) image lies: :class:`~mri_recon.io.geometry.Geometry`.
    complex_
        Write real and imaginary parts on a last axis of size 2 instead of the magnitude.
    protect
        Input files that must not be overwritten.

    Raises
    ------
    OutputError
        The image does not have the geometry's matrix, or the file cannot be written.
    """
    import nibabel  # noqa: PLC0415 - imported on use: only NIfTI output needs it

    matrix = geometry.matrix if geometry.matrix[2] > 1 else geometry.matrix[:2]
    data = nifti_array(image, matrix, complex_=complex_)
    affine = geometry.affine_ras()
    nii = nibabel.Nifti1Image(data, affine)
    nii.header.set_xyzt_units(xyz="mm")
    nii.set_sform(affine, code=1)
    nii.set_qform(affine, code=1)
    parts = "real, imaginary (last axis)" if complex_ else "magnitude"
    stack = ", stack on axis 4" if np.ndim(image) == len(matrix) + 1 else ""
    nii.header["descrip"] = f"mri-recon {parts}{stack}".encode()[:79]
    payload = nii.to_bytes()
    if str(path).lower().endswith(".gz"):
        payload = gzip.compress(payload, compresslevel=6, mtime=0)
    with atomic_output(path, protect=protect) as tmp:
        tmp.write_bytes(payload)
