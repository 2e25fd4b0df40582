"""Reading and writing: the one format dispatcher, schema v1, ISMRMRD, the PSF cache, atomic files, PNG.

:func:`load_scans` is the entry point that accepts every input format; :func:`load_scan` returns one image.
"""

from __future__ import annotations

import os
from typing import Any

from ..errors import InvalidDataError, SchemaError
from ..scan import Scan
from .schema import is_hdf5_scan, load_schema_v1, save_scan

__all__ = ["load_scan", "load_scans", "save_scan"]


_CHOICES = ("slice", "contrast", "phase", "set", "repetition")


def _one_image_file(path: str | os.PathLike, options: dict[str, Any]) -> None:
    """A schema-v1 file holds one image: refuse a choice of MRD image indices for it."""
    chosen = {name: options[name] for name in _CHOICES if options.get(name) is not None}
    if chosen:
        asked = ", ".join(f"{name}={value}" for name, value in chosen.items())
        raise InvalidDataError(f"{path}: a schema-v1 file holds one image; {asked} chooses among the images "
                               f"of an ISMRMRD file")


def load_scans(path: str | os.PathLike, *, allow_external: bool = False,
               **ismrmrd_options: Any) -> list[tuple[dict, Scan]]:
    """Every image of a scan file: ``(key, Scan)`` pairs for ISMRMRD (MRD), else ``[({}, scan)]`` for schema v1.

    The entry point of a pipeline that accepts both formats. An ISMRMRD key holds the image's ``slice``,
    ``contrast``, ``phase``, ``set`` and ``repetition``; ``ismrmrd_options`` (``traj_units``, ``space``,
    ``dataset``, and those five indices to choose images) apply to ISMRMRD files only, and a choice of
    indices is refused for a schema-v1 file (:class:`~mri_recon.errors.InvalidDataError`).

    The file is read only within itself: one whose links or datasets read other files (HDF5 external links,
    external raw storage, virtual datasets) is refused before any data are read
    (:class:`~mri_recon.errors.ExternalDataError`) unless ``allow_external=True``
    (:mod:`mri_recon.io.contained`). An MRD file of images (not raw acquisitions) is refused as such.
    A Siemens ``.dat`` file is read through twixtools (:mod:`mri_recon.io.twix`).
    """
    if str(path).lower().endswith(".dat"):  # Siemens twix (the 'twix' extra)
        from .twix import load_twix_all  # noqa: PLC0415

        return load_twix_all(path, **ismrmrd_options)
    found = is_hdf5_scan(path, allow_external)
    if found == "ismrmrd":
        from .ismrmrd import load_ismrmrd_all  # noqa: PLC0415 - the ismrmrd package is imported on use

        return load_ismrmrd_all(path, allow_external=allow_external, **ismrmrd_options)
    if found == "schema-v1":  # MRD images: load_schema_v1 says what they are
        _one_image_file(path, ismrmrd_options)
    return [({}, load_schema_v1(path, allow_external=allow_external))]


def load_scan(path: str | os.PathLike, *, allow_external: bool = False, **ismrmrd_options: Any) -> Scan:
    """Read one scan (schema v1, or one image of an ISMRMRD file) and validate it.

    ``ismrmrd_options`` (``traj_units``, ``space``, ``dataset``, and ``slice``, ``contrast``, ``phase``,
    ``set``, ``repetition`` to choose the image) apply to ISMRMRD files only; a file with several images
    needs a choice that leaves one. ``allow_external`` as for :func:`load_scans`.
    """
    if str(path).lower().endswith(".dat"):  # Siemens twix: one image, as for MRD
        scans = load_scans(path, **ismrmrd_options)
        if len(scans) > 1:
            raise SchemaError(f"{path}: holds several images; choose one with slice=, contrast=, phase=, set=, "
                              f"repetition=")
        return scans[0][1]
    found = is_hdf5_scan(path, allow_external)
    if found == "ismrmrd":
        from .ismrmrd import load_ismrmrd  # noqa: PLC0415 - the ismrmrd package is imported on use

        return load_ismrmrd(path, allow_external=allow_external, **ismrmrd_options)
    if found == "schema-v1":  # MRD images: load_schema_v1 says what they are
        _one_image_file(path, ismrmrd_options)
    return load_schema_v1(path, allow_external=allow_external)

