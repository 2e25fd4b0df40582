"""DICOM output through pydicom (the ``dicom`` extra): one series of MR Image Storage files, one per slice.

Layout
------
- ``-o DIR --format dicom`` writes the folder ``DIR`` holding ``IM00001.dcm``, ``IM00002.dcm``, ...: every
  slice of every image of the stack (a 2-D image is one slice; a 3-D image one file per index of axis 2),
  in the stack's C order, then by slice. ``InstanceNumber`` counts them from 1; ``EchoNumbers`` is the
  contrast + 1, ``AcquisitionNumber`` the repetition + 1, ``TemporalPositionIdentifier`` the phase + 1.
- Pixels: the magnitude as unsigned 16 bits, ``stored = round(|x| / slope)`` with one ``RescaleSlope``
  for the whole series (its largest magnitude is 65535) and ``RescaleIntercept`` 0, so that
  ``slope * stored`` is the magnitude to within half a step. Row r and column c of a slice are voxel
  ``(r, c)`` of image axes 0 and 1 (as the PNG preview and BART's ``toimg`` show them).
- Geometry from :class:`~mri_recon.io.geometry.Geometry`, the object behind the NIfTI affine:
  ``ImagePositionPatient`` is the LPS position of pixel (0, 0) of the slice (the affine applied to voxel
  ``(0, 0, k)`` and converted from RAS+ to LPS), ``ImageOrientationPatient`` the LPS directions of
  increasing column (image axis 1) then increasing row (axis 0), ``PixelSpacing`` the voxel size along
  rows then columns (axes 0, 1), ``SliceThickness`` and ``SpacingBetweenSlices`` the voxel size along axis 2
  (for a stack of 2-D slices: the distance between neighbouring slice positions when they are evenly spaced).
- Patient, study and series fields from the input's ISMRMRD header where present
  (:mod:`mri_recon.io.dicom_fields`); UIDs are fresh (``pydicom.uid.generate_uid``) except a valid study
  instance and frame of reference UID of the header. File meta: Explicit VR Little Endian, written with
  ``enforce_file_format=True`` (pydicom's file-meta validation).
- Written into a temporary folder beside ``DIR``, flushed, then renamed to ``DIR``. An existing ``DIR`` is
  replaced only when it is empty or holds only ``.dcm`` files (an earlier series); anything else is refused.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import shutil
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from .._version import __version__
from ..errors import OutputError, printable
from .files import FileSet, check_space, temp_name, write_error
from .geometry import LPS_TO_RAS, Geometry
from .outputs import ImageStack, OutputFormat
from .stack import DIMENSIONS

MR_IMAGE_STORAGE = "1.2.840.10008.5.1.4.1.1.4"
FULL_SCALE = 65535


def dicom_values(*, complex_: bool = False) -> str:
    """What DICOM output holds: the magnitude (``--complex`` is refused: NIfTI and MRD hold complex data)."""
    if complex_:
        raise OutputError("DICOM output holds magnitude images; --complex is for NIfTI (MRD, HDF5 and BART "
                          "cfl hold the complex image)")
    return "magnitude"


def _pydicom():
    try:
        import pydicom  # noqa: PLC0415 - the dicom extra, imported on use
    except ImportError as exc:
        raise OutputError("DICOM output needs pydicom: pip install 'mri-recon[dicom]'") from exc
    return pydicom


def check_dicom_output(path: str | os.PathLike, *, protect: tuple[str | os.PathLike, ...] | FileSet = ()) -> Path:
    """Check that ``path`` can become the series folder and that pydicom is installed (before any work);
    returns its parent folder (see the module docstring)."""
    _pydicom()
    target = Path(path)
    parent = target.parent if str(target.parent) else Path(".")
    if target in (protect if isinstance(protect, FileSet) else FileSet(protect)):
        raise OutputError(f"{target}: output would overwrite the input file; choose another path")
    if target.is_symlink() or (target.exists() and not target.is_dir()):
        raise OutputError(f"{target}: DICOM output is a folder (one file per slice), and this path is a file; "
                          f"choose a new folder name")
    if target.is_dir():
        others = [p.name for p in target.iterdir() if not (p.is_file() and p.suffix.lower() == ".dcm")]
        if others:
            raise OutputError(f"{target}: folder holds other files than an earlier DICOM series "
                              f"({printable(others[0])}, ...); choose a new or empty folder")
    if not parent.is_dir():
        raise OutputError(f"{target}: output folder {parent} does not exist")
    if not os.access(parent, os.W_OK):
        raise OutputError(f"{target}: output folder {parent} is not writable; nothing was written")
    return parent


def _scale(magnitude: np.ndarray) -> tuple[str, float]:
    """``RescaleSlope`` as written (a DS) and its value: the series' largest magnitude maps to 65535."""
    from .dicom_fields import decimal  # noqa: PLC0415

    top = float(np.max(magnitude)) if magnitude.size else 0.0
    text = decimal(top / FULL_SCALE if top > 0 else 1.0)
    value = float(text)
    if top / value > FULL_SCALE + 0.5:  # the rounded slope came out smaller: one step up
        text = decimal(np.nextafter(value, np.inf) * (1 + 1e-9))
        value = float(text)
    return text, value


