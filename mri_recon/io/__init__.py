"""Reading and writing: the input and output formats (registries :mod:`.readers`, :mod:`.writers`), schema
v1, ISMRMRD, NIfTI, MRD images, the PSF cache, atomic files, PNG.

:func:`load_scans` is the entry point that accepts every input format; :func:`load_scan` returns one image.
"""

from __future__ import annotations

from .readers import load_scan, load_scans
from .schema import save_scan

__all__ = ["load_scan", "load_scans", "save_scan"]
