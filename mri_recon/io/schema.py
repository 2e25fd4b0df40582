"""Schema v1 (HDF5) files: reading and writing :class:`~mri_recon.scan.Scan` objects.

Schema v1 is documented in ``docs/schema.md``. Writes are atomic (temporary file, then rename).
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import h5py

from ..errors import InvalidDataError, OutputError, ScanFileError, SchemaError, printable
from ..scan import OPTIONAL, SCHEMA_VERSION, Scan
from .files import memory_output
from .inputs import InputFormat, Probe
from .mrd_image import SUFFIXES as MRD_SUFFIXES
from .stack import DIMENSIONS


def _open(path: str | os.PathLike, allow_external: bool = False) -> h5py.File:
    """The HDF5 file ``path``, open for reading, after :func:`~mri_recon.io.contained.check_contained`: a
    file that reaches other files is refused unless ``allow_external``."""
    import h5py  # noqa: PLC0415 - h5py imported on use: a run on .cfl files reads no HDF5

    from .contained import check_contained  # noqa: PLC0415 - imports h5py

    p = Path(path)
    shown = printable(p)
    try:
        exists, is_dir = p.exists(), p.is_dir()
    except OSError as exc:  # a name too long, a loop of links, ...
        raise ScanFileError(f"{printable(str(p)[:200])}: cannot be opened ({exc.strerror})") from exc
    if not exists:
        raise ScanFileError(f"{shown}: no such file")
    if is_dir:
        raise ScanFileError(f"{shown}: is a directory, expected an HDF5 scan file")
    if not p.is_file():  # a FIFO would block the reads below
        raise ScanFileError(f"{shown}: is not a regular file (a device, FIFO or socket), expected an HDF5 scan file")
    try:
        with open(p, "rb"):  # no permission: said as such, not as "not an HDF5 file"
            pass
    except OSError as exc:
        raise ScanFileError(f"{shown}: cannot be opened ({exc.strerror})") from exc
    try:
        if not h5py.is_hdf5(p):
            raise ScanFileError(f"{shown}: not an HDF5 file")
        f = h5py.File(p, "r")
    except ScanFileError:
        raise
    except OSError as exc:  # no permission, corrupt, ...
        raise ScanFileError(f"{shown}: cannot be read as HDF5 ({printable(exc)})") from exc
    try:
        check_contained(f, str(path), allow_external)
    except BaseException:
        f.close()
        raise
    return f


def is_ismrmrd(f: h5py.File) -> bool:
    """True for an ISMRMRD (MRD) file: a group holding ``data`` and ``xml`` datasets, or an acquisition
    ``data`` dataset alone (an ISMRMRD file that lost its header; the ISMRMRD reader then says so)."""
    import h5py  # noqa: PLC0415 - h5py imported on use: a run on .cfl files reads no HDF5

    return any(isinstance(g, h5py.Group) and "data" in g and ("xml" in g or _acquisitions(g["data"]))
               for g in f.values())


def _acquisitions(item: object) -> bool:
    """True for a dataset of ISMRMRD acquisition records (a compound with ``head``, ``traj`` and ``data``)."""
    import h5py  # noqa: PLC0415 - h5py imported on use: a run on .cfl files reads no HDF5

    names = getattr(getattr(item, "dtype", None), "names", None) or ()
    return isinstance(item, h5py.Dataset) and {"head", "traj", "data"} <= set(names)


def image_series(f: h5py.File) -> list[str]:
    """The MRD image series of ``f`` (``"dataset/image_0"``, ...): groups with ``header`` and ``data`` inside
    an ISMRMRD dataset group that holds no acquisitions (a file ``ismrmrd`` wrote as images, e.g. an MRD
    output of ``mri-recon reconstruct``)."""
    import h5py  # noqa: PLC0415 - h5py imported on use: a run on .cfl files reads no HDF5

    return [f"{g.name.lstrip('/')}/{name}" for g in f.values() if isinstance(g, h5py.Group) and "data" not in g
            for name, s in g.items() if isinstance(s, h5py.Group) and {"header", "data"} <= set(s.keys())]


def images_not_raw(src: str, series: list[str]) -> SchemaError:
    """The error for an MRD image file given where raw acquisitions are needed."""
    return SchemaError(printable(f"{src}: holds MRD images ({', '.join(series)}), not raw acquisitions; "
                                 f"reconstruct needs k-space (an ISMRMRD file of acquisitions or schema v1)"))


def is_hdf5_scan(path: str | os.PathLike, allow_external: bool = False) -> str:
    """The format of a scan file: ``"ismrmrd"``, ``"mrd-images"`` (images, not raw data) or ``"schema-v1"``
    (:class:`ScanFileError` if unreadable, :class:`~mri_recon.errors.ExternalDataError` if it reaches
    other files and ``allow_external`` is False)."""
    with _open(path, allow_external) as f:
        if is_ismrmrd(f):
            return "ismrmrd"
        return "mrd-images" if "matrix" not in f.attrs and image_series(f) else "schema-v1"


def _attribute(src: str, key: str | bytes, value: Any) -> Any:
    """A root attribute as a plain value; a name or text that is not UTF-8 is refused, naming it (the
    attributes are copied into the outputs and shown by ``info``: bytes replaced here would silently change
    what the file says)."""
    try:
        plain = _plain(value)
    except UnicodeDecodeError as exc:
        plain, why = None, f" ({exc.reason} at byte {exc.start})"
    else:
        why = "" if isinstance(key, bytes) or not _utf8(plain) else None
    if why is not None:
        raise SchemaError(printable(f"{src}: root attribute {key!r} is not valid UTF-8 text{why}; expected "
                                    f"UTF-8 names and strings"))
    return plain


def _utf8(value: Any) -> bool:
    """False for text holding surrogates (h5py keeps the undecodable bytes of a variable-length string so)."""
    if isinstance(value, list):
        return all(_utf8(v) for v in value)
    try:
        value.encode() if isinstance(value, str) else None
    except UnicodeEncodeError:
        return False
    return True


def _plain(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return [_plain(v) for v in value.tolist()] if value.dtype.kind in "SO" else value.tolist()
    return value


def _store_attribute(f: h5py.File, path: str | os.PathLike, key: str, value: Any) -> None:
    """``f.attrs[key] = value``; h5py's refusal of a value HDF5 has no type for, as an OutputError naming it."""
    try:
        f.attrs[key] = value
    except (TypeError, ValueError, OverflowError) as exc:
        raise OutputError(f"{printable(path)}: attribute {printable(key)} ({type(value).__name__}) cannot be stored "
                          f"in HDF5 ({exc}); attributes hold numbers, strings, bytes, lists of them, or NumPy "
                          f"arrays of numbers or bytes") from None


