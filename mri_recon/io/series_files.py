"""Writing a time series of frames: HDF5 with a named ``time`` axis, NIfTI 4D, MRD images, a PNG montage.

- HDF5: ``image`` complex64 ``(T, *matrix)`` with the attribute ``axes = ["time", "x", "y"(, "z")]``,
  ``time_labels`` (each frame's repetition / phase, or its number), ``temporal_axis``
  (``"repetition"``, ``"phase"`` or ``"readouts"``), ``frame_duration_s`` (NaN when unknown), ``history``
  (the solver's relative objective), the settings as ``param_*`` attributes and, for a simulated series,
  ``nrmse_vs_ground_truth`` (magnitudes, all frames).
- NIfTI-1: the frames on axis 4 (axis 3 of a 2-D frame is its slice, size 1), the frame duration in
  ``pixdim[4]`` with time units seconds (``xyzt_units``), 0 when unknown; otherwise as
  :mod:`mri_recon.io.nifti`.
- MRD: one image record per frame (:func:`mri_recon.io.mrd_image.write_mrd_images`) with its ``repetition``
  or ``phase`` (a series cut from readouts: ``repetition`` = frame number).
- PNG: the montage of the frames' magnitudes, row by row (:func:`mri_recon.io.png.write_png`).
- Any other format (BART cfl, DICOM, ...): the frames as a stack of images keyed by their ``repetition`` or
  ``phase`` (:func:`frame_results`), written by the format's own writer as a file's several images are.

Every file is written to a temporary file and renamed (:mod:`mri_recon.io.files`).
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import math
import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..errors import OutputError
from .files import memory_output, write_file
from .geometry import Geometry
from .mrd_image import write_mrd_images
from .nifti import nifti_bytes
from .png import write_png
from .stack import IMAGE_AXES

__all__ = ["frame_keys", "frame_results", "write_series", "write_series_hdf5", "write_series_mrd",
           "write_series_nifti", "write_series_png"]


def _check(image: np.ndarray, labels: Sequence[int]) -> None:
    if image.ndim not in (3, 4) or image.shape[0] != len(labels):
        raise OutputError(f"time series output: expected frames (T, *matrix) with {len(labels)} labels, found "
                          f"shape {image.shape}")


def write_series_hdf5(path: str | os.PathLike, image: np.ndarray, *, labels: Sequence[int], axis: str,
                      frame_duration_s: float | None, parameters: Mapping[str, Any], history: Sequence[float],
                      nrmse: float | None = None, protect: tuple = ()) -> None:
    """Write the frames as HDF5 (see the module docstring)."""
    import h5py  # noqa: PLC0415 - h5py imported on use: a run on .cfl files reads no HDF5

    _check(image, labels)
    with memory_output(path, protect=protect) as buffer, h5py.File(buffer, "w") as f:
        f.create_dataset("image", data=np.asarray(image, dtype=np.complex64))
        f.attrs["axes"] = np.array(["time", *IMAGE_AXES[: image.ndim - 1]], dtype=h5py.string_dtype())
        f.attrs["time_labels"] = np.asarray(labels, dtype=np.int64)
        f.attrs["temporal_axis"] = str(axis)
        f.attrs["frame_duration_s"] = math.nan if frame_duration_s is None else float(frame_duration_s)
        f.create_dataset("history", data=np.asarray(history, dtype=np.float64))
        for name, value in parameters.items():
            f.attrs[f"param_{name}"] = "none" if value is None else (
                json.dumps(value) if isinstance(value, (dict, list, tuple)) else value)
        if nrmse is not None:
            f.attrs["nrmse_vs_ground_truth"] = float(nrmse)
            f.attrs["nrmse_kind"] = "magnitude"


def write_series_nifti(path: str | os.PathLike, image: np.ndarray, geometry: Geometry, *,
                       frame_duration_s: float | None, complex_: bool = False, protect: tuple = ()) -> None:
    """Write the frames as NIfTI-1, time on axis 4 with its step in ``pixdim[4]`` (see the module docstring)."""
    import nibabel  # noqa: PLC0415 - imported on use: only NIfTI output needs it

    payload = nifti_bytes("frames.nii", image, geometry, complex_=complex_, axes=("time",))
    nii = nibabel.Nifti1Image.from_bytes(payload)
    nii.header.set_xyzt_units(xyz="mm", t="sec")
    zooms = list(nii.header.get_zooms())
    zooms[3] = 0.0 if frame_duration_s is None else float(frame_duration_s)
    nii.header.set_zooms(zooms)
    out = nii.to_bytes()
    if str(path).lower().endswith(".gz"):
        out = gzip.compress(out, compresslevel=6, mtime=0)
    write_file(path, out, protect=protect)


def frame_keys(labels: Sequence[int], axis: str) -> list[dict[str, int]]:
    """The MRD image key of each frame: its ``phase`` or ``repetition`` (readouts: the frame number)."""
    name = "phase" if axis == "phase" else "repetition"
    return [{name: int(label)} for label in labels]


def write_series_mrd(path: str | os.PathLike, image: np.ndarray, geometry: Geometry, *, labels: Sequence[int],
                     axis: str, header_xml: str | bytes | None = None, magnitude: bool = False,
                     protect: tuple = ()) -> None:
    """Write one MRD image record per frame with its repetition / phase (see the module docstring)."""
    _check(image, labels)
    frames = [np.asarray(frame, dtype=np.complex64) for frame in image]
    write_mrd_images(path, frames, [geometry] * len(frames), frame_keys(labels, axis), header_xml=header_xml,
                     magnitude=magnitude, protect=protect)


def write_series_png(path: str | os.PathLike, image: np.ndarray, *, protect: tuple = ()) -> str:
    """Write the montage of the frames (one tile per frame; 3-D frames: their middle slice)."""
    return write_png(path, image, stacked=True, protect=protect)


TRUTH = "mri_recon_ground_truth"
"""Root dataset of a simulated series' MRD file: the true frames, complex64 ``(T, *matrix)`` (ISMRMRD readers
ignore it: it is neither a dataset group nor an image series)."""


def save_series_mrd(path: str | os.PathLike, series: Any) -> None:
    """Write a :class:`~mri_recon.io.frames.TimeSeries` as ISMRMRD raw data: frame ``t`` as the acquisitions of
    ``repetition`` (or ``phase``) = its label, with their time stamps, and the ground truth (when the series
    has one) as the root dataset :data:`TRUTH`. Built in a temporary file beside ``path``, then renamed."""
    import tempfile  # noqa: PLC0415

    import h5py  # noqa: PLC0415 - h5py imported on use: a run on .cfl files reads no HDF5

    from .ismrmrd_write import write_ismrmrd  # noqa: PLC0415 - the ismrmrd package is imported on use

    name = "phase" if series.axis == "phase" else "repetition"
    pairs = [({name: int(label)}, frame) for label, frame in zip(series.labels, series.frames)]
    folder = os.path.dirname(os.path.abspath(path))
    handle, temporary = tempfile.mkstemp(prefix=".series-", suffix=".h5", dir=folder)
    os.close(handle)
    try:
        os.unlink(temporary)
        write_ismrmrd(temporary, pairs)
        if series.ground_truth is not None:
            with h5py.File(temporary, "a") as f:
                f.create_dataset(TRUTH, data=np.asarray(series.ground_truth, dtype=np.complex64))
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise


def read_series_truth(path: str | os.PathLike, frames: int, matrix: tuple[int, ...]) -> np.ndarray | None:
    """The first ``frames`` true frames stored by :func:`save_series_mrd`, when present and of ``matrix``;
    else None."""
    import h5py  # noqa: PLC0415 - h5py imported on use: a run on .cfl files reads no HDF5

    with h5py.File(path, "r") as f:
        item = f.get(TRUTH)
        if not isinstance(item, h5py.Dataset) or item.ndim != len(matrix) + 1 or \
                tuple(item.shape[1:]) != tuple(matrix) or item.shape[0] < frames or item.dtype.kind != "c":
            return None
        return np.asarray(item[:frames], dtype=np.complex64)


def frame_results(result: Any, frames: Sequence[Any], record: Mapping[str, Any]) -> list[tuple]:
    """A time series' result as ``(key, scan, record, result)`` per frame: the stack every writer takes
    (:class:`~mri_recon.io.outputs.ImageStack`), each frame's result its image alone."""
    keys = frame_keys(result.frames.labels, result.frames.axis)
    return [(key, scan, dict(record), dataclasses.replace(result, image=frame, frames=None))
            for key, scan, frame in zip(keys, frames, result.image)]


