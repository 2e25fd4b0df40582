"""The outcome of a reconstruction and its writers (HDF5; NIfTI through :mod:`mri_recon.io.nifti`; MRD images
through :mod:`mri_recon.io.mrd_image`)."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from ._version import __version__
from .errors import OutputError
from .io.files import memory_output
from .io.geometry import Geometry, geometry_attrs, geometry_of
from .io.mrd_image import is_mrd_name, read_header_xml, write_mrd_images
from .io.nifti import is_nifti_name
from .io.nifti_stack import write_nifti_stack
from .io.stack import StackLayout, stack_layout
from .scan import Scan

FORMATS = ("hdf5", "nifti", "mrd")
"""Output formats of :func:`write_result`."""
HDF5_SUFFIXES = (".h5", ".hdf5")
"""File names that choose HDF5 output (``.mrd.h5`` chooses MRD)."""


@dataclass(frozen=True)
class Result:
    """The outcome of :func:`mri_recon.reconstruct`."""

    image: np.ndarray
    """complex64 ``matrix``: the reconstructed image (real-valued for ``combine == "rss"``)."""
    residuals: tuple[float, ...]
    """Relative CG residuals ``||b - A x|| / ||b||``; the first is that of the zero initial guess. For the tv
    and wavelet regularizers: the objective relative to its value at zero (1 first), at the solver's checks."""
    iterations: int
    """CG iterations run (``len(residuals) - 1``); outer iterations for the tv and wavelet regularizers."""
    timings: Mapping[str, float]
    """Seconds per stage: upload, fhd, psf, iterations, filter, download (device synchronized)."""
    device: str
    """Where it ran: ``"cpu"`` or ``"gpu:N"``."""
    parameters: Mapping[str, Any]
    """The settings used (scalars and strings), including the absolute Tikhonov weight ``lam_abs``."""
    combine: str
    """``"sense"`` (coil maps), ``"rss"`` (per-coil images, root-sum-of-squares) or ``"single"``."""

    def __repr__(self) -> str:
        """Image shape, iterations, final residual, device and engine; never the arrays."""
        return (f"Result(image={self.image.dtype}{list(self.image.shape)}, iterations={self.iterations}, "
                f"residual={self.residuals[-1]:.2e}, device={self.device!r}, "
                f"engine={self.parameters.get('method')!r}, combine={self.combine!r})")

    def _repr_png_(self) -> bytes:
        """The magnitude preview as PNG bytes (Jupyter shows it; a 3-D image as a montage of its slices)."""
        from .io.png import encode_png, montage  # noqa: PLC0415 - on use

        return encode_png(montage(self.image)[0])

    def show(self, axis: int = 2, ax: Any = None) -> Any:
        """Draw the magnitude with matplotlib (optional: ``pip install matplotlib``); a 3-D image as a montage
        of its slices across ``axis``. Returns the matplotlib image; ``ax``: the axes to draw in."""
        from .io.png import montage  # noqa: PLC0415 - on use

        try:
            import matplotlib.pyplot as plt  # noqa: PLC0415 - optional
        except ImportError as exc:
            raise OutputError("Result.show needs matplotlib (pip install matplotlib); Jupyter shows a Result "
                              "without it (its PNG preview)") from exc
        pixels, what = montage(self.image, axis=axis)
        ax = ax if ax is not None else plt.figure().gca()
        ax.set_title(what, fontsize=9)
        ax.set_axis_off()
        return ax.imshow(pixels, cmap="gray", vmin=0, vmax=255)



def output_format(output: str | os.PathLike, format: str | None = None) -> str:
    """``"nifti"`` for a name ending in ``.nii`` / ``.nii.gz``, ``"mrd"`` for ``.mrd.h5`` / ``.mrd``,
    ``"hdf5"`` for ``.h5`` / ``.hdf5`` (any case); ``format`` overrides, for any name.

    Raises
    ------
    OutputError
        ``format`` is not one of :data:`FORMATS`, or it is None and the name has another extension (``.png``,
        ``.txt``, ``.npy``, ...) or none: no file of one format is written under the name of another.
    """
    if format is None:
        if is_nifti_name(output):
            return "nifti"
        if is_mrd_name(output):
            return "mrd"
        if str(output).lower().endswith(HDF5_SUFFIXES):
            return "hdf5"
        suffix = Path(output).suffix
        found = f"extension {suffix!r} is not" if suffix else "name has no extension naming"
        raise OutputError(f"{output}: the {found} an output format: use .h5 or .hdf5 (HDF5), .nii or .nii.gz "
                          f"(NIfTI), .mrd.h5 or .mrd (MRD images); a PNG preview is --png FILE.png; --format "
                          f"hdf5|nifti|mrd writes that format under any name")
    if format not in FORMATS:
        raise OutputError(f"unknown output format {format!r}: expected one of {', '.join(FORMATS)}")
    return format


