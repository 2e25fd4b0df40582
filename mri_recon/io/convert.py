"""MRD raw data from any scan file mri-recon reads (schema v1, ISMRMRD, Siemens twix; BART has its own,
:func:`mri_recon.io.cfl_scan.convert_cfl`)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..errors import OutputError
from .files import same_file
from .ismrmrd_write import write_ismrmrd
from .readers import load_scans


def convert_to_mrd(source: str | os.PathLike, output: str | os.PathLike, **options: Any) -> list[Path]:
    """Every image of ``source`` (``options``: the reader's keywords) in one MRD raw-data file ``output``
    (:func:`~mri_recon.io.ismrmrd_write.write_ismrmrd`; coil maps, field maps and a ground truth have no place
    there and are left out). Returns the file written."""
    images = load_scans(source, **options)
    if same_file(output, source):
        raise OutputError(f"{output}: output would overwrite the input file; choose another path")
    write_ismrmrd(output, images)
    return [Path(output)]


def refuse_schema_output(source: str | os.PathLike, output: str | os.PathLike, reader: str,
                         **options: Any) -> list[Path]:
    """A schema-v1 ``output`` from a ``reader`` input other than ISMRMRD: refused, once the input has been
    read (so that a file that is no scan at all says what it is)."""
    load_scans(source, **options)
    raise OutputError(f"{output}: convert writes a {reader} scan as MRD raw data (a name ending .mrd.h5 or .mrd)")
