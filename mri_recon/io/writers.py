"""The output formats, one registry: :data:`OUTPUTS`, and the dispatcher :func:`write_result`.

A new format is one module that defines ``FORMAT = OutputFormat(...)`` (:mod:`mri_recon.io.outputs`) and
one entry in :data:`OUTPUTS` below; the CLI's ``--format`` choices, the names that choose a format, the
default output names of a batch and the messages all follow from it (docs/architecture.md, "Where to add an
output format").
"""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import OutputError
from . import cfl_scan, dicom, hdf5_image, mrd_image, nifti_stack
from .outputs import ImageStack, OutputFormat

OUTPUTS: dict[str, OutputFormat] = {f.name: f for f in (
    hdf5_image.FORMAT,
    nifti_stack.FORMAT,
    mrd_image.FORMAT,
    cfl_scan.FORMAT,
    dicom.FORMAT,
)}
"""Every output format by name, in the order the messages list them."""


def formats() -> tuple[str, ...]:
    """Output format names (``--format``): ``("hdf5", "nifti", "mrd", "cfl", "dicom")``."""
    return tuple(OUTPUTS)


def output_suffixes() -> tuple[str, ...]:
    """Every file name ending that chooses an output format."""
    return tuple(s for f in OUTPUTS.values() for s in f.suffixes)


def _named_by(output: str | os.PathLike) -> OutputFormat | None:
    """The format whose ending the name has; the longest ending wins (``.mrd.h5`` is MRD, not HDF5)."""
    found = [(len(s), f) for f in OUTPUTS.values() for s in f.suffixes if str(output).lower().endswith(s)]
    return max(found, key=lambda pair: pair[0])[1] if found else None


def _names() -> str:
    return ", ".join(f"{' or '.join(f.suffixes)} ({f.title or f.label})" for f in OUTPUTS.values() if f.suffixes)


def _folders() -> str:
    folders = [f.name for f in OUTPUTS.values() if f.folder]
    return f" ({', '.join(folders)}: a folder)" if folders else ""


def output_format(output: str | os.PathLike, format: str | None = None) -> str:
    """The format of ``output``: the one whose file name ending it has (any case: ``.nii`` / ``.nii.gz``
    NIfTI, ``.mrd.h5`` / ``.mrd`` MRD, ``.h5`` / ``.hdf5`` HDF5); ``format`` overrides, for any name.

    Raises
    ------
    OutputError
        ``format`` is not one of :func:`formats`, or it is None and the name has another extension (``.png``,
        ``.txt``, ``.npy``, ...) or none: no file of one format is written under the name of another.
    """
    if format is None:
        named = _named_by(output)
        if named is not None:
            return named.name
        suffix = Path(output).suffix
        found = f"extension {suffix!r} is not" if suffix else "name has no extension naming"
        raise OutputError(f"{output}: the {found} an output format: use {_names()}; a PNG preview is --png "
                          f"FILE.png; --format {'|'.join(formats())} writes that format under any name{_folders()}")
    if format not in OUTPUTS:
        raise OutputError(f"unknown output format {format!r}: expected one of {', '.join(formats())}")
    return format


def output_values(format: str, *, complex_: bool = False, magnitude: bool = False) -> str:
    """What an output of ``format`` holds: ``"complex"``, ``"magnitude"`` or ``"real and imaginary"``.

    HDF5 always holds the complex image. NIfTI holds the magnitude, or real and imaginary parts with
    ``complex_``. MRD holds complex images, or magnitude images with ``magnitude``.

    Raises
    ------
    OutputError
        Both ``complex_`` and ``magnitude``, or a choice the format cannot hold (``magnitude`` for HDF5).
    """
    if complex_ and magnitude:
        raise OutputError("complex and magnitude output both asked for (--complex and --magnitude); choose one")
    return OUTPUTS[output_format("", format)].values(complex_, magnitude)


def write_result(output: str | os.PathLike, results: list, scan_path: str | os.PathLike, *,
                 format: str | None = None, complex_: bool = False, magnitude: bool = False,
                 protect: tuple[str | os.PathLike, ...] = ()) -> list[Path]:
    """Write reconstructions to ``output`` (atomically; the input ``scan_path`` and the files of ``protect``,
    the other inputs the run read, are never replaced).

    Returns the files written: ``output``, or for NIfTI of 2-D slices that do not form one volume one file
    per slice (:func:`mri_recon.io.nifti_stack.write_nifti_stack`).

    Parameters
    ----------
    output
        The file to write. HDF5 (:mod:`mri_recon.io.hdf5_image`): ``image`` (complex64; several images on
        named leading axes, see :func:`mri_recon.io.stack.stack_layout`; the attribute ``axes`` names every
        axis, e.g. ``["slice", "contrast", "x", "y"]``, and ``stack`` lists the images' keys in C order),
        ``residuals`` (one row per image, on the same leading axes), and attributes for the version, device,
        settings, timings, the geometry (:func:`mri_recon.io.geometry.geometry_attrs`, each on the same
        leading axes) and the NRMSE against a simulated scan's ground truth. NIfTI:
        :func:`mri_recon.io.nifti_stack.write_nifti_stack`: the slices of a 2-D stack as axis 3 of one
        volume when parallel and evenly spaced (else one file per slice), the other leading axes flattened
        onto axis 4. MRD: :func:`mri_recon.io.mrd_image.write_mrd_images`, one image record per image with
        its own geometry and key, and the input's XML header when the input was MRD.
    results
        ``(key, scan, record, result)`` per image (:class:`~mri_recon.io.outputs.ImageStack`).
    scan_path
        The input file (recorded, and protected from being overwritten).
    format
        A name of :func:`formats`; by default chosen by the name of ``output``.
    complex_
        NIfTI: real and imaginary parts instead of the magnitude (HDF5 and MRD hold the complex image).
    magnitude
        MRD: magnitude images instead of complex ones (see :func:`output_values`).

    Raises
    ------
    OutputError
        An unknown format, contradicting value choices (:func:`output_values`), a path that cannot be
        written or that names the input.
    SchemaError
        Malformed geometry attributes of a scan.
    """
    chosen = OUTPUTS[output_format(output, format)]
    stack = ImageStack(results, scan_path)
    stack.check(lambda: output_values(chosen.name, complex_=complex_, magnitude=magnitude))
    return chosen.write(output, stack, complex_=complex_, magnitude=magnitude, protect=(scan_path, *protect))