def output_values(format: str, *, complex_: bool = False, magnitude: bool = False) -> str:
    """What an output of ``format`` holds: ``"complex"``, ``"magnitude"`` or ``"real and imaginary"``.

    HDF5 always holds the complex image. NIfTI holds the magnitude, or real and imaginary parts with
    ``complex_``. MRD holds complex images, or magnitude images with ``magnitude``.

    Raises
    ------
    OutputError
        Both ``complex_`` and ``magnitude``, or ``magnitude`` for HDF5 output.
    """
    if complex_ and magnitude:
        raise OutputError("complex and magnitude output both asked for (--complex and --magnitude); choose one")
    if format == "hdf5":
        if magnitude:
            raise OutputError("HDF5 output always holds the complex image; magnitude output applies to MRD "
                              "(--format mrd) and is NIfTI's default")
        return "complex"
    if format == "nifti":
        return "real and imaginary" if complex_ else "magnitude"
    return "magnitude" if magnitude else "complex"


def result_geometries(results: list) -> list[Geometry]:
    """The :class:`~mri_recon.io.geometry.Geometry` of each ``(key, scan, record, result)`` image."""
    return [geometry_of(scan.matrix, scan.attrs, scan.source or "<memory>") for _, scan, _, _ in results]


def write_result(output: str | os.PathLike, results: list, scan_path: str | os.PathLike, *,
                 format: str | None = None, complex_: bool = False, magnitude: bool = False) -> list[Path]:
    """Write reconstructions to ``output`` (atomically; the input ``scan_path`` is never replaced).

    Returns the files written: ``output``, or for NIfTI of 2-D slices that do not form one volume one file
    per slice (:func:`mri_recon.io.nifti_stack.write_nifti_stack`).

    Parameters
    ----------
    output
        The file to write. HDF5: ``image`` (complex64; several images on named leading axes, see
        :func:`mri_recon.io.stack.stack_layout`; the attribute ``axes`` names every axis, e.g.
        ``["slice", "contrast", "x", "y"]``, and ``stack`` lists the images' keys in C order), ``residuals``
        (one row per image, on the same leading axes), and attributes for the version, device, settings,
        timings, the geometry (:func:`mri_recon.io.geometry.geometry_attrs`, each on the same leading axes)
        and the NRMSE against a simulated scan's ground truth. NIfTI:
        :func:`mri_recon.io.nifti_stack.write_nifti_stack`: the slices of a 2-D stack as axis 3 of one
        volume when parallel and evenly spaced (else one file per slice), the other leading axes flattened
        onto axis 4. MRD:
        :func:`mri_recon.io.mrd_image.write_mrd_images`, one image record per image with its own geometry
        and key, and the input's XML header when the input was MRD.
    results
        ``(key, scan, record, result)`` per image: the image's key (e.g. ``{"slice": 0, "contrast": 1, ...}``,
        in the order of :func:`mri_recon.io.load_scans`), the scan as reconstructed, the preparation record
        of :func:`mri_recon.prep.prepare_scan` and the :class:`Result`.
    scan_path
        The input file (recorded, and protected from being overwritten).
    format
        ``"hdf5"``, ``"nifti"`` or ``"mrd"``; by default chosen by the name of ``output``.
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
    chosen = output_format(output, format)
    layout = stack_layout([k for k, _, _, _ in results])
    values = output_values(chosen, complex_=complex_, magnitude=magnitude)
    images = [np.asarray(r.image, dtype=np.complex64) for _, _, _, r in results]
    image = stacked_image(images, layout)
    geometries = result_geometries(results)
    if chosen == "nifti":
        return write_nifti_stack(output, image, geometries, layout.axes, complex_=complex_, protect=(scan_path,))
    if chosen == "mrd":
        _write_mrd(output, results, images, geometries, scan_path, magnitude=values == "magnitude")
    else:
        _write_hdf5(output, results, image, layout, geometries, scan_path)
    return [Path(output)]


def stacked_image(images: list[np.ndarray], layout: StackLayout) -> np.ndarray:
    """The images as one array: ``(*layout.shape, *matrix)``, or the single image itself."""
    if len(images) == 1:
        return images[0]
    return np.stack(images).reshape(*layout.shape, *images[0].shape)


def _write_mrd(output, results: list, images: list, geometries: list, scan_path, *, magnitude: bool) -> None:
    scan = results[0][1]
    header = None
    if scan.attrs.get("source_format") == "ismrmrd":
        header = read_header_xml(scan.source or scan_path, str(scan.attrs.get("ismrmrd_dataset", "dataset")))
    meta = [image_meta(image, s, r) for image, (_, s, _, r) in zip(images, results)]
    write_mrd_images(output, images, geometries, [k for k, _, _, _ in results], header_xml=header,
                     magnitude=magnitude, meta=meta, protect=(scan_path,))


def image_meta(image: np.ndarray, scan: Scan, result: Result) -> dict[str, Any]:
    """The meta attributes of an image's MRD record (version, iterations, residual, engine, device, combine and
    the NRMSE against a ground truth): the file output's and the MRD server's."""
    return {"mri_recon_version": __version__, "iterations": result.iterations,
            "final_residual": f"{result.residuals[-1]:.3e}", "engine": result.parameters.get("method"),
            "device": result.device, "combine": result.combine, **_truth_meta(image, scan.ground_truth, result)}


def _truth_meta(image: np.ndarray, truth: np.ndarray | None, result: Result) -> dict[str, str]:
    """MRD meta of the NRMSE against the ground truth (none without one), as the HDF5 attributes hold it."""
    if truth is None:
        return {}
    kind, value = nrmse_vs_truth(image, truth, result)
    return {"nrmse_vs_ground_truth": repr(value), "nrmse_kind": kind}


def _write_hdf5(output, results: list, image: np.ndarray, layout: StackLayout, geometries: list,
                scan_path) -> None:
    key, scan, record, first = results[0]
    with memory_output(output, protect=(scan_path,)) as buffer, h5py.File(buffer, "w") as f:
        f.create_dataset("image", data=image)
        f.attrs["axes"] = np.array(layout.names(scan.ndim), dtype=h5py.string_dtype())
        longest = max(len(r.residuals) for _, _, _, r in results)
        residuals = np.full((len(results), longest), np.nan)
        for i, (_, _, _, r) in enumerate(results):
            residuals[i, : len(r.residuals)] = r.residuals
        f.create_dataset("residuals", data=residuals.reshape(*layout.shape, longest))
        if len(results) > 1:
            f.attrs["stack"] = json.dumps([k for k, _, _, _ in results])
        f.attrs["mri_recon_version"] = __version__
        f.attrs["input"] = str(scan_path)
        f.attrs["matrix"] = np.asarray(scan.matrix, dtype=np.int64)
        f.attrs["device"] = str(first.device)
        f.attrs["iterations"] = int(max(r.iterations for _, _, _, r in results))
        f.attrs["final_residual"] = float(max(r.residuals[-1] for _, _, _, r in results))
        f.attrs["combine"] = str(first.combine)
        for name, value in {**record, **{k: v for k, v in scan.attrs.items() if k == "traj_units"}}.items():
            f.attrs[name] = value
        for name, value in first.parameters.items():
            f.attrs[f"param_{name}"] = "none" if value is None else value
        for name, value in geometry_attrs(geometries).items():
            f.attrs[name] = value if isinstance(value, str) or len(results) == 1 else \
                value.reshape(*layout.shape, *value.shape[1:])
        for stage in first.timings:
            f.attrs[f"time_{stage}_s"] = float(sum(r.timings.get(stage, 0.0) for _, _, _, r in results))
        if len(results) == 1 and scan.ground_truth is not None:
            kind, value = nrmse_vs_truth(image, scan.ground_truth, first)
            f.attrs["nrmse_vs_ground_truth"] = value
            f.attrs["nrmse_kind"] = kind


def nrmse_vs_truth(image: np.ndarray, truth: np.ndarray, result: Result) -> tuple[str, float]:
    """``("complex" | "magnitude", ||image - truth|| / ||truth||)`` with no fitted scale.

    Complex only where the image's phase is the truth's: SENSE with the scan's own maps. Estimated maps carry
    an arbitrary phase per voxel and root-sum-of-squares images none, so those compare magnitudes.
    """
    if result.combine == "sense" and result.parameters.get("coil_maps") == "scan":
        kind, a, b = "complex", np.asarray(image, np.complex128), np.asarray(truth, np.complex128)
    else:
        kind, a, b = "magnitude", np.abs(np.asarray(image, np.complex128)), np.abs(np.asarray(truth, np.complex128))
    return kind, float(np.linalg.norm(a - b) / max(float(np.linalg.norm(b)), 1e-30))