def check_scan_name(path: str | os.PathLike) -> None:
    """Refuse a name for a scan file that ends neither as schema v1 (``.h5``, ``.hdf5``) nor as MRD raw data
    (``.mrd.h5``, ``.mrd``), any case: the command line writes no HDF5 file under another format's name
    (``.nii.gz``, ``.png``, ...)."""
    if not str(path).lower().endswith((*INPUT.suffixes, *MRD_SUFFIXES)):
        raise OutputError(f"{printable(path)}: a scan is written as schema v1 (HDF5), named "
                          f"{' or '.join(INPUT.suffixes)}, or as MRD raw data, named .mrd.h5 or .mrd")


def save_scan(path: str | os.PathLike, scan: Scan, *, protect: tuple[str | os.PathLike, ...] = ()) -> None:
    """Write ``scan`` as schema v1, atomically (built in memory, written to a temporary file, renamed; a file of
    ``protect`` is never replaced). An attribute HDF5 cannot hold (a dict, a list mixing numbers and strings, an
    object, an integer beyond 64 bits, a NumPy array of text) is an :class:`~mri_recon.errors.OutputError`
    naming it, and nothing is written."""
    import h5py  # noqa: PLC0415 - h5py imported on use: a run on .cfl files reads no HDF5

    with memory_output(path, protect=protect) as buffer, h5py.File(buffer, "w") as f:
        f.attrs["matrix"] = np.asarray(scan.matrix, dtype=np.int64)
        f.attrs["schema_version"] = SCHEMA_VERSION
        for key, value in scan.attrs.items():
            if key not in ("matrix", "schema_version") and value is not None:
                _store_attribute(f, path, key, value)
        f.create_dataset("kspace", data=scan.kspace)
        f.create_dataset("trajectory", data=scan.trajectory)
        for name in OPTIONAL:
            value = getattr(scan, name)
            if value is not None:
                f.create_dataset(name, data=value)


