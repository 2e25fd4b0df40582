"""MRD (ISMRMRD) image output through the ``ismrmrd`` package: one ``ismrmrd.Image`` record per image.

The ``ismrmrd`` package owns the format: the file is an :class:`ismrmrd.Dataset`, each image an
:class:`ismrmrd.Image` made by :meth:`ismrmrd.Image.from_array` and stored by
:meth:`ismrmrd.Dataset.append_image`, the XML header written by :meth:`ismrmrd.Dataset.write_xml_header`.

Layout
------
- Dataset group ``dataset``: ``xml`` (the input's XML header, verbatim, when the input was MRD; else a
  minimal header that ``ismrmrd.xsd`` accepts, see :func:`minimal_header_xml`) and ``image_0``, one image
  series holding one record per image of the stack, in the stack's order.
- Image axes: image axis 0 is ISMRMRD's x (``read_dir``), axis 1 is y (``phase_dir``), axis 2 is z
  (``slice_dir``; a 2-D image has z = 1), as for the input's trajectory columns
  (:mod:`mri_recon.io.geometry`). The record's data array is ``(channels, z, y, x)`` = ``(1, N3, N2, N1)``,
  so ``image == record.data[0].T`` (squeezed to 2 axes for a 2-D image).
- Values: complex64 (``image_type`` ``IMTYPE_COMPLEX``), the HDF5 output's image bit for bit; with
  ``magnitude=True`` float32 ``|image|`` (``IMTYPE_MAGNITUDE``), NIfTI's magnitude bit for bit.

Header fields
-------------
- ``matrix_size`` ``(N1, N2, N3)``; ``field_of_view`` the voxel size times the matrix in mm (a 2-D image:
  z is the slice thickness); ``channels`` 1.
- ``position`` (the field of view's centre, voxel ``N // 2``), ``read_dir``, ``phase_dir``, ``slice_dir``:
  the geometry's, LPS, mm. An image whose scan does not say where it lies gets position 0 and the directions
  :data:`~mri_recon.io.geometry.UNPLACED` (:meth:`Geometry.directions`), which NIfTI's affine then has too,
  converted to RAS.
- ``slice``, ``contrast``, ``phase``, ``set``, ``repetition``, ``average``: from the stack key where it
  names them (e.g. ``{"slice": 1, "repetition": 0}``), else 0.
- ``image_index`` 1, 2, ... in the stack's order; ``image_series_index`` 0 (the one series ``image_0``).
- The attribute string (ISMRMRD meta XML, :class:`ismrmrd.Meta`) carries what the caller passes as ``meta``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .._version import __version__
from ..errors import OutputError, SchemaError
from ..scan import Scan
from .files import memory_output
from .geometry import DIRECTIONS, Geometry
from .outputs import ImageStack, OutputFormat, nrmse_vs_truth
from .stack import DIMENSIONS

SUFFIXES = (".mrd.h5", ".mrd")
"""File names that choose MRD output."""
SERIES = "image_0"
"""The image series (group inside the dataset) the records go to."""
INDICES = ("average", *DIMENSIONS)
"""Stack-key names copied into the image header's fields of the same name."""


def is_mrd_name(path: str | os.PathLike) -> bool:
    """True for a name ending in ``.mrd.h5`` or ``.mrd`` (any case)."""
    return str(path).lower().endswith(SUFFIXES)


def _ismrmrd():
    import ismrmrd  # noqa: PLC0415 - a dependency of mri-recon, imported on use like the reader does

    return ismrmrd


def read_header_xml(path: str | os.PathLike, dataset: str = "dataset") -> bytes:
    """The XML header of an ISMRMRD file, as stored (to copy it into the output).

    Raises
    ------
    SchemaError
        The file cannot be opened as ISMRMRD or its dataset has no XML header.
    """
    mr = _ismrmrd()
    try:
        with mr.Dataset(str(path), dataset, create_if_needed=False, mode="r") as source:
            xml = source.read_xml_header()
    except (OSError, LookupError) as exc:
        raise SchemaError(f"{path}: cannot read the ISMRMRD XML header of dataset '{dataset}' to copy it into "
                          f"the MRD output ({exc})") from exc
    return xml.encode() if isinstance(xml, str) else bytes(xml)


