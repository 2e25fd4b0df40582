"""The input formats, one registry: :data:`INPUTS`, and the one dispatcher, :func:`load_scans` /
:func:`load_scan`.

A new format is one module that defines ``INPUT = InputFormat(...)`` (:mod:`mri_recon.io.inputs`) and one
entry in :data:`INPUTS` below (docs/architecture.md, "Where to add an input format").
"""

from __future__ import annotations

import os
from typing import Any

from ..errors import InvalidDataError, ScanFileError, printable
from ..scan import Scan
from . import cfl_scan, ismrmrd, schema, twix
from .inputs import InputFormat, Probe

INPUTS: tuple[InputFormat, ...] = (
    twix.INPUT,  # by name (.dat), before the HDF5 formats
    cfl_scan.INPUT,
    schema.INPUT,
    ismrmrd.INPUT,
)
"""Every input format; the first whose ``claims`` accepts a file reads it."""


def scan_suffixes() -> tuple[str, ...]:
    """The endings of the scan files a folder stands for, in registry order, those that end in another left
    out (``.mrd.h5`` is an ``.h5``)."""
    every = [s for f in INPUTS for s in f.suffixes]
    return tuple(dict.fromkeys(s for s in every if not any(s != t and s.endswith(t) for t in every)))


def input_suffixes() -> tuple[str, ...]:
    """Every ending of an input format's names, longest first (what a default output name drops)."""
    return tuple(sorted({s for f in INPUTS for s in f.suffixes}, key=len, reverse=True))


def reader_of(path: str | os.PathLike, allow_external: bool = False) -> tuple[InputFormat, Probe]:
    """The format that reads ``path``, and the file's probe."""
    probe = Probe(path, allow_external, schema.is_hdf5_scan)
    for reader in INPUTS:
        if reader.claims(probe):
            return reader, probe
    raise ScanFileError(f"{path}: not a scan file of a known format ({', '.join(f.name for f in INPUTS)})")


def reader_options(reader: InputFormat, path: str | os.PathLike, options: dict[str, Any]) -> dict[str, Any]:
    """``options`` less those that other formats alone take (:attr:`InputFormat.options`), which must then be
    None: one given for a file of ``reader`` is refused (:class:`~mri_recon.errors.InvalidDataError`)."""
    foreign = {name: f for f in INPUTS if f is not reader for name in f.options if name not in reader.options}
    given = [name for name in foreign if options.get(name) is not None]
    if given:
        owner = foreign[given[0]]
        raise InvalidDataError(f"{printable(path)}: {', '.join('--' + n for n in given)} apply to "
                               f"{owner.title or owner.name} ({', '.join(n + '=' for n in given)}); this file is "
                               f"{reader.title or reader.name} input, which holds its own")
    return {name: value for name, value in options.items() if name not in foreign}


def load_scans(path: str | os.PathLike, *, allow_external: bool = False,
               **options: Any) -> list[tuple[dict, Scan]]:
    """Every image of a scan file: ``(key, Scan)`` pairs for ISMRMRD (MRD), else ``[({}, scan)]`` for schema v1.

    The entry point of a pipeline that accepts every input format. An ISMRMRD key holds the image's
    ``slice``, ``contrast``, ``phase``, ``set`` and ``repetition``; ``options`` (``traj_units``, ``space``,
    ``dataset``, and those five indices to choose images) apply to ISMRMRD files only, and a choice of
    indices is refused for a schema-v1 file (:class:`~mri_recon.errors.InvalidDataError`). BART k-space
    (``ksp.cfl``) takes ``trajectory=`` (required), ``sensitivities=`` and ``matrix=`` too
    (:func:`mri_recon.io.cfl_scan.load_cfl_scans`); given for a file of another format they are refused.

    The file is read only within itself: one whose links or datasets read other files (HDF5 external links,
    external raw storage, virtual datasets) is refused before any data are read
    (:class:`~mri_recon.errors.ExternalDataError`) unless ``allow_external=True``
    (:mod:`mri_recon.io.contained`). An MRD file of images (not raw acquisitions) is refused as such.
    """
    reader, probe = reader_of(path, allow_external)
    return reader.load_all(probe, **reader_options(reader, path, options))


def load_scan(path: str | os.PathLike, *, allow_external: bool = False, **options: Any) -> Scan:
    """Read one scan (schema v1, or one image of an ISMRMRD file) and validate it.

    ``options`` (``traj_units``, ``space``, ``dataset``, and ``slice``, ``contrast``, ``phase``, ``set``,
    ``repetition`` to choose the image) apply to ISMRMRD files only; a file with several images needs a
    choice that leaves one. ``allow_external`` as for :func:`load_scans`.
    """
    reader, probe = reader_of(path, allow_external)
    return reader.load_one(probe, **reader_options(reader, path, options))