def slice_positions(geometry: Geometry, count: int) -> list[np.ndarray]:
    """LPS position of pixel (0, 0) of each slice ``k < count`` (from :meth:`Geometry.affine_ras`)."""
    affine = geometry.affine_ras()
    return [LPS_TO_RAS @ (affine @ np.array([0.0, 0.0, float(k), 1.0]))[:3] for k in range(count)]


def orientation(geometry: Geometry) -> list[float]:
    """``ImageOrientationPatient``: LPS unit vectors of image axis 1 (along a row), then axis 0 (down a column)."""
    linear = LPS_TO_RAS @ geometry.affine_ras()[:3, :3]
    rows, columns = linear[:, 1], linear[:, 0]
    return [float(v) for v in np.concatenate([rows / np.linalg.norm(rows), columns / np.linalg.norm(columns)])]


def _spacing(geometries: Sequence[Geometry], depth: int) -> float:
    """Distance between neighbouring slices: axis 2's voxel size, or for 2-D slices the even step between
    the images' positions (their thickness when uneven or single)."""
    if depth > 1 or len(geometries) < 2:
        return float(geometries[0].voxel_size_mm[2])
    normal = np.asarray(orientation(geometries[0]))
    normal = np.cross(normal[:3], normal[3:])
    along = sorted({round(float(normal @ slice_positions(g, 1)[0]), 6) for g in geometries})
    steps = np.diff(along)
    if steps.size and np.allclose(steps, steps[0], rtol=1e-4, atol=1e-4) and steps[0] > 0:
        return float(steps[0])
    return float(geometries[0].voxel_size_mm[2])


def _series(results: list, geometries: Sequence[Geometry], depth: int) -> dict:
    """Data elements every file of the series shares."""
    from .dicom_fields import decimal, header_fields, scan_header  # noqa: PLC0415

    pydicom = _pydicom()
    scan = results[0][1]
    now = datetime.datetime.now()
    shared = {"SpecificCharacterSet": "ISO_IR 192",  # UTF-8: names and descriptions as they are
              "Modality": "MR", "SOPClassUID": MR_IMAGE_STORAGE, "SeriesInstanceUID": pydicom.uid.generate_uid(),
              "StudyInstanceUID": pydicom.uid.generate_uid(), "FrameOfReferenceUID": pydicom.uid.generate_uid(),
              "SeriesNumber": 1, "StudyDate": now.strftime("%Y%m%d"), "StudyTime": now.strftime("%H%M%S"),
              "PatientName": "", "PatientID": "", "PatientBirthDate": "", "PatientSex": "", "StudyID": "",
              "AccessionNumber": "", "ReferringPhysicianName": "", "PositionReferenceIndicator": "",
              "Manufacturer": "", "ImageType": ["DERIVED", "PRIMARY", "M"], "ScanningSequence": "RM",
              "SequenceVariant": "NONE", "ScanOptions": "", "MRAcquisitionType": "3D" if depth > 1 else "2D",
              "EchoTrainLength": None, "SamplesPerPixel": 1, "PhotometricInterpretation": "MONOCHROME2",
              "BitsAllocated": 16, "BitsStored": 16, "HighBit": 15, "PixelRepresentation": 0,
              "SoftwareVersions": f"mri-recon {__version__}", "SeriesDescription": "mri-recon",
              "ContentDate": now.strftime("%Y%m%d"), "ContentTime": now.strftime("%H%M%S"),
              "PixelSpacing": [decimal(v) for v in geometries[0].voxel_size_mm[:2]],
              "SliceThickness": decimal(geometries[0].voxel_size_mm[2]),
              "SpacingBetweenSlices": decimal(_spacing(geometries, depth)),
              "BurnedInAnnotation": "NO", "RescaleType": "US"}
    shared.update(header_fields(scan_header(scan.attrs, scan.source, str(scan.attrs.get("ismrmrd_dataset",
                                                                                        "dataset")))))
    return shared


