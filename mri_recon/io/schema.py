"""Schema v1 (HDF5) files: reading and writing :class:`~mri_recon.scan.Scan` objects.

Schema v1 is documented in ``docs/schema.md``. Writes are atomic (temporary file, then rename).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from ..errors import ScanFileError, SchemaError
from ..scan import OPTIONAL, SCHEMA_VERSION, Scan
from .files import memory_output


def _open(path: str | os.PathLike) -> h5py.File:
    p = Path(path)
    try:
        exists, is_dir = p.exists(), p.is_dir()
    except OSError as exc:  # a name too long, a loop of links, ...
        raise ScanFileError(f"{str(p)[:200]}: cannot be opened ({exc.strerror})") from exc
    if not exists:
        raise ScanFileError(f"{p}: no such file")
    if is_dir:
        raise ScanFileError(f"{p}: is a directory, expected an HDF5 scan file")
    try:
        if not h5py.is_hdf5(p):
            raise ScanFileError(f"{p}: not an HDF5 file")
        return h5py.File(p, "r")
    except ScanFileError:
        raise
    except OSError as exc:
        raise ScanFileError(f"{p}: cannot be read as HDF5 ({exc})") from exc


def is_ismrmrd(f: h5py.File) -> bool:
    """True for an ISMRMRD (MRD) file: a group holding ``data`` and ``xml`` datasets, or an acquisition
    ``data`` dataset alone (an ISMRMRD file that lost its header; the ISMRMRD reader then says so)."""
    return any(isinstance(g, h5py.Group) and "data" in g and ("xml" in g or _acquisitions(g["data"]))
               for g in f.values())


def _acquisitions(item: object) -> bool:
    """True for a dataset of ISMRMRD acquisition records (a compound with ``head``, ``traj`` and ``data``)."""
    names = getattr(getattr(item, "dtype", None), "names", None) or ()
    return isinstance(item, h5py.Dataset) and {"head", "traj", "data"} <= set(names)


def is_hdf5_scan(path: str | os.PathLike) -> str:
    """The format of a scan file: ``"ismrmrd"`` or ``"schema-v1"`` (:class:`ScanFileError` if unreadable)."""
    with _open(path) as f:
        return "ismrmrd" if is_ismrmrd(f) else "schema-v1"


def _plain(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    return value


def save_scan(path: str | os.PathLike, scan: Scan, *, protect: tuple[str | os.PathLike, ...] = ()) -> None:
    """Write ``scan`` as schema v1, atomically (built in memory, written to a temporary file, renamed; a file of
    ``protect`` is never replaced)."""
    with memory_output(path, protect=protect) as buffer, h5py.File(buffer, "w") as f:
        f.attrs["matrix"] = np.asarray(scan.matrix, dtype=np.int64)
        f.attrs["schema_version"] = SCHEMA_VERSION
        for key, value in scan.attrs.items():
            if key not in ("matrix", "schema_version") and value is not None:
                f.attrs[key] = value
        f.create_dataset("kspace", data=scan.kspace)
        f.create_dataset("trajectory", data=scan.trajectory)
        for name in OPTIONAL:
            value = getattr(scan, name)
            if value is not None:
                f.create_dataset(name, data=value)


def _read(f: h5py.File, src: str, name: str) -> Any:
    """The whole dataset ``name``: a group, a dangling (external or soft) link or an unreadable dataset is a
    :class:`SchemaError` naming it."""
    try:
        node = f[name]
    except (KeyError, OSError) as exc:
        raise SchemaError(f"{src}: '{name}' cannot be opened (a broken link?): {exc}") from exc
    if not isinstance(node, h5py.Dataset):
        raise SchemaError(f"{src}: '{name}' must be a dataset, found a group")
    try:
        return node[()]
    except (OSError, TypeError, ValueError) as exc:
        raise SchemaError(f"{src}: dataset '{name}' cannot be read: {exc}") from exc


def load_schema_v1(path: str | os.PathLike) -> Scan:
    """Read a schema-v1 scan file and validate it."""
    src = str(path)
    with _open(path) as f:
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
        attrs = {k: _plain(v) for k, v in f.attrs.items() if k != "matrix"}
        matrix = f.attrs["matrix"]
    return Scan(matrix=matrix, attrs=attrs, source=src, **values)
