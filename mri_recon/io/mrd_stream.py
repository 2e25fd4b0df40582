"""ISMRMRD acquisitions received in memory (the streaming server's), read as
:func:`~mri_recon.io.ismrmrd.load_ismrmrd_all` reads a file of them, without writing one.

The records are built by the ``ismrmrd`` package's own conversion (``Acquisitions.to_numpy``, into
``acquisition_dtype``), exactly what its ``File`` writes and reads back, and go through the same reader
(:func:`~mri_recon.io.ismrmrd.scans_of`), so a stream gives the scans its file would. The XML header is parsed
by the package's ``CreateFromDocument``; a stream's frames all carry one header, so a few parsed headers are
kept, keyed by their bytes, and each caller gets its own copy.
"""

from __future__ import annotations

import copy
import functools
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import InvalidDataError, SchemaError, printable
from ..scan import Scan
from .ismrmrd import DIMENSIONS, _ismrmrd, header_error, scans_of

SOURCE = "the stream"


@functools.lru_cache(maxsize=8)
def _parsed(xml: bytes) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return _ismrmrd().xsd.CreateFromDocument(xml)


def stream_header(xml: bytes, source: str = SOURCE) -> Any:
    """The parsed ISMRMRD header of ``xml`` (a copy of the one kept), with the reader's error."""
    try:
        return copy.deepcopy(_parsed(bytes(xml)))
    except Exception as exc:  # the xsd parser raises TypeError, ParserError, ...
        raise header_error(source, exc) from exc


def load_stream(header_xml: bytes, acquisitions: Sequence[Any], *, traj_units: str = "auto", space: str = "recon",
                dataset: str | None = None, slice: int | None = None, contrast: int | None = None,
                phase: int | None = None, set: int | None = None, repetition: int | None = None,
                allow_external: bool = False, source: str = SOURCE) -> list[tuple[dict, Scan]]:
    """The images of these acquisitions (``ismrmrd.Acquisition``) with this XML header, as
    :func:`~mri_recon.io.ismrmrd.load_ismrmrd_all` reads them from a file that holds them (same options;
    ``allow_external`` has nothing to allow in memory; a ``dataset`` other than the default is refused: a stream
    has no HDF5 groups)."""
    del allow_external
    if dataset not in (None, "dataset"):
        raise InvalidDataError(printable(f"{source}: --dataset {dataset!r} names an HDF5 group of an ISMRMRD file; "
                                         f"a stream has none (leave the option out)"))
    header = stream_header(header_xml, source)
    if not acquisitions:
        raise SchemaError(f"{source}: holds no acquisitions")
    files = _ismrmrd().file
    records = np.array([files.Acquisitions.to_numpy(a) for a in acquisitions], dtype=files.acquisition_dtype)
    chosen = dict(zip(DIMENSIONS, (slice, contrast, phase, set, repetition)))
    return scans_of(source, header, records, "dataset", traj_units, space, chosen)