def _dataset(shared: dict, pixels: np.ndarray, position: np.ndarray, orient: list[float], number: int,
             key: dict, slope: str, slice_dir: np.ndarray):
    pydicom = _pydicom()
    from .dicom_fields import decimal  # noqa: PLC0415

    ds = pydicom.Dataset()
    for keyword, value in shared.items():
        setattr(ds, keyword, value)
    ds.SOPInstanceUID = pydicom.uid.generate_uid()
    ds.InstanceNumber = number
    ds.EchoNumbers = int(key.get("contrast", 0)) + 1
    ds.AcquisitionNumber = int(key.get("repetition", 0)) + 1
    ds.TemporalPositionIdentifier = int(key.get("phase", 0)) + 1
    ds.ImagePositionPatient = [decimal(v) for v in position]
    ds.ImageOrientationPatient = [decimal(v) for v in orient]
    ds.SliceLocation = decimal(float(np.asarray(slice_dir, dtype=np.float64) @ position))  # along the slice axis
    ds.Rows, ds.Columns = int(pixels.shape[0]), int(pixels.shape[1])
    ds.RescaleSlope, ds.RescaleIntercept = slope, "0"
    ds.PixelData = np.ascontiguousarray(pixels, dtype="<u2").tobytes()
    meta = pydicom.dataset.FileMetaDataset()
    meta.MediaStorageSOPClassUID = MR_IMAGE_STORAGE
    meta.MediaStorageSOPInstanceUID = ds.SOPInstanceUID
    meta.TransferSyntaxUID = pydicom.uid.ExplicitVRLittleEndian
    meta.ImplementationClassUID = pydicom.uid.PYDICOM_IMPLEMENTATION_UID
    meta.ImplementationVersionName = f"MRIRECON_{__version__}"[:16]
    ds.file_meta = meta
    return ds


def series_datasets(image: np.ndarray, geometries: Sequence[Geometry], results: list) -> list:
    """The pydicom datasets of the series (see the module docstring), in file order."""
    ndim = results[0][1].ndim
    images = np.asarray(image).reshape(-1, *np.shape(image)[np.ndim(image) - ndim:])
    magnitude = np.abs(images.astype(np.complex64))
    if ndim == 2:
        magnitude = magnitude[..., np.newaxis]
    depth = magnitude.shape[-1]
    slope_text, slope = _scale(magnitude)
    stored = np.clip(np.rint(magnitude / slope), 0, FULL_SCALE).astype(np.uint16)
    shared = _series(results, geometries, depth)
    out = []
    for index, (geometry, (key, _, _, _)) in enumerate(zip(geometries, results)):
        orient = orientation(geometry)
        for k, position in enumerate(slice_positions(geometry, depth)):
            key_all = {name: key.get(name, 0) for name in DIMENSIONS}
            out.append(_dataset(shared, stored[index, :, :, k], position, orient, len(out) + 1, key_all, slope_text,
                                geometry.directions()[:, 2]))
    return out


def write_dicom_series(output: str | os.PathLike, image: np.ndarray, geometries: Sequence[Geometry], results: list,
                       *, protect: tuple[str | os.PathLike, ...] | FileSet = ()) -> list[Path]:
    """Write the series into the folder ``output`` atomically (see the module docstring); returns its files.

    Raises
    ------
    OutputError
        pydicom is missing, the folder cannot be written or holds other files, too little space, a failed write.
    """
    target = Path(output)
    parent = check_dicom_output(target, protect=protect)
    datasets = series_datasets(image, geometries, results)
    check_space(target, parent, sum(len(ds.PixelData) + 4096 for ds in datasets))
    staging = parent / temp_name()
    names = [f"IM{i + 1:05d}.dcm" for i in range(len(datasets))]
    try:
        os.mkdir(staging, 0o777)
        for name, ds in zip(names, datasets):
            _save(ds, staging / name)
        _replace_folder(staging, target, parent)
    except OSError as exc:
        raise write_error(target, exc) from None
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return [target / name for name in names]


def _save(ds, path: Path) -> None:
    try:
        ds.save_as(path, enforce_file_format=True)
    except TypeError:  # pydicom 2.x: write_like_original=False writes the preamble and file meta
        ds.save_as(path, write_like_original=False)
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _replace_folder(staging: Path, target: Path, parent: Path) -> None:
    """Rename ``staging`` to ``target``; an earlier series there is moved aside first and removed after."""
    old = None
    if target.is_dir():
        old = parent / temp_name()
        os.rename(target, old)
    try:
        os.rename(staging, target)
    except OSError:
        if old is not None:
            os.rename(old, target)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
    with contextlib.suppress(OSError):
        fd = os.open(parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def write_dicom_output(output: str | os.PathLike, stack: ImageStack, *, complex_: bool = False,
                       magnitude: bool = False, protect: tuple = ()) -> list[Path]:
    """The :class:`~mri_recon.io.outputs.OutputFormat` writer: :func:`write_dicom_series` of the stack."""
    del complex_, magnitude
    return write_dicom_series(output, stack.image, stack.geometries, list(stack.results), protect=protect)


FORMAT = OutputFormat("dicom", "DICOM", (), ".dcm", write_dicom_output,
                      values=lambda complex_, magnitude: dicom_values(complex_=complex_), shown="{label}, {values}",
                      placed="files have", check=check_dicom_output, folder=True)
"""DICOM output: ``--format dicom``, ``-o`` naming the series folder."""