def _hdf5(output: Any, result: Any, geometry: Geometry, nrmse: float | None, protect: tuple,
          record: Mapping[str, Any], **_: Any) -> None:
    frames = result.frames
    parameters = {**result.parameters, "frames": len(frames.labels), "temporal_axis": frames.axis,
                  "dropped_readouts": frames.dropped_readouts, **record}  # the preparation's record too
    write_series_hdf5(output, result.image, labels=frames.labels, axis=frames.axis,
                      frame_duration_s=frames.duration_s, parameters=parameters, history=result.residuals,
                      nrmse=nrmse, protect=protect)


def _nifti(output: Any, result: Any, geometry: Geometry, protect: tuple, complex_: bool, **_: Any) -> None:
    write_series_nifti(output, result.image, geometry, frame_duration_s=result.frames.duration_s,
                       complex_=complex_, protect=protect)


def _mrd(output: Any, result: Any, geometry: Geometry, protect: tuple, values: str, header_xml: Any,
         **_: Any) -> None:
    write_series_mrd(output, result.image, geometry, labels=result.frames.labels, axis=result.frames.axis,
                     header_xml=header_xml, magnitude=values == "magnitude", protect=protect)


SERIES_WRITERS = {"hdf5": _hdf5, "nifti": _nifti, "mrd": _mrd}
"""The formats with a time axis of their own (frame duration, labels); the others write the frames as a stack."""


def write_series(output: str | os.PathLike, result: Any, frames: Sequence[Any], record: Mapping[str, Any],
                 source: str | os.PathLike, *, format: str | None = None, complex_: bool = False,
                 magnitude: bool = False, header_xml: Any = None, nrmse: float | None = None,
                 protect: tuple = ()) -> str:
    """Write a time series' ``result`` (frames ``frames``, the prepared scans) to ``output`` in the format its
    name (or ``format``) chooses; returns the format's name."""
    from .geometry import geometry_of  # noqa: PLC0415
    from .writers import output_format, output_values, write_result  # noqa: PLC0415 - writers list this module

    chosen = output_format(output, format)
    values = output_values(chosen, complex_=complex_, magnitude=magnitude)
    writer = SERIES_WRITERS.get(chosen)
    if writer is None:
        write_result(output, frame_results(result, frames, record), source, format=chosen, complex_=complex_,
                     magnitude=magnitude, protect=protect)
        return chosen
    geometry = geometry_of(frames[0].matrix, frames[0].attrs, str(source))
    writer(output, result, geometry, nrmse=nrmse, protect=protect, complex_=complex_, values=values,
           header_xml=header_xml, record=record)
    return chosen