def minimal_header_xml(geometry: Geometry) -> str:
    """A minimal ISMRMRD XML header for an input that had none (a schema-v1 scan).

    One encoding whose encoded and recon spaces are the image's matrix and field of view, trajectory
    ``other``, and ``H1resonanceFrequency_Hz`` 0 (the one required experimental condition; 0: unknown).
    """
    xsd = _ismrmrd().xsd
    fov = np.asarray(geometry.voxel_size_mm) * np.asarray(geometry.matrix)
    space = xsd.encodingSpaceType(
        matrixSize=xsd.matrixSizeType(x=geometry.matrix[0], y=geometry.matrix[1], z=geometry.matrix[2]),
        fieldOfView_mm=xsd.fieldOfViewMm(x=float(fov[0]), y=float(fov[1]), z=float(fov[2])))
    header = xsd.ismrmrdHeader(
        experimentalConditions=xsd.experimentalConditionsType(H1resonanceFrequency_Hz=0),
        encoding=[xsd.encodingType(encodedSpace=space, reconSpace=space,
                                   encodingLimits=xsd.encodingLimitsType(), trajectory=xsd.trajectoryType.OTHER)])
    return xsd.ToXML(header)


def mrd_image(image: np.ndarray, geometry: Geometry, key: Mapping[str, Any], index: int, *,
              magnitude: bool = False, meta: Mapping[str, Any] | None = None):
    """One :class:`ismrmrd.Image` with its header filled (see the module docstring).

    Parameters
    ----------
    image
        The image, of shape ``geometry.matrix`` (without its padding for a 2-D image).
    geometry
        Where it lies.
    key
        Its stack key: the values of :data:`INDICES` it names go to the header.
    index
        Its position in the stack, from 0 (``image_index`` is ``index + 1``).
    magnitude
        Write ``|image|`` as float32 instead of the complex64 image.
    meta
        Attributes for the image's meta XML (values written as text).

    Raises
    ------
    OutputError
        The image does not have the geometry's matrix.
    """
    mr = _ismrmrd()
    matrix = geometry.matrix if geometry.matrix[2] > 1 else geometry.matrix[:2]
    image = np.asarray(image)
    if image.shape != tuple(matrix):
        raise OutputError(f"MRD output: image {index} has shape {image.shape}; expected the matrix {list(matrix)}")
    values = np.abs(image.astype(np.complex64, copy=False)) if magnitude else image.astype(np.complex64, copy=False)
    directions = geometry.directions()  # LPS; UNPLACED for unknown geometry, as NIfTI's affine (geometry.py)
    place = {name: tuple(float(v) for v in directions[:, d]) for d, name in enumerate(DIRECTIONS)}
    place["position"] = tuple(geometry.position_mm) if geometry.oriented else (0.0, 0.0, 0.0)
    fov = tuple(float(v) * n for v, n in zip(geometry.voxel_size_mm, geometry.matrix))
    fields = {name: int(key.get(name, 0)) for name in INDICES}
    record = mr.Image.from_array(
        np.ascontiguousarray(values.T), image_type=mr.IMTYPE_MAGNITUDE if magnitude else mr.IMTYPE_COMPLEX,
        field_of_view=fov, image_index=index + 1, image_series_index=0, **place, **fields)
    if meta:
        record.attribute_string = mr.Meta({name: str(value) for name, value in meta.items()}).serialize()
    return record