def _read(f: h5py.File, src: str, name: str) -> Any:
    """The whole dataset ``name``: a group, a dangling (external or soft) link or an unreadable dataset is a
    :class:`SchemaError` naming it."""
    import h5py  # noqa: PLC0415 - h5py imported on use: a run on .cfl files reads no HDF5

    try:
        node = f[name]
    except (KeyError, OSError) as exc:
        raise SchemaError(printable(f"{src}: '{name}' cannot be opened (a broken link?): {exc}")) from exc
    if not isinstance(node, h5py.Dataset):
        raise SchemaError(f"{src}: '{name}' must be a dataset, found a group")
    _check_stored(node, src, name)
    try:
        return node[()]
    except (OSError, TypeError, ValueError) as exc:
        raise SchemaError(printable(f"{src}: dataset '{name}' cannot be read: {exc}")) from exc


MAX_EXPANSION = 1000
"""The most a dataset may declare over the bytes the file holds allocated for it (chunks written, or its
contiguous storage), once it declares more than :data:`EXPANSION_FLOOR` bytes."""
EXPANSION_FLOOR = 64 * 2**20


def _check_stored(node: h5py.Dataset, src: str, name: str) -> None:
    """Refuse, before reading, a dataset that declares far more than the file allocates for it (unwritten chunks
    read as fill values: a 2 KiB file may declare 4 GiB, all of which a read would allocate). Compressed chunks
    count at their full size; an empty dataset and a virtual one (its sources are checked where they are read,
    :mod:`mri_recon.io.contained`) are not looked at."""
    if node.shape is None or not node.size or node.is_virtual:
        return
    declared = int(node.size) * node.dtype.itemsize
    if node.chunks is not None:
        allocated = int(node.id.get_num_chunks()) * math.prod(node.chunks) * node.dtype.itemsize
    else:
        allocated = int(node.id.get_storage_size())
    if declared > EXPANSION_FLOOR and declared > MAX_EXPANSION * max(allocated, 1):
        raise SchemaError(f"{src}: dataset '{name}' declares {declared / 2**20:.0f} MiB but the file holds "
                          f"{allocated} bytes of it (unwritten chunks); refused before reading")


def load_schema_v1(path: str | os.PathLike, *, allow_external: bool = False) -> Scan:
    """Read a schema-v1 scan file and validate it; a file that reaches other files (external links, external
    storage, virtual datasets) is refused unless ``allow_external`` (:mod:`mri_recon.io.contained`)."""
    src = str(path)
    with _open(path, allow_external) as f:
        if "matrix" not in f.attrs and image_series(f):
            raise images_not_raw(src, image_series(f))
        if "matrix" not in f.attrs:
            missing = [n for n in ("kspace", "trajectory") if n not in f]
            raise SchemaError(
                f"{src}: missing root attribute 'matrix'"
                + (f" and dataset(s) {', '.join(repr(n) for n in missing)}" if missing else "")
                + " (schema v1 needs kspace, trajectory and the root attribute matrix)"
            )
        for name in ("kspace", "trajectory"):
            if name not in f:
                raise SchemaError(f"{src}: missing dataset '{name}' (schema v1 needs kspace, trajectory "
                                  f"and the root attribute matrix)")
        values = {name: _read(f, src, name) for name in ("kspace", "trajectory")}
        for name in OPTIONAL:
            if name in f:
                values[name] = _read(f, src, name)
        attrs = {k: _attribute(src, k, v) for k, v in f.attrs.items() if k != "matrix"}
        matrix = f.attrs["matrix"]
    return Scan(matrix=matrix, attrs=attrs, source=src, **values)


def _one_image_file(probe: Probe, options: dict[str, Any]) -> None:
    """A schema-v1 file holds one image: refuse a choice of MRD image indices for it (an MRD file of images
    is refused by :func:`load_schema_v1`, saying what it is)."""
    chosen = {name: options[name] for name in DIMENSIONS if options.get(name) is not None}
    if chosen and probe.hdf5 == "schema-v1":
        asked = ", ".join(f"{name}={value}" for name, value in chosen.items())
        raise InvalidDataError(f"{probe.path}: a schema-v1 file holds one image; {asked} chooses among the images "
                               f"of an ISMRMRD file")


def _load_one(probe: Probe, **options: Any) -> Scan:
    _one_image_file(probe, options)
    return load_schema_v1(probe.path, allow_external=probe.allow_external)


INPUT = InputFormat("schema-v1", (".h5", ".hdf5"), lambda probe: probe.hdf5 != "ismrmrd",
                    lambda probe, **options: [({}, _load_one(probe, **options))], _load_one)
"""Schema-v1 HDF5 input (and the refusal of MRD image files, which are HDF5 too)."""
