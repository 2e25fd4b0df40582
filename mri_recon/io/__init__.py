"""Reading and writing: the one format dispatcher, schema v1, ISMRMRD, the PSF cache, atomic files, PNG.

:func:`load_scans` is the entry point that accepts every input format; :func:`load_scan` returns one image.
"""

from __future__ import annotations

import os
from typing import Any

from ..scan import Scan
from .schema import is_hdf5_scan, load_schema_v1, save_scan

__all__ = ["load_scan", "load_scans", "save_scan"]


def load_scans(path: str | os.PathLike, **ismrmrd_options: Any) -> list[tuple[dict, Scan]]:
    """Every image of a scan file: ``({"slice": s, "repetition": r}, Scan)`` pairs for ISMRMRD (MRD), else
    ``[({}, scan)]`` for schema v1.

    The entry point of a pipeline that accepts both formats; ``ismrmrd_options`` (``traj_units``,
    ``space``, ``dataset``) apply to ISMRMRD files only.
    """
    if is_hdf5_scan(path) == "ismrmrd":
        from .ismrmrd import load_ismrmrd_all  # noqa: PLC0415 - the ismrmrd package is imported on use

        return load_ismrmrd_all(path, **ismrmrd_options)
    return [({}, load_schema_v1(path))]


def load_scan(path: str | os.PathLike, **ismrmrd_options: Any) -> Scan:
    """Read one scan (schema v1, or an ISMRMRD file holding one image) and validate it.

    ``ismrmrd_options`` (``traj_units``, ``slice``, ``repetition``, ``space``, ``dataset``) apply to ISMRMRD
    files only; a file with several images needs ``slice=`` / ``repetition=``.
    """
    if is_hdf5_scan(path) == "ismrmrd":
        from .ismrmrd import load_ismrmrd  # noqa: PLC0415 - the ismrmrd package is imported on use

        return load_ismrmrd(path, **ismrmrd_options)
    return load_schema_v1(path)