def write_mrd_images(path: str | os.PathLike, images: Sequence[np.ndarray], geometries: Sequence[Geometry],
                     keys: Sequence[Mapping[str, Any]], *, header_xml: str | bytes | None = None,
                     magnitude: bool = False, meta: Sequence[Mapping[str, Any]] | None = None,
                     protect: tuple[str | os.PathLike, ...] = ()) -> None:
    """Write ``images`` to ``path`` as ISMRMRD image records (atomically; a name in ``protect`` is never replaced).

    Parameters
    ----------
    path
        The file (HDF5, an ISMRMRD dataset named ``dataset``).
    images
        One image per record, each of its geometry's matrix.
    geometries
        Where each image lies (:class:`~mri_recon.io.geometry.Geometry`).
    keys
        Each image's stack key (``{"slice": s, "repetition": r}``, ``{}`` for a lone image).
    header_xml
        The XML header to store (the input's when it was MRD); by default :func:`minimal_header_xml` of the
        first image.
    magnitude
        Magnitude (float32) records instead of complex64 ones.
    meta
        Per-image attributes for the records' meta XML.
    protect
        Input files that must not be overwritten.

    Raises
    ------
    OutputError
        No images, different numbers of images, geometries, keys or meta, an image without its geometry's
        matrix, or a file that cannot be written.
    """
    counts = {"images": len(images), "geometries": len(geometries), "keys": len(keys)}
    if meta is not None:
        counts["meta"] = len(meta)
    if not images or len(set(counts.values())) != 1:
        raise OutputError(f"MRD output: expected one geometry, key (and meta) per image, at least one image; "
                          f"found {', '.join(f'{n} {name}' for name, n in counts.items())}")
    records = [mrd_image(image, geometry, key, i, magnitude=magnitude, meta=None if meta is None else meta[i])
               for i, (image, geometry, key) in enumerate(zip(images, geometries, keys))]
    xml = minimal_header_xml(geometries[0]) if header_xml is None else header_xml
    mr = _ismrmrd()
    with memory_output(path, protect=protect) as buffer:  # h5py opens the in-memory file as HDF5
        with mr.Dataset(buffer, "dataset", create_if_needed=True, mode="w") as dataset:
            dataset.write_xml_header(xml.encode() if isinstance(xml, str) else xml)
            for record in records:
                dataset.append_image(SERIES, record)


def mrd_values(complex_: bool, magnitude: bool) -> str:
    """MRD holds complex images, or magnitude images with ``magnitude``."""
    del complex_
    return "magnitude" if magnitude else "complex"


def write_mrd(output: str | os.PathLike, stack: ImageStack, *, complex_: bool = False, magnitude: bool = False,
              protect: tuple = ()) -> list[Path]:
    """Write ``stack`` as MRD image records (:func:`write_mrd_images`), with the input's XML header when the
    input was MRD and each image's run in its meta."""
    del complex_
    results, images = stack.results, stack.images
    scan = results[0][1]
    header = None
    if scan.attrs.get("source_format") == "ismrmrd":
        header = read_header_xml(scan.source or stack.source, str(scan.attrs.get("ismrmrd_dataset", "dataset")))
    meta = [image_meta(image, s, r) for image, (_, s, _, r) in zip(images, results)]
    write_mrd_images(output, images, stack.geometries, stack.keys, header_xml=header, magnitude=magnitude,
                     meta=meta, protect=protect)
    return [Path(output)]


def image_meta(image: np.ndarray, scan: Scan, result: Any) -> dict[str, Any]:
    """The meta attributes of an image's MRD record (version, iterations, residual, engine, device, combine and
    the NRMSE against a ground truth): the file output's and the MRD server's. ``result``: the image's
    :class:`~mri_recon.result.Result`."""
    return {"mri_recon_version": __version__, "iterations": result.iterations,
            "final_residual": f"{result.residuals[-1]:.3e}", "engine": result.parameters.get("method"),
            "device": result.device, "combine": result.combine, **_truth_meta(image, scan.ground_truth, result)}


def _truth_meta(image: np.ndarray, truth: np.ndarray | None, result: Any) -> dict[str, str]:
    """MRD meta of the NRMSE against the ground truth (none without one), as the HDF5 attributes hold it."""
    if truth is None:
        return {}
    kind, value = nrmse_vs_truth(image, truth, result)
    return {"nrmse_vs_ground_truth": repr(value), "nrmse_kind": kind}


FORMAT = OutputFormat("mrd", "MRD", SUFFIXES, ".mrd.h5", write_mrd, values=mrd_values,
                      shown="{label}, {values} images", title="MRD images", placed="image headers have position 0,")
"""MRD image output (``.mrd.h5``, ``.mrd``)."""
