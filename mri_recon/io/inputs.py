"""What an input format is: :class:`InputFormat`, and the :class:`Probe` of a file that each format's
``claims`` looks at (the file is opened once to learn what HDF5 holds, whichever formats ask)."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field

from ..scan import Scan


@dataclass
class Probe:
    """One input file, as the readers' ``claims`` see it."""

    path: str | os.PathLike
    allow_external: bool
    sniff: Callable[[str | os.PathLike, bool], str]
    """:func:`mri_recon.io.schema.is_hdf5_scan`."""
    _hdf5: str | None = field(default=None, repr=False)

    @property
    def hdf5(self) -> str:
        """What the HDF5 file holds: ``"ismrmrd"``, ``"mrd-images"`` or ``"schema-v1"`` (``sniff``, called
        once; it raises its errors for a file that is not HDF5)."""
        if self._hdf5 is None:
            self._hdf5 = self.sniff(self.path, self.allow_external)
        return self._hdf5


@dataclass(frozen=True)
class InputFormat:
    """One input format: how its files are recognized and read."""

    name: str
    suffixes: tuple[str, ...]
    """File name endings a folder given to a batch stands for (``*.mrd``)."""
    claims: Callable[[Probe], bool]
    """Whether the file is of this format (the first format of the registry that claims a file reads it)."""
    load_all: Callable[..., list[tuple[dict, Scan]]]
    """``load_all(probe, **options)``: every image, ``(key, Scan)`` pairs (``[({}, scan)]`` for one image)."""
    load_one: Callable[..., Scan]
    """``load_one(probe, **options)``: the one image the options leave."""
    options: tuple[str, ...] = ()
    """Reader options of this format alone (BART's ``trajectory``): not passed to the other formats, and
    refused for their files when given (:func:`mri_recon.io.readers.reader_options`)."""
    title: str = ""
    """The format in messages (``"BART .cfl k-space"``); empty: ``name``."""
