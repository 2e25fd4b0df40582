"""mri-recon: exact non-Cartesian MRI reconstruction on NVIDIA GPUs, with a NumPy twin.

Public API (stable)::

    load_scan, save_scan, Scan            schema-v1 HDF5 scans (and ISMRMRD input)
    fhd, forward                           exact F^H d and F
    reconstruct, Result                    CG-SENSE / Tikhonov reconstruction
    convolve, smooth                       post-filter (correlation semantics)
    MriReconError                          base class of every error raised on purpose
"""

from __future__ import annotations

import importlib

from ._version import __version__  # noqa: E402
from .errors import MriReconError
from .io import load_scan, save_scan
from .scan import Scan

_LAZY = {
    "fhd": "operators",
    "forward": "operators",
    "reconstruct": "pipeline",
    "Result": "result",
    "convolve": "filters",
    "smooth": "filters",
}

__all__ = ["MriReconError", "Scan", "load_scan", "save_scan", "__version__", *_LAZY]


def __getattr__(name: str):
    if name in _LAZY:
        module = importlib.import_module(f".{_LAZY[name]}", __name__)
        return getattr(module, name)
    raise AttributeError(f"module 'mri_recon' has no attribute {name!r}")
